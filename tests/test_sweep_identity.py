"""A sweep finds each job's run by its settings' identity (cl_bench/identity.py, rundirs.job_folder): re-run or grown
into its directory, it runs exactly the jobs whose settings have no run there, resumes the interrupted ones and
leaves every earlier run as it was. A resume keeps the run's record: a complete run is left untouched, and a change
of what the run learns is refused."""
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import cl_bench, files, forked, once_per_session, sweep_summary, train
from hypothesis import given, settings
from hypothesis import strategies as st

from cl_bench import report, rundirs

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

QUICK = ["debug=fast", "logger=none", "hardware.threads=1"]
KEPT = ["checkpoint.enabled=true", "checkpoint.keep=all"]  # debug=fast writes none; an interrupted run needs them


def sweep(sweep_dir, *overrides, fresh=False, code=0):
    """`cl-bench train -m` into sweep_dir, forked from the test's server (the basic launcher needs no exit
    handlers), or with fresh=True in a fresh interpreter (joblib, Optuna)."""
    args = ["train", "-m", *QUICK, f"hydra.sweep.dir={sweep_dir}", *overrides]
    if fresh:
        proc = cl_bench(*args)
    else:
        proc = forked(args, {**os.environ, "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "0"}, None, 600)
    assert proc.returncode == code, proc.stderr[-3000:]
    return proc


def jobs(sweep_dir: Path) -> dict[str, Path]:
    """The sweep's job folders by name."""
    return {p.name: p for p in sorted(sweep_dir.iterdir()) if p.is_dir() and p.name.isdigit()}


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def lrs(sweep_dir: Path) -> dict[str, float]:
    """Each job folder's method.lr, as its run.json records it."""
    return {name: record(job)["settings"]["method.lr"] for name, job in jobs(sweep_dir).items()}


def stop_after_first_task(run_dir: Path) -> None:
    """Leave run_dir as a run killed right after checkpointing its first task (of debug=fast's two)."""
    shutil.rmtree(run_dir / "checkpoints" / "task_001")
    (run_dir / "checkpoints" / "last").write_text("task_000")
    (run_dir / "metrics.json").unlink()


# One folder grown sweep by sweep, the steps in order (issue 74: the tests below read its steps, where each ran its
# own first sweep before): other values, a changed value, more seeds, then an interrupted job asked for again. Every
# job keeps its checkpoints (checkpoint.* is no part of a run's identity) so that the last step can interrupt one.
GROWN = [("method.lr=0.01,0.05",), ("method.lr=0.1,0.2",), ("method.lr=0.01,0.3",), ("method.lr=0.01,0.05", "seed=0,1")]


def grow_one_sweep(sweep_dir: Path) -> dict:
    """GROWN's sweeps into sweep_dir, then job 0 interrupted and a sweep asking for its setting again: what each
    step printed and left (every job's files, lr and metrics), as JSON."""
    steps = []
    for overrides in GROWN:
        proc = sweep(sweep_dir, *KEPT, *overrides)
        steps.append({"stderr": proc.stderr, "files": {name: files(job) for name, job in jobs(sweep_dir).items()},
                      "lrs": lrs(sweep_dir), "metrics": {name: metrics(job) for name, job in jobs(sweep_dir).items()}})
    runs = report.find_runs([sweep_dir])
    rows = report.summarise(runs, report.grouping_keys(runs))
    whole = metrics(sweep_dir / "0")
    stop_after_first_task(sweep_dir / "0")
    hydra_record, original = files(sweep_dir / "0" / ".hydra"), record(sweep_dir / "0")
    proc = sweep(sweep_dir, *KEPT, "method.lr=0.1,0.01")  # job 0 is lr 0.1 now, complete in folder 2; lr 0.01 is job 1
    resumed = sweep_dir / "0"
    starts = [json.loads(line)["task"] for line in (resumed / "events.jsonl").read_text().splitlines()
              if json.loads(line)["event"] == "task_start"]
    return {"dir": str(sweep_dir), "steps": steps, "report_seeds": sorted(row["seeds"] for row in rows),
            "interrupted": {"stderr": proc.stderr, "lrs": lrs(sweep_dir), "whole": whole, "metrics": metrics(resumed),
                            "starts": starts, "hydra_before": hydra_record, "hydra_after": files(resumed / ".hydra"),
                            "record_before": original, "record_after": record(resumed)}}


@pytest.fixture
def grown(tmp_path_factory, worker_id) -> dict:
    """grow_one_sweep's steps, once in the session (as JSON: file records as lists)."""
    return once_per_session(tmp_path_factory, worker_id, "grown_sweep", grow_one_sweep)


def test_a_sweep_rerun_with_other_values_runs_them_and_leaves_the_earlier_runs(grown):
    """The issue's commands: before, both new jobs printed `D/0 is complete, skipped` and no run of 0.1 or 0.2
    existed."""
    first, second = grown["steps"][:2]
    assert sweep_summary(grown["dir"], 2, 2, 0) in first["stderr"]
    assert "skipped" not in second["stderr"].replace("skipped as complete", "")
    assert second["stderr"].strip().splitlines()[-1] == sweep_summary(grown["dir"], 2, 2, 0)
    assert second["lrs"] == {"0": 0.01, "1": 0.05, "2": 0.1, "3": 0.2}
    assert all(m["complete"] for m in second["metrics"].values())
    assert {name: second["files"][name] for name in first["files"]} == first["files"]  # .hydra/ and logs too


def test_a_changed_value_runs_as_a_new_job_beside_the_old_ones(grown):
    before, changed = grown["steps"][1:3]
    assert changed["stderr"].count("is complete, skipped") == 1 and f"{grown['dir']}/0 is complete" in changed["stderr"]
    assert changed["stderr"].strip().splitlines()[-1] == sweep_summary(grown["dir"], 2, 1, 1)
    assert changed["lrs"] == {"0": 0.01, "1": 0.05, "2": 0.1, "3": 0.2, "4": 0.3}
    assert {name: changed["files"][name] for name in before["files"]} == before["files"]


def test_growing_a_sweeps_seeds_runs_the_new_seeds_alone(grown):
    """The first sweeps named no seed: their runs are seed 0's (the default), which the grown sweep names."""
    before, grown_ = grown["steps"][2:4]
    assert grown_["stderr"].count("is complete, skipped") == 2
    assert grown_["stderr"].strip().splitlines()[-1] == sweep_summary(grown["dir"], 4, 2, 2)
    runs = sorted((grown_["lrs"][name], m["seed"]) for name, m in grown_["metrics"].items())
    assert runs == [(0.01, 0), (0.01, 1), (0.05, 0), (0.05, 1), (0.1, 0), (0.2, 0), (0.3, 0)]
    assert {name: grown_["files"][name] for name in before["files"]} == before["files"]


def test_the_report_groups_a_grown_sweeps_runs_by_their_settings_less_the_seed(grown):
    """Rows are the distinct settings without the seed (five lrs); n, the distinct seeds of each."""
    assert grown["report_seeds"] == [1, 1, 1, 2, 2]


def test_an_interrupted_job_is_resumed_by_its_own_settings_and_no_other_job_takes_its_folder(grown):
    """Before, a job resumed whatever unfinished run its number's folder held, under its own overrides: here job 0,
    lr 0.1, whose complete run is in folder 2."""
    run = grown["interrupted"]
    assert run["stderr"].strip().splitlines()[-1] == sweep_summary(grown["dir"], 2, 1, 1)
    assert f"{grown['dir']}/2 is complete" in run["stderr"]
    assert run["lrs"] == grown["steps"][-1]["lrs"]  # no new folder
    assert run["starts"] == [0, 1, 1]  # its second task learned again, from its first task's checkpoint
    assert run["metrics"]["complete"] and run["metrics"]["acc"] == run["whole"]["acc"]
    assert run["hydra_after"] == run["hydra_before"]  # Hydra's record of the run stays as it was
    after, original = run["record_after"], run["record_before"]
    assert {k: v for k, v in after.items() if k != "resumes"} == original  # the run's own record stays
    [resume] = after["resumes"]
    assert sorted(resume["overrides"]) == sorted(original["overrides"])  # the job's own overrides, noted beside


@pytest.fixture
def finished(tmp_path_factory, worker_id, tmp_path):
    """A complete debug=fast run of lr 0.01 with both tasks' checkpoints, run once in the session."""
    def compute(folder):
        train(folder / "run", *QUICK, "checkpoint.enabled=true", "method.lr=0.01")
        return str(folder / "run")
    run_dir = tmp_path / "run"
    shutil.copytree(once_per_session(tmp_path_factory, worker_id, "finished_fast_run", compute), run_dir)
    return run_dir


def test_a_folder_holding_a_run_of_other_settings_is_refused_before_anything_is_written(finished):
    """A hydra.sweep.subdir of the user's can give two jobs one folder: the second is refused in one line. The run
    there is the finished one (lr 0.01), as a first job would have left it."""
    sweep_dir = finished.parent
    shared = finished.rename(sweep_dir / "shared")
    before = files(shared)
    proc = sweep(sweep_dir, "method.lr=0.05", "hydra.sweep.subdir=shared", code=2)
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"cl-bench: error: job 0 (debug=fast logger=none hardware.threads=1 method.lr=0.05) "
                           f"would run in {shared}, which holds a run of other settings (method.lr 0.01 -> "
                           "0.05): give each job a folder of its own")
    assert files(shared) == before


def test_a_new_run_into_a_folder_holding_an_interrupted_one_is_refused(finished):
    stop_after_first_task(finished)
    before = files(finished)
    proc = cl_bench("train", f"hydra.run.dir={finished}", *QUICK)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (f"cl-bench: error: {finished} already holds a run: continue it with "
                                   f"resume={finished}, or choose another hydra.run.dir")
    assert files(finished) == before


def test_resuming_a_complete_run_changes_nothing(finished):
    before = files(finished)
    proc = cl_bench("train", f"resume={finished}", "method.lr=0.5")
    assert proc.returncode == 0, proc.stderr
    assert f"{finished} is complete: nothing to resume, nothing changed" in proc.stderr
    assert files(finished) == before


def test_a_resume_that_would_change_what_the_run_learns_is_refused(finished):
    stop_after_first_task(finished)
    before = files(finished)
    proc = cl_bench("train", f"resume={finished}", "method.lr=0.5")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"cl-bench: error: resume={finished} with method.lr=0.5 would change what the run learns "
                           "(method.lr 0.01 -> 0.5): resume it without them, or start a new run")
    assert f"init_from={finished} " in line
    assert files(finished) == before


def test_a_resume_on_other_hardware_settings_is_recorded_beside_the_runs_own(finished):
    whole = metrics(finished)
    original = record(finished)
    stop_after_first_task(finished)
    hydra_record = files(finished / ".hydra")
    proc = cl_bench("train", f"resume={finished}", "hardware.threads=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert metrics(finished)["acc"] == whole["acc"]
    after = record(finished)
    assert {k: v for k, v in after.items() if k != "resumes"} == original
    [resume] = after["resumes"]
    assert resume["overrides"] == ["hardware.threads=2"] and resume["started"][:2] == "20"
    assert files(finished / ".hydra") == hydra_record


# Property: random sequences of small sweeps into one folder.
LRS = (0.01, 0.05, 0.1)
SWEEPS = st.lists(st.tuples(st.lists(st.sampled_from(LRS), min_size=1, max_size=2, unique=True),
                            st.lists(st.sampled_from((0, 1)), min_size=1, max_size=2, unique=True),
                            st.booleans()),  # interrupt one of the sweep's runs afterwards
                  min_size=2, max_size=3)


def state(sweep_dir: Path) -> dict:
    """Each job folder's files (metrics.json, run.json, .hydra/), by digest."""
    return {name: {k: v[0] for k, v in files(job).items() if k in ("metrics.json", "run.json") or k[:6] == ".hydra"}
            for name, job in jobs(sweep_dir).items()}


def check_records(job: Path) -> tuple[float, int]:
    """A run's records agree: run.json's settings and identity, the config Hydra saved, the overrides it ran and
    its metrics.json; its (lr, seed)."""
    from cl_bench import identity, rundirs
    rec = record(job)
    assert rec["settings"] == rundirs.saved_settings(job / ".hydra" / "config.yaml")
    assert rec["identity"] == identity.identity(rec["settings"])
    lr, seed = rec["settings"]["method.lr"], rec["settings"]["seed"]
    assert f"method.lr={lr}" in rec["overrides"] and f"seed={seed}" in rec["overrides"]
    if (job / "metrics.json").is_file():
        assert metrics(job)["seed"] == seed
    return lr, seed


# Three sequences (about 12 runs; five took 20, issue 74): the fixed sequence of grow_one_sweep above shows each
# kind of step, and these draw others at random
@settings(max_examples=3, deadline=None)
@given(SWEEPS)
def test_any_sequence_of_sweeps_into_one_folder_runs_each_setting_once_and_keeps_every_run(tmp_path_factory,
                                                                                           sequence):
    """Values added, removed and changed, seeds grown, a run interrupted and asked for again (or not)."""
    sweep_dir = tmp_path_factory.mktemp("sequence")
    interrupted: dict[str, list] = {}  # folder -> its accuracy matrix when it was whole
    for values, seeds, interrupt in sequence:
        before = state(sweep_dir)
        sweep(sweep_dir, *KEPT, f"method.lr={','.join(map(str, values))}", f"seed={','.join(map(str, seeds))}")
        requested = {(lr, seed) for lr in values for seed in seeds}
        found = {}
        for name, job in jobs(sweep_dir).items():
            found.setdefault(check_records(job), []).append(name)
        assert all(len(names) == 1 for names in found.values()), found  # one folder per distinct setting
        assert requested <= set(found)
        for (lr, seed), [name] in found.items():
            job = jobs(sweep_dir)[name]
            if name in interrupted and (lr, seed) in requested:  # resumed, and ends as if never interrupted
                assert metrics(job)["acc"] == interrupted.pop(name)
            elif name in before:  # complete before (skipped if asked for), or interrupted and not asked for
                assert state(sweep_dir)[name] == before[name]
            if (lr, seed) in requested:
                assert metrics(job)["complete"]
        # the report: a row per distinct lr among the complete runs, n its distinct seeds
        complete = [setting for setting, [name] in found.items() if rundirs.is_complete(jobs(sweep_dir)[name])]
        runs = report.find_runs([sweep_dir])
        rows = report.summarise(runs, report.grouping_keys(runs))
        assert sorted(row["seeds"] for row in rows) == sorted(Counter(lr for lr, _ in complete).values())
        if interrupt:
            name = found[min(requested)][0]
            interrupted[name] = metrics(jobs(sweep_dir)[name])["acc"]
            stop_after_first_task(jobs(sweep_dir)[name])


def test_a_saved_config_a_kill_cut_short_is_no_run_of_any_settings(tmp_path):
    """A job killed while Hydra wrote .hydra/config.yaml (in place) leaves it cut mid-line: a sweep re-run finds no
    run there (and claims another folder), rather than failing on the YAML."""
    job = tmp_path / "sweep" / "0" / ".hydra"
    job.mkdir(parents=True)
    (job / "config.yaml").write_text("method:\n  name: ewc\n  lr: 0.1\n  momen")
    assert rundirs.saved_settings(job / "config.yaml") is None
    assert rundirs.same_run(tmp_path / "sweep", "any identity") is None


def test_a_saved_paper_value_for_a_memory_size_it_lacks_reads_as_written(tmp_path):
    table = "${by_memory_size:{200: 0.01, 500: 0.1}}"
    path = tmp_path / "config.yaml"
    for size, lr in ((500, 0.1), (300, table)):  # 300: the resolver refuses it, the value stays as written
        path.write_text(f"method:\n  name: er\n  memory_size: {size}\n  lr: '{table}'\n")
        found = rundirs.saved_settings(path)
        assert (found["method.memory_size"], found["method.lr"]) == (size, lr)


def test_a_single_runs_resolved_config_names_no_job_folder(tmp_path):
    proc = cl_bench("train", "--cfg", "all", "--resolve", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert proc.returncode == 0, proc.stderr
    assert "    subdir: '0'\n" in proc.stdout and "lr: " in proc.stdout
    assert not (tmp_path / "sweep").exists()  # nothing claimed


def test_a_later_task_of_a_job_gives_up_when_the_first_claims_no_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(rundirs, "FOLLOWER_WAIT_S", 0.2)
    with pytest.raises(TimeoutError, match=f"the first task of this job claimed no folder in {tmp_path} within 0.2 s"):
        rundirs.follow(tmp_path, "an identity no run has")
