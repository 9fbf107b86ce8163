"""Resume: a run stopped after task 2 of 5 and resumed ends exactly like one never interrupted."""
import json
import shutil

import pytest
from conftest import cl_bench, contract_problems, train
from test_method_contract import trial

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

TIMINGS = ("time_s", "peak_mem_mb")


def stop_after(run_dir, task_id):
    """Leave run_dir as a run killed right after checkpointing task_id: later checkpoints and the final
    metrics.json gone, checkpoints/last naming task_id."""
    for later in (run_dir / "checkpoints").glob("task_*"):
        if int(later.name.split("_")[1]) > task_id:
            shutil.rmtree(later)
    (run_dir / "checkpoints" / "last").write_text(f"task_{task_id:03d}")
    (run_dir / "metrics.json").unlink()


def without_timings(metrics):
    return {k: v for k, v in metrics.items() if k not in TIMINGS}


@pytest.mark.parametrize("method", ["er", "independent", "joint"])
def test_resumed_run_equals_uninterrupted_run(tmp_path_factory, worker_id, tmp_path, method):
    """The uninterrupted run is the method's trial (test_method_contract.py), cut after its first task."""
    run = trial(tmp_path_factory, worker_id, method, "task")
    whole = run["metrics"]
    shutil.copytree(run["run_dir"], tmp_path / "cut")
    stop_after(tmp_path / "cut", 0)
    proc = cl_bench("train", f"resume={tmp_path / 'cut'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    resumed = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    assert without_timings(resumed) == without_timings(whole)
    assert contract_problems(tmp_path / "cut") == []


def test_resume_without_checkpoints_starts_from_the_beginning(tmp_path_factory, worker_id, tmp_path):
    """A copy of finetune's trial without its checkpoints and metrics.json."""
    run = trial(tmp_path_factory, worker_id, "finetune", "task")
    whole = run["metrics"]
    shutil.copytree(run["run_dir"], tmp_path / "whole")
    shutil.rmtree(tmp_path / "whole" / "checkpoints")
    (tmp_path / "whole" / "metrics.json").unlink()
    proc = cl_bench("train", f"resume={tmp_path / 'whole'}", "logger=none")
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads((tmp_path / "whole" / "metrics.json").read_text())
    assert without_timings(again) == without_timings(whole)


def test_resume_of_a_directory_that_is_no_run_is_a_clear_error(tmp_path):
    proc = cl_bench("train", f"resume={tmp_path}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("cl-bench: error: resume=") and "run.json not found" in proc.stderr


def test_a_resume_reads_the_runs_own_record_not_hydras(tmp_path):
    """Hydra rewrites .hydra/ in place on every resume: a kill there leaves its overrides.yaml cut short (here: to
    its first line) and config.yaml empty. The resume composes from run.json and still ends as the whole run."""
    args = ["method=finetune", "method.epochs=1", "scenario=class", "dataset.num_tasks=3"]
    whole = train(tmp_path / "whole", *args)
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")
    stop_after(tmp_path / "cut", 0)
    hydra = tmp_path / "cut" / ".hydra"
    (hydra / "overrides.yaml").write_text((hydra / "overrides.yaml").read_text().splitlines()[0] + "\n")
    (hydra / "config.yaml").write_text("")
    proc = cl_bench("train", f"resume={tmp_path / 'cut'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert without_timings(json.loads((tmp_path / "cut" / "metrics.json").read_text())) == without_timings(whole)


@pytest.mark.parametrize("name", [None, "task_000"])
def test_a_run_whose_every_checkpoint_is_damaged_is_one_line(tmp_path, name):
    """What `cl-bench eval` restores: each damaged checkpoint named, none taken for the run's state."""
    from cl_bench import config
    from cl_bench import train as train_module
    from cl_bench.errors import UserError
    config.register()
    for task in ("task_000", "task_001"):
        (tmp_path / "checkpoints" / task).mkdir(parents=True)
        (tmp_path / "checkpoints" / task / "meta.json").write_text("{cut short")
    named = f"{name} " if name else ""
    with pytest.raises(UserError, match=rf"^no valid checkpoint {named}in {tmp_path}/checkpoints \(.*task_00"
                                        r"\d is unreadable \(JSONDecodeError: [^\n]*\)$") as refused:
        train_module.restore(config.compose(["logger=none"]), tmp_path, name)
    assert str(refused.value).count("is unreadable") == (1 if name else 2)


def test_a_checkpoint_without_validation_accuracy_cannot_be_resumed(tmp_path):
    from cl_bench.errors import UserError
    from cl_bench.train import Results
    with pytest.raises(UserError, match=rf"^{tmp_path} was checkpointed by an older cl-bench that recorded no "
                                        r"validation accuracy: it cannot be resumed; start it again$"):
        Results.from_meta({"task_id": 0, "acc": [[0.9]]}, tmp_path)
    assert Results.from_meta({"task_id": 0, "acc": [[0.9]], "val_acc": [[0.8]]}, tmp_path).val_acc == [[0.8]]
