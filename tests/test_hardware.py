"""hardware.*: switches that must do what they say."""
import dataclasses
import json
import os
import socket
import warnings

import pytest
import torch
from conftest import quick_args
from omegaconf import OmegaConf
from torch import nn

from cl_bench import config, hardware
from cl_bench import train as train_module
from cl_bench.data import EVAL_BATCH
from cl_bench.errors import UserError
from cl_bench.methods.base import fresh_copy
from cl_bench.recorders import Recorders


def test_deterministic_turns_on_pytorchs_deterministic_algorithms_warning_only():
    """warn_only: on CUDA resnet, vgg and convnet (AdaptiveAvgPool2d's backward) and cpg (kthvalue) have no
    deterministic kernel, and would otherwise stop at their first step. The next run in the process (a multirun's
    job) without the flag turns it off again."""
    config.register()
    cfg = OmegaConf.structured(config.HardwareConfig(device="cpu", deterministic=True))
    try:
        hardware.setup(cfg)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        hardware.setup(OmegaConf.structured(config.HardwareConfig(device="cpu")))
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def put_without_accumulate() -> None:
    """An op with no deterministic implementation on the CPU too (torch.Tensor.put_ with accumulate=False): under
    use_deterministic_algorithms(True, warn_only=True) torch itself warns, as on CUDA for the ops of the runs."""
    torch.zeros(3).put_(torch.tensor([0]), torch.ones(1))


def test_torchs_nondeterminism_warnings_are_recorded_once_per_op_and_other_warnings_still_shown():
    lines = []
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            with hardware.watch_nondeterminism(lines.append) as ops:
                for _ in range(3):  # every step of a run
                    put_without_accumulate()
                warnings.warn("something else", UserWarning, stacklevel=1)
            put_without_accumulate()  # the watch is over: torch's own warning again
    finally:
        torch.use_deterministic_algorithms(False)
    assert ops == ["put_"]
    assert len(lines) == 1 and lines[0].startswith("hardware.deterministic: put_ has no deterministic implementation")
    assert [str(w.message).split(" does not")[0] for w in shown] == ["something else", "put_"]


def test_the_op_is_read_from_torchs_message():
    """CUDA's messages (no GPU here), written as at::Context::alertNotDeterministic words them: the caller's name,
    which may hold spaces, then " does not have a deterministic implementation, but you set ..."."""
    tail = (" does not have a deterministic implementation, but you set 'torch.use_deterministic_algorithms(True, "
            "warn_only=True)'. You can file an issue at https://github.com/pytorch/pytorch/issues to help us "
            "prioritize adding deterministic support for this operation. (Triggered internally at "
            "/__w/pytorch/pytorch/aten/src/ATen/Context.cpp:186.)")
    for op in ("adaptive_avg_pool2d_backward_cuda", "kthvalue CUDA"):
        assert hardware.nondeterministic_op(UserWarning(op + tail)) == op
    assert hardware.nondeterministic_op(UserWarning("TypedStorage is deprecated")) is None


@pytest.mark.slow
def test_a_deterministic_run_records_the_nondeterministic_ops_it_ran(monkeypatch, run_dir, caplog):
    """metrics.json's ran_on.nondeterministic_ops and one warning line (train.log under `cl-bench train`, here the
    cl_bench logger): an op without a deterministic kernel at every evaluation, put_ standing in for CUDA's."""
    evaluate = train_module.evaluate
    monkeypatch.setattr(train_module, "evaluate", lambda *a: (put_without_accumulate(), evaluate(*a))[1])
    config.register()
    run_dir.mkdir()
    try:
        train_module.run(config.compose([*quick_args("finetune", "task"), "hardware.deterministic=true"]), run_dir)
    finally:
        torch.use_deterministic_algorithms(False)
    assert json.loads((run_dir / "metrics.json").read_text())["ran_on"]["nondeterministic_ops"] == ["put_"]
    said = [r.getMessage() for r in caplog.records if "no deterministic implementation" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("hardware.deterministic: put_") and "nondeterministic_ops" in said[0]


def test_compile_compiles_the_backbone_in_place():
    config.register()
    for flag in (False, True):
        cfg = config.compose(["method=lwf", "logger=none", f"hardware.compile={str(flag).lower()}"])
        _, method, _ = train_module.build(cfg, Recorders([]))
        assert (method.backbone._compiled_call_impl is not None) == flag
        assert all(not k.startswith("_orig_mod") for k in method.state_dict()), "checkpoint keys unchanged"


@pytest.mark.slow
def test_compiled_mask_methods_compile_every_task_and_score_as_eager(tmp_path, monkeypatch):
    """PackNet's graphs specialise on the task (its masks and widths): before issue 46 the fifth task's graphs went
    past Dynamo's recompile limit and the run fell back to eager. Each of its tasks compiles afresh and scoring runs
    eagerly, so every task's training still compiles; a counting backend (a plain FX graph: eager's numerics)
    counts the graphs between evaluations, and the metrics are the uncompiled run's."""
    events, caches = compile_counting(monkeypatch)
    config.register()
    args = ["method=packnet", "logger=none", "checkpoint.enabled=false", "method.epochs=1", "method.retrain_epochs=1"]
    metrics = []
    for flag in ("false", "true"):
        run_dir = tmp_path / flag
        run_dir.mkdir()
        train_module.run(config.compose([*args, f"hardware.compile={flag}"]), run_dir)
        metrics.append(json.loads((run_dir / "metrics.json").read_text()))
    per_task = " ".join(events).split("scored")
    assert len(per_task) == 2 * 5 + 1 and all("graph" not in part for part in per_task[:5])  # eager run: none
    assert all("graph" in part for part in per_task[5:10]), per_task  # every task of the compiled run compiles
    assert [c.misses for c in caches] == [5]
    assert metrics[0]["acc"] == metrics[1]["acc"]


def compile_counting(monkeypatch) -> tuple[list, list]:
    """The run's graphs as a counting backend compiles them (a plain FX graph: eager's numerics), the events marked
    by evaluation, and every CompiledGraphs the runs make."""
    from cl_bench.methods.base import Method
    events, caches = [], []

    def counting(gm, example_inputs):
        events.append("graph")
        return gm.forward

    monkeypatch.setattr(Method, "compile_backbone", lambda self: self.backbone.compile(backend=counting))
    evaluate = train_module.evaluate
    monkeypatch.setattr(train_module, "evaluate", lambda *a, **k: (events.append("scored"), evaluate(*a, **k))[1])
    cache = train_module.CompiledGraphs
    monkeypatch.setattr(train_module, "CompiledGraphs", lambda method: caches.append(cache(method)) or caches[-1])
    return events, caches


@pytest.mark.slow
def test_a_compiled_backbone_of_one_shape_compiles_once_in_a_three_task_run(tmp_path, monkeypatch):
    """hardware.compile keeps the graphs from task to task while the network keeps its shape: a 3-task finetune
    run compiles in its first task only (one miss of the shape cache), and learns as the eager run."""
    events, caches = compile_counting(monkeypatch)
    config.register()
    args = ["method=finetune", "logger=none", "checkpoint.enabled=false", "dataset.num_tasks=3", "method.epochs=1"]
    metrics = []
    for flag in ("false", "true"):
        (tmp_path / flag).mkdir()
        train_module.run(config.compose([*args, f"hardware.compile={flag}"]), tmp_path / flag)
        metrics.append(json.loads((tmp_path / flag / "metrics.json").read_text()))
    per_task = " ".join(events).split("scored")
    assert len(per_task) == 2 * 3 + 1 and "graph" in per_task[3] and "graph" not in " ".join(per_task[4:])
    assert [c.misses for c in caches] == [1]
    assert metrics[0]["acc"] == metrics[1]["acc"]


def test_the_shape_signature_changes_with_growth_and_with_the_task_where_graphs_specialise():
    config.register()
    cfg = config.compose(["method=finetune", "logger=none"])
    _, method, _ = train_module.build(cfg, Recorders([]))
    graphs = train_module.CompiledGraphs(method)
    for task_id in (0, 1, 1):
        graphs.before(task_id)
    assert graphs.misses == 1
    layer = next(m for m in method.backbone.modules() if getattr(m, "weight", None) is not None)
    layer.weight = nn.Parameter(torch.zeros(layer.weight.shape[0] + 1, *layer.weight.shape[1:]))  # as growth widens
    graphs.before(2)
    assert graphs.misses == 2
    method.traits = dataclasses.replace(method.traits, backbone_use="masked")  # per-task units: a task, its graphs
    graphs.before(2)
    graphs.before(3)
    assert graphs.misses == 4


@pytest.mark.slow
def test_a_copy_of_a_compiled_module_runs_on_its_own_weights():
    torch.manual_seed(0)
    original = nn.Linear(3, 2)
    original.compile(backend="eager")  # the wrapping is what matters here, not the compiler
    clone = fresh_copy(original)
    assert clone._compiled_call_impl is not None and clone._compiled_call_impl is not original._compiled_call_impl
    with torch.no_grad():
        clone.weight.zero_()
        clone.bias.fill_(1.0)
    x = torch.randn(4, 3)
    assert torch.equal(clone(x), torch.ones(4, 2))  # a plain deepcopy would have computed original(x)
    assert not torch.equal(original(x), torch.ones(4, 2))


def test_the_runs_evaluation_batch_reaches_its_context():
    config.register()
    for override, expected in (([], EVAL_BATCH), (["data.eval_batch_size=7"], 7)):
        _, _, ctx = train_module.build(config.compose(["method=finetune", "logger=none", *override]), Recorders([]))
        assert ctx.eval_batch_size == expected


def test_evaluation_and_the_methods_passes_read_the_runs_evaluation_batch(monkeypatch):
    """The scores do not depend on the batch, and a method's own evaluation passes (here gated's relevance) take
    the run's batch size, not a constant of their own."""
    from cl_bench.data.scenarios import Split
    config.register()
    cfg = config.compose(["method=gated", "logger=none", "data.eval_batch_size=7"])
    scenario, method, ctx = train_module.build(cfg, Recorders([]))
    task = scenario.tasks[0]
    hits = [train_module.count_correct(method, [task], [scenario.test[0]], scenario.info, ctx, size)[0].item()
            for size in (7, 1000)]
    assert hits[0] == hits[1]
    asked = []
    batches = Split.batches
    monkeypatch.setattr(Split, "batches", lambda self, size, *a: asked.append(size) or batches(self, size, *a))
    method._firing(task.val, task.id)
    assert asked and set(asked) == {7}


CLUSTER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def outside_any_job():
    """No torchrun, submitit or Slurm variables: each test sets the job environment it stands for. The whole
    environment is restored afterwards, the variables cluster_ranks sets included (monkeypatch would restore only
    those it set itself, and a RANK left behind makes every later run in this worker a torchrun rank)."""
    saved = dict(os.environ)
    for key in list(os.environ):
        if key in CLUSTER_VARIABLES or key.startswith(("SUBMITIT_", "SLURM_")):
            del os.environ[key]
    yield
    os.environ.clear()
    os.environ.update(saved)


def submitit_local_task(rank: int, tasks: int = 2):
    """The variables submitit's local executor gives task `rank` of a job of `tasks` tasks on one node."""
    os.environ.update({"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_JOB_ID": "4242",
                       "SUBMITIT_LOCAL_NTASKS": str(tasks), "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
                       "SUBMITIT_LOCAL_NODEID": "0", "SUBMITIT_LOCAL_GLOBALID": str(rank),
                       "SUBMITIT_LOCAL_LOCALID": str(rank)})


def test_a_submitit_task_becomes_a_ddp_rank_and_without_ddp_is_refused(outside_any_job):
    """What a submitit job of two tasks does in each task (the whole job: test_ddp's submitit test)."""
    submitit_local_task(rank=1)
    with pytest.raises(UserError) as refused:
        hardware.cluster_ranks(distributed=False)
    assert str(refused.value) == hardware.several_tasks_refusal(2) and "hardware=ddp" in str(refused.value)
    assert "WORLD_SIZE" not in os.environ
    hardware.cluster_ranks(distributed=True)
    ranks = {key: os.environ[key] for key in CLUSTER_VARIABLES}
    port = ranks.pop("MASTER_PORT")
    assert ranks == {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                     "MASTER_ADDR": socket.gethostname()}
    for key in CLUSTER_VARIABLES:  # task 0 of the same job meets task 1 at the same port
        del os.environ[key]
    submitit_local_task(rank=0)
    hardware.cluster_ranks(distributed=True)
    assert os.environ["RANK"] == "0" and os.environ["MASTER_PORT"] == port
    assert hardware.MASTER_PORTS[0] <= int(port) <= hardware.MASTER_PORTS[1] < 32768  # no ephemeral port


def test_an_srun_task_becomes_a_ddp_rank_and_a_batch_scripts_own_step_is_left_alone(outside_any_job):
    os.environ.update({"SLURM_JOB_ID": "77", "SLURM_NTASKS": "4", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1",
                       "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_JOB_NODELIST": "gpu[07-08]"})
    hardware.cluster_ranks(distributed=False)  # the batch script's own process carries SLURM_NTASKS too
    assert "WORLD_SIZE" not in os.environ
    hardware.cluster_ranks(distributed=True)
    assert {key: os.environ[key] for key in CLUSTER_VARIABLES[:5]} == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "gpu07"}


def test_a_single_task_or_torchruns_own_ranks_are_left_alone(outside_any_job):
    submitit_local_task(rank=0, tasks=1)
    hardware.cluster_ranks(distributed=False)
    hardware.cluster_ranks(distributed=True)
    assert "WORLD_SIZE" not in os.environ
    submitit_local_task(rank=0)
    os.environ["WORLD_SIZE"] = "2"  # torchrun's: set already, kept
    hardware.cluster_ranks(distributed=False)
    assert os.environ["WORLD_SIZE"] == "2" and "RANK" not in os.environ


@pytest.mark.skipif(torch.cuda.is_available(), reason="refused only where no CUDA GPU is visible")
def test_hardware_gpu_without_a_gpu_is_one_line():
    config.register()
    with pytest.raises(UserError, match=r"^hardware.device=cuda but no CUDA GPU is visible: use hardware=cpu or "
                                        r"hardware=auto$"):
        hardware.setup(config.compose(["hardware=gpu"]).hardware)


@pytest.mark.parametrize(("environment", "multirun", "said"), [
    ({"TORCHELASTIC_RUN_ID": "1"}, None, "torchrun"),
    ({"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "77"}, None, "submitit_slurm"),  # submitit first: it uses Slurm
    ({"SLURM_JOB_ID": "77"}, None, "slurm"),
    ({}, {"_target_": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"}, "joblib"),
    ({}, {"n_jobs": 2}, "hydra"),  # a launcher without a target: Hydra's
    ({}, None, "cl-bench"),
])
def test_the_launcher_recorded_names_what_started_the_process(outside_any_job, environment, multirun, said):
    os.environ.pop("TORCHELASTIC_RUN_ID", None)
    os.environ.update(environment)
    try:
        hardware.enter_multirun(multirun)
        assert hardware.launcher() == said
    finally:
        hardware.enter_multirun(None)
