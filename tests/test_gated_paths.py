"""scripts/gated_paths.py: gated's kernels frozen after each task (from events.jsonl) and its per-task task-aware
accuracy and task prediction after the last task, averaged per rung (hand values)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_run(run: Path, method: str, epochs: int, frozen: list[int], aware: list[float]) -> None:
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(f"method:\n  name: {method}\n  epochs: {epochs}\n")
    (run / "events.jsonl").write_text("\n".join(json.dumps({"event": "task_end", "task": t, "capacity": {
        "kernels_frozen": f}}) for t, f in enumerate(frozen)) + "\n")
    (run / "metrics.json").write_text(json.dumps({
        "method": method, "complete": True, "capacity": {"kernels_total": 160, "kernels_frozen": frozen[-1]},
        "task_aware_acc": [aware[:1], aware], "task_prediction_acc": [[1.0], [0.8, 0.6]]}))


def test_rungs_are_averaged_per_task_and_other_methods_left_out(tmp_path):
    write_run(tmp_path / "a", "gated", 10, [100, 150], [0.9, 0.6])
    write_run(tmp_path / "b", "gated", 10, [110, 152], [0.95, 0.7])
    write_run(tmp_path / "c", "gated", 2, [140, 160], [0.9, 0.5])
    write_run(tmp_path / "d", "er", 2, [0, 0], [1.0, 1.0])
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gated_paths.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[2] == "| 2 | 1 | 140.0, 160.0 | 90.0, 50.0 | 80.0, 60.0 |"
    assert out[3] == "| 10 | 2 | 105.0, 151.0 | 92.5, 65.0 | 80.0, 60.0 |"
