"""docs/parity.md from the parity records: per row, both sides' RA over seeds and their difference with a 95% CI.

    python scripts/parity/summary.py [--records outputs/parity] [--json docs/parity.json] [--doc docs/parity.md]

Records accumulate: those under --records (one JSON per run, written by the runners) replace the entries of the
same reference, row, side and seed in --json, which keeps every run the table was made from (committed, so the doc
can be rebuilt and checked without rerunning anything).
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from parity.common import RECORDS, ROOT  # noqa: E402  (scripts/ is not a package: the path first)

from cl_bench.report import mean_std  # noqa: E402  (mean and sample sd, as cl-bench's reports compute them)

REFERENCES = ("cpg", "mammoth", "hat", "lamaml", "cgate")  # the runner modules, in the doc's order
SIDES = ("reference", "cl-bench")
GAP = 1.0  # points of RA: a larger difference, or a CI that excludes 0, needs its cause named


def difference_ci(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """mean(ours) - mean(theirs) and Welch's 95% interval of it (unequal variances, Welch-Satterthwaite df)."""
    from scipy.stats import t
    (m1, s1), (m2, s2) = mean_std(ours), mean_std(theirs)
    diff = m1 - m2
    if len(ours) < 2 or len(theirs) < 2:
        return diff, math.nan, math.nan
    v1, v2 = s1 ** 2 / len(ours), s2 ** 2 / len(theirs)
    se = math.sqrt(v1 + v2)
    if se == 0:
        return diff, diff, diff
    df = (v1 + v2) ** 2 / (v1 ** 2 / (len(ours) - 1) + v2 ** 2 / (len(theirs) - 1))
    half = float(t.ppf(0.975, df)) * se
    return diff, diff - half, diff + half


def key(record: dict) -> tuple:
    return record["reference"], record["row"], record["side"], record["seed"]


def merged(records_dir: Path, json_path: Path) -> list[dict]:
    """The committed records with the runners' newer ones in their place."""
    records = {key(r): r for r in (json.loads(json_path.read_text()) if json_path.is_file() else [])}
    for path in sorted(records_dir.glob("*/*/*.json")) if records_dir.is_dir() else []:
        record = json.loads(path.read_text())
        records[key(record)] = record
    return [records[k] for k in sorted(records)]


def row_stats(records: list[dict]) -> dict:
    """Per side: RA values in points and mean seconds; the difference and its CI in points."""
    sides = {side: [r for r in records if r["side"] == side] for side in SIDES}
    stats = {side: {"ra": [100 * r["ra"] for r in rs], "seconds": [r["seconds"] for r in rs]}
             for side, rs in sides.items()}
    ours, theirs = stats["cl-bench"]["ra"], stats["reference"]["ra"]
    stats["diff"] = difference_ci(ours, theirs) if ours and theirs else (math.nan,) * 3
    return stats


def needs_cause(diff: tuple[float, float, float]) -> bool:
    d, lo, hi = diff
    return abs(d) > GAP or (not math.isnan(lo) and (lo > 0 or hi < 0))


def fmt_side(side: dict) -> str:
    if not side["ra"]:
        return "not run"
    mean, sd = mean_std(side["ra"])
    return f"{mean:.2f} ± {sd:.2f} (n={len(side['ra'])})"


def fmt_diff(diff: tuple[float, float, float]) -> str:
    d, lo, hi = diff
    if math.isnan(d):
        return "–"
    interval = "" if math.isnan(lo) else f" [{lo:+.2f}, {hi:+.2f}]"
    return f"{d:+.2f}{interval}" + (" †" if needs_cause(diff) else "")


def fmt_seconds(stats: dict) -> str:
    return " / ".join(f"{sum(s) / len(s):.0f}" if s else "–" for s in (stats[side]["seconds"] for side in SIDES))


def table(modules: list, records: list[dict]) -> list[str]:
    lines = ["| Method | Reference @ commit | Setting | Reference RA | cl-bench RA | cl-bench − reference [95% CI] "
             "| s/run (ref / cl-bench) |", "|---|---|---|---|---|---|---|"]
    for module in modules:
        for name, row in module.ROWS.items():
            stats = row_stats([r for r in records if r["reference"] == module.NAME and r["row"] == name])
            lines.append(f"| {row.method} | [{module.REPO}](#{module.NAME}) @ `{module.PINNED[:8]}` | {row.setting} "
                         f"| {fmt_side(stats['reference'])} | {fmt_side(stats['cl-bench'])} "
                         f"| {fmt_diff(stats['diff'])} | {fmt_seconds(stats)} |")
    return lines


def section(module) -> list[str]:
    lines = [f"## {module.NAME}", "", f"{module.REPO} at `{module.PINNED}`.", "",
             "Rerun (a checkout of the reference at that commit in DIR):", "", "```",
             f"make parity-{module.NAME} REF=DIR DATA=DATA_ROOT", "make parity-summary", "```", ""]
    lines += ["Patches to the reference's copy (nothing else is changed):", ""]
    lines += [f"- `{p.file}`: {p.why}" for p in module.PATCHES] or ["- none"]
    lines += ["", "What the runs found (fixed in cl-bench, matched by the rows' overrides, or named):", ""]
    lines += [f"- {finding}" for finding in getattr(module, "FINDINGS", [])] or ["- nothing yet"]
    lines += [""]
    for name, row in module.ROWS.items():
        lines += [f"**{name}** ({row.method}): reference arguments `{' '.join(row.reference) or '(none)'}`; "
                  f"`cl-bench train {' '.join(row.clbench)} seed=N`." + (f" {row.note}." if row.note else ""), ""]
    return lines


HEADER = """# Parity with the authors' code

Each row trains one method on the same samples through its authors' code (or the standard framework that
published it) and through cl-bench: the harness (scripts/parity/) builds cl-bench's split for the seed, writes it in
the reference's own input format, runs the reference from a patched copy of a checkout at the pinned commit, then
runs `cl-bench train` with the row's overrides. RA is the average accuracy after the last task (points); values
are mean ± sample sd over seeds; the difference is cl-bench minus the reference with Welch's 95% interval. Both
sides run on one CPU thread. † marks a row more than 1 point apart or whose interval excludes 0: its cause is
named under its reference below.

Generated by `scripts/parity/summary.py` from docs/parity.json (every run's record); the cl-bench runs were made
at commit {commit}.
"""


def document(modules: list, records: list[dict]) -> str:
    commits = sorted({r["commit"][:12] for r in records if r["side"] == "cl-bench"}) or ["(none yet)"]
    lines = [HEADER.format(commit=", ".join(f"`{c}`" for c in commits)), *table(modules, records), ""]
    for module in modules:
        lines += section(module)
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=RECORDS)
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "parity.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "parity.md")
    args = parser.parse_args()
    records = merged(args.records, args.json)
    modules = [importlib.import_module(f"parity.{name}") for name in REFERENCES]
    args.json.write_text(json.dumps(records, indent=1) + "\n")
    args.doc.write_text(document(modules, records))
    print(f"{args.doc}: {len(records)} runs")


if __name__ == "__main__":
    main()
