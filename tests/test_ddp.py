"""hardware=ddp under torchrun: 2 CPU processes (gloo) under DistributedDataParallel match one process with the
same global batch, the rehearsal methods with one memory on every rank; each rank augments its own shard."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, cl_bench, contract_problems, once_per_session, train
from safetensors.torch import load_file
from test_sync_audit import AFTER_TASK, FAST, WITHIN

from cl_bench import backbones, config, methods, recorders
from cl_bench.data import scenarios
from cl_bench.data.batches import View
from cl_bench.methods import parallel

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

# The MLP of 256 units: the runs compared must be stable ones, where float-order differences stay small; on the
# 2×100 default, finetune's 2 epochs at lr 0.01 amplify them to a fifth of a task's test samples in one cell.
COMMON = ["method=finetune", "backbone=mlp", "backbone.hidden_sizes=[256,256]", "method.batch_size=64",
          "method.epochs=2", "logger=none"]


# Two ranks on this host. --standalone: a rendezvous on a free port, where torchrun's default master port (29500)
# is shared by every launch on the host, so two tests launching at once (the suite's two workers) met at it and
# crossed (seen once: a rank aborted in gloo).
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


# The runs compared with one process: COMMON, the baselines that declare ddp and the rehearsal methods. Their
# torchrun side trains in rank_runs' one launch below (checkpoint.keep=all there: every task's memory read), which
# also audits it for host syncs (issue 74: it stands for those methods' audit cases).
# SI (importance from the averaged gradient) and iCaRL (herding on every rank) stand for the other importance
# and herding methods (MAS, LUCIR), which share those mechanisms.
# iCaRL at Mammoth's S-MNIST lr (0.1): at its CIFAR default of 2.0 this small MLP's training is chaotic, and the
# float-order differences of two processes (or of one at another thread count) move a late task by 40 points.
BASELINE = ["backbone=mlp", "backbone.hidden_sizes=[32]", "method.batch_size=64", "method.epochs=1", "logger=none"]
REHEARSAL = ["backbone=mlp", "backbone.hidden_sizes=[256,256]", "method.epochs=2", "logger=none"]
COMPARED = {
    "compare_common": COMMON,
    "compare_si": ["method=si", "scenario=task", *BASELINE, "method.lr=0.05"],
    "compare_icarl": ["method=icarl", "scenario=class", *BASELINE, "method.lr=0.1"],
    "compare_er": ["method=er", *REHEARSAL, "scenario=class"],
    "compare_der": ["method=der", *REHEARSAL, "scenario=task", "method.batch_size=63"],
}


def single_and_ddp(tmp_path, rank_runs, name: str) -> tuple[dict, dict, Path]:
    """metrics.json of COMPARED[name] in one process and of two under torchrun (rank_runs' launch: the global batch
    is the same), and the latter's folder."""
    single = train(tmp_path / "single", "hardware=cpu", *COMPARED[name])
    ddp = Path(rank_runs[name][0]["run_dir"])
    assert contract_problems(ddp) == []
    return single, json.loads((ddp / "metrics.json").read_text()), ddp


def assert_close_runs(ddp: dict, single: dict, avg: float, cell: float) -> None:
    assert abs(ddp["avg_acc"] - single["avg_acc"]) <= avg
    for row_ddp, row_single in zip(ddp["acc"], single["acc"]):
        assert max(abs(a - b) for a, b in zip(row_ddp, row_single)) <= cell


@pytest.fixture(scope="module")
def common_runs(tmp_path_factory, worker_id, rank_runs) -> list[dict]:
    """COMMON's run in one process and in two under torchrun, which the launchers' tests compare with (once in
    the session, whichever workers draw those tests)."""
    return once_per_session(tmp_path_factory, worker_id, "common_runs",
                            lambda folder: list(single_and_ddp(folder, rank_runs, "compare_common")[:2]))


def test_two_processes_match_one_with_the_same_global_batch(common_runs):
    single, ddp = common_runs
    host = socket.gethostname()
    assert single["ran_on"] == {"launcher": "cl-bench", "world_size": 1, "hosts": [host], "nodes": 1, "device": "cpu",
                                "threads": single["ran_on"]["threads"], "residency": "device", "cuda_graphs": "off"}
    threads = max(1, len(os.sched_getaffinity(0)) // 2)  # torchrun's two processes share the node's cores
    assert ddp["ran_on"] == {"launcher": "torchrun", "world_size": 2, "hosts": [host, host], "nodes": 1,
                             "device": "cpu", "threads": threads, "residency": "device", "cuda_graphs": "off"}
    # Each rank takes half of every batch and the gradients are averaged: the same updates as one process
    # up to the order of float sums, so the results agree within a few test samples.
    assert_close_runs(ddp, single, 0.02, 0.06)


def stored_samples(run_dir, task: int) -> set[bytes]:
    """The exemplars a herding memory holds after a task, as a set (its row order follows the herding order)."""
    state = load_file(run_dir / "checkpoints" / f"task_{task:03d}" / "state.safetensors")
    x = state["memory.x"][: int(state["memory.class_count"].sum())]
    return {row.numpy().tobytes() for row in x.flatten(1)}


@pytest.mark.parametrize("method", ["si", "icarl"])
def test_the_baselines_that_declare_ddp_match_one_process(tmp_path, rank_runs, method):
    """The importance passes (SI's path integral from the averaged gradient, MAS's over the whole task on every
    rank) and the exemplar choices (herding on every rank) give every rank the same state, so two processes
    learn as one up to the order of float sums. The first task, before any of that state is used, agrees as
    finetune does; later, one herding tie broken the other way by a float sum picks another exemplar, and with
    72 test samples a task (1.4 points each) the runs drift apart by a few samples a cell. (SI's importance
    ω/((Δθ)² + ξ) is far from equal: it divides float-order differences by ξ = 1e-3; the weights agree.)"""
    single, ddp, ddp_dir = single_and_ddp(tmp_path, rank_runs, f"compare_{method}")
    assert single["avg_acc"] > 0.3  # it learned: equal runs at chance would show nothing
    assert abs(ddp["acc"][0][0] - single["acc"][0][0]) <= 0.03
    assert_close_runs(ddp, single, 0.06, 0.25)
    if method == "icarl":  # each rank herds over the whole task, not its shard: the same exemplars
        for task in range(len(single["acc"])):
            assert stored_samples(ddp_dir, task) == stored_samples(tmp_path / "single", task)


def memory_of(run_dir, task: int) -> dict:
    state = load_file(run_dir / "checkpoints" / f"task_{task:03d}" / "state.safetensors")
    return {k.removeprefix("memory."): v for k, v in state.items() if k.startswith("memory.")}


@pytest.mark.parametrize("method", ["er", "der"])
def test_rehearsal_under_two_processes_keeps_one_memory_and_learns_as_one(tmp_path, rank_runs, method):
    """Every rank stores the global batch and draws the same replay rows from the shared stream, so the memory
    after each task is the one a single process fills, sample for sample; DER's stored logits, computed on each
    rank's shard and gathered (an odd global batch of 63: shards of 32 and 31), equal the single process's up
    to the order of float sums. On the 8x8 digits, with no augmentation, the runs then agree as finetune does."""
    single, ddp, ddp_dir = single_and_ddp(tmp_path, rank_runs, f"compare_{method}")
    assert single["avg_acc"] > 0.5
    # Float-order differences flip borderline test samples: ER's class scenario, right after task 1, is the most
    # uncertain cell (8 of task 0's 72 test images measured there, every other cell equal, the memories equal).
    assert_close_runs(ddp, single, 0.02, 0.12)
    for task in range(len(single["acc"])):
        one, two = memory_of(tmp_path / "single", task), memory_of(ddp_dir, task)
        for key in ("x", "y", "t", "seen"):
            assert torch.equal(one[key], two[key]), (task, key)
        assert torch.allclose(one["logits"], two["logits"], atol=0.05), task
        if method == "der":
            assert one["logits"].abs().sum() > 0  # the logits were stored, not left at zero


def rank_view(rank: int):
    """A split_digits method as rank `rank` of 2 sees it, with the pad-crop and flip of the colour datasets."""
    config.register()
    cfg = config.validate(config.compose(["method=finetune", "backbone=mlp"]))
    device = torch.device("cpu")
    scenario = scenarios.build(cfg.dataset, cfg.data, cfg.scenario, cfg.seed, device)
    ctx = methods.Context(device, None, torch.Generator().manual_seed(0), recorders.Recorder(), rank, 2, seed=0)
    method = methods.build(cfg.method, backbones.build(cfg.backbone, scenario.info.input_shape), scenario.info, ctx)
    method.info.view = View((0.5,) * 3, (0.25,) * 3, augment=True, device=device)
    return method, ctx


def test_each_rank_augments_its_own_shard_from_its_own_stream():
    raw = torch.randint(0, 256, (9, 3, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    y, t = torch.arange(9), torch.zeros(9, dtype=torch.long)
    batches = []
    for rank in (0, 1):
        method, ctx = rank_view(rank)
        shared = ctx.generator.get_state()
        parallel.seed_shard_augmentation(method.ctx, task_id=0, phase=0, epoch=3)
        batch = method.loop._training_batch(raw, y, t, step=0)
        assert torch.equal(batch.raw, raw[rank::2]) and torch.equal(batch.y, y[rank::2])
        assert batch.unsharded().raw is raw  # what a memory stores: the global batch
        assert torch.equal(ctx.generator.get_state(), shared)  # the shared stream stays as one process draws it
        parallel.seed_shard_augmentation(method.ctx, task_id=0, phase=0, epoch=3)  # a resumed epoch augments as before
        assert torch.equal(method.loop._training_batch(raw, y, t, step=0).x, batch.x)
        parallel.seed_shard_augmentation(method.ctx, task_id=0, phase=0, epoch=3)
        batches.append(method.loop.augment(raw[:4]))  # the same rows through each rank's stream
    assert not torch.equal(batches[0], batches[1])


def test_a_method_outside_the_epoch_loop_refuses_ddp_clearly(tmp_path):
    proc = cl_bench("train", "hardware=ddp", "method=agem", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "method=agem does not support hardware=ddp" in proc.stderr and "finetune" in proc.stderr


def test_skipping_nonfinite_steps_refuses_ddp_clearly(tmp_path):
    proc = cl_bench("train", "hardware=ddp", "method.skip_nonfinite=true", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "skip_nonfinite" in proc.stderr


def test_ddp_outside_torchrun_says_how_to_start_it(tmp_path):
    proc = cl_bench("train", "hardware=ddp", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and "torchrun --nproc_per_node" in proc.stderr and "Traceback" not in proc.stderr


def test_a_submitit_job_of_two_tasks_trains_as_torchrun_does(tmp_path, common_runs):
    """Hydra's submitit_local launcher (submitit's local executor: the code path of a Slurm job, without Slurm)
    starts 2 tasks; cl-bench takes their ranks and rendezvous from submitit's job environment and trains as the
    same two ranks under torchrun do, bit for bit (same shards, same float order)."""
    sweep = tmp_path / "submitit"
    proc = cl_bench("train", "-m", *COMMON, "hardware=ddp", "hydra/launcher=submitit_local",
                    "hydra.launcher.tasks_per_node=2", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert contract_problems(sweep / "0") == []
    job = json.loads((sweep / "0" / "metrics.json").read_text())
    assert job["acc"] == common_runs[1]["acc"]  # torchrun's (checkpoint.keep=all there changes no update)
    assert job["ran_on"]["launcher"] == "submitit_local" and job["ran_on"]["world_size"] == 2


def test_a_job_of_several_tasks_without_ddp_is_one_line(tmp_path):
    """Each task would train the same run into the same directory: refused, saying what to do."""
    proc = cl_bench("train", "-m", "debug=smoke", "hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2",
                    f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "cl-bench: error: this job runs as 2 tasks (hydra.launcher.tasks_per_node x nodes, or srun's --ntasks): "
        "use hardware=ddp to train one run on them, or a single task per job")
    assert "Traceback" not in proc.stderr


def test_a_submitit_job_that_fails_reaches_the_caller_as_its_own_one_line(tmp_path):
    """A refusal only the job can make (hardware=ddp in a job of one task: no ranks to train on) fails the job;
    submitit's error, which quotes the job's error stream, reaches the sweep's caller as the job's one line."""
    proc = cl_bench("train", "-m", "debug=smoke", "hardware=ddp", "hydra/launcher=submitit_local",
                    f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("cl-bench: error: hardware=ddp runs under torchrun")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_nodes_through_torchrun_rendezvous_match_one_process(tmp_path, common_runs):
    """Multi-node torchrun as docs/sweeps.md gives it: two "nodes" on localhost, one process each, meeting through a
    c10d rendezvous (gloo); they learn as one process does, up to the order of float sums."""
    single = common_runs[0]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    endpoint = f"localhost:{free_port()}"
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
                               "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}", "--rdzv_id=cl-bench-test",
                               "-m", "cl_bench", "train", "hardware=ddp", *COMMON,
                               f"hydra.run.dir={tmp_path / 'nodes'}"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for node in nodes:
        _, err = node.communicate(timeout=600)
        assert node.returncode == 0, err[-3000:]
    assert contract_problems(tmp_path / "nodes") == []
    two = json.loads((tmp_path / "nodes" / "metrics.json").read_text())
    assert two["ran_on"]["launcher"] == "torchrun" and two["ran_on"]["world_size"] == 2
    assert_close_runs(two, single, 0.02, 0.06)


# Each rank of torchrun's processes: every run of runs.json in turn, each as `cl-bench train` runs it and under the
# host-sync audit (test_sync_audit.SyncAudit), then a digest of every tensor of that run's method state (and its
# capacity report) and the syncs found inside its steps (kind @ site: count) in a file named by run and rank. One
# launch for all the runs: a torchrun launch costs each rank its imports, several CPU-seconds.
RANK_RUN = '''
import hashlib, json, os, sys
sys.path.insert(0, sys.argv[2])
from test_sync_audit import SyncAudit
from cl_bench import cli, methods
built, build = [], methods.build
methods.build = lambda *args: built.append(build(*args)) or built[-1]
with open(os.path.join(sys.argv[1], "runs.json")) as f:
    runs = json.load(f)
for name, argv in runs.items():
    with SyncAudit() as audit:
        code = cli.main(argv)
    digest = lambda v: hashlib.sha256(v.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
    state = {k: [list(v.shape), str(v.dtype), digest(v)] for k, v in built[-1].state_dict().items()}
    out = {"code": code, "state": state, "capacity": built[-1].capacity(), "within": dict(audit.within),
           "inside": {f"{kind} @ {where}": n for (kind, where), n in audit.inside.items()}}
    with open(os.path.join(sys.argv[1], f"{name}.rank{os.environ['RANK']}.json"), "w") as f:
        json.dump(out, f)
'''

# Tiny runs (2 tasks of split_digits, one epoch per phase) in which every decision a method makes from data is
# taken: CPG grows when its goal model's measured accuracy is not met (train_acc_bar=0 keeps growth to the goal),
# compacts and refits on selection accuracy; gated freezes kernels by their relevance on validation data; ER's
# memory. An evaluation batch of 8 spreads each measurement over both ranks; 165 training samples end each epoch
# on a batch of 5, shards of 3 and 2, so the ranks' own random streams (gate noise) are drawn from apart.
TINY = ["dataset.num_tasks=2", "dataset.samples_per_task=165", "dataset.val_samples_per_task=40",
        "method.batch_size=32", "data.eval_batch_size=8", "method.epochs=1", "logger=none", "checkpoint.enabled=false"]
CPG = ["method.prune_epochs=1", "method.prune_ramp_epochs=1", "method.retrain_epochs=2", "method.train_acc_bar=0",
       "method.prune_frequency=1", "method.prune_targets=[0.3,0.6]", "method.lr=0.002"]
AGREEMENT_RUNS = {
    "cpg": ["method=cpg", *CPG],
    "pae": ["method=cpg", "method.picking=false", *CPG],
    "packnet": ["method=packnet", "method.retrain_epochs=1"],
    "gated_task": ["method=gated", "scenario=task"],
    "gated_class": ["method=gated", "scenario=class", "method.memory_size=40"],
    "er_class": ["method=er", "scenario=class", "method.memory_size=40"],
}
# The host-sync audit's runs (test_sync_audit.FAST: two tasks of one batch, every phase cut to one batch): every
# hardware=ddp method in each scenario it declares (Traits.distributed_scenarios), gated also with its task
# classifier fitted after each task. PackNet, gated in both scenarios and ER in the class scenario are audited in
# their agreement runs above, which take every phase in full, finetune, SI and DER (task) and iCaRL (class) in the
# runs COMPARED with one process; CPG's ramp with a cutoff in CPG's and PAE's, whose steps release weights by
# the ramp's cutoff (test_sync_audit.WITHIN's kthvalue).
AUDITED_IN_AGREEMENT = {"packnet_task": "packnet", "gated_task": "gated_task", "gated_class": "gated_class",
                        "er_class": "er_class", "finetune_task": "compare_common", "si_task": "compare_si",
                        "icarl_class": "compare_icarl", "der_task": "compare_der"}  # and in the compared runs
RAMPS = ("cpg", "pae")
DDP_CASES = {f"{name}_{scenario}": [f"method={name}", f"scenario={scenario}", *FAST]
             for name in methods.METHODS for scenario in sorted(methods.get(name).traits.distributed_scenarios)
             if f"{name}_{scenario}" not in AUDITED_IN_AGREEMENT}
DDP_CASES["gated_after_task_class"] = ["method=gated", *FAST, *AFTER_TASK]


@pytest.fixture(scope="module")
def rank_runs(tmp_path_factory, worker_id) -> dict[str, list[dict]]:
    """Every run of AGREEMENT_RUNS and DDP_CASES under 2-rank torchrun (gloo), one after another in one launch:
    each rank's digest of its method's state and its audit (once in the session, whichever workers draw the tests
    that read it)."""
    return once_per_session(tmp_path_factory, worker_id, "rank_runs", ddp_runs)


def ddp_runs(root) -> dict[str, list[dict]]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    script = root / "rank_run.py"
    script.write_text(RANK_RUN)
    runs = {name: ["train", "hardware=ddp", *overrides, f"hydra.run.dir={root / name}"]
            for name, overrides in {**{k: [*TINY, *v] for k, v in AGREEMENT_RUNS.items()}, **DDP_CASES,
                                    **{k: ["checkpoint.keep=all", *v] for k, v in COMPARED.items()}}.items()}
    (root / "runs.json").write_text(json.dumps(runs))
    proc = subprocess.run([*TORCHRUN, str(script), str(root),
                           str(Path(__file__).parent)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name: [{**json.loads((root / f"{name}.rank{r}.json").read_text()), "run_dir": str(root / name)}
                   for r in (0, 1)] for name in runs}


@pytest.mark.parametrize("name", AGREEMENT_RUNS)
def test_every_rank_ends_with_the_same_state(rank_runs, name):
    """The ranks decide from the same numbers (accuracies and relevance summed over the ranks, the goal models'
    gradients averaged), so they take the same phases and end with the same masks, gates, memories and weights,
    bit for bit."""
    zero, one = rank_runs[name]
    assert zero["code"] == one["code"] == 0
    differing = sorted(k for k in zero["state"] if zero["state"][k] != one["state"].get(k))
    assert differing == [] and zero["state"].keys() == one["state"].keys(), differing[:10]
    assert zero["capacity"] == one["capacity"]


def test_cpg_grew_and_compacted_alike_on_both_ranks(rank_runs):
    """The case the ranks used to split on: CPG's first task misses its measured goal and grows; each task keeps
    a sparsity chosen by selection accuracy."""
    for name in ("cpg", "pae"):
        capacity = rank_runs[name][0]["capacity"]
        assert capacity["param_multiplier"] > 1, name
        assert all(0 < g < 1 for g in capacity["goal_per_task"]), name  # measured goals, not fixed ones
        assert any(s > 0 for s in capacity["sparsity_per_task"]), name


@pytest.mark.parametrize("name", AGREEMENT_RUNS)
def test_the_runs_that_agree_are_the_declared_ddp_methods(name):
    """What the agreement runs cover is what the methods declare (Traits.distributed_scenarios, which
    hardware=ddp checks before training)."""
    overrides = dict(o.split("=", 1) for o in AGREEMENT_RUNS[name] if o.startswith(("method=", "scenario=")))
    method = methods.get(overrides["method"])
    assert overrides.get("scenario", "task") in method.traits.distributed_scenarios


@pytest.mark.parametrize("name", [*AGREEMENT_RUNS, *DDP_CASES, *COMPARED])
def test_no_host_sync_inside_a_data_parallel_training_step(rank_runs, name):
    """hardware=ddp with two ranks: DistributedDataParallel's wrapping at each phase, the shards and the all-reduces
    run where one process has none of them (the wrapping broadcasts rank 0's parameters and buffers, which a cache
    keyed on a tensor's version sees as a change)."""
    for rank, audit in enumerate(rank_runs[name]):
        assert audit["code"] == 0, f"rank {rank} of {name} exited {audit['code']}"
        assert sum(audit["within"].values()), f"rank {rank} saw no training step"
        assert name not in RAMPS or audit["within"].get(WITHIN["cpg_ramp"]), f"no step of {name} released weights"
        assert not audit["inside"], f"host syncs inside {name}'s training steps on rank {rank}: {audit['inside']}"


def test_every_ddp_method_and_scenario_is_audited():
    """Each method and scenario that hardware=ddp accepts has an audited run: its own case or an agreement run."""
    declared = {f"{name}_{scenario}" for name in methods.METHODS
                for scenario in methods.get(name).traits.distributed_scenarios}
    assert declared <= set(DDP_CASES) | set(AUDITED_IN_AGREEMENT)
    for case, run in AUDITED_IN_AGREEMENT.items():
        method, scenario = case.rsplit("_", 1)
        chosen = dict(o.split("=", 1) for o in {**AGREEMENT_RUNS, **COMPARED}[run]
                      if o.startswith(("method=", "scenario=")))
        assert (chosen["method"], chosen.get("scenario", "task")) == (method, scenario), case
