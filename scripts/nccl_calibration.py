"""The table of `make repro-nccl-calibration`: NCCL's outer objective x beta on each stream, against the default.

    .venv/bin/python scripts/nccl_calibration.py outputs/sweeps/repro-nccl/calibration

Per benchmark and variant: RA, BTI and LA (mean ± sd over seeds), how far the calibration moved (the largest
relative change of a calibration entry in any task, metrics.json's capacity.calibration_moved: median over seeds),
and the paired RA difference against the default (the seed's objective at beta 1) over the seeds both ran, with
its 95% interval and the equivalence verdict at ±1 point (cl_bench/stats.py, as docs/parity.md).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import yaml

from cl_bench import stats

DEFAULT = ("seed", 1.0)
MARGIN = 1.0


def runs(sweep: Path) -> list[dict]:
    """Each complete run: its dataset, seed, variant (outer objective, beta) and metrics."""
    found = []
    for path in sorted(sweep.rglob("metrics.json")):
        metrics = json.loads(path.read_text())
        method = yaml.safe_load((path.parent / ".hydra" / "config.yaml").read_text())["method"]
        if metrics["complete"]:
            found.append({"dataset": metrics["dataset"], "seed": metrics["seed"],
                          **metrics, "setup": (method["outer_objective"], float(method["beta"]))})
    return found


def cell(values: list[float]) -> str:
    mean, sd = stats.mean_sd([100 * v for v in values])
    return f"{mean:.2f} ± {sd:.2f}"


def row(group: list[dict], base: list[dict]) -> str:
    objective, beta = group[0]["setup"]
    moved = statistics.median(max(r["capacity"]["calibration_moved"]) for r in group)
    paired = stats.paired({r["seed"]: 100 * r["avg_acc"] for r in group},
                          {r["seed"]: 100 * r["avg_acc"] for r in base})
    versus = "–" if group[0]["setup"] == DEFAULT else (
        f"{paired.mean:+.2f} [{paired.ci95[0]:+.2f}, {paired.ci95[1]:+.2f}], {paired.verdict(MARGIN)}")
    return (f"| {group[0]['dataset']} | {objective} | {beta:g} | {len(group)} | {cell([r['avg_acc'] for r in group])} "
            f"| {cell([r['bti'] for r in group])} | {cell([r['la'] for r in group])} | {moved:.2e} | {versus} |")


def table(found: list[dict]) -> list[str]:
    lines = ["| benchmark | outer objective | β | seeds | RA % | BTI % | LA % | calibration moved (median of the "
             "largest relative change) | RA − default, paired [95% CI], verdict at ±1 |", "|---|---|---|---|---|---|"
             "---|---|---|"]
    for dataset in sorted({r["dataset"] for r in found}):
        mine = [r for r in found if r["dataset"] == dataset]
        base = [r for r in mine if r["setup"] == DEFAULT]
        for variant in sorted({r["setup"] for r in mine}, key=lambda v: (v != DEFAULT, v)):
            lines.append(row([r for r in mine if r["setup"] == variant], base))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    print("\n".join(table(runs(parser.parse_args().sweep))))


if __name__ == "__main__":
    main()
