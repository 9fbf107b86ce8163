"""Where gated's capacity goes in a sweep, per group of runs (a schedule ladder's rungs): the kernels frozen after
each task (events.jsonl's task_end capacity) and, after the last task, each task's task-aware accuracy and task
prediction (metrics.json), means over the group's seeds.

    .venv/bin/python scripts/gated_paths.py outputs/sweeps/repro-gated-ladder --by method.epochs

A task learns through the kernels its predecessors left unfrozen (and its own gates, norms and head): kernels
frozen early and task-aware accuracy falling towards chance (50% on two classes) on later tasks say that capacity,
not task prediction, limits the class scenario.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import yaml

from cl_bench.recorders import task_end_capacities


def lookup(config: dict, dotted: str) -> str:
    for part in dotted.split("."):
        config = config[part]
    return str(config)


def gated_runs(sweep: Path, key: str) -> dict[str, list[dict]]:
    """Complete gated runs under sweep, grouped by the value of config key."""
    groups: dict[str, list[dict]] = {}
    for path in sorted(sweep.rglob("metrics.json")):
        metrics = json.loads(path.read_text())
        if metrics["method"] != "gated" or not metrics["complete"]:
            continue
        config = yaml.safe_load((path.parent / ".hydra" / "config.yaml").read_text())
        frozen = [capacity["kernels_frozen"] for capacity in task_end_capacities(path.parent)]
        groups.setdefault(lookup(config, key), []).append({**metrics, "frozen_after": frozen})
    return groups


def mean_per_task(rows: list[list[float]], scale: float = 1.0) -> str:
    return ", ".join(f"{scale * statistics.mean(column):.1f}" for column in zip(*rows))


def table(groups: dict[str, list[dict]], key: str) -> list[str]:
    total = next(iter(groups.values()))[0]["capacity"]["kernels_total"]
    lines = [f"| {key} | seeds | kernels frozen after each task (of {total}) | task-aware accuracy % per task | "
             "task prediction % per task |", "|---|---|---|---|---|"]
    for value in sorted(groups, key=lambda v: (len(v), v)):
        runs = groups[value]
        lines.append(f"| {value} | {len(runs)} | {mean_per_task([r['frozen_after'] for r in runs])} | "
                     f"{mean_per_task([r['task_aware_acc'][-1] for r in runs], 100)} | "
                     f"{mean_per_task([r['task_prediction_acc'][-1] for r in runs], 100)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--by", default="method.epochs", help="the config key that tells the groups apart")
    args = parser.parse_args()
    groups = gated_runs(args.sweep, args.by)
    if not groups:
        parser.error(f"no complete gated run under {args.sweep}")
    print("\n".join(table(groups, args.by)))


if __name__ == "__main__":
    main()
