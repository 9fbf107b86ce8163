"""One trial per method and scenario, paid once (issues 47, 74): a short run of every registered method on the embedded
digits, in each scenario it declares, in-process and once per session (conftest.once_per_session), and every
per-method check read off that run: the run directory contract of docs/architecture.md (conftest.contract_problems),
validation accuracy and the papers' metrics, no reach to test data (nothing reachable from the method or the tasks
it was given shares storage with a test tensor), no host sync inside a training step (test_sync_audit.SyncAudit),
learning above chance (the run's own health check), and the method's own figures (test_hat.py and the like read
them off the trial as well). One run per method again with the same seed gives the same metrics and the same weights:
graphed (hardware.cuda_graphs, which on a CPU runs the StepGraph's path eagerly) for a method whose steps capture,
so that the same re-run holds the graphed path to the eager loop bit for bit (test_cuda_graphs.py's other checks
stay there). What a method declares (its scenarios, its steps' capture) is read through declared() alone."""
import contextlib
import dataclasses
import functools
import gc
import hashlib
import json
import math
import types
from pathlib import Path

import pytest
import torch
from conftest import contract_problems, once_per_session, quick_args
from test_cuda_graphs import ReplayAudit, audit_replays
from test_sync_audit import ALLOWED, SyncAudit

from cl_bench import app, config, methods
from cl_bench import train as train_module
from cl_bench.data import scenarios
from cl_bench.methods.loop import Loop, StepGraph
from cl_bench.methods.online import OnlineMethod

pytestmark = pytest.mark.usefixtures("one_thread")
config.register()
TIMINGS = ("time_s", "peak_mem_mb")


def declared(name: str) -> types.SimpleNamespace:
    """What method `name` declares about itself, as these trials read it: the one place that reads the flags."""
    cls = methods.METHODS[name]
    return types.SimpleNamespace(scenarios=sorted(cls.traits.scenarios), captures=cls.traits.captures(),
                                 online=issubclass(cls, OnlineMethod))


# A method whose steps capture trains two epochs with the lr cut after the first (a recapture) in batches of 48, which
# leave each epoch a smaller last batch (an eager step between replays); CPG captures its goal models' phases only.
GRAPH_CUT = ("method.epochs=2", "method.lr_milestones=[1]", "method.batch_size=48")
GRAPH_EXTRA = {"cpg": ("method.goal_source=independent",)}
TRIALS = [(name, scenario) for name in sorted(methods.METHODS) for scenario in declared(name).scenarios]
# Trials whose method has a memory option it does not use there: gated rehearses in the class scenario only
NO_MEMORY = {("gated", "task")}
# Trials whose short schedule leaves the first task within guessing's band (two tasks, one epoch; the online methods
# 40 samples a task): their learning is shown by their own files' longer runs
SHORT_OF_CHANCE = {("gated", "task"): "its first task's path starts from a sparse gate (test_gated.py)",
                   ("gated", "class"): "its task classifier, trained on GRAPH_CUT's two short epochs, names task 1 "
                                       "within guessing's band (REPRODUCING.md: the class scenario at short schedules)",
                   ("hat", "task"): "its annealed gates open over more epochs than one (test_hat.py)",
                   ("lamaml", "class"): "40 samples a task (test_online.py, test_nccl_lamaml.py)",
                   ("lamaml", "task"): "40 samples a task (test_online.py, test_nccl_lamaml.py)",
                   ("piggyback", "task"): "it learns masks over a random backbone (test_packnet_cpg.py)"}
# The determinism re-run: in the first scenario the method declares
RERUNS = {name: declared(name).scenarios[0] for name in sorted(methods.METHODS)}


def trial_args(name: str, scenario: str) -> list[str]:
    """conftest.quick_args with every task's checkpoint kept; GRAPH_CUT for a method whose steps capture."""
    args = [a for a in quick_args(name, scenario) if a != "checkpoint.enabled=false"] + ["checkpoint.keep=all"]
    if declared(name).captures:
        args = [a for a in args if a != "method.epochs=1"] + [*GRAPH_CUT, *GRAPH_EXTRA.get(name, ())]
    return args


def run_capturing(monkeypatch, run_dir, args, built=None):
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
        if built is not None:
            built(m)
        return m

    monkeypatch.setattr(scenarios, "build", scenario)
    monkeypatch.setattr(methods, "build", method)
    cfg = config.compose(args)
    app.write_run_record(run_dir, args, cfg)  # run.json, as api.run writes it: the run resumes as any
    train_module.run(cfg, run_dir)
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


def digests(state: dict) -> dict[str, str]:
    """Each tensor of a state dict as the digest of its bytes: equal digests, bit-equal weights."""
    return {k: hashlib.sha256(v.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
            for k, v in state.items() if isinstance(v, torch.Tensor)}


def run_trial(name: str, scenario: str, folder: Path, again: bool = False) -> dict:
    """The trial's run in folder/run, audited for host syncs; or, again, its re-run, graphed where the method's
    steps capture, each graph's replays audited against its capture (test_cuda_graphs.ReplayAudit). What the checks
    read, as JSON."""
    graphed = again and declared(name).captures
    args = trial_args(name, scenario) + (["hardware.cuda_graphs=true"] if graphed else [])
    graphs, replay = [], ReplayAudit(None)
    audit = replay if graphed else SyncAudit() if not again else contextlib.nullcontext()
    with pytest.MonkeyPatch.context() as patch, audit:
        if graphed:
            keep_graphs(patch, graphs, replay)
        m, seen = run_capturing(patch, folder / "run", args, built=lambda method: setattr(replay, "method", method))
    record = {"run_dir": str(folder / "run"), "metrics": m, "state": digests(seen["method"].state_dict()),
              "graphs": [{"captures": g.captures, "warm": g.warm, "released": g.graph is None} for g in graphs],
              "replays": replay.replays, "replayed_calls": len(replay.calls), "replay_problems": replay.problems[:5]}
    if again:
        return record
    test = storages(t for split in seen["scenario"].test for t in (split.x, split.y, split.t))
    given = reachable_tensors(seen["method"], seen["given"])
    return {**record, "memory_size": config.compose(args).method.get("memory_size"),
            "test_found": test <= storages(reachable_tensors(seen["scenario"])),
            "given": len(given), "given_test": len(storages(given) & test),
            "val_sizes": [len(task.val) for task in seen["given"]], "steps_audited": audit.within.total(),
            "syncs": {f"{kind} at {where}": n for (kind, where), n in audit.inside.items()
                      if (name, kind, where) not in ALLOWED}}


def keep_graphs(patch, graphs: list, replay: ReplayAudit) -> None:
    """Keeps the StepGraphs the phases make and marks each capture, so that replay audits what its replays call
    against what the capture did (test_cuda_graphs.audited's patches, in a whole run)."""
    make = Loop.step_graph

    def step_graph(self, *a):
        graph = make(self, *a)
        if graph is not None:
            graphs.append(graph)
        return graph
    patch.setattr(Loop, "step_graph", step_graph)
    audit_replays(patch, replay)


_computed: dict[str, dict] = {}  # within this process (once_per_session reads its JSON afresh at each call)


def trial(tmp_path_factory, worker_id, name: str, scenario: str, again: bool = False) -> dict:
    """Method name's trial in scenario (again: its re-run), run once in the session."""
    key = f"trial-{name}-{scenario}" + ("-again" if again else "")
    if key not in _computed:
        _computed[key] = once_per_session(tmp_path_factory, worker_id, key,
                                          lambda folder: run_trial(name, scenario, folder, again))
    return _computed[key]


def within(a, b):
    return math.isclose(a, b, abs_tol=1e-12)


def kept(metrics: dict) -> dict:
    """metrics.json less its timings and the record of whether steps were graphed (the re-run's one difference)."""
    out = {k: v for k, v in metrics.items() if k not in TIMINGS}
    out["ran_on"] = {k: v for k, v in out["ran_on"].items() if k != "cuda_graphs"}
    return out


@pytest.fixture
def trial_of(tmp_path_factory, worker_id):
    return functools.partial(trial, tmp_path_factory, worker_id)


def test_the_task_a_learner_receives_has_no_test_split():
    assert [f.name for f in dataclasses.fields(scenarios.Task)] == ["id", "classes", "offset", "train", "val"]


def test_every_method_has_a_trial_in_each_scenario_it_declares():
    assert {name for name, _ in TRIALS} == set(methods.METHODS) and len(TRIALS) == len(set(TRIALS))
    assert all(scenario in methods.METHODS[name].traits.scenarios for name, scenario in TRIALS)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "scenario"), TRIALS)
def test_the_run_keeps_the_contract_and_records_the_papers_metrics(trial_of, name, scenario):
    run = trial_of(name, scenario)
    m = run["metrics"]
    assert contract_problems(Path(run["run_dir"])) == []
    assert (m["method"], m["scenario"], m["complete"]) == (name, scenario, True)
    if run["memory_size"] is not None and (name, scenario) not in NO_MEMORY:
        assert m["capacity"]["memory_size"] == run["memory_size"]
    acc, val, n = m["acc"], m["val_acc"], m["num_tasks"]
    assert [len(row) for row in val] == [1, 2] and all(0 <= a <= 1 for row in val for a in row)
    sizes = run["val_sizes"]
    assert all(round(a * sizes[j]) == pytest.approx(a * sizes[j]) for row in val for j, a in enumerate(row))
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


@pytest.mark.slow
@pytest.mark.parametrize(("name", "scenario"), TRIALS)
def test_the_method_never_reaches_test_data(trial_of, name, scenario):
    """The honest protocol: the test splits are where the search finds them (the positive control), and nowhere
    the method or the tasks it was given lead."""
    run = trial_of(name, scenario)
    assert run["test_found"], "the search finds test data where it is"
    assert run["given"] > 10 and run["given_test"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(("name", "scenario"), TRIALS)
def test_no_host_sync_inside_a_training_step(trial_of, name, scenario):
    run = trial_of(name, scenario)
    assert run["steps_audited"], "the audit saw no training step"
    assert not run["syncs"], f"host syncs inside {name}'s training steps (kind at site: count): {run['syncs']}"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "scenario"), [t for t in TRIALS if t not in SHORT_OF_CHANCE])
def test_the_method_learns_above_chance(trial_of, name, scenario):
    """The run's own health check (health.chance_level) finds no task learned within guessing's band."""
    findings = trial_of(name, scenario)["metrics"]["health"]["findings"]
    assert not [f for f in findings if f["check"] == "chance_level"], findings


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RERUNS))
def test_the_same_seed_again_trains_the_same_weights_graphed_where_the_steps_capture(trial_of, name):
    first, again = trial_of(name, RERUNS[name]), trial_of(name, RERUNS[name], again=True)
    assert kept(again["metrics"]) == kept(first["metrics"])
    assert again["state"] == first["state"]
    if not declared(name).captures:
        return
    # every phase captured after its warm-up, a phase of two epochs again at its new learning rate (PackNet's
    # retraining, cut to one epoch, once), every graph released with its phase, every replay the capture's calls
    graphs = again["graphs"]
    assert graphs and all(g["captures"] >= 1 and g["warm"] == StepGraph.WARMUP for g in graphs)
    assert any(g["captures"] == 2 for g in graphs) and all(g["released"] for g in graphs)
    assert again["replays"] > 0 and again["replayed_calls"] and not again["replay_problems"], again["replay_problems"]
