"""Where a run ran (metrics.json's ran_on) and torch's threads per job: a run alone keeps torch's default, jobs
side by side share the cores (torchrun's processes on a node, the parallel launcher's n_jobs), hardware.threads
wins; each run's train.log says which."""
import json
import os
import re

import pytest
from conftest import cl_bench

from cl_bench import hardware

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


def test_a_submitit_local_sweep_runs_each_job(tmp_path):
    """Two single-process jobs through Hydra's submitit_local launcher: each a complete run that says so."""
    proc = cl_bench("train", "-m", "debug=smoke", "hydra/launcher=submitit_local", "seed=0,1",
                    f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for job in ("0", "1"):
        m = json.loads((tmp_path / job / "metrics.json").read_text())
        assert m["complete"] and m["seed"] == int(job)
        assert m["ran_on"]["launcher"] == "submitit_local" and m["ran_on"]["world_size"] == 1
