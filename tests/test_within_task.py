"""checkpoint.every_epochs: checkpoints written within a task, and resumes that continue from them.

Each case stops a run right after one of its within-task checkpoints (the last thing a killed run would
have left), resumes it, and requires exactly the metrics and final state of a run that wrote no within-task
checkpoint at all: neither the stop nor the checkpoints written before and after it changed anything (a run
never stopped that wrote them is not run besides, issue 74: it would only show the second again)."""
import json
import shutil

import pytest
import torch
from conftest import cl_bench
from safetensors.torch import load_file

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
CASES = {
    "finetune": (["method=finetune"], (1, 0, 0)),
    "er": (["method=er", "method.memory_size=20"], (1, 0, 0)),
    "lwf": (["method=lwf"], (1, 0, 0)),
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
    "mas": (["method=mas"], (1, 0, 0)),
    "independent": (["method=independent"], (1, 0, 0)),
    "packnet": (["method=packnet", "method.retrain_epochs=2"], (1, 1, 0)),
    # The mask scores' Adam state and their lr schedule (here dropping after epoch 0) continue across the stop.
    "piggyback": (["method=piggyback", "method.mask_lr=0.05", "method.mask_lr_milestones=[1]"], (1, 0, 0)),
    "gated-path": (GATED, (1, 0, 0)),  # joint: the sparsity warm-up and the rehearsal draws cross the stop
    "gated-classifier": (GATED_AFTER, (1, 1, 0)),  # the post-hoc task classifier's own phase
    "finetune-first-task": (["method=finetune"], (0, 0, 0)),  # resumed from the initial state
}


def metrics(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    return {k: v for k, v in m.items() if k not in DROP}


def run(tmp_path, name, args):
    config.register()
    run_dir = tmp_path / name
    run_dir.mkdir()
    train_module.run(config.compose(args), run_dir)
    return run_dir


class Stop(Exception):
    pass


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_stopped_within_a_task_resumes_to_the_same_metrics(tmp_path, monkeypatch, one_thread, case):
    extra, (task, phase, epoch) = CASES[case]
    args = [*BASE, *extra]
    plain = run(tmp_path, "plain", args)
    args.append("checkpoint.every_epochs=1")

    save = checkpoint.save

    def save_then_stop(run_dir, task_id, *a, within=None, **k):
        out = save(run_dir, task_id, *a, within=within, **k)
        if within and (task_id, within["phase"], within["epoch"]) == (task, phase, epoch):
            raise Stop  # as if killed right after this checkpoint was written
        return out

    monkeypatch.setattr(checkpoint, "save", save_then_stop)
    with pytest.raises(Stop):
        run(tmp_path, "stopped", args)
    monkeypatch.undo()
    stopped = tmp_path / "stopped"
    assert (stopped / "checkpoints" / f"task_{task:03d}_within").is_dir()
    last = (stopped / "checkpoints" / "last")
    assert last.read_text() == f"task_{task - 1:03d}" if task else not last.exists(), "last names whole tasks"
    train_module.run(config.compose([*args, f"resume={stopped}"]), stopped)
    assert metrics(stopped) == metrics(plain)
    assert not any(p.name.endswith("_within") for p in (stopped / "checkpoints").iterdir()), "spent ones removed"
    final = f"task_{TASKS - 1:03d}"
    assert same_state(plain / "checkpoints" / final, stopped / "checkpoints" / final), "every tensor, bit for bit"


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


def test_a_damaged_within_task_checkpoint_falls_back_to_the_task_before(tmp_path, monkeypatch, one_thread):
    args = [*BASE, "method=finetune", "checkpoint.every_epochs=1", "checkpoint.keep=all"]  # cut back to task 0
    whole = run(tmp_path, "whole", args)
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
