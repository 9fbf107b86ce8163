"""The records behind REPRODUCING.md's tables, and the tables made again from them.

    python scripts/repro_records.py keep SWEEP NAME     # each complete run's small files into docs/repro/NAME
    python scripts/repro_records.py render [--check]    # every table of REPRODUCING.md, from docs/repro

A run's record is what the report reads of it: metrics.json, run.json and .hydra's config.yaml and overrides.yaml
(no checkpoints, no logs), kept under docs/repro/NAME at the run's path inside its sweep. A table of REPRODUCING.md is
generated where it sits, between `<!-- table: TOOL NAME [options] -->` and `<!-- /table -->`: TOOL is `report`
(cl-bench report's report.md, the table and the lines under it), `sweep_table` (scripts/sweep_table.py) or `paper`
(each setting's RA beside a paper's figure, from a YAML file under docs/repro: `paper NAME FIGURES.yaml`), run over
docs/repro/NAME. tests/test_repro_records.py checks that every table regenerates exactly.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "repro"
DOCUMENT = ROOT / "REPRODUCING.md"
KEPT = ("metrics.json", "run.json", ".hydra/config.yaml", ".hydra/overrides.yaml")
BLOCK = re.compile(r"(<!-- table: (?P<args>[^>]*?) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)
TOOLS = ("report", "sweep_table", "paper")
WIDTH = 118


def keep(sweep: Path, dest: Path) -> int:
    """Copy each complete run's KEPT files under sweep into dest (replacing what was there); the count."""
    shutil.rmtree(dest, ignore_errors=True)
    kept = 0
    for metrics in sorted(sweep.rglob("metrics.json")):
        run = metrics.parent
        if not json.loads(metrics.read_text()).get("complete") or (run / "FAILED").exists():
            continue
        for part in KEPT:
            if (run / part).is_file():
                target = dest / run.relative_to(sweep) / part
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(run / part, target)
        kept += 1
    return kept


def table(args: str) -> str:
    """A block's text: TOOL run over RECORDS/NAME with its options, as the tool writes it."""
    tool, name, *options = args.split()
    if tool not in TOOLS:
        raise SystemExit(f"REPRODUCING.md: a table's tool is one of {', '.join(TOOLS)}, not {tool!r}")
    source = RECORDS / name
    if not source.is_dir():
        raise SystemExit(f"REPRODUCING.md: no records at {source.relative_to(ROOT)} (make them with `keep`)")
    where = str(source.relative_to(ROOT))
    if tool == "paper":
        if len(options) != 1 or not (RECORDS / options[0]).is_file():
            raise SystemExit(f"REPRODUCING.md: a paper table names one figures file under docs/repro, not {options}")
        return versus_paper(source, RECORDS / options[0])
    if tool == "sweep_table":
        return run([sys.executable, str(ROOT / "scripts" / "sweep_table.py"), where, *options])
    with tempfile.TemporaryDirectory() as out:
        run([sys.executable, "-m", "cl_bench", "report", where, "--out", out, "--no-plots", *options])
        return wrapped(Path(out, "report.md").read_text())


def versus_paper(source: Path, figures: Path) -> str:
    """cl-bench report's rows over source (RA: mean ± sd [95% interval] over seeds) beside the published figure of
    each, read from figures: {dataset: {method: figure, or {memory size: figure}}}, in %; – where it has none."""
    import yaml

    from cl_bench import report
    published = yaml.safe_load(figures.read_text())
    runs = report.find_runs([source])
    keys = report.grouping_keys(runs)  # settings that tell runs apart beyond the columns: never pooled, shown
    lines = ["| dataset | scenario | method | memory | " + "".join(f"{k} | " for k in keys)
             + "seeds | RA % [95% CI] | paper % | RA − paper |", "|---" * (8 + len(keys)) + "|"]
    shown = set()
    for row in report.summarise(runs, keys):
        cells = (row["dataset"], row["scenario"], row["method"], row["memory"], *map(str, row["settings"].values()))
        if cells in shown:  # report's other columns (tasks, backbone, protocol, ran_on) tell them apart, not this table
            raise SystemExit(f"{source}: two settings of {' '.join(map(str, cells))} differ in a column a paper table "
                             "does not show (tasks, backbone, protocol, ran_on); show them with a report table")
        shown.add(cells)
        paper = published.get(row["dataset"], {}).get(row["method"])
        if isinstance(paper, dict):
            paper = paper.get(row["memory"])
        figure, gap = ("–", "–") if paper is None else (f"{paper:.2f}", f"{100 * row['avg_acc'] - paper:+.2f}")
        lines.append(f"| {row['dataset']} | {row['scenario']} | {row['method']} | {row['memory'] or '–'} | "
                     + "".join(f"{report.group_cell(row, k)} | " for k in keys)
                     + f"{row['seeds']} | {report.fmt(row, 'avg_acc')} | {figure} | {gap} |")
    return "\n".join(lines) + "\n"


def wrapped(text: str) -> str:
    """The report's prose lines (its legend) folded at WIDTH, so that no document line is a wall; tables and list
    items as they are."""
    return "\n".join(line if line.startswith(("|", "- ")) else textwrap.fill(line, WIDTH) or line
                     for line in text.splitlines()) + "\n"


def run(command: list[str]) -> str:
    """stdout of command, run from the checkout's root so that the paths it prints are the records' own."""
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command[1:])} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def render(text: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + table(m.group("args")).rstrip("\n") + "\n" + m.group(4), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    kept = commands.add_parser("keep", help="a sweep's records into docs/repro/NAME")
    kept.add_argument("sweep", type=Path)
    kept.add_argument("name")
    rendered = commands.add_parser("render", help="REPRODUCING.md's tables from docs/repro")
    rendered.add_argument("--check", action="store_true", help="exit 1, naming them, where tables differ")
    args = parser.parse_args()
    if args.command == "keep":
        print(f"{keep(args.sweep, RECORDS / args.name)} runs kept in {(RECORDS / args.name).relative_to(ROOT)}")
        return
    old = DOCUMENT.read_text()
    new = render(old)
    if args.check:
        stale = [m.group("args") for m, n in zip(BLOCK.finditer(old), BLOCK.finditer(new)) if m.group(0) != n.group(0)]
        if stale:
            raise SystemExit("REPRODUCING.md's tables differ from their records: " + "; ".join(stale))
        return
    DOCUMENT.write_text(new)


if __name__ == "__main__":
    main()
