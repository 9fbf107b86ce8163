"""Stops, bad numbers and concurrent starts, through real processes."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, ForkedTrain, cl_bench, contract_problems, once_per_session, train

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

# Long enough to be caught mid-run, here and by test_threads.py's signalled job, which compare with its one
# uninterrupted run (issue 74)
SLOW = ["method=finetune", "method.epochs=30", "logger=none"]


def uninterrupted(tmp_path_factory, worker_id) -> dict:
    """SLOW's metrics.json, never stopped, once in the session."""
    return once_per_session(tmp_path_factory, worker_id, "slow_uninterrupted_run",
                            lambda folder: train(folder / "run", *SLOW))


def start(*args, cwd=ROOT):
    return subprocess.Popen([sys.executable, "-m", "cl_bench", "train", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ})


def wait_for(path, proc, timeout=300):
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_run_keeps_its_checkpoint_and_says_how_to_resume(tmp_path_factory, worker_id, tmp_path, sig, code):
    run_dir = tmp_path / "run"
    proc = start(f"hydra.run.dir={run_dir}", *SLOW)
    wait_for(run_dir / "checkpoints" / "last", proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code and "Traceback" not in err
    assert f"cl-bench train resume={run_dir}" in err
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["complete"] is False
    last = (run_dir / "checkpoints" / "last").read_text()
    assert (run_dir / "checkpoints" / last / "meta.json").is_file()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "warning" and signal.Signals(sig).name in events[-1]["message"]
    if sig == signal.SIGINT:
        return
    # and the resumed run ends as one never stopped
    assert cl_bench("train", f"resume={run_dir}").returncode == 0
    whole = uninterrupted(tmp_path_factory, worker_id)
    resumed = json.loads((run_dir / "metrics.json").read_text())
    drop = ("time_s", "peak_mem_mb")
    assert {k: v for k, v in resumed.items() if k not in drop} == {k: v for k, v in whole.items() if k not in drop}
    assert contract_problems(run_dir) == []


def test_a_diverging_loss_stops_with_task_epoch_and_step(tmp_path):
    run_dir = tmp_path / "run"
    proc = cl_bench("train", f"hydra.run.dir={run_dir}", "logger=none", "method.lr=1e30", "method.epochs=2")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("cl-bench: error: the loss became") and "task 0, epoch 0, step" in line
    assert "method.skip_nonfinite=true" in line
    assert not (run_dir / "checkpoints" / "last").exists()  # nothing saved from diverged weights


def test_skip_nonfinite_skips_instead_of_stopping(tmp_path):
    run_dir = tmp_path / "run"
    proc = cl_bench("train", f"hydra.run.dir={run_dir}", "logger=none", "method.lr=1e30", "method.epochs=1",
                    "method.skip_nonfinite=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()
                if '"warning"' in line]
    assert warnings and "non-finite steps" in warnings[0]["message"]


def test_runs_started_in_the_same_second_get_distinct_directories(tmp_path):
    procs = [ForkedTrain("logger=none", "method.epochs=1", cwd=tmp_path) for _ in range(3)]
    for p in procs:
        p.communicate(timeout=300)
        assert p.returncode == 0
    runs = sorted((tmp_path / "outputs" / "runs").iterdir())
    assert len(runs) == 3 and all((r / "metrics.json").is_file() for r in runs)
