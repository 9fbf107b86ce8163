"""checkpoint.every_epochs: checkpoints written within a task, and resumes that continue from them.

Each case runs once with within-task checkpoints, copying its run directory aside right after one of them (the last
thing a run killed there would have left); the copy resumed ends with exactly the metrics and final state of the run
that went on: the stop changed nothing (issue 74: the copy is taken from that run, not from a run of its own). Where
a case's arguments are its method's trial (test_method_contract.py), which writes no within-task checkpoint, the run
also ends as the trial did: writing them changed nothing."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import cl_bench, once_per_session
from safetensors.torch import load_file
from test_method_contract import trial, trial_args

from cl_bench import checkpoint, config
from cl_bench import train as train_module

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

DROP = ("time_s", "peak_mem_mb")
TASKS = 2
BASE = ["logger=none", f"dataset.num_tasks={TASKS}", "method.epochs=2"]
# Where each method is stopped: (task, phase, epoch) of the within-task checkpoint it stops after. Later
# phases come after work between phases (PackNet's pruning, gated's consolidation) that the resume redoes.
GATED = ["experiment=gated_split_digits", "scenario=class", "method.sparsity_warmup_epochs=1", *BASE]
GATED_AFTER = [*GATED, "method.task_classifier_fit=after_task", "method.task_classifier_epochs=2"]
# The cases run on their method's trial (its arguments, two epochs with the lr cut after the first, the stop before
# the cut), as (method, scenario): writing within-task checkpoints is shown to change nothing on these, plain
# methods with one phase and none, one or a copy per task of the network (a run that writes none would only be the
# trial again, issue 74); the other cases keep their own arguments.
ON_TRIAL = {"finetune": ("finetune", "task"), "lwf": ("lwf", "task"), "mas": ("mas", "task"),
            "independent": ("independent", "task"), "finetune-first-task": ("finetune", "task")}
CASES = {
    "finetune": (None, (1, 0, 0)),
    "er": (["method=er", "method.memory_size=20"], (1, 0, 0)),
    "lwf": (None, (1, 0, 0)),
    # the teacher and the exemplars are rebuilt from the task-start state; herding comes after the one phase
    "icarl": (["method=icarl", "scenario=class", "method.memory_size=50"], (1, 0, 0)),
    # the greedy memory is refilled and the network re-drawn from the task-start state and random states
    "gdumb": (["method=gdumb", "scenario=class", "method.memory_size=50"], (1, 0, 0)),
    # lucir as icarl (the teacher and the imprinted vectors from the task-start state); stopped in the finetuning
    # phase, the exemplars herded after the skipped phase come from the saved state
    "lucir": (["method=lucir", "scenario=class", "method.memory_size=50"], (1, 0, 0)),
    "lucir-finetune": (["method=lucir", "scenario=class", "method.memory_size=50", "method.balanced_finetune=true",
                        "method.finetune_epochs=2"], (1, 1, 0)),
    # SI's path integral of the task in flight (ω, θ at the task's start) continues across the stop.
    "si": (["method=si", "method.c=10"], (1, 0, 0)),
    "mas": (None, (1, 0, 0)),
    "independent": (None, (1, 0, 0)),
    "packnet": (["method=packnet", "method.retrain_epochs=2"], (1, 1, 0)),
    # The mask scores' Adam state and their lr schedule (here dropping after epoch 0) continue across the stop.
    "piggyback": (["method=piggyback", "method.mask_lr=0.05", "method.mask_lr_milestones=[1]"], (1, 0, 0)),
    "gated-path": (GATED, (1, 0, 0)),  # joint: the sparsity warm-up and the rehearsal draws cross the stop
    "gated-classifier": (GATED_AFTER, (1, 1, 0)),  # the post-hoc task classifier's own phase
    "finetune-first-task": (None, (0, 0, 0)),  # resumed from the initial state
}


def case_args(case: str) -> list[str]:
    """The case's run: its trial's arguments (ON_TRIAL) or its own, with a checkpoint after every epoch."""
    extra = CASES[case][0]
    args = trial_args(*ON_TRIAL[case]) if extra is None else [*BASE, *extra]
    return [*args, "checkpoint.every_epochs=1"]


def metrics(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    return {k: v for k, v in m.items() if k not in DROP}


def run(tmp_path, name, args):
    config.register()
    run_dir = tmp_path / name
    run_dir.mkdir()
    train_module.run(config.compose(args), run_dir)
    return run_dir


def stopped_run(tmp_path_factory, worker_id, case: str) -> tuple[Path, Path]:
    """The case's run, once in the session: its directory, whole, and the copy taken right after the checkpoint the
    case stops after, as a run killed there would have left it."""
    def compute(folder):
        stop, save = CASES[case][1], checkpoint.save

        def save_then_copy(run_dir, task_id, *a, within=None, **k):
            out = save(run_dir, task_id, *a, within=within, **k)
            if within and (task_id, within["phase"], within["epoch"]) == stop:
                shutil.copytree(run_dir, folder / "stopped")  # fails if the point came twice
            return out

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(checkpoint, "save", save_then_copy)
            run(folder, "whole", case_args(case))
        assert (folder / "stopped").is_dir(), f"the run never wrote the checkpoint {stop} of {case}"
        return [str(folder / "whole"), str(folder / "stopped")]
    whole, stopped = once_per_session(tmp_path_factory, worker_id, f"within-task-{case}", compute)
    return Path(whole), Path(stopped)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_stopped_within_a_task_resumes_to_the_same_metrics(tmp_path_factory, worker_id, tmp_path, one_thread,
                                                                 case):
    task = CASES[case][1][0]
    whole, copy = stopped_run(tmp_path_factory, worker_id, case)
    stopped = tmp_path / "stopped"
    shutil.copytree(copy, stopped)
    assert (stopped / "checkpoints" / f"task_{task:03d}_within").is_dir()
    last = (stopped / "checkpoints" / "last")
    assert last.read_text() == f"task_{task - 1:03d}" if task else not last.exists(), "last names whole tasks"
    train_module.run(config.compose([*case_args(case), f"resume={stopped}"]), stopped)
    assert metrics(stopped) == metrics(whole)
    for run_dir in (whole, stopped):
        assert not any(p.name.endswith("_within") for p in (run_dir / "checkpoints").iterdir()), "spent ones removed"
    final = f"task_{TASKS - 1:03d}"
    assert same_state(whole / "checkpoints" / final, stopped / "checkpoints" / final), "every tensor, bit for bit"
    if case in ON_TRIAL:  # the trial wrote no within-task checkpoint
        plain = trial(tmp_path_factory, worker_id, *ON_TRIAL[case])
        assert metrics(whole) == {k: v for k, v in plain["metrics"].items() if k not in DROP}
        assert same_state(Path(plain["run_dir"]) / "checkpoints" / final, whole / "checkpoints" / final)


def same_state(a, b) -> bool:
    """Two checkpoints hold the same tensors (weights, masks, memories, random states), bit for bit."""
    for name in checkpoint.FILES:
        x, y = load_file(a / name), load_file(b / name)
        if x.keys() != y.keys() or not all(torch.equal(x[k], y[k]) for k in x):
            return False
    return True


def test_methods_whose_phases_depend_on_results_refuse_every_epochs(tmp_path):
    for method in ("cpg", "nccl"):
        proc = cl_bench("train", f"method={method}", "checkpoint.every_epochs=1", f"hydra.run.dir={tmp_path / method}")
        assert proc.returncode == 2
        assert f"checkpoint.every_epochs is not supported by method={method}" in proc.stderr
        assert "Traceback" not in proc.stderr and not (tmp_path / method).exists()


def test_a_damaged_within_task_checkpoint_falls_back_to_the_task_before(tmp_path_factory, worker_id, tmp_path,
                                                                       one_thread):
    """The finetune case's whole run (every task's checkpoint kept, its trial's), cut back to task 0."""
    whole, _ = stopped_run(tmp_path_factory, worker_id, "finetune")
    args = case_args("finetune")
    assert "checkpoint.keep=all" in args
    stopped = tmp_path / "stopped"
    shutil.copytree(whole, stopped)
    (stopped / "metrics.json").unlink()
    shutil.rmtree(stopped / "checkpoints" / "task_001")
    shutil.copytree(whole / "checkpoints" / "task_000", stopped / "checkpoints" / "task_001_within")
    (stopped / "checkpoints" / "last").write_text("task_000")
    # a copy of another checkpoint with a byte changed: its checksum fails
    state = stopped / "checkpoints" / "task_001_within" / "state.safetensors"
    data = bytearray(state.read_bytes())
    data[-1] ^= 0xFF
    state.write_bytes(bytes(data))
    train_module.run(config.compose([*args, f"resume={stopped}"]), stopped)
    assert metrics(stopped) == metrics(whole)
