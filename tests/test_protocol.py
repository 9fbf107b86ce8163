"""Gated's place in the honest protocol: its task-aware figure is its accuracy with the task id, and it predicts
before learning anything. That every method never reaches test data and records validation accuracy and the papers'
metrics is tests/test_method_contract.py's, once per method."""

import pytest
import torch
from test_method_contract import run_capturing

from cl_bench import config
from cl_bench import train as train_module

pytestmark = pytest.mark.usefixtures("one_thread")
config.register()


@pytest.mark.slow  # a whole run
def test_gated_task_aware_accuracy_is_its_accuracy_with_the_task_id(tmp_path, monkeypatch):
    args = ["experiment=gated_split_digits", "scenario=class", "dataset.num_tasks=3", "method.epochs=1",
            "logger=none", "checkpoint.enabled=false"]
    m, seen = run_capturing(monkeypatch, tmp_path / "run", args)
    method, sc = seen["method"], seen["scenario"]
    method.eval()
    with torch.no_grad():
        with_id = [(method(sc.info.view.eval(sc.test[t].x), t).argmax(1) == sc.test[t].y - sc.info.offsets[t])
                   .double().mean().item() for t in range(3)]
    assert m["task_aware_acc"][-1] == pytest.approx(with_id, abs=1e-12)
    assert m["task_aware_acc"][-1] != m["acc"][-1]


@torch.no_grad()
def test_gated_predicts_classes_before_learning_anything(tmp_path):
    """eval_future's random-initialisation reference: no task seen yet, so the first task's path answers."""
    cfg = config.compose(["method=gated", "scenario=class", "dataset.num_tasks=3"])
    scenario, method, _ = train_module.build(cfg, train_module.recorders.Recorders([]))
    x = scenario.info.view.eval(scenario.test[0].x[:8])
    assert method.predict(x, None).shape == (8, scenario.info.sizes[0])
