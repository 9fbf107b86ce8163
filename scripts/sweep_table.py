"""A sweep's runs grouped by the config values that differ between them, each group paired against a baseline.

    .venv/bin/python scripts/sweep_table.py SWEEP --by method.outer_objective method.beta \
        --versus seed 1.0
    .venv/bin/python scripts/sweep_table.py SWEEP --by method.name method.epochs --versus er \
        --also task_aware_avg_acc:% capacity.kernels_frozen

`cl-bench report` averages runs of one method, dataset and scenario together; a sweep over other values (an
ablation, a schedule ladder) needs them apart. Per dataset and group (the values of the --by keys, read from each
run's .hydra/config.yaml): the seeds, RA, BTI and LA (mean ± sd), the largest of a per-task capacity list where
--capacity names one (NCCL's calibration_moved: median over seeds), and, against its baseline, the paired RA
difference over shared seeds with its 95% interval and the equivalence verdict at --margin (cl_bench/stats.py, as
docs/parity.md and `cl-bench report --rank`). A group's baseline is the group of the same dataset whose values are
the --versus values for the first --by keys, in their order, and the group's own for the rest or where a value is
`-` (--by method.name method.epochs --versus er: each rung's ER). Values only, never KEY=VALUE: a selector that
reads as an override would seem to set what it only picks.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import yaml

from cl_bench import stats


def lookup(config: dict, dotted: str) -> str:
    value = config
    for part in dotted.split("."):
        value = value[part]
    return str(value)


def runs(sweep: Path, keys: list[str]) -> list[dict]:
    """Each complete run: its metrics and the values of the keys that group it."""
    found = []
    for path in sorted(sweep.rglob("metrics.json")):
        metrics = json.loads(path.read_text())
        config = yaml.safe_load((path.parent / ".hydra" / "config.yaml").read_text())
        if metrics["complete"]:
            found.append({**metrics, "group": tuple(lookup(config, k) for k in keys)})
    return found


def cell(values: list[float], scale: float = 100) -> str:
    mean, sd = stats.mean_sd([scale * v for v in values])
    return f"{mean:.2f} ± {sd:.2f}"


def final(value) -> float:
    """A metrics.json value as one number: a number itself; a per-task list its mean, a matrix (a row per task
    learned) the mean of its last row, both as they stand after the last task."""
    while isinstance(value, list) and value and isinstance(value[-1], list):
        value = value[-1]
    return statistics.mean(value) if isinstance(value, list) else float(value)


def also_cell(group: list[dict], spec: str) -> str:
    key, _, unit = spec.partition(":")
    values = []
    for r in group:
        value = r
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            values.append(final(value))
    return cell(values, 100 if unit == "%" else 1) if len(values) == len(group) else "–"


def row(group: list[dict], base: list[dict] | None, args) -> str:
    cells = [group[0]["dataset"], *group[0]["group"], str(len(group)), cell([r["avg_acc"] for r in group]),
             cell([r["bti"] for r in group]), cell([r["la"] for r in group])]
    if args.capacity:
        cells.append(f"{statistics.median(max(r['capacity'][args.capacity]) for r in group):.2e}")
    cells += [also_cell(group, spec) for spec in args.also]
    paired = stats.paired({r["seed"]: 100 * r["avg_acc"] for r in group},
                          {r["seed"]: 100 * r["avg_acc"] for r in base})
    cells.append("–" if group is base or not base else f"{paired.mean:+.2f} [{paired.ci95[0]:+.2f}, "
                 f"{paired.ci95[1]:+.2f}], {paired.verdict(args.margin)}")
    return "| " + " | ".join(cells) + " |"


def table(found: list[dict], args) -> list[str]:
    head = ["dataset", *args.by, "seeds", "RA %", "BTI %", "LA %",
            *([f"{args.capacity}: largest, median over seeds"] if args.capacity else []),
            *(spec.replace(":%", " %") for spec in args.also),
            f"RA − baseline, paired [95% CI], verdict at ±{args.margin:g}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for dataset in sorted({r["dataset"] for r in found}):
        mine = [r for r in found if r["dataset"] == dataset]
        groups = {g: [r for r in mine if r["group"] == g] for g in sorted({r["group"] for r in mine})}
        ordered = sorted(groups, key=lambda g: (baseline(g, args) != g, [natural(v) for v in g]))
        lines += [row(groups[g], groups.get(baseline(g, args)), args) for g in ordered]
    return lines


def natural(value: str) -> tuple:
    """Numbers in their order (2 before 10), then words."""
    try:
        return 0, float(value), ""
    except ValueError:
        return 1, 0.0, value


def baseline(group: tuple, args) -> tuple:
    chosen = [*args.versus, *["-"] * (len(group) - len(args.versus))]
    return tuple(value if mine == "-" else mine for mine, value in zip(chosen, group))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--by", nargs="+", required=True, help="config keys that tell the groups apart")
    parser.add_argument("--versus", nargs="+", default=[], metavar="VALUE",
                        help="what a group's baseline has for the first --by keys, in order (- or the rest: as the "
                             "group)")
    parser.add_argument("--capacity", help="a per-task list in metrics.json's capacity to report the largest of")
    parser.add_argument("--also", nargs="+", default=[], metavar="KEY[:%]",
                        help="metrics.json values (dotted: capacity.kernels_frozen) as mean ± sd over seeds, a list "
                             "or matrix by its state after the last task; :%% reports fractions in percent; a group "
                             "whose runs lack one shows –")
    parser.add_argument("--margin", type=float, default=1.0, help="the equivalence margin, points of RA")
    args = parser.parse_args()
    if len(args.versus) > len(args.by):
        parser.error(f"--versus gives {len(args.versus)} values for {len(args.by)} --by keys: one value a key at most")
    if any("=" in value for value in args.versus):
        parser.error("--versus takes values in --by's order, not KEY=VALUE: e.g. --by method.name --versus er")
    print("\n".join(table(runs(args.sweep, args.by), args)))


if __name__ == "__main__":
    main()
