"""What a user reads of a run: tasks numbered from 0 everywhere (console, progress bar, train.log, the resume line,
as checkpoints/task_<ttt> and metrics.json's rows are), a progress bar that never shows `loss nan`, and the result
on stdout with the progress on stderr."""
import shutil
from types import SimpleNamespace

import pytest
from conftest import cl_bench

from cl_bench.recorders import ConsoleRecorder, resume_line


def started(num_tasks: int) -> ConsoleRecorder:
    """A console recorder at a run's start, its bar never drawn (stderr is no terminal under pytest)."""
    recorder = ConsoleRecorder()
    cfg = SimpleNamespace(method=SimpleNamespace(name="finetune"), dataset=SimpleNamespace(name="split_digits"),
                          backbone=SimpleNamespace(name="convnet"), scenario="task", setting=None)
    recorder.run_start(cfg, SimpleNamespace(num_tasks=num_tasks), "/tmp/run", 0)
    return recorder


def description(recorder: ConsoleRecorder) -> str:
    return recorder.progress.tasks[0].description


def test_the_bar_numbers_tasks_and_epochs_from_0_and_shows_no_loss_before_one_is_known():
    recorder = started(2)
    recorder.task_start(SimpleNamespace(id=0))
    recorder.epoch_start(0, 0, 2, steps=5)
    assert description(recorder) == "task 0 of 2 · epoch 0 of 2"  # was "task 1/2 · epoch 1/2 · loss nan"
    recorder.epoch_end(0, 0, 0.5)
    assert description(recorder) == "task 0 of 2 · epoch 0 of 2 · loss 0.5000"  # at once, not an epoch later
    recorder.epoch_start(0, 1, 2, steps=5)
    assert description(recorder) == "task 0 of 2 · epoch 1 of 2 · loss 0.5000"
    recorder.task_start(SimpleNamespace(id=1))
    recorder.epoch_start(1, 0, 2, steps=5)
    assert description(recorder) == "task 1 of 2 · epoch 0 of 2"  # task 0's loss is not task 1's
    recorder.close()


def test_the_resume_line_names_the_next_task_and_those_done_from_0():
    assert resume_line(1, 2) == "resuming at task 1 of 2 (task 0 done)"
    assert resume_line(3, 5) == "resuming at task 3 of 5 (tasks 0 to 2 done)"
    assert resume_line(2, 2) == "resuming with all 2 tasks done (tasks 0 to 1)"


def cut_after_task_0(run_dir):
    """run_dir as a run killed right after checkpointing task 0 (test_resume.stop_after, for a two-task run)."""
    shutil.rmtree(run_dir / "checkpoints" / "task_001")
    (run_dir / "checkpoints" / "last").write_text("task_000")
    (run_dir / "metrics.json").unlink()


@pytest.mark.slow
def test_a_runs_console_train_log_and_resume_line_agree_and_its_result_goes_to_stdout(tmp_path):
    run = tmp_path / "run"
    proc = cl_bench("train", "debug=fast", f"hydra.run.dir={run}", "checkpoint.enabled=true", "checkpoint.keep=all")
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = (run / "train.log").read_text()
    for text in (proc.stderr, log):
        assert "task 0: acc" in text and "task 1: acc" in text
        assert "task 2" not in text
    # stdout: the table (its rows and columns numbered as metrics.json's) and the summary; stderr: the progress
    assert "accuracy after each task" in proc.stdout and "T0" in proc.stdout and "T2" not in proc.stdout
    assert "avg_acc (RA)" in proc.stdout and f"run directory: {run}" in proc.stdout
    assert "task 0: acc" not in proc.stdout and "cl-bench finetune on split_digits" in proc.stderr
    assert "accuracy after each task" not in proc.stderr and "avg_acc (RA)" not in proc.stderr

    cut_after_task_0(run)
    resumed = cl_bench("train", f"resume={run}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    log = (run / "train.log").read_text()[len(log):]  # the resume's part
    for text in (resumed.stderr, log):
        assert "resuming at task 1 of 2 (task 0 done)" in text
        assert "task 1: acc" in text and "task 0: acc" not in text and "task 2" not in text
    assert "accuracy after each task" in resumed.stdout
