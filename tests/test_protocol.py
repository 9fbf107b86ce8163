"""The honest protocol: learners never reach test data, every run records validation accuracy and the papers'
metrics (RA, BTI, LA, task-aware accuracy), and gated's task-aware figure is its accuracy with the task id."""
import dataclasses
import gc
import json
import math
import types

import pytest
import torch
from conftest import quick_args

from cl_bench import config, methods
from cl_bench import train as train_module
from cl_bench.data import scenarios

pytestmark = pytest.mark.usefixtures("one_thread")
config.register()


def run_capturing(monkeypatch, run_dir, args):
    """train.run in-process; returns metrics.json, the scenario it built, the method and the tasks it was given."""
    seen = {"given": []}
    build_scenario, build_method = scenarios.build, methods.build

    def scenario(*a, **k):
        seen["scenario"] = build_scenario(*a, **k)
        return seen["scenario"]

    def method(*a, **k):
        m = seen["method"] = build_method(*a, **k)
        learning = m.learning  # what the run calls: each task's training, yielding its epochs' ends
        m.learning = lambda task: (seen["given"].append(task), learning(task))[1]
        return m

    monkeypatch.setattr(scenarios, "build", scenario)
    monkeypatch.setattr(methods, "build", method)
    run_dir.mkdir()
    train_module.run(config.compose(args), run_dir)
    monkeypatch.undo()
    del vars(seen["method"])["learning"]  # the recording wrapper holds `seen`, the scenario included
    assert len(seen["given"]) == len(seen["scenario"].tasks), "every task the run learned was recorded"
    return json.loads((run_dir / "metrics.json").read_text()), seen


def reachable_tensors(*roots) -> list[torch.Tensor]:
    """Every tensor an object graph holds: instance data, containers, bound methods and closures (not modules,
    classes or a function's globals, which lead to everything loaded)."""
    found, visited, stack = [], set(), list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in visited or isinstance(obj, (types.ModuleType, type, types.CodeType)):
            continue
        visited.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif isinstance(obj, types.FunctionType):
            stack += [*(obj.__defaults__ or ()), *(x for c in obj.__closure__ or () for x in _contents(c))]
        else:
            stack += gc.get_referents(obj)
    return found


def _contents(cell) -> list:
    try:
        return [cell.cell_contents]
    except ValueError:  # a cell not filled yet
        return []


def storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if t.numel()}


def test_the_task_a_learner_receives_has_no_test_split():
    assert [f.name for f in dataclasses.fields(scenarios.Task)] == ["id", "classes", "offset", "train", "val"]


@pytest.mark.parametrize("name", ["finetune", "er", "gated", "cpg", "hat"])
def test_a_learner_cannot_reach_test_data(tmp_path, monkeypatch, name):
    """Nothing reachable from the method (its config, backbone, info, context, memory) or from the tasks it was
    given shares storage with a test tensor; the scenario itself, the positive control, does."""
    cls = methods.METHODS[name]
    _, seen = run_capturing(monkeypatch, tmp_path / "run", quick_args(name, "class" if "class" in cls.scenarios
                                                                       else "task"))
    test = storages(t for split in seen["scenario"].test for t in (split.x, split.y, split.t))
    assert test <= storages(reachable_tensors(seen["scenario"])), "the search finds test data where it is"
    given = reachable_tensors(seen["method"], seen["given"])
    assert len(given) > 10 and not storages(given) & test


def within(a, b):
    return math.isclose(a, b, abs_tol=1e-12)


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_every_method_records_validation_and_the_papers_metrics(tmp_path, monkeypatch, name):
    cls = methods.METHODS[name]
    scenario = "class" if "class" in cls.scenarios else "task"
    m, seen = run_capturing(monkeypatch, tmp_path / "run", quick_args(name, scenario))
    acc, val, n = m["acc"], m["val_acc"], m["num_tasks"]
    assert [len(row) for row in val] == [1, 2] and all(0 <= a <= 1 for row in val for a in row)
    val_sizes = [len(task.val) for task in seen["given"]]
    assert all(round(a * val_sizes[j]) == pytest.approx(a * val_sizes[j]) for row in val for j, a in enumerate(row))
    assert within(m["val_avg_acc"], sum(val[-1]) / n)
    assert within(m["bti"], sum(acc[-1][j] - acc[j][j] for j in range(n)) / n)
    assert within(m["la"], sum(acc[j][j] for j in range(n)) / n)
    assert m["objective"] == "val_avg_acc"
    if scenario == "task":
        assert "task_aware_acc" not in m
        return
    aware = m["task_aware_acc"]
    assert [len(row) for row in aware] == [1, 2] and within(m["task_aware_avg_acc"], sum(aware[-1]) / n)
    if name != "gated":  # one head: restricting the argmax to the task's classes can only help
        assert all(a >= b for ra, rb in zip(aware, acc) for a, b in zip(ra, rb))


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
