"""cl-bench from Python, in one module: compose a checked config (a notebook's `cl-bench train --cfg job`), build
the scenario and the method it names and drive them in your own loop, run the whole task loop into a run
directory, and read a run's metrics and its model back. docs/api.md shows each; tests/test_api.py runs its examples.

    from cl_bench import api
    exp = api.build(api.compose("method=er", "dataset=split_digits"))
    for task in exp.tasks:
        exp.method.learn(task)
        print(api.evaluate(exp, task.id).test)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from . import app, config, recorders, train
from .data.scenarios import Info, Scenario, Split, Task
from .methods import METHODS, Context, Method
from .train import Evaluation


@dataclass
class Experiment:
    """A built run: its scenario (tasks for learning, test splits for scoring), its method and the context the
    method computes in."""

    scenario: Scenario
    method: Method
    ctx: Context

    @property
    def tasks(self) -> list[Task]:
        return self.scenario.tasks

    @property
    def info(self) -> Info:
        return self.scenario.info


def compose(*overrides: str):
    """The run's config as `cl-bench train OVERRIDES` composes it, checked (a bad value raises UserError)."""
    config.register()
    cfg = config.compose(list(overrides))
    config.validate(cfg)
    return cfg


def build(cfg) -> Experiment:
    """The scenario and the (untrained) method cfg names, seeded as a run is; nothing is written."""
    return Experiment(*train.build(cfg, recorders.Recorders([])))


def evaluate(exp: Experiment, task_id: int) -> Evaluation:
    """What a run records after learning task task_id: accuracy on the test and validation split of every task seen,
    task-aware accuracy in the class scenario (fractions in [0, 1])."""
    return train.evaluate(exp.method, exp.scenario, task_id, False, exp.ctx, exp.ctx.eval_batch_size)


def run(run_dir: str | Path, *overrides: str) -> dict:
    """The whole task loop of `cl-bench train OVERRIDES` into run_dir (run.json, metrics.json, checkpoints, logs;
    `load` and `cl-bench eval` read it back); its metrics.json."""
    run_dir = Path(run_dir)
    cfg = compose(*overrides)
    app.write_run_record(run_dir, list(overrides), cfg)
    train.run(cfg, run_dir, config.chosen_option(list(overrides), "backbone"))
    return load_metrics(run_dir)


def load_metrics(run_dir: str | Path) -> dict:
    """A run's metrics.json (docs/architecture.md lists its keys)."""
    return json.loads((Path(run_dir) / "metrics.json").read_text())


def load(run_dir: str | Path, checkpoint: str | None = None) -> tuple[Experiment, int]:
    """A run made by `cl-bench train` rebuilt from its recorded overrides, its method as a checkpoint left it
    (default: the newest valid one; else e.g. "task_001"), and the last task that checkpoint had learned."""
    cfg = compose(*app.run_overrides(Path(run_dir), "cl_bench.api.load"))
    scenario, method, ctx, task_id = train.restore(cfg, Path(run_dir), checkpoint)
    return Experiment(scenario, method, ctx), task_id


@torch.no_grad()
def predict(exp: Experiment, x: torch.Tensor, task_id: int | None = None) -> torch.Tensor:
    """Predicted labels (in the scenario's label space) for uint8 images x as a split holds them: normalised as
    the run does, in evaluation mode; task_id given in the task scenario, None in the class scenario."""
    exp.method.eval()
    x = exp.info.view.eval(x.to(exp.ctx.device), task_id)
    logits = exp.method.predict(x, task_id)
    offset = exp.info.offsets[task_id] if task_id is not None and exp.info.scenario == "task" else 0
    return logits.argmax(1) + offset


__all__ = ["METHODS", "Context", "Evaluation", "Experiment", "Info", "Method", "Scenario", "Split", "Task", "build",
           "compose", "evaluate", "load", "load_metrics", "predict", "run"]
