"""A run that the file system stops (a full disk, a read-only folder) ends in one line with what to do, exit 2, its
temporary files removed, its earlier checkpoints intact and its folder marked FAILED; a resume once fixed completes
it. The file systems are tmpfs mounts of a set size, which need root."""
import json
import subprocess
from pathlib import Path

import pytest
from conftest import cl_bench

from cl_bench import checkpoint, failures

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out
RUN = ["logger=none", "dataset.num_tasks=2", "method.epochs=1"]


def mount(folder: Path, options: str) -> None:
    folder.mkdir(exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"a tmpfs of a set size needs mount, which is not permitted here (root or CAP_SYS_ADMIN): "
                    f"{proc.stderr.strip() or proc.returncode}")


@pytest.fixture
def disk(tmp_path):
    """A folder to mount a tmpfs on, unmounted after the test."""
    folder = tmp_path / "disk"
    yield folder
    if folder.is_dir() and folder.is_mount():
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture(scope="module")
def one_task_bytes(tmp_path_factory) -> tuple[int, int]:
    """(a one-task run's folder, its checkpoint) in bytes, measured: the disk is sized from them."""
    run = tmp_path_factory.mktemp("measure") / "run"
    assert cl_bench("train", f"hydra.run.dir={run}", "logger=none", "dataset.num_tasks=1",
                    "method.epochs=1").returncode == 0

    def size(folder: Path) -> int:
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return size(run), size(run / "checkpoints" / "task_000")


def fill_at_second_checkpoint(disk: Path, sizes: tuple[int, int]):
    """A two-task run on a disk with room for the first task's checkpoint and half the second's."""
    folder, ckpt = sizes
    mount(disk, f"size={(folder + ckpt // 2) // 1024 + 16}k")
    return cl_bench("train", f"hydra.run.dir={disk / 'run'}", *RUN)


def assert_one_line(proc, starts: str) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cl-bench: error: {starts}"), proc.stderr[-2000:]
    return lines[0]


def assert_first_task_intact(run: Path) -> None:
    assert not [p for p in run.rglob("*") if ".tmp" in p.name], "temporary files left behind"
    state, _, meta, problems = checkpoint.load(run)
    assert state is not None and meta["task_id"] == 0 and problems == []


def test_a_full_disk_during_a_checkpoint_is_one_line_and_a_resume_completes_the_run(disk, one_task_bytes, tmp_path):
    proc = fill_at_second_checkpoint(disk, one_task_bytes)
    run = disk / "run"
    line = assert_one_line(proc, "no space left on the device")
    assert line.endswith(f"free space there, then continue it with cl-bench train resume={run}")
    assert_first_task_intact(run)
    assert (run / failures.MARK).read_text().strip() == line.removeprefix("cl-bench: error: ")
    report = cl_bench("report", str(run), "--no-plots", "--out", str(tmp_path / "report"))
    assert report.returncode == 2 and "no complete run" in report.stderr  # the failed run is not counted

    subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)  # space freed
    resumed = cl_bench("train", f"resume={run}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((run / "metrics.json").read_text())["complete"] and not (run / failures.MARK).exists()


def test_a_read_only_run_folder_is_one_line(disk):
    mount(disk, "size=64k,ro")
    proc = cl_bench("train", f"hydra.run.dir={disk / 'run'}", *RUN)
    line = assert_one_line(proc, "the file system is read-only")
    assert "choose another hydra.run.dir" in line and not (disk / "run").exists()


def test_resuming_into_a_folder_made_read_only_is_one_line_and_damages_nothing(disk, one_task_bytes):
    fill_at_second_checkpoint(disk, one_task_bytes)
    run = disk / "run"
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    line = assert_one_line(cl_bench("train", f"resume={run}"), "the file system is read-only")
    assert line.endswith(f"make it writable, then continue it with cl-bench train resume={run}")
    assert_first_task_intact(run)


def test_a_failure_without_an_errno_still_reads_as_one_line(tmp_path):
    """A DataLoader worker's error arrives re-raised with the worker's traceback as its text, and no errno."""
    error = FileNotFoundError("Caught FileNotFoundError in DataLoader worker process 0.\nOriginal Traceback (most "
                              "recent call last):\n  File \"x.py\", line 1\nFileNotFoundError: [Errno 2] No such file "
                              "or directory: '/data/prepared/x/train.u8'")
    line = failures.describe(error, tmp_path)
    assert "\n" not in line and line.startswith("no such file or folder")
    assert "/data/prepared/x/train.u8" in line and f"resume={tmp_path}" in line


def test_evaluating_a_pruned_checkpoint_says_it_was_written_and_pruned(tmp_path):
    run = tmp_path / "run"
    assert cl_bench("train", f"hydra.run.dir={run}", "logger=none", "dataset.num_tasks=3", "method.epochs=1",
                    "checkpoint.keep=2").returncode == 0
    line = assert_one_line(cl_bench("eval", str(run), "--checkpoint", "task_000"), "task_000 was written, then pruned")
    assert "checkpoint.keep=2" in line and "task_001, task_002" in line and "checkpoint.keep=all" in line
    assert "was not written" in assert_one_line(cl_bench("eval", str(run), "--checkpoint", "task_007"), "task_007")
    assert cl_bench("eval", str(run), "--checkpoint", "task_001").returncode == 0


def test_a_user_error_after_the_run_folder_was_made_marks_it_failed(tmp_path):
    run = tmp_path / "run"
    proc = cl_bench("train", f"hydra.run.dir={run}", "logger=none", "dataset=split_mnist",
                    f"data.root={tmp_path / 'empty'}")
    line = assert_one_line(proc, "mnist needs the MNIST files")
    assert (run / failures.MARK).read_text().strip() == line.removeprefix("cl-bench: error: ")


@pytest.mark.parametrize("code, what, fix", [
    (28, "no space left on the device", "free space there"), (30, "the file system is read-only", "make it writable"),
    (13, "permission denied", "give this user access to it"), (2, "no such file or folder", "put it back")])
def test_each_failure_says_what_happened_and_what_to_do(tmp_path, code, what, fix):
    import os
    error = OSError(code, os.strerror(code), str(tmp_path / "data" / "train.u8"))
    during = failures.describe(error, tmp_path / "run")
    assert during.startswith(what) and "\n" not in during
    assert during.endswith(f"{fix}, then continue it with cl-bench train resume={tmp_path / 'run'}")
    assert failures.describe(error, started=False).endswith(f"{fix}, or choose another hydra.run.dir")


def test_a_libraries_io_error_reads_as_the_os_error_it_reports(tmp_path):
    path = tmp_path / "state.safetensors"
    error = failures.as_os_error(RuntimeError("I/O error: No space left on device (os error 28)"), path)
    assert isinstance(error, OSError) and (error.errno, error.filename) == (28, str(path))
    assert failures.describe(error, tmp_path).startswith("no space left on the device")
    assert failures.as_os_error(RuntimeError("Error while deserializing header: header too small"), path) is None


def test_marking_failed_removes_only_this_processs_temporaries(tmp_path):
    import os
    mine = [tmp_path / f".meta.json.tmp{os.getpid()}", tmp_path / "checkpoints" / f".task_001.tmp{os.getpid()}"]
    mine[1].mkdir(parents=True)
    (mine[1] / "state.safetensors").write_bytes(b"half")
    mine[0].write_text("{")
    other = tmp_path / "checkpoints" / f".task_001.tmp{os.getpid() + 1}"  # another rank's, still writing
    other.mkdir()
    failures.mark(tmp_path, "no space left on the device")
    assert not any(p.exists() for p in mine) and other.is_dir()
    assert (tmp_path / failures.MARK).read_text() == "no space left on the device\n"


def test_a_folder_that_cannot_take_the_mark_is_left_as_it_is(tmp_path, caplog):
    gone = tmp_path / "removed meanwhile"
    failures.mark(gone, "no space left on the device")  # warns, never raises over the error being reported
    assert not gone.exists() and f"could not mark {gone} FAILED" in caplog.text
