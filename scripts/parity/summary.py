"""docs/parity.md from the parity records: per row, both sides' RA, the paired difference and its equivalence verdict.

    python scripts/parity/summary.py [--records outputs/parity] [--json docs/parity.json] [--doc docs/parity.md]

Records accumulate: those under --records (one JSON per run, written by the runners) replace the entries of the same
reference, row, side, seed and diagnostic in --json, which keeps every run the document was made from (committed, so
the document is rebuilt and checked without rerunning anything: tests/test_parity_summary.py does). --json holds two
sections: "runs" (the rows' pilot and plan seeds) and "diagnostics" (runs that test a cause, rendered under their row).

The arithmetic is cl_bench/stats.py's, the one `cl-bench report --rank` uses: the difference is taken seed by seed
(the same seed writes the same split for both sides), with Student's t intervals, and the verdict is TOST at
plans.MARGIN points. A row's verdict comes from its plan's seeds once they have all run (scripts/parity/plans.py);
until then from its pilot, said so in the row, and a pilot extended after a look is marked.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from parity import plans  # noqa: E402  (scripts/ is not a package: the path first)
from parity.common import PATCH_KINDS, PROVENANCE_KEYS, RECORDS, ROOT  # noqa: E402

from cl_bench import stats  # noqa: E402

# Rows whose cl-bench side or cut changed after a gap was seen ("reference/row": what changed, when, what was seen,
# and the diagnostic that holds the before-numbers): a data file, read here and rendered in the row.
LOOKS = json.loads((HERE / "looks.json").read_text())
REFERENCES = ("cpg", "mammoth", "hat", "lamaml", "cgate")  # the runner modules, in the doc's order
SIDES = ("reference", "cl-bench")
# Where a row's reference comes from, the doc's sections in order (a module's SOURCE, or a row's own `source`).
SOURCES = {
    "authors": "The method's authors' code",
    "baseline": "A published implementation by others (the framework or paper that ran it as a baseline)",
    "reimplementation": "An independent re-implementation (not the authors')",
    "different": "Not the same algorithm: each side as its code has it, shown for what differs, not as parity",
}


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


# --- the document -------------------------------------------------------------------------------------------------
def row_source(module, row) -> str:
    return "different" if row.differs else (getattr(row, "source", "") or module.SOURCE)


def row_records(records: list[dict], module, name: str) -> list[dict]:
    return [r for r in records if r["reference"] == module.NAME and r["row"] == name and not r.get("diagnostic")]


def table_line(module, name: str, row, records: list[dict]) -> str:
    key = (module.NAME, name)
    plan = plans.PLANS.get(key)
    on, figures = basis(records, plan)
    used = [r for r in records if r["seed"] in set(figures["reference"]) | set(figures["cl-bench"])]
    return (f"| {row.method} | [{module.REPO}](#{module.NAME}) @ `{module.PINNED[:8]}` | {row.setting} "
            f"| {fmt_side(figures['reference'])} | {fmt_side(figures['cl-bench'])} | {fmt_paired(figures['paired'])} "
            f"| {fmt_verdict(figures['paired'], on, plan, key)} | {fmt_seeds(records, plan, key)} "
            f"| {fmt_seconds(used)} | {fmt_cpus(used)} | {fmt_provenance(used)} |")


TABLE_HEAD = ["| Method | Reference @ commit | Setting | Reference RA | cl-bench RA | cl-bench − reference, paired "
              "[95% CI] | Verdict (±1 point) | Seeds | s/run (ref / cl-bench) | CPU (ref / cl-bench) | Records |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]


def tables(modules: list, records: list[dict]) -> list[str]:
    lines = []
    for source, title in SOURCES.items():
        rows = [(m, n, r) for m in modules for n, r in m.ROWS.items() if row_source(m, r) == source]
        if not rows:
            continue
        lines += [f"### {title}", "", *TABLE_HEAD]
        lines += [table_line(m, n, r, row_records(records, m, n)) for m, n, r in rows]
        lines += [""]
    return lines


def pilot_line(module, name: str, records: list[dict]) -> str:
    plan = plans.PLANS.get((module.NAME, name))
    if plan is None:
        pilot = compare(records, set(plans.PILOT_SEEDS))
        return (f"No seed plan yet: {plans.PENDING[(module.NAME, name)]}. Pilot, seeds 0-{len(plans.PILOT_SEEDS) - 1}"
                f": reference {fmt_side(pilot['reference'])}, cl-bench {fmt_side(pilot['cl-bench'])}, paired "
                f"{fmt_paired(pilot['paired'])}; its plan follows from its paired sd by the rule in plans.py.")
    pilot = compare(records, set(plan.pilot_seeds))
    look = " (extended after a look: not a 95% interval)" if plan.after_look else ""
    return (f"Pilot, seeds 0-{plan.pilot - 1}{look}: reference {fmt_side(pilot['reference'])}, cl-bench "
            f"{fmt_side(pilot['cl-bench'])}, paired {fmt_paired(pilot['paired'])}, sd {pilot['paired'].sd:.2f}; "
            f"the plan: {plan.n} fresh seed{'s' * (plan.n != 1)} from {plans.FIRST_SEED}"
            + (f", sized from the sd's {plans.SD_CONFIDENCE:.0%} upper bound "
               f"({plans.sd_upper_bound(plan.pilot_sd, plan.pilot):.2f})" if plan.upper_sd else "")
            + (f", capped at {plan.cpu_hours:.0f} CPU-hours (80% power needs {plan.needed})" if plan.capped else "")
            + ".")


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
    return mean.format(sum(known) / len(known)) if mean and known else tally(values)


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
    columns = getattr(module, "PHASE_COLUMNS", ())
    sides = {side: sorted((r for r in records if r["side"] == side and r.get("phases")), key=lambda r: r["seed"])
             for side in ("reference", "cl-bench")}
    if not columns or not all(sides.values()):
        return []
    seeds = {side: [r["seed"] for r in runs] for side, runs in sides.items()}
    # The legend names only what this table holds (phase_cell's test): a tallied column's ×n, each averaged one's mean.
    legend = ["a value with ×n: n seeds chose it"] if any(not mean for *_, mean in columns) else []
    legend += [f"{title}: the mean" for _, title, mean in columns if mean]
    legend += ["(p): where the tallies differ, the exact permutation test's p that both sides draw alike"] * bool(
        any(not mean for *_, mean in columns))
    legend += ["cl-bench lower: pairs whose final test accuracy is lower on cl-bench's side, sign test p"]
    lines = [f"Per task, `reference / cl-bench` over seeds {seeds['reference']} / {seeds['cl-bench']} "
             f"({'; '.join(legend)}):", "",
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
        runs = [r for r in records if r["reference"] == module.NAME and r.get("diagnostic") == label]
        changed = by_seed(runs, diag.side)
        other = "reference" if diag.side == "cl-bench" else "cl-bench"
        base = by_seed(row_records(records, module, name), other, set(changed))
        p = stats.paired(changed, base) if diag.side == "cl-bench" else stats.paired(base, changed)
        verdict = verdict_text(p) if p.n else "not run"
        lines.append(f"- Diagnostic `{label}` ({diag.what}; {diag.side} changed, seeds "
                     f"{min(diag.seeds)}-{max(diag.seeds)}): {diag.side} {fmt_side(changed)} against the row's "
                     f"{other} {fmt_side(base)}; cl-bench − reference {fmt_paired(p)}, {verdict}. "
                     f"{fmt_provenance(runs) if runs else ''}".rstrip())
    return lines


def rerun_lines(module) -> list[str]:
    make = f"make parity-{module.NAME} REF=DIR DATA=DATA_ROOT"
    resume = [f"{make} RESUME=1   # the same, going on with a run cut short (either side)"]
    plan = "every row's plan; ROWS=... for some, PILOT=1 for the pilot's seeds, PARITY_SEEDS=... some of them"
    return ["make parity-env", f"{make}   # {plan}",
            *(resume if hasattr(module, "RESUMABLE") else []),
            *[f"{make} DIAG={d}" for d in getattr(module, "DIAGNOSTICS", {})], "make parity-summary"]


def section(module, records: list[dict]) -> list[str]:
    lines = [f"## {module.NAME}", "", f"{module.REPO} at `{module.PINNED}`. {module.TORCH} It runs here on this "
             "project's torch (each record names the version), through the environment patches below.", "",
             "Rerun (a checkout of the reference at that commit in DIR):", "", "```", *rerun_lines(module), "```", "",
             f"DATA_ROOT holds {module.DATA}.", ""]
    lines += patch_lines(module)
    lines += ["What the runs found (fixed in cl-bench, matched by the rows' overrides, or named):", ""]
    lines += [f"- {finding}" for finding in getattr(module, "FINDINGS", [])] or ["- nothing yet"]
    lines += [""]
    for name, row in module.ROWS.items():
        lines += [f"**{name}** ({row.method}): reference arguments `{' '.join(row.reference) or '(none)'}`; "
                  f"`cl-bench train {' '.join(row.clbench)} seed=N`." + (f" {row.note}." if row.note else "")
                  + (f" **Not the same algorithm:** {row.differs}." if row.differs else ""), "",
                  pilot_line(module, name, row_records(records, module, name)), "",
                  *look_lines(module, name, row_records(records, module, name)),
                  *phase_lines(module, row_records(records, module, name))]
        diagnostics = diagnostic_lines(module, name, records)
        lines += [*diagnostics, ""] if diagnostics else []
    return lines


def look_lines(module, name: str, records: list[dict]) -> list[str]:
    """A reconfigured row's account: what changed after which gap, where the before-numbers are, and whether the
    fresh seeds that alone confirm the change (its plan's, run after it) have decided the row."""
    look = LOOKS.get(f"{module.NAME}/{name}")
    if look is None:
        return []
    before = (f"diagnostic `{look['before']}`" if look.get("before") else "none recorded (no run completed)")
    on, _ = basis(records, plans.PLANS.get((module.NAME, name)))
    confirmed = ("Its plan's fresh seeds, run after the change, decide the verdict." if on == "plan"
                 else "Only its plan's fresh seeds can confirm the change; they have not all run.")
    return [f"Reconfigured after a look ({look['commit']}):", "",
            f"- changed: {look['changed']}", f"- after: {look['seen']}", f"- before-numbers: {before}",
            f"- {confirmed}", ""]


def patch_lines(module) -> list[str]:
    lines = ["Patches to the reference's copy, by what they touch (nothing else is changed):", ""]
    for kind in PATCH_KINDS:
        lines += [f"- {kind}: `{p.file}`: {p.why}" for p in module.PATCHES if p.kind == kind]
    rows = [(name, p) for name, row in module.ROWS.items() for p in row.patches]
    lines += [f"- {p.kind}, row {name} only: `{p.file}`: {p.why}" for name, p in rows]
    extra = [p for d in getattr(module, "DIAGNOSTICS", {}).values() for p in d.patches]
    lines += [f"- {p.kind}, diagnostics only: `{p.file}`: {p.why}" for p in extra]
    return [*lines, ""] if module.PATCHES or rows or extra else [*lines[:-1], "- none", ""]


HEADER = """# Parity with reference implementations

Each row trains one method on the same samples through a reference implementation and through cl-bench: the
harness (scripts/parity/) builds cl-bench's split for the seed, writes it in the reference's own input format,
runs the reference from a patched copy of a checkout at the pinned commit, then runs `cl-bench train` with the
row's overrides. RA is the average accuracy after the last task, in points. Both sides run on one CPU thread.

- **The difference is paired**: the same seed writes the same split for both sides, so the row's difference is
  the mean of the seeds' differences (cl-bench − reference), with Student's 95% interval on n − 1 degrees of
  freedom. The per-side columns are mean ± sample sd.
- **The verdict is an equivalence test** at a margin of ±{margin:g} point (TOST): *equivalent* when the 90%
  interval lies inside ±{margin:g}; *different* when the 95% interval lies wholly outside it; *undetermined*
  otherwise (n too small to tell). A noisy row is undetermined, never equivalent by default.
- **Seed counts are fixed before the runs** (scripts/parity/plans.py): from the paired sd of a pilot (for plans
  fixed from 2026-12-05 on, its one-sided {sd_level:.0%} upper confidence bound: three pilot seeds estimate an sd
  poorly), the fresh seeds (from {first}) that give the test 80% power, capped at {hours:g} CPU-hours a row
  ({learn_hours:g} for the learning cut's rows, whose seeds take hours). A verdict in bold rests on a plan run in
  full; "pilot only" rests on the pilot, and "extended after a look" marks a pilot that grew seed by seed while its
  row looked far off (its interval is not a 95% interval). Pilots are reported apart under each row. The Seeds
  column counts the plan's seeds run on both sides, and those so far run on one side only.
- **Provenance**: each record carries the cl-bench commit and whether its tree was dirty, the reference's commit,
  Python, numpy and torch on its side, the CPU, the threads and the date; the Records column flags what lacks them
  (records made before they existed: which torch those ran on is not known) or was made from a dirty tree, and
  names the torch each side ran on where recorded.
- **Sections** say what the reference is: the method's authors' code, a published implementation by others, an
  independent re-implementation, or not the same algorithm (two codes that differ by design, shown with what
  differs). Each patch to a reference is classed: environment, data I/O, architecture or control flow/learning.
- **Diagnostics** (runs that test a cause: another option, another stem) are records too, in docs/parity.json's
  second section, and are rendered under their row.

NCCL (Yin et al. 2021) has no public code, so no row here checks it against an outside reference; what can be
measured, whether its calibration moves and matters, is REPRODUCING.md's "NCCL's calibration measured".

Generated by `scripts/parity/summary.py` from docs/parity.json ({runs} runs, {diagnostics} diagnostic runs, made
at {commits} cl-bench commits: each record names its own).
"""


def document(modules: list, records: list[dict]) -> str:
    split = sections(records)
    commits = {r["commit"] for r in records if r["side"] == "cl-bench"}
    lines = [HEADER.format(margin=plans.MARGIN, first=plans.FIRST_SEED, hours=plans.CPU_HOURS,
                           learn_hours=plans.LEARN_CPU_HOURS, sd_level=plans.SD_CONFIDENCE,
                           runs=len(split["runs"]), diagnostics=len(split["diagnostics"]), commits=len(commits)),
             *tables(modules, records)]
    for module in modules:
        lines += section(module, records)
    return "\n".join(lines).rstrip() + "\n"


def modules() -> list:
    return [importlib.import_module(f"parity.{name}") for name in REFERENCES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "parity.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "parity.md")
    args = parser.parse_args()
    records = merged(args.records, args.json)
    args.json.write_text(json.dumps(sections(records), indent=1) + "\n")
    args.doc.write_text(document(modules(), records))
    print(f"{args.doc}: {len(records)} records")


if __name__ == "__main__":
    main()
