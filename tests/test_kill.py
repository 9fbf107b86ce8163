"""Kill anywhere: SIGKILL a real run at random moments (training, evaluation, checkpoint writes alike),
resume each time, and end with exactly the metrics of a run never interrupted."""
import json
import random
import signal
import time

import pytest
from conftest import ForkedTrain, cl_bench, contract_problems
from test_method_contract import trial, trial_args

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

DROP = ("time_s", "peak_mem_mb")
CASES = {
    # checkpoints within tasks too, so that kills also land between them and resumes continue mid-task
    "finetune": ["method=finetune", "method.epochs=4", "checkpoint.every_epochs=1"],
    "cpg": ["experiment=cpg_split_digits", "method.epochs=3", "method.prune_epochs=1", "method.retrain_epochs=1"],
    "gated": ["experiment=gated_split_digits", "method.epochs=2", "scenario=class"],
    "nccl": ["experiment=nccl_split_digits", "dataset.samples_per_task=60"],
}


def without_timings(m):
    return {k: v for k, v in m.items() if k not in DROP}


def written(run_dir) -> int:
    """The events a run has written so far (events.jsonl's lines)."""
    events = run_dir / "events.jsonl"
    return events.read_text().count("\n") if events.is_file() else 0


@pytest.mark.parametrize("method", sorted(CASES))
def test_random_sigkills_lose_nothing(tmp_path, method):
    overrides = [*CASES[method], "logger=none"]
    began = time.monotonic()
    # Forked from the server that has imported already, as the killed runs start: the gap below is theirs
    proc = cl_bench("train", f"hydra.run.dir={tmp_path / 'whole'}", "checkpoint.keep=all", *overrides)
    assert proc.returncode == 0, proc.stderr[-2000:]
    whole = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    # Kill moments are drawn by the killed run's own progress, not by the clock: three event counts in the first
    # half of the uninterrupted run's events.jsonl, each kill landing a random share of a typical gap between
    # events after the run has written that many (count 0: during start-up). A schedule in seconds assumed the
    # killed run as fast as the uninterrupted one, and a load that changed between them let it finish unkilled.
    events = len((tmp_path / "whole" / "events.jsonl").read_text().splitlines())
    gap = (time.monotonic() - began) / (events + 1)
    run_dir, rng, kills = tmp_path / "killed", random.Random(method), 0
    proc = ForkedTrain(f"hydra.run.dir={run_dir}", *overrides)
    for target in sorted(rng.randrange(max(1, events // 2)) for _ in range(3)):
        while written(run_dir) < target and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.0) * gap)
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        # a run is resumable once its record exists (written before Hydra's .hydra/, see cli.write_run_record)
        proc = ForkedTrain(f"resume={run_dir}") if (run_dir / "run.json").is_file() else \
            ForkedTrain(f"hydra.run.dir={run_dir}", *overrides)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    assert kills >= 1
    resumed = json.loads((run_dir / "metrics.json").read_text())
    assert without_timings(resumed) == without_timings(whole), f"after {kills} kills"
    assert contract_problems(run_dir) == []
    print(f"{method}: {kills} kills, metrics equal")


def test_a_kill_while_hydra_writes_its_record_resumes(tmp_path_factory, worker_id, tmp_path):
    """The moment of the kill test's one failure: killed as soon as .hydra/ appears, before Hydra has written
    overrides.yaml into it, `resume=` found no record and refused (or, killed during a resume's rewrite, read a
    record cut short). The run's own run.json is whole by then, so the resume ends as the uninterrupted run: finetune's
    trial (test_method_contract.py), whose arguments the killed run has."""
    overrides = trial_args("finetune", "task")
    whole = trial(tmp_path_factory, worker_id, "finetune", "task")["metrics"]
    run_dir = tmp_path / "killed"
    proc = ForkedTrain(f"hydra.run.dir={run_dir}", *overrides)
    while not (run_dir / ".hydra").is_dir():
        assert proc.poll() is None, "the run ended before .hydra/ appeared"
        time.sleep(0.0005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "checkpoints").exists()
    resumed = cl_bench("train", f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert without_timings(json.loads((run_dir / "metrics.json").read_text())) == without_timings(whole)
