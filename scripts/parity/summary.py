"""docs/parity.md, its per-row pages (docs/parity/) and its forest plot from the parity records.

Its account: scripts/parity/README.md, section summary.py.
"""
from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import re
import statistics
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from parity import common, plans  # noqa: E402  (scripts/ is not a package: the path first)
from parity.common import PATCH_KINDS, PROVENANCE_KEYS, RECORDS, ROOT, texts, wording  # noqa: E402

from cl_bench import stats  # noqa: E402

# Rows whose cl-bench side or cut changed after a gap was seen ("reference/row": what changed, when, what was seen,
# and the diagnostic that holds the before-numbers): a data file, read here and rendered in the row.
LOOKS = json.loads((HERE / "looks.json").read_text())
REFERENCES = ("cpg", "mammoth", "hat", "lamaml", "cgate")  # the runner modules, in the doc's order
SIDES = ("reference", "cl-bench")
WORDS = wording("summary")  # the pages' fixed sentences (wording.yaml)
SOURCES = WORDS["sources"]  # where a row's reference comes from, the doc's sections in order


# --- the records --------------------------------------------------------------------------------------------------
def key(record: dict) -> tuple:
    return record["reference"], record["row"], record.get("diagnostic", ""), record["side"], record["seed"]


def load(json_path: Path) -> list[dict]:
    """Every record in a docs/parity.json, runs and diagnostics together (a record's diagnostic tells them apart);
    a file from before the sections existed is a plain list of runs."""
    if not json_path.is_file():
        return []
    data = json.loads(json_path.read_text())
    return data if isinstance(data, list) else [*data["runs"], *data["diagnostics"]]


def merged(records_dir: Path, json_path: Path) -> list[dict]:
    """The committed records with the runners' newer ones in their place."""
    records = {key(r): r for r in load(json_path)}
    for path in sorted(records_dir.glob("*/*/*.json")) if records_dir.is_dir() else []:
        record = json.loads(path.read_text())
        records[key(record)] = record
    return [records[k] for k in sorted(records)]


def sections(records: list[dict]) -> dict:
    return {"runs": [r for r in records if not r.get("diagnostic")],
            "diagnostics": [r for r in records if r.get("diagnostic")]}


# --- one row's figures --------------------------------------------------------------------------------------------
def by_seed(records: list[dict], side: str, seeds=None) -> dict[int, float]:
    """RA in points by seed for one side, optionally only the given seeds."""
    return {r["seed"]: 100 * r["ra"] for r in records if r["side"] == side and (seeds is None or r["seed"] in seeds)}


def compare(records: list[dict], seeds) -> dict:
    """Both sides' RA over the given seeds and their paired difference (cl-bench - reference)."""
    ref, ours = by_seed(records, "reference", seeds), by_seed(records, "cl-bench", seeds)
    return {"reference": ref, "cl-bench": ours, "paired": stats.paired(ours, ref),
            "seconds": {side: [r["seconds"] for r in records if r["side"] == side and r["seed"] in (seeds or ())]
                        for side in SIDES}}


def basis(records: list[dict], plan: plans.Plan | None) -> tuple[str, dict]:
    """What a row's verdict rests on: its plan's seeds when all of them have run on both sides, else its pilot's
    (plans.PILOT_SEEDS for a row whose plan waits on its pilot)."""
    if plan is None:
        return "pilot", compare(records, set(plans.PILOT_SEEDS))
    planned = compare(records, set(plan.seeds))
    if planned["paired"].n == plan.n:
        return "plan", planned
    return "pilot", compare(records, set(plan.pilot_seeds))


def unproven(records: list[dict]) -> tuple[int, int]:
    """How many records lack a provenance key, and how many were made from a tree with uncommitted changes."""
    missing = sum(1 for r in records if any(k not in r.get("provenance", {}) for k in PROVENANCE_KEYS))
    dirty = sum(1 for r in records if r.get("provenance", {}).get("clbench_dirty"))
    return missing, dirty


# --- cells --------------------------------------------------------------------------------------------------------
def fmt_side(values: dict[int, float]) -> str:
    if not values:
        return "not run"
    mean, sd = stats.mean_sd(list(values.values()))
    return f"{mean:.2f} ± {sd:.2f} (n={len(values)})"


def fmt_paired(p: stats.Paired) -> str:
    if p.n == 0:
        return "–"
    if p.n < 2:
        return f"{p.mean:+.2f}"
    return f"{p.mean:+.2f} [{p.ci95[0]:+.2f}, {p.ci95[1]:+.2f}]"


def verdict_text(p: stats.Paired) -> str:
    """TOST's verdict, and where it is undetermined but the 95% interval excludes 0, which side is above."""
    verdict = p.verdict(plans.MARGIN)
    if verdict == stats.UNDETERMINED and p.direction():
        verdict += f": cl-bench {p.direction()}, margin not shown"
    return verdict


def fmt_verdict(p: stats.Paired, on: str, plan: plans.Plan | None, key: tuple = ()) -> str:
    if not p.n:
        return "not run"
    reconfigured = ", reconfigured after a look" if "/".join(key) in LOOKS else ""
    if on == "plan":
        return f"**{verdict_text(p)}**{reconfigured}"
    look = ", extended after a look" if plan and plan.after_look else ""
    return f"pilot only{look}{reconfigured}: {verdict_text(p)}"


def fmt_seeds(records: list[dict], plan: plans.Plan | None, key: tuple) -> str:
    if plan is None:
        return f"no plan yet ({plans.PENDING[key]}); pilot {len(plans.PILOT_SEEDS)}"
    ref, ours = (set(by_seed(records, side, set(plan.seeds))) for side in SIDES)
    # A plan's seeds run a side at a time where a side is long: say how far each has got before they pair up.
    alone = "".join(f", {len(only)} on the {side} side only" for side, only in zip(SIDES, (ref - ours, ours - ref))
                    if only)
    cap = f", capped (80% power needs {plan.needed})" if plan.capped else ""
    return f"plan {plan.n}{cap}: {len(ref & ours)} run{alone}; pilot {plan.pilot}"


def cpu_name(record: dict) -> str:
    """The CPU a record ran on, short (Xeon, EPYC), or "?" for records from before provenance existed."""
    name = record.get("provenance", {}).get("cpu")
    if not name:
        return "?"
    words = re.sub(r"\((R|TM)\)|\b(Intel|AMD|Processor|CPU)\b", " ", name).split()
    return words[0] if words else name


def fmt_seconds(records: list[dict]) -> str:
    """Mean seconds a run, per side, and per CPU where a side ran on more than one."""
    def side_cell(runs):
        by_cpu = {}
        for r in runs:
            by_cpu.setdefault(cpu_name(r), []).append(r["seconds"])
        if len(by_cpu) == 1:
            return f"{statistics.mean(next(iter(by_cpu.values()))):.0f}"
        return ", ".join(f"{statistics.mean(s):.0f} ({cpu})" for cpu, s in sorted(by_cpu.items()))
    return " / ".join(side_cell(runs) if runs else "–" for runs in ([r for r in records if r["side"] == side]
                                                                   for side in SIDES))


def fmt_cpus(records: list[dict]) -> str:
    """The CPUs each side ran on (with counts where several), and the seeds whose two sides ran on different
    models: their seconds do not compare, and a CPU's floating point may differ."""
    sides = [[cpu_name(r) for r in records if r["side"] == side] for side in SIDES]
    cell = " / ".join(tally(names) if names else "–" for names in sides)
    cpus = {side: {r["seed"]: cpu_name(r) for r in records if r["side"] == side} for side in SIDES}
    across = [s for s, cpu in cpus["reference"].items() if cpus["cl-bench"].get(s, cpu) != cpu]
    return cell + (f"; {len(across)} pair{'s' * (len(across) != 1)} across CPUs" if across else "")


def fmt_provenance(records: list[dict]) -> str:
    """The Records cell: what lacks provenance or came from a dirty tree, and the torch each side ran on."""
    if not records:
        return "–"
    missing, dirty = unproven(records)
    flags = [f"{missing} without provenance"] * bool(missing) + [f"{dirty} from a dirty tree"] * bool(dirty)
    torches = [f"{side} torch {', '.join(found)}" for side in SIDES
               if (found := sorted({r["provenance"]["torch"] for r in records
                                    if r["side"] == side and "torch" in r.get("provenance", {})}))]
    return "; ".join(flags or ["complete"]) + "".join(f"; {t}" for t in torches)


# --- the rows --------------------------------------------------------------------------------------------------
def row_source(module, row) -> str:
    return "different" if row.differs else (getattr(row, "source", "") or module.SOURCE)


def row_records(records: list[dict], module, name: str) -> list[dict]:
    return [r for r in records if r["reference"] == module.NAME and r["row"] == name and not r.get("diagnostic")]


def pilot_line(module, name: str, records: list[dict]) -> str:
    plan = plans.PLANS.get((module.NAME, name))
    if plan is None:
        pilot = compare(records, set(plans.PILOT_SEEDS))
        return WORDS["no_plan"].format(pending=plans.PENDING[(module.NAME, name)], last=len(plans.PILOT_SEEDS) - 1,
                                       reference=fmt_side(pilot["reference"]), clbench=fmt_side(pilot["cl-bench"]),
                                       paired=fmt_paired(pilot["paired"]))
    pilot = compare(records, set(plan.pilot_seeds))
    words = WORDS["pilot"]
    upper = (words["upper"].format(level=plans.SD_CONFIDENCE, bound=plans.sd_upper_bound(plan.pilot_sd, plan.pilot))
             if plan.upper_sd else "")
    return (words["line"].format(last=plan.pilot - 1, look=words["look"] * plan.after_look,
                                 reference=fmt_side(pilot["reference"]), clbench=fmt_side(pilot["cl-bench"]),
                                 paired=fmt_paired(pilot["paired"]), sd=pilot["paired"].sd, n=plan.n,
                                 s="s" * (plan.n != 1), first=plans.FIRST_SEED)
            + upper + words["capped"].format(hours=plan.cpu_hours, needed=plan.needed) * plan.capped + ".")


def tally(values: list) -> str:
    """Seeds' values of one decision: the value where all agree, else each value with its count (0.6 ×2, 0.9 ×1)."""
    if not values:
        return "–"
    counts = {v: values.count(v) for v in sorted(set(values), key=str)}
    if len(counts) == 1:
        return str(values[0])
    return ", ".join(f"{v} ×{n}" for v, n in counts.items())


def phase_values(runs: list[dict], task: int, field: str) -> list:
    return [r["phases"][task].get(field) for r in runs if task < len(r["phases"])]


def phase_cell(runs: list[dict], task: int, field: str, mean: str | None) -> str:
    """One side's value of one decision for one task over its seeds: their mean in the format `mean` where the
    column has one (a goal, a count), else tallied."""
    values = phase_values(runs, task, field)
    known = [v for v in values if v is not None]
    if mean:
        return mean.format(sum(known) / len(known)) if known else "–"
    return tally(values)


def permutation_p(a: list, b: list) -> float:
    """Two-sided exact permutation test that two sides' seeds draw a decision from one distribution: the share of
    every relabelling of the pooled seeds whose two groups' value distributions lie at least as far apart (total
    variation distance) as the observed ones. Exact over all relabellings (the plans' seed counts keep them few)."""
    pooled = [str(v) for v in (*a, *b)]

    def distance(group: tuple[int, ...]) -> float:
        inside = [pooled[i] for i in group]
        outside = [pooled[i] for i in range(len(pooled)) if i not in set(group)]
        return sum(abs(inside.count(v) / len(inside) - outside.count(v) / len(outside)) for v in set(pooled)) / 2
    observed = distance(tuple(range(len(a))))
    groups = list(itertools.combinations(range(len(pooled)), len(a)))
    return sum(distance(g) >= observed - 1e-12 for g in groups) / len(groups)


def sign_p(k: int, n: int) -> float:
    """Two-sided sign test: the chance of a split at least as uneven as k of n when each pair falls either way
    with probability one half."""
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def frequency_cell(sides: dict, task: int, field: str) -> str:
    """A tallied decision's cell with its permutation p where the two sides' tallies differ."""
    values = [phase_values(runs, task, field) for runs in sides.values()]
    cell = " / ".join(tally(v) for v in values)
    differs = sorted(map(str, values[0])) != sorted(map(str, values[1]))
    return cell + (f" (p {permutation_p(*values):.2f})" if differs and all(values) else "")


def lower_cell(sides: dict, task: int) -> str:
    """How many pairs (common seeds) end the task lower on cl-bench's side, with the sign test's p."""
    final = {side: {r["seed"]: r["matrix"][-1][task] for r in runs} for side, runs in sides.items()}
    common = sorted(set(final["reference"]) & set(final["cl-bench"]))
    lower = sum(final["cl-bench"][s] < final["reference"][s] for s in common)
    return f"{lower}/{len(common)} (p {sign_p(lower, len(common)):.2f})" if common else "–"


def phase_lines(module, records: list[dict]) -> list[str]:
    """A row's per-task decisions on both sides (records' phases, where the runner reads them; the module's
    PHASE_COLUMNS name them): each decision over the seeds as `reference / cl-bench`, with each task's final test
    accuracy (mean over the seeds, points)."""
    sides = {side: sorted((r for r in records if r["side"] == side and r.get("phases")), key=lambda r: r["seed"])
             for side in ("reference", "cl-bench")}
    held = {field for runs in sides.values() for r in runs for phase in r["phases"] for field in phase}
    columns = [column for column in getattr(module, "PHASE_COLUMNS", ()) if column[0] in held]
    if not columns or not all(sides.values()):
        return []
    seeds = {side: [r["seed"] for r in runs] for side, runs in sides.items()}
    # The legend names only what this table holds (phase_cell's test): a tallied column's ×n, each averaged one's mean.
    tallied, words = any(not mean for *_, mean in columns), WORDS["legend"]
    legend = [words["tallied"]] * tallied + [f"{title}: the mean" for _, title, mean in columns if mean]
    legend += [words["permutation"]] * tallied + [words["lower"]]
    lines = [WORDS["per_task"].format(reference=seeds["reference"], clbench=seeds["cl-bench"],
                                      legend="; ".join(legend)), "",
             "| task | " + " | ".join(title for _, title, _ in columns) + " | final test acc % | cl-bench lower |",
             "|---" * (len(columns) + 3) + "|"]
    for task in range(max(len(r["phases"]) for runs in sides.values() for r in runs)):
        cells = [" / ".join(phase_cell(runs, task, field, mean) for runs in sides.values()) if mean
                 else frequency_cell(sides, task, field) for field, _, mean in columns]
        final = [f"{100 * sum(r['matrix'][-1][task] for r in runs) / len(runs):.1f}" for runs in sides.values()]
        lines.append(f"| {task} | " + " | ".join(cells) + f" | {' / '.join(final)} | {lower_cell(sides, task)} |")
    return [*lines, ""]


def diagnostic_lines(module, name: str, records: list[dict]) -> list[str]:
    lines = []
    for label, diag in getattr(module, "DIAGNOSTICS", {}).items():
        if diag.row != name:
            continue
        runs, p = diagnostic_paired(module, label, diag, records)
        changed = by_seed(runs, diag.side)
        other = "reference" if diag.side == "cl-bench" else "cl-bench"
        base = by_seed(row_records(records, module, name), other, set(changed))
        verdict = verdict_text(p) if p.n else "not run"
        lines.append(WORDS["diagnostic"].format(
            label=label, what=diag.what, side=diag.side, first=min(diag.seeds), last=max(diag.seeds),
            changed=fmt_side(changed), other=other, base=fmt_side(base), paired=fmt_paired(p), verdict=verdict,
            records=fmt_provenance(runs) if runs else "").rstrip())
    return lines


def rerun_lines(module) -> list[str]:
    make = f"make parity-{module.NAME} REF=DIR DATA=DATA_ROOT"
    resume = [f"{make} RESUME=1   # {WORDS['rerun_resume']}"]
    return ["make parity-env", f"{make}   # {WORDS['rerun_plan']}",
            *(resume if hasattr(module, "RESUMABLE") else []),
            *[f"{make} DIAG={d}" for d in getattr(module, "DIAGNOSTICS", {})], "make parity-summary"]


def look_lines(module, name: str, records: list[dict]) -> list[str]:
    """A reconfigured row's account: what changed after which gap, where the before-numbers are, and whether the
    fresh seeds that alone confirm the change (its plan's, run after it) have decided the row."""
    look = LOOKS.get(f"{module.NAME}/{name}")
    if look is None:
        return []
    before = (f"diagnostic `{look['before']}`" if look.get("before") else "none recorded (no run completed)")
    on, _ = basis(records, plans.PLANS.get((module.NAME, name)))
    confirmed = WORDS["look_confirmed"] if on == "plan" else WORDS["look_unconfirmed"]
    return [f"Reconfigured after a look ({look['commit']}):", "",
            f"- changed: {look['changed']}", f"- after: {look['seen']}", f"- before-numbers: {before}",
            f"- {confirmed}", ""]


def patch_lines(module) -> list[str]:
    lines = [WORDS["patches_lead"], ""]
    for kind in PATCH_KINDS:
        lines += [f"- {kind}: `{p.file}`: {p.why}" for p in module.PATCHES if p.kind == kind]
    rows = [(name, p) for name, row in module.ROWS.items() for p in row.patches]
    lines += [f"- {p.kind}, row {name} only: `{p.file}`: {p.why}" for name, p in rows]
    extra = [p for d in getattr(module, "DIAGNOSTICS", {}).values() for p in d.patches]
    lines += [f"- {p.kind}, diagnostics only: `{p.file}`: {p.why}" for p in extra]
    return [*lines, ""] if module.PATCHES or rows or extra else [*lines[:-1], "- none", ""]


def modules() -> list:
    return [importlib.import_module(f"parity.{name}") for name in REFERENCES]


# --- the pages ------------------------------------------------------------------------------------------------------
DOCS = ROOT / "docs"
PAGES = "parity"  # docs/parity/: a page per row (<reference>_<row>.md) and per reference (<reference>.md)
PLOT = "img/parity_forest.png"  # relative to docs/
WIDTH = 118  # generated prose wraps here: no line of any page runs long
CODE = WORDS["code"]  # the overview's Code column, SOURCES in a word or three
TITLES = 3  # findings' titles a row shows in docs/parity.md (its page has them all)


def wrapped(lines: list[str]) -> list[str]:
    """Prose lines wrapped at WIDTH (a bullet's continuation indented); tables and code as they are."""
    out, code = [], False
    for line in lines:
        code ^= line.startswith("```")
        if code or line.startswith(("|", "```")) or len(line) <= WIDTH:
            out.append(line)
            continue
        indent = "  " if line.startswith("- ") else ""
        out.append(textwrap.fill(line, WIDTH, subsequent_indent=indent, break_long_words=False,
                                 break_on_hyphens=False))
    return out


def findings(module) -> dict[str, list[str]]:
    """A reference's findings by row, "all" for every row's (scripts/parity/findings/<reference>.md; a module
    without that file has none)."""
    if not (common.FINDINGS / f"{module.NAME}.md").is_file():
        return {}
    return {key: items for (kind, key), items in texts(module.NAME, common.FINDINGS).items() if kind == "findings"}


def title(finding: str) -> str:
    """A finding's title: its bold lead, else its first clause, cut at a word near 120 characters."""
    lead = finding[2:].split("**")[0] if finding.startswith("**") else re.split(r"[:.] ", finding)[0]
    return lead.rstrip(".:") if len(lead) <= 120 else lead[:120].rsplit(" ", 1)[0] + " …"


def page_name(module, name: str) -> str:
    return f"{module.NAME}_{name}.md"


def row_key(module, name: str) -> tuple[str, str]:
    return module.NAME, name


def marks(key: tuple, plan: plans.Plan | None, on: str) -> list[str]:
    """What qualifies a row's verdict: no plan or a pilot's only, a pilot extended or a row reconfigured after a
    look, a plan capped below the power it needs."""
    out = ["no plan yet"] if plan is None else ["pilot only"] if on == "pilot" else []
    out += ["extended after a look"] * bool(on == "pilot" and plan and plan.after_look)
    out += ["reconfigured after a look"] * ("/".join(key) in LOOKS)
    return out + ["capped"] * bool(plan and plan.capped)


def overview_line(module, name: str, row, records: list[dict]) -> str:
    key = row_key(module, name)
    plan = plans.PLANS.get(key)
    on, figures = basis(records, plan)
    p = figures["paired"]
    verdict = "not run" if not p.n else f"**{verdict_text(p)}**" if on == "plan" else verdict_text(p)
    used = [r for r in records if r["seed"] in set(figures["reference"]) & set(figures["cl-bench"])]
    return table_line(module, name, row, "", p, verdict, used, ", ".join(marks(key, plan, on)) or "–")


def table_line(module, name: str, row, variant: str, p: stats.Paired, verdict: str, used: list[dict],
               marked: str) -> str:
    """One line of the overview: a row, or a variant of it (`variant` follows its label); `used`: the records its
    verdict rests on, whose CPUs it names."""
    return (f"| [{module.NAME}/{name}]({PAGES}/{page_name(module, name)}){variant} | {row.method} "
            f"| [{module.REPO}]({PAGES}/{module.NAME}.md) | {CODE[row_source(module, row)]} | {p.n} "
            f"| {fmt_paired(p)} | {verdict} | {fmt_cpus(used) if used else '–'} | {marked} |")


def ordered(modules: list) -> list[tuple]:
    """Every (module, row name, row), by where the reference comes from (SOURCES), then as the modules list them."""
    return [(m, n, r) for source in SOURCES for m in modules for n, r in m.ROWS.items() if row_source(m, r) == source]


def diagnostic_paired(module, label: str, diag, records: list[dict]) -> tuple[list[dict], stats.Paired]:
    """A diagnostic's records and its paired difference, cl-bench − reference, against the row's other side over
    the seeds both have."""
    runs = [r for r in records if r["reference"] == module.NAME and r.get("diagnostic") == label]
    changed = by_seed(runs, diag.side)
    other = "reference" if diag.side == "cl-bench" else "cl-bench"
    base = by_seed(row_records(records, module, diag.row), other, set(changed))
    return runs, stats.paired(changed, base) if diag.side == "cl-bench" else stats.paired(base, changed)


def shown_lines(module, name: str, row, records: list[dict]) -> list[str]:
    """The overview's lines for the row's variants (Diagnostic.shown_as): labelled, beside the row, their own
    seeds' verdict (plain: a diagnostic is no plan of its own)."""
    lines = []
    for label, diag in getattr(module, "DIAGNOSTICS", {}).items():
        if diag.row != name or not diag.shown_as:
            continue
        runs, p = diagnostic_paired(module, label, diag, records)
        done = f"{p.n} of {len(diag.seeds)} seeds" if p.n < len(diag.seeds) else "the plan's seeds"
        changed = set(by_seed(runs, diag.side))
        other = "reference" if diag.side == "cl-bench" else "cl-bench"
        used = [r for r in runs if r["seed"] in changed] + [
            r for r in row_records(records, module, diag.row) if r["side"] == other and r["seed"] in changed]
        lines.append(table_line(module, name, row, f", {diag.shown_as}", p, verdict_text(p) if p.n else "not run",
                                used, f"diagnostic `{label}`, {done}"))
    return lines


def overview(modules: list, records: list[dict]) -> list[str]:
    return [WORDS["overview_head"], "|---|---|---|---|---|---|---|---|---|",
            *(line for m, n, r in ordered(modules)
              for line in (overview_line(m, n, r, row_records(records, m, n)), *shown_lines(m, n, r, records)))]


def figure_table(module, name: str, row, records: list[dict]) -> list[str]:
    """The row's figures, a line each: both sides' RA, the paired difference, the verdict, the seeds run, the
    seconds, the CPUs and what the records lack."""
    key = row_key(module, name)
    plan = plans.PLANS.get(key)
    on, figures = basis(records, plan)
    used = [r for r in records if r["seed"] in set(figures["reference"]) | set(figures["cl-bench"])]
    cells = {"Method": row.method,
             "Reference @ commit": f"[{module.REPO}](https://github.com/{module.REPO}) @ `{module.PINNED[:8]}`",
             "Setting": row.setting, "Reference RA": fmt_side(figures["reference"]),
             "cl-bench RA": fmt_side(figures["cl-bench"]),
             "cl-bench − reference, paired [95% CI]": fmt_paired(figures["paired"]),
             "Verdict (±1 point)": fmt_verdict(figures["paired"], on, plan, key),
             "Seeds": fmt_seeds(records, plan, key), "s/run (ref / cl-bench)": fmt_seconds(used),
             "CPU (ref / cl-bench)": fmt_cpus(used), "Records": fmt_provenance(used)}
    return ["| | |", "|---|---|", *(f"| {label} | {value} |" for label, value in cells.items())]


def seed_lines(module, name: str, records: list[dict]) -> list[str]:
    """Every seed both sides ran, a line each: which set it belongs to, both RAs, the difference, the seconds, the
    CPUs and the cl-bench commit (dirty where its tree was)."""
    plan = plans.PLANS.get(row_key(module, name))
    pilot = set(plan.pilot_seeds if plan else plans.PILOT_SEEDS)
    runs = {side: {r["seed"]: r for r in records if r["side"] == side} for side in SIDES}
    seeds = sorted(set(runs["reference"]) | set(runs["cl-bench"]))
    if not seeds:
        return []
    lines = [WORDS["seeds_head"], "|---|---|---|---|---|---|---|---|"]
    for seed in seeds:
        ref, ours = runs["reference"].get(seed), runs["cl-bench"].get(seed)
        part = "pilot" if seed in pilot else "plan" if plan and seed in plan.seeds else "outside the plan"
        ra = [f"{100 * r['ra']:.2f}" if r else "–" for r in (ref, ours)]
        diff = f"{100 * (ours['ra'] - ref['ra']):+.2f}" if ref and ours else "–"
        seconds = " / ".join(f"{r['seconds']:.0f}" if r else "–" for r in (ref, ours))
        cpus = " / ".join(cpu_name(r) if r else "–" for r in (ref, ours))
        commit = (ours["commit"][:8] + " (dirty)" * bool(ours.get("provenance", {}).get("clbench_dirty"))
                  if ours else "–")
        lines.append(f"| {seed} | {part} | {ra[0]} | {ra[1]} | {diff} | {seconds} | {cpus} | {commit} |")
    return lines


def arguments_line(row) -> str:
    words = WORDS["arguments"]
    return (words["line"].format(reference=" ".join(row.reference) or "(none)", clbench=" ".join(row.clbench))
            + (f" {row.note}." if row.note else "") + (words["differs"].format(row.differs) if row.differs else ""))


def figure_lines(module, name: str, records: list[dict]) -> list[str]:
    """What a row's page renders from its records (its figures, pilot, diagnostics and seeds), before its prose."""
    mine = row_records(records, module, name)
    return [*figure_table(module, name, module.ROWS[name], mine), "", pilot_line(module, name, mine), "",
            *diagnostic_lines(module, name, records), "", *seed_lines(module, name, mine)]


def page(module, name: str, records: list[dict]) -> str:
    """docs/parity/<reference>_<row>.md: the row's full account."""
    row, mine = module.ROWS[name], row_records(records, module, name)
    figures = figure_lines(module, name, records)
    table_end = figures.index("")
    own = findings(module).get(name, [])
    lines = [f"# {module.NAME}/{name}: {row.method}", "",
             WORDS["row_links"].format(repo=module.REPO, name=module.NAME),
             "", *figures[:table_end], "", arguments_line(row), "", pilot_line(module, name, mine), "",
             *look_lines(module, name, mine), "## Findings", "",
             *([f"- {f}" for f in own] or ["- none for this row alone"]), ""]
    phases = phase_lines(module, mine)
    lines += ["## Per task", "", *phases] if phases else []
    diagnostics = diagnostic_lines(module, name, records)
    lines += ["## Diagnostics", "", *diagnostics, ""] if diagnostics else []
    seeds = seed_lines(module, name, mine)
    lines += ["## Seeds", "", *seeds] if seeds else []
    return "\n".join(wrapped(lines)).rstrip() + "\n"


def reference_page(module, records: list[dict]) -> str:
    """docs/parity/<reference>.md: the reference, how to rerun it, its patches, the findings for every row."""
    rows = [f"- [{module.NAME}/{n}]({page_name(module, n)}): {r.method}, {r.setting}" for n, r in module.ROWS.items()]
    lines = [f"# {module.NAME}: {module.REPO}", "", "[All rows](../parity.md)", "",
             WORDS["reference_intro"].format(repo=module.REPO, pinned=module.PINNED, torch=module.TORCH), "",
             WORDS["rerun_lead"], "", "```", *rerun_lines(module), "```", "",
             f"DATA_ROOT holds {module.DATA}.", "", *patch_lines(module), WORDS["every_row"], "",
             *([f"- {f}" for f in findings(module).get("all", [])] or ["- none"]), "", "Rows:", "", *rows]
    return "\n".join(wrapped(lines)).rstrip() + "\n"


def finding_lines(modules: list) -> list[str]:
    """docs/parity.md's findings: per reference, its every-row findings' titles, then each row's own (at most
    TITLES of them), each linking the page that holds them in full."""
    lines = ["## Findings by row", ""]
    for module in modules:
        found = findings(module)
        lines += [f"### {module.REPO}", "", f"Every row ([{module.NAME}.md]({PAGES}/{module.NAME}.md)): "
                  + ("; ".join(title(f) for f in found.get("all", [])) or "none") + ".", ""]
        for name, row in module.ROWS.items():
            own = [title(f) for f in found.get(name, [])]
            more = f"; {len(own) - TITLES} more on its page" if len(own) > TITLES else ""
            lines.append(f"- [{module.NAME}/{name}]({PAGES}/{page_name(module, name)}) ({row.method}): "
                         + ("; ".join(own[:TITLES]) + more if own else "none of its own") + ".")
        lines += [""]
    return lines


def document(modules: list, records: list[dict]) -> str:
    """docs/parity.md: the overview table, the forest plot, each row's findings in brief, how the rows are made."""
    split = sections(records)
    commits = {r["commit"] for r in records if r["side"] == "cl-bench"}
    how = (HERE / "parity_method.md").read_text().format(
        margin=plans.MARGIN, first=plans.FIRST_SEED, hours=plans.CPU_HOURS, learn_hours=plans.LEARN_CPU_HOURS,
        sd_level=plans.SD_CONFIDENCE, runs=len(split["runs"]), diagnostics=len(split["diagnostics"]),
        commits=len(commits))
    lines = ["# Parity with reference implementations", "",
             WORDS["intro"].format(margin=plans.MARGIN), "", *overview(modules, records), "",
             WORDS["plot_alt"].format(margin=plans.MARGIN, plot=PLOT), "",
             *finding_lines(modules), *how.splitlines()]
    return "\n".join(wrapped(lines)).rstrip() + "\n"


def forest(modules: list, records: list[dict], path: Path) -> None:
    """The forest plot: every row's paired difference with its 95% interval, the ±MARGIN band shaded; filled where
    the plan decides, hollow where only the pilot does."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = ordered(modules)
    colours = {stats.EQUIVALENT: "tab:green", stats.DIFFERENT: "tab:red", stats.UNDETERMINED: "tab:grey"}
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(rows) + 1.2))
    ax.axvspan(-plans.MARGIN, plans.MARGIN, color="tab:green", alpha=0.12, lw=0)
    ax.axvline(0, color="black", lw=0.6)
    for y, (module, name, _) in enumerate(rows):
        on, figures = basis(row_records(records, module, name), plans.PLANS.get(row_key(module, name)))
        p = figures["paired"]
        if not p.n:
            ax.text(0, y, "not run", ha="center", va="center", fontsize=7)
            continue
        colour = colours[p.verdict(plans.MARGIN)]
        if p.n > 1:
            ax.plot(p.ci95, (y, y), color=colour, lw=1.5)
        ax.plot(p.mean, y, "o", color=colour, mfc=colour if on == "plan" else "white", ms=5)
    ax.set_yticks(range(len(rows)), [f"{m.NAME}/{n} ({r.method})" for m, n, r in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel(WORDS["plot_xlabel"])
    ax.set_title(WORDS["plot_title"].format(margin=plans.MARGIN), fontsize=8)
    ax.grid(axis="x", lw=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def pages(modules: list, records: list[dict]) -> dict[str, str]:
    """docs/parity/'s pages by file name: each row's and each reference's."""
    rows = {page_name(m, n): page(m, n, records) for m in modules for n in m.ROWS}
    return {**rows, **{f"{m.NAME}.md": reference_page(m, records) for m in modules}}


def write(modules: list, records: list[dict], doc: Path) -> None:
    """docs/parity.md, its pages beside it in parity/ (any other page there removed: they are all generated) and
    the forest plot in img/."""
    pages_ = pages(modules, records)
    folder = doc.parent / PAGES
    folder.mkdir(parents=True, exist_ok=True)
    for stale in {p.name for p in folder.glob("*.md")} - set(pages_):
        (folder / stale).unlink()
    for name, text in pages_.items():
        (folder / name).write_text(text)
    doc.write_text(document(modules, records))
    forest(modules, records, doc.parent / PLOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=RECORDS,
                        help=WORDS["help"]["records"])
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "parity.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "parity.md",
                        help=WORDS["help"]["doc"])
    args = parser.parse_args()
    records = merged(args.records, args.json)
    args.json.write_text(json.dumps(sections(records), indent=1) + "\n")
    write(modules(), records, args.doc)
    print(f"{args.doc}: {len(records)} records")


if __name__ == "__main__":
    main()
