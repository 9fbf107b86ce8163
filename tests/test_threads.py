"""Where a run ran (metrics.json's ran_on) and torch's threads per job: a run alone keeps torch's default, jobs
side by side share the cores (torchrun's processes on a node, the parallel launcher's n_jobs), hardware.threads
wins; each run's train.log says which."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, cl_bench, files, sweep_summary
from test_reliability import SLOW
from test_reliability import uninterrupted as uninterrupted_run

from cl_bench import hardware

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

CORES = len(os.sched_getaffinity(0))


def threads_line(run_dir) -> str:
    return re.search(r"torch threads: .*", (run_dir / "train.log").read_text()).group(0)


def test_parallel_sweep_shares_the_cores(tmp_path):
    proc = cl_bench("train", "-m", "debug=smoke", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "seed=0,1",
                    f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for job in ("0", "1"):
        assert json.loads((tmp_path / job / "metrics.json").read_text())["ran_on"]["launcher"] == "joblib"
        assert threads_line(tmp_path / job) == (f"torch threads: {max(1, CORES // 2)} ({CORES} cores shared by 2 "
                                                "jobs side by side: hydra.launcher.n_jobs=2)")
        assert f"multirun job {job}: device cpu" in (tmp_path / job / "train.log").read_text()
    # grown in its folder: the jobs, in processes of their own, find their runs by settings (seed 1's is skipped)
    # and claim new folders at once (seed 2's), leaving the earlier runs as they were
    before = {job: files(tmp_path / job) for job in ("0", "1")}
    grown = cl_bench("train", "-m", "debug=smoke", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "seed=1,2",
                     f"hydra.sweep.dir={tmp_path}")
    assert grown.returncode == 0 and sweep_summary(tmp_path, 2, 1, 1) in grown.stderr, grown.stderr[-2000:]
    assert {job: files(tmp_path / job) for job in before} == before
    assert json.loads((tmp_path / "2" / "run.json").read_text())["settings"]["seed"] == 2


@pytest.mark.parametrize(("launcher", "job", "gpus", "gpu"), [
    (None, 5, 4, 0),  # a run alone
    ({"n_jobs": 8}, 5, 4, 1), ({"n_jobs": 8}, 3, 4, 3), ({"n_jobs": 8}, 4, 4, 0),  # side by side: round robin
    ({"n_jobs": 8}, 5, 1, 0),  # one GPU: every job on it
    ({"_target_": "BasicLauncher"}, 5, 4, 0),  # one job after another: GPU 0
])
def test_jobs_side_by_side_spread_over_the_gpus(launcher, job, gpus, gpu):
    try:
        hardware.enter_multirun(launcher, job)
        assert hardware.placed_gpu(gpus) == gpu
    finally:
        hardware.enter_multirun(None)


@pytest.mark.parametrize(("extra", "said"), [([], "torch threads: 1 (torch's default for a run alone: a single run)"),
                                              (["hardware.threads=2"], "torch threads: 2 (hardware.threads)")])
def test_a_run_alone_keeps_torchs_default_and_an_explicit_count_wins(tmp_path, monkeypatch, extra, said):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torch's default in the child: one thread
    proc = cl_bench("train", "debug=smoke", *extra, f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert threads_line(tmp_path) == said


def test_torchrun_processes_on_a_node_share_its_cores(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    threads, why = hardware.default_threads()
    assert threads == max(1, CORES // 4)
    assert why == (f"{CORES} cores shared by 4 jobs side by side: "
                   "LOCAL_WORLD_SIZE=4: the data-parallel processes on this node")


@pytest.mark.parametrize(("n_jobs", "cores", "jobs"), [(3, 8, 3), (-1, 8, 8), (-2, 8, 7), (-9, 8, 1), (12, 8, 12)])
def test_joblib_worker_count(n_jobs, cores, jobs):
    """joblib's reading of n_jobs (joblib.Parallel's docs): negative counts from the cores, -1 every core."""
    assert hardware.joblib_jobs(n_jobs, cores) == jobs


@pytest.mark.parametrize(("launcher", "jobs", "said"), [
    ({"cpus_per_task": 4}, 4, "hydra.launcher.cpus_per_task=4"),  # submitit's: each job its own share of the cores
    ({"cpus_per_task": 32}, 1, "hydra.launcher.cpus_per_task=32"),  # more than there are: one job's worth
    ({"_target_": "BasicLauncher"}, 1, "the launcher runs its jobs one after another"),
])
def test_a_sweeps_launcher_says_how_many_jobs_share_the_cores(launcher, jobs, said):
    try:
        hardware.enter_multirun(launcher)
        assert hardware.concurrent_jobs(16) == (jobs, said)
    finally:
        hardware.enter_multirun(None)


def test_a_submitit_local_sweep_runs_each_job(tmp_path):
    """Two single-process jobs through Hydra's submitit_local launcher: each a complete run that says so."""
    proc = cl_bench("train", "-m", "debug=smoke", "hydra/launcher=submitit_local", "seed=0,1",
                    f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for job in ("0", "1"):
        m = json.loads((tmp_path / job / "metrics.json").read_text())
        assert m["complete"] and m["seed"] == int(job)
        assert m["ran_on"]["launcher"] == "submitit_local" and m["ran_on"]["world_size"] == 1
    # grown by a seed into its directory: each job finds its folder by its settings, the new one alone runs
    before = {job: (tmp_path / job / "metrics.json").read_bytes() for job in ("0", "1")}
    proc = cl_bench("train", "-m", "debug=smoke", "hydra/launcher=submitit_local", "seed=0,1,2",
                    f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"3 jobs in {tmp_path} (1 run, 2 skipped as complete)" in proc.stderr  # the jobs' own lines: their logs
    assert {job: (tmp_path / job / "metrics.json").read_bytes() for job in ("0", "1")} == before
    assert json.loads((tmp_path / "2" / "metrics.json").read_text())["seed"] == 2


def submitit_task(folder: Path) -> int | None:
    """The pid of rank 0 of the local submitit job whose folder is `folder` (its environment names both), or None."""
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            env = environ.read_bytes().split(b"\0")
        except OSError:  # gone, or not ours
            continue
        command = next((e for e in env if e.startswith(b"SUBMITIT_LOCAL_COMMAND=")), b"")
        if b"SUBMITIT_LOCAL_GLOBALID=0" in env and bytes(folder) + b"/" in command:
            return int(environ.parent.name)
    return None


def test_a_job_signalled_as_slurm_does_at_its_time_limit_requeues_and_finishes_as_if_uninterrupted(tmp_path_factory,
                                                                                                  worker_id, tmp_path):
    """SIGUSR2, what Slurm (and submitit's local executor) sends a job before its time limit or on pre-emption:
    submitit checkpoints the Hydra job and requeues it, and the requeued job resumes the run from its last
    checkpoint. Its metrics equal a run of the same overrides that was never signalled (a run alone: a launcher
    changes no update, as test_a_submitit_job_of_two_tasks_trains_as_torchrun_does shows for two tasks)."""
    overrides = SLOW  # test_reliability's long run, whose uninterrupted run is shared
    uninterrupted = uninterrupted_run(tmp_path_factory, worker_id)
    sweep = tmp_path / "signalled"
    proc = subprocess.Popen([sys.executable, "-m", "cl_bench", "train", "-m", *overrides,
                             "hydra/launcher=submitit_local", f"hydra.sweep.dir={sweep}"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    # mid-run: one task done and checkpointed, four to go. `last`, written once the checkpoint is whole, not the
    # task's folder: a signal between the two requeues a job with no complete checkpoint, which starts afresh
    while not (sweep / "0" / "checkpoints" / "last").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    pid = submitit_task(sweep / ".submitit")
    assert pid is not None
    os.kill(pid, signal.SIGUSR2)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    log = (sweep / "0" / "train.log").read_text()
    assert "resuming at task" in log  # requeued, and resumed rather than started again
    signalled = json.loads((sweep / "0" / "metrics.json").read_text())
    assert signalled["complete"] and signalled["acc"] == uninterrupted["acc"]
