"""Health checks: each trips on a small run built to degenerate in that way, a healthy run trips none, and a tripped
check is said where users look (console, train.log, events.jsonl, metrics.json, the report) without changing what
the method does."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import cl_bench, once_per_session, train
from test_method_contract import trial
from test_resume import stop_after, without_timings

from cl_bench import api, health, methods, report
from cl_bench.methods.masking import PICKS_NONE
from cl_bench.methods.memory import Memory, Rehearsal

# Short phases for the mask methods, on the embedded digits.
CPG = ["method=cpg", "backbone=convnet", "backbone.channels=[8,16]", "method.prune_targets=[0.5,0.9]",
       "method.prune_epochs=1", "method.prune_ramp_epochs=1", "method.prune_frequency=2", "method.retrain_epochs=1",
       "method.epochs=1", "method.lr=0.05", "method.lr_milestones=[]", "checkpoint.enabled=false"]
# No phase tops the bar: nothing is compacted and the first task keeps every weight; its goal is out of reach, so
# it grows to the largest network as well (the 20-task run, cut to three tasks).
CPG_BAR = [*CPG, "dataset.num_tasks=3", "method.train_acc_bar=0.999", "method.goal_source=fixed", "method.goal=0.999"]
# Compacting runs (no bar) and a one-epoch picking refit beats the restarted mask but not the compacted model.
CPG_REFIT = [*CPG, "dataset.num_tasks=5", "method.train_acc_bar=0", "method.goal_source=none", "method.mask_lr=0.01",
             "method.retrain_mask_lr=0.01"]
GATED = ["method=gated", "scenario=task", "backbone=convnet", "backbone.channels=[8,16]", "method.epochs=1",
         "dataset.num_tasks=2", "checkpoint.enabled=false"]
ONLINE = ["dataset.samples_per_task=40", "dataset.num_tasks=2", "checkpoint.enabled=false"]


def tripped(metrics: dict) -> dict[str, list[int]]:
    """metrics.json's findings as check -> the tasks after which it tripped."""
    found = {}
    for f in metrics["health"]["findings"]:
        found.setdefault(f["check"], []).append(f["task"])
    return found


# --- the shared checks' arithmetic ----------------------------------------------------------------------------
def test_chance_level_is_the_upper_end_of_guessings_95_percent_band():
    # 2 classes, 400 samples: 0.5 + 1.96 * sqrt(0.25 / 400) = 0.549
    def chance(*outcome):
        return health.chance_level(health.Outcome(*outcome))
    assert chance(3, 0.548, 400, 2).task == 3
    assert chance(3, 0.550, 400, 2) is None
    assert chance(0, 0.118, 1000, 10) is not None and chance(0, 0.118, 10000, 10) is None
    assert chance(0, 0.0, 0, 2) is None  # no test data, nothing to say


@pytest.mark.slow
def test_metrics_json_lists_the_checks_that_ran_and_no_other(tmp_path, monkeypatch):
    """A shared check is registered once, with its evaluation, and metrics.json lists it because it ran after
    every task: a check once listed in health.SHARED without being evaluated was claimed as run all the same."""
    ran = []
    monkeypatch.setattr(health, "SHARED", [*health.SHARED])  # the spy's registration ends with the test
    health.shared(health.Check("spy", "a check that notes when it runs", "method.epochs"))(
        lambda outcome: ran.append(outcome.task))
    metrics = api.run(tmp_path / "run", "method=gdumb", "scenario=class", "debug=fast", "checkpoint.enabled=false")
    assert ran == list(range(metrics["num_tasks"]))
    own = [c.name for c in methods.get("gdumb").traits.health_checks]
    assert metrics["health"]["checks"] == ["chance_level", "spy", *own] and own == ["memory.classes_missing"]


def test_a_method_with_a_rehearsal_memory_names_its_check():
    """Rehearsal.health evaluates memory.classes_missing: each such method's traits list it."""
    rehearsing = [name for name, cls in methods.METHODS.items() if issubclass(cls, Rehearsal)]
    assert len(rehearsing) >= 9
    assert [n for n in rehearsing if health.MEMORY_CLASSES not in methods.get(n).traits.health_checks] == []


def test_a_finding_round_trips_through_the_record():
    finding = health.MEMORY_CLASSES.found(2, "the memory holds no sample of 1 of the 6 classes seen (4)")
    assert finding.line() == ("health: task 2: memory.classes_missing: the memory holds no sample of 1 of the 6 "
                              f"classes seen (4); {health.MEMORY_CLASSES.fix}")
    record = health.section(["chance_level", "memory.classes_missing"], [finding])
    assert record["checks"] == ["chance_level", "memory.classes_missing"] and record["tripped"] == 1
    assert health.findings_of(json.loads(json.dumps(record))) == [finding]


def test_every_check_a_method_names_is_unique_and_says_what_to_change():
    names = [c.name for method in methods.METHODS.values() for c in method.traits.health_checks]
    for name, method in methods.METHODS.items():
        checks = method.traits.health_checks
        assert len({c.name for c in checks}) == len(checks), name
        assert all("method." in c.fix for c in checks), name
    assert {"cpg.hoarded", "packnet.no_own_weights", "gated.path_closed", "hat.path_closed", "masks.picks_all",
            "memory.classes_missing", "nccl.calibration_inert", "lamaml.rates_at_zero"} <= set(names)


def test_the_reports_task_lists_shorten_runs_of_tasks():
    assert report.spans([0, 2, 3, 4, 7]) == "0, 2-4, 7" and report.spans([5]) == "5"


def test_the_memory_check_reads_the_classes_stored():
    info = type("Info", (), {"offsets": [0, 2], "sizes": [2, 2]})()
    memory = Memory(4, (1, 2, 2), 4, torch.device("cpu"))
    x = torch.zeros(4, 1, 2, 2, dtype=torch.uint8)
    memory.add(x, torch.tensor([0, 1, 2, 2]), torch.tensor([0, 0, 1, 1]))
    assert memory.missing_classes(0, info) == []
    [finding] = memory.missing_classes(1, info)
    assert finding.check == "memory.classes_missing" and "1 of the 4 classes seen (3)" in finding.detail


# --- each check tripped by a run built to degenerate ---------------------------------------------------------
@pytest.fixture
def hoarding(tmp_path_factory, worker_id, tmp_path) -> Path:
    """CPG_BAR's run with its checkpoints, run once in the session and copied into each test that reads it."""
    def compute(folder):
        train(folder / "run", *CPG_BAR, "checkpoint.enabled=true")
        return str(folder / "run")
    shutil.copytree(once_per_session(tmp_path_factory, worker_id, "cpg_hoarding_run", compute), tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.slow  # a whole run
def test_cpg_whose_phases_never_top_the_bar_is_said_to_hoard_and_leave_later_tasks_nothing(hoarding):
    run = hoarding
    metrics = json.loads((run / "metrics.json").read_text())
    found = tripped(metrics)
    assert found["cpg.hoarded"] == [0] and found["cpg.exhausted"] == [0] and found["cpg.no_own_weights"] == [1, 2]
    assert metrics["capacity"]["params_owned_per_task"][1:] == [0, 0]  # what the checks read, as the record has it
    assert metrics["capacity"]["param_multiplier"] == 1.5 and metrics["capacity"]["sparsity_per_task"][0] == 0
    hoarded = next(f for f in metrics["health"]["findings"] if f["check"] == "cpg.hoarded")
    assert "training accuracy" in hoarded["detail"] and "method.train_acc_bar 0.999" in hoarded["detail"]
    assert "method.train_acc_bar" in hoarded["fix"]
    assert metrics["health"]["tripped"] == len(metrics["health"]["findings"])
    log = (run / "train.log").read_text()
    assert "WARNING] health: task 0: cpg.hoarded: it kept all" in log
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [(e["check"], e["task"]) for e in events if e["event"] == "health"] == \
        [(f["check"], f["task"]) for f in metrics["health"]["findings"]]
    # The report marks the run and names its checks.
    proc = cl_bench("report", str(run), "--no-plots")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1/1 tripped" in proc.stdout and "cpg.hoarded after task 0; cpg.exhausted after task 0" in proc.stdout
    assert "cpg.no_own_weights after task 1-2" in proc.stdout
    assert "cpg.exhausted cpg.hoarded cpg.no_own_weights |" in (run / "report.md").read_text()


@pytest.mark.slow
def test_findings_survive_a_resume(hoarding, tmp_path):
    whole = json.loads((hoarding / "metrics.json").read_text())
    shutil.copytree(hoarding, tmp_path / "cut")
    stop_after(tmp_path / "cut", 1)
    proc = cl_bench("train", f"resume={tmp_path / 'cut'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    resumed = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    assert without_timings(resumed)["health"] == whole["health"]


@pytest.mark.slow
def test_a_cpg_refit_worse_than_compacting_trips_and_the_compacted_baseline_clears_it(tmp_path):
    official = train(tmp_path / "official", *CPG_REFIT)
    worse = [f for f in official["health"]["findings"] if f["check"] == "cpg.refit_worse"]
    assert worse, official["health"]
    kept, compacted = (float(x.rstrip(")")) for x in
                       (worse[0]["detail"].split("accuracy ")[1].split(")")[0], worse[0]["detail"].split("(")[-1]))
    assert kept < compacted
    fixed = train(tmp_path / "fixed", *CPG_REFIT, "method.refit_baseline=compacted")
    assert fixed["health"]["tripped"] == 0, fixed["health"]  # the healthy run: no check trips


PACKNET_NOTHING = ("method=packnet", "backbone=mlp", "backbone.hidden_sizes=[32,32]", "method.prune_ratio=0",
                   "method.retrain_epochs=1", "method.epochs=1", "dataset.num_tasks=3", "checkpoint.enabled=false")


def packnet_releasing_nothing(tmp_path_factory, worker_id) -> Path:
    """PACKNET_NOTHING's run under logger=wandb (offline), once in the session: its folder. test_wandb.py reads the
    alerts its findings raise there (issue 74: one run for both)."""
    def compute(folder):
        proc = cl_bench("train", f"hydra.run.dir={folder / 'run'}", "logger=wandb", *PACKNET_NOTHING)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return str(folder / "run")
    return Path(once_per_session(tmp_path_factory, worker_id, "packnet_releasing_nothing", compute))


@pytest.mark.slow
def test_packnet_that_releases_nothing(tmp_path_factory, worker_id, tmp_path):
    metrics = json.loads((packnet_releasing_nothing(tmp_path_factory, worker_id) / "metrics.json").read_text())
    found = tripped(metrics)
    assert found["packnet.hoarded"] == [0] and found["packnet.exhausted"] == [0]
    assert found["packnet.no_own_weights"] == [1, 2] == [t for t, n in enumerate(
        metrics["capacity"]["params_owned_per_task"]) if n == 0]
    # Next to none: task 0 releases two weights of 3072, which task 1 claims.
    scant = train(tmp_path / "scant", "method=packnet", "backbone=mlp", "backbone.hidden_sizes=[32,32]",
                  "method.prune_ratio=0.0005", "method.retrain_epochs=1", "method.epochs=1", "dataset.num_tasks=3",
                  "checkpoint.enabled=false")
    assert scant["capacity"]["params_owned_per_task"][1] == 2 and "packnet.no_own_weights" in tripped(scant)
    assert 1 in tripped(scant)["packnet.no_own_weights"]


@pytest.mark.slow
def test_picking_masks_that_never_move_and_that_drop_everything(tmp_path):
    args = ["method=piggyback", "backbone=convnet", "backbone.channels=[8,16]", "method.epochs=1",
            "dataset.num_tasks=3", "checkpoint.enabled=false"]
    metrics = train(tmp_path / "run", *args, "method.mask_lr=1e-12")
    assert tripped(metrics)["masks.picks_all"] == [1, 2]
    assert metrics["capacity"]["picking_density_per_task"] == [1.0, 1.0]
    # A mask of no weight is not reached by training here (its scores start above the threshold): set it so.
    exp = api.build(api.compose(*args))
    method, task = exp.method, exp.tasks[1]
    method.begin_task(0), method.finish_task(0), method.begin_task(1)
    for layer in method.layers:
        layer.score.data.fill_(-1.0)
    method.finish_task(1)
    assert [f.check for f in method.health(task)] == [PICKS_NONE.name]


@pytest.mark.slow
def test_hat_attention_closed_everywhere(tmp_path):
    metrics = train(tmp_path / "run", "method=hat", "backbone=mlp", "backbone.hidden_sizes=[32,32]", "method.c=100",
                    "method.epochs=2", "dataset.num_tasks=3", "checkpoint.enabled=false")
    assert tripped(metrics)["hat.path_closed"] == [0, 1, 2]
    assert all(u == 0 for u in metrics["capacity"]["units_used_per_task"])


def test_hat_with_every_unit_in_use_is_exhausted():
    # Reached by training only over many tasks: the accumulated attention set so, every unit on.
    exp = api.build(api.compose("method=hat", "backbone=mlp", "backbone.hidden_sizes=[8,8]", "dataset.num_tasks=3"))
    method, task = exp.method, exp.tasks[0]
    for layer in method.layers:
        layer.embedding.data.fill_(1.0)  # every task's attention on
    assert method.health(task) == []
    for layer in method.layers:
        layer.cumulative.fill_(1.0)
    assert [f.check for f in method.health(task)] == ["hat.exhausted"]
    assert method.health(exp.tasks[2]) == []  # the last task leaves nothing to come


@pytest.mark.slow
def test_gated_paths_closed_and_every_kernel_frozen(tmp_path):
    closed = train(tmp_path / "closed", *GATED, "method.gate_open_bias=-10")
    assert tripped(closed)["gated.path_closed"] == [0, 1]
    assert closed["capacity"]["active_channels_per_sample"] == [0.0, 0.0]
    frozen = train(tmp_path / "frozen", *GATED, "method.gate_open_bias=10", "method.sparsity=0")
    assert tripped(frozen)["gated.all_frozen"] == [0]
    assert frozen["capacity"]["kernels_frozen"] == frozen["capacity"]["kernels_total"]


@pytest.mark.slow
def test_a_memory_too_small_for_the_classes(tmp_path_factory, worker_id, tmp_path):
    metrics = train(tmp_path / "run", "method=er", "scenario=class", "method.memory_size=10", "method.epochs=1",
                    "dataset.num_tasks=5", "checkpoint.enabled=false")
    assert "memory.classes_missing" in tripped(metrics)
    # the healthy run: ER's trial in the class scenario (test_method_contract), whose memory holds every class seen
    big = trial(tmp_path_factory, worker_id, "er", "class")["metrics"]
    assert big["capacity"]["memory_size"] >= 200 and "memory.classes_missing" not in tripped(big)


# The healthy runs beside the degenerate ones are the methods' trials where a trial is that run (test_method_contract:
# ONLINE's two tasks of 40 samples in the task scenario, the default one)
@pytest.mark.slow
def test_nccl_calibration_that_cannot_move(tmp_path_factory, worker_id, tmp_path):
    inert = train(tmp_path / "inert", "method=nccl", *ONLINE, "method.outer_lr=1e-30")
    assert tripped(inert)["nccl.calibration_inert"] == [1]
    moving = trial(tmp_path_factory, worker_id, "nccl", "task")["metrics"]
    assert "nccl.calibration_inert" not in tripped(moving)
    # metrics.json says how far the calibration moved in each task: nowhere in task 0 (no outer step), past the
    # check's threshold in the moving run's task 1, not in the inert run's
    assert moving["capacity"]["calibration_moved"][0] == 0 and moving["capacity"]["calibration_moved"][1] > 1e-6
    assert inert["capacity"]["calibration_moved"][1] <= 1e-6


@pytest.mark.slow
def test_lamaml_learning_rates_clipped_to_zero(tmp_path_factory, worker_id, tmp_path):
    metrics = train(tmp_path / "run", "method=lamaml", *ONLINE, "method.alpha_init=1e-4", "method.outer_lr=100")
    assert "lamaml.rates_at_zero" in tripped(metrics)
    default = trial(tmp_path_factory, worker_id, "lamaml", "task")["metrics"]
    assert "lamaml.rates_at_zero" not in tripped(default)


@pytest.fixture
def at_chance(tmp_path_factory, worker_id) -> dict:
    """`cl-bench train` of finetune at lr 1e-12 under logger=none, run once in the session: its stderr and metrics."""
    def compute(folder):
        run = folder / "run"
        proc = cl_bench("train", f"hydra.run.dir={run}", "logger=none", "method=finetune", "scenario=task",
                        "method.lr=1e-12", "method.epochs=1", "dataset.num_tasks=5", "checkpoint.enabled=false")
        assert proc.returncode == 0, proc.stderr[-2000:]
        return {"stdout": proc.stdout, "stderr": proc.stderr, "metrics": json.loads((run / "metrics.json").read_text())}
    return once_per_session(tmp_path_factory, worker_id, "finetune_at_chance", compute)


@pytest.mark.slow
def test_a_task_learned_to_chance(at_chance, tmp_path_factory, worker_id):
    metrics = at_chance["metrics"]
    scenario = api.build(api.compose("scenario=task", "dataset.num_tasks=5")).scenario
    low = [j for j in range(5) if health.chance_level(health.Outcome(
        j, metrics["acc"][j][j], len(scenario.test[j]), len(metrics["tasks"][j]["classes"]))) is not None]
    assert tripped(metrics)["chance_level"] == low and len(low) >= 3
    # the healthy run: finetune's trial (test_method_contract), which its own test holds above chance as well
    healthy = trial(tmp_path_factory, worker_id, "finetune", "task")["metrics"]
    assert "chance_level" not in tripped(healthy), healthy["acc"]


def test_docs_health_lists_every_check():
    text = (Path(__file__).resolve().parents[1] / "docs" / "health.md").read_text()
    names = {c.name for c, _ in health.SHARED}
    names |= {c.name for m in methods.METHODS.values() for c in m.traits.health_checks}
    assert [n for n in sorted(names) if f"`{n}`" not in text] == []


@pytest.mark.slow
def test_a_health_warning_reaches_stderr_under_logger_none(at_chance):
    """logger=none silences progress and tables, not a run that degenerated: each finding is a line on stderr."""
    findings = [health.Finding(**f) for f in at_chance["metrics"]["health"]["findings"]]
    assert findings and [f.check for f in findings][0] == "chance_level"
    warned = [line for line in at_chance["stderr"].splitlines() if line.startswith("cl-bench: warning: health: ")]
    assert warned == [f"cl-bench: warning: {f.line()}" for f in findings]
    assert "task 0 of 5" not in at_chance["stderr"]  # no progress
    assert "avg_acc" not in at_chance["stdout"] + at_chance["stderr"]  # no table
