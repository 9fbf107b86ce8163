"""debug=profile leaves a profiler trace of task 0. (debug=fast runs every method in seconds: tested with the GPU
check's --cpu mode, which is debug=fast, in test_gpu_check.py.)"""
import json

import pytest
from conftest import train

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out


def test_debug_profile_writes_a_trace_of_task_0(tmp_path):
    run = tmp_path / "run"
    train(run, "debug=profile", "dataset.num_tasks=2", "method.epochs=1")
    trace = json.loads((run / "profile" / "task_000.json").read_text())
    assert any(e.get("name", "").startswith("aten::") for e in trace["traceEvents"])
    assert "Self CPU" in (run / "profile" / "task_000.txt").read_text()
    assert not (run / "profile" / "task_001.json").exists()
