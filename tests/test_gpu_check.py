"""scripts/gpu_check.sh, the prepared GPU run, on the CPU at tiny sizes (--cpu): it prepares CIFAR-10 from an
archive written here, runs every method through its multiruns and writes the table; its sanity check; and its
refusal, without --cpu, of a machine where CUDA is not usable."""
import io
import json
import pickle
import subprocess
import sys
import tarfile
import time

import numpy as np
import pytest
import torch
from conftest import ROOT

from cl_bench.methods import METHODS

sys.path.insert(0, str(ROOT / "scripts"))
import bench  # noqa: E402


def cifar_archive(path, per_class_train: int, per_class_test: int) -> None:
    """cifar-10-python.tar.gz in the official layout, random pixels (the check runs the path, not the figures)."""
    rng = np.random.default_rng(0)

    def images(per_class):
        y = np.repeat(np.arange(10), per_class)
        return rng.integers(0, 256, (len(y), 3 * 32 * 32), dtype=np.uint8), y

    x, y = images(per_class_train)
    splits = {f"data_batch_{i + 1}": (x[part], y[part]) for i, part in enumerate(np.array_split(np.arange(len(y)), 5))}
    splits["test_batch"] = images(per_class_test)
    with tarfile.open(path, "w:gz") as tar:
        for name, (x, y) in splits.items():
            blob = pickle.dumps({b"data": x, b"labels": y.tolist()})
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))


@pytest.mark.slow  # whole runs: `make test-fast` leaves them out
def test_gpu_check_on_the_cpu_runs_every_method_under_debug_fast(tmp_path):
    """--cpu is debug=fast (two tasks of one batch each, one epoch, no checkpoints): this is also the one test
    that runs every method that way, in seconds each."""
    cifar_archive(tmp_path / "cifar-10-python.tar.gz", per_class_train=40, per_class_test=20)
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", str(tmp_path / "cifar-10-python.tar.gz"), "--cpu",
                           "--docs", str(tmp_path / "docs"), "--runs", str(tmp_path / "runs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "docs" / "benchmarks.json").read_text())["gpu"]
    assert {key.split("/")[0] for key in result["runs"]} == set(METHODS)
    assert result["flagged"] == [] and all(r["samples_per_s"] > 0 for r in result["runs"].values())
    table = (tmp_path / "docs" / "benchmarks.md").read_text()
    assert "## GPU check" in table and all(f"| {name} |" in table for name in METHODS)
    jobs = {json.loads(f.read_text())["method"]: f.parent for f in (tmp_path / "runs").glob("*/*/metrics.json")}
    assert set(jobs) == set(METHODS)
    for name, job in jobs.items():
        metrics = json.loads((job / "metrics.json").read_text())
        assert metrics["complete"] and len(metrics["acc"]) == 2 and not (job / "checkpoints").exists(), name
        assert metrics["time_s"] < 60, name  # seconds, not minutes: a generous bound for a loaded CPU
    events = [json.loads(line) for line in (jobs["finetune"] / "events.jsonl").read_text().splitlines()]
    assert [(e["task"], e["epoch"]) for e in events if e["event"] == "epoch_end"] == [(0, 0), (1, 0)]


def test_gpu_check_refuses_a_missing_source_in_one_line(tmp_path):
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", str(tmp_path / "nothing")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "does not exist" in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a usable GPU: the script would run the whole check")
def test_gpu_check_refuses_a_machine_without_cuda_in_one_line_writing_nothing(tmp_path):
    """Without --cpu, where CUDA is not usable: a non-zero exit in seconds (torch's import), one line naming the
    problem, before any data is prepared or any table written (here or in the repository's docs/)."""
    cifar_archive(tmp_path / "cifar-10-python.tar.gz", per_class_train=1, per_class_test=1)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "benchmarks.json").write_text('{"gpu": "earlier"}')
    repo_docs = {p: p.read_bytes() for p in (ROOT / "docs").glob("benchmarks.*")}
    start = time.monotonic()
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", str(tmp_path / "cifar-10-python.tar.gz"), "--docs",
                           str(docs), "--runs", str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert time.monotonic() - start < 30  # seconds (2 here), not the minutes of preparing and running
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("gpu_check: CUDA is not usable here (")
    assert "torch.cuda.is_available() is False" in proc.stderr and "--cpu" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar-10-python.tar.gz", "docs"]
    assert [p.name for p in docs.iterdir()] == ["benchmarks.json"]
    assert (docs / "benchmarks.json").read_text() == '{"gpu": "earlier"}'
    assert {p: p.read_bytes() for p in (ROOT / "docs").glob("benchmarks.*")} == repo_docs


def test_the_sanity_check_flags_nan_incomplete_and_chance_runs():
    def run(final, complete=True):
        return {"acc": [[0.9], final], "complete": complete}
    assert bench.gpu_sanity(run([0.9, 0.5]), "task", 0.02) is None
    assert "chance" in bench.gpu_sanity(run([0.5, 0.52]), "task", 0.02)  # mean 0.51: within the margin of 0.5
    assert "chance" in bench.gpu_sanity(run([0.1, 0.1]), "class", 0.02)
    assert bench.gpu_sanity(run([float("nan"), 0.9]), "class", 0.02) == "incomplete or NaN"
    assert bench.gpu_sanity(run([0.9, 0.9], complete=False), "class", 0.02) == "incomplete or NaN"
