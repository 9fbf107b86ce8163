"""hardware=ddp under torchrun: 2 CPU processes (gloo) match one process with the same global batch."""
import json
import os
import subprocess
import sys

from conftest import ROOT, cl_bench, contract_problems, train

COMMON = ["method=finetune", "backbone=mlp", "method.batch_size=64", "method.epochs=2", "logger=none"]


def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    single = train(tmp_path / "single", "hardware=cpu", *COMMON)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "cl_bench",
                           "train", "hardware=ddp", *COMMON, f"hydra.run.dir={tmp_path / 'ddp'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert contract_problems(tmp_path / "ddp") == []
    # Each rank takes half of every batch and the gradients are averaged: the same updates as one process
    # up to the order of float sums, so the results agree within a few test samples.
    assert abs(ddp["avg_acc"] - single["avg_acc"]) <= 0.02
    for row_ddp, row_single in zip(ddp["acc"], single["acc"]):
        assert max(abs(a - b) for a, b in zip(row_ddp, row_single)) <= 0.06


def test_a_method_outside_the_epoch_loop_refuses_ddp_clearly(tmp_path):
    proc = cl_bench("train", "hardware=ddp", "method=er", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "method=er does not support hardware=ddp" in proc.stderr and "finetune" in proc.stderr


def test_ddp_outside_torchrun_says_how_to_start_it(tmp_path):
    proc = cl_bench("train", "hardware=ddp", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and "torchrun --nproc_per_node" in proc.stderr and "Traceback" not in proc.stderr
