"""One contract test per method, paid once (issue 47): a short run of every registered method, in-process, keeps the
run directory contract of docs/architecture.md (conftest.contract_problems), records validation accuracy and the
papers' metrics (RA, BTI, LA, task-aware accuracy), never reaches test data (nothing reachable from the method or
the tasks it was given shares storage with a test tensor), and a second run with the same seed gives the same
metrics. It replaces the every-method tests of test_protocol.py and test_kill.py and the change detector that
pinned accuracies to a commit before the redesign of issue 32."""
import dataclasses
import gc
import json
import math
import types

import pytest
import torch
from conftest import contract_problems, quick_args

from cl_bench import config, methods
from cl_bench import train as train_module
from cl_bench.data import scenarios

pytestmark = pytest.mark.usefixtures("one_thread")
config.register()
TIMINGS = ("time_s", "peak_mem_mb")


def run_capturing(monkeypatch, run_dir, args):
    """train.run in-process; returns metrics.json, the scenario it built, the method and the tasks it was given."""
    seen = {"given": []}
    build_scenario, build_method = scenarios.build, methods.build

    def scenario(*a, **k):
        seen["scenario"] = build_scenario(*a, **k)
        return seen["scenario"]

    def method(*a, **k):
        m = seen["method"] = build_method(*a, **k)
        learn = m.learn  # what the run calls: each task's training, with its epochs' ends handed to the run
        m.learn = lambda task, at_epoch_end=None: (seen["given"].append(task), learn(task, at_epoch_end))[1]
        return m

    monkeypatch.setattr(scenarios, "build", scenario)
    monkeypatch.setattr(methods, "build", method)
    run_dir.mkdir()
    train_module.run(config.compose(args), run_dir)
    monkeypatch.undo()
    del vars(seen["method"])["learn"]  # the recording wrapper holds `seen`, the scenario included
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


def within(a, b):
    return math.isclose(a, b, abs_tol=1e-12)


def test_the_task_a_learner_receives_has_no_test_split():
    assert [f.name for f in dataclasses.fields(scenarios.Task)] == ["id", "classes", "offset", "train", "val"]


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_the_method_keeps_the_contract(tmp_path, monkeypatch, name):
    scenario = "class" if "class" in methods.METHODS[name].traits.scenarios else "task"
    args = [a for a in quick_args(name, scenario) if a != "checkpoint.enabled=false"] + ["checkpoint.keep=all"]
    m, seen = run_capturing(monkeypatch, tmp_path / "run", args)
    assert contract_problems(tmp_path / "run") == []

    # the honest protocol: the test splits are where the search finds them (the positive control), and nowhere
    # the method or its tasks lead
    test = storages(t for split in seen["scenario"].test for t in (split.x, split.y, split.t))
    assert test <= storages(reachable_tensors(seen["scenario"])), "the search finds test data where it is"
    given = reachable_tensors(seen["method"], seen["given"])
    assert len(given) > 10 and not storages(given) & test

    # validation and the papers' metrics
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
    else:
        aware = m["task_aware_acc"]
        assert [len(row) for row in aware] == [1, 2] and within(m["task_aware_avg_acc"], sum(aware[-1]) / n)
        if name != "gated":  # one head: restricting the argmax to the task's classes can only help
            assert all(a >= b for ra, rb in zip(aware, acc) for a, b in zip(ra, rb))

    # determinism: the same seed again, the same metrics
    again = tmp_path / "again"
    again.mkdir()
    train_module.run(config.compose(args), again)
    second = json.loads((again / "metrics.json").read_text())
    assert {k: v for k, v in m.items() if k not in TIMINGS} == {k: v for k, v in second.items() if k not in TIMINGS}
