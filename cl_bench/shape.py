"""debug=shape: a setting at its real shape (the full network, every task, every phase, memories and checkpoints as
configured) with every training phase cut to one epoch of one batch, so that what the setting costs is measured in
minutes on a CPU: peak host and device memory, the bytes of the method's state (and of any state it keeps on disk
beside it), of every checkpoint written and kept, and the seconds of each phase. Recorded in metrics.json's
`shape` section and printed after each task.

Loop.fit (methods/loop.py) caps its epochs and batches through Shape; loops a method runs itself (the online
stream, BiC's bias correction, EWC's Fisher, MAS's importance) go through the same Loop helpers, so no method tests
for the mode."""
import contextlib
import itertools
import resource
import time
from pathlib import Path

import torch


class Shape:
    """Each phase's cap, and the measurements of the run so far."""

    epochs = 1  # epochs of every training phase
    batches = 1  # batches of every epoch

    def __init__(self, device: torch.device):
        self.device = device
        self.tasks: list[dict] = []  # one entry per task learned in this process: its phases, times and sizes
        self.checkpoints: dict[int, int] = {}  # task -> bytes of its checkpoint as written

    def cap_epochs(self, epochs: int) -> int:
        return min(epochs, self.epochs)

    def cap_batches(self, batches):
        return itertools.islice(batches, self.batches)

    def cap_steps(self, steps: int) -> int:
        return min(steps, self.batches)

    def task_start(self, task_id: int) -> None:
        self.tasks.append({"id": task_id, "phases": []})

    @contextlib.contextmanager
    def phase(self, name: str):
        """Times one phase of the current task and notes the memory high-water marks at its end."""
        start = time.perf_counter()
        yield
        self.tasks[-1]["phases"].append({"name": name, "s": round(time.perf_counter() - start, 4),
                                         "peak_rss_mb": peak_rss_mb(), "peak_device_mb": self.peak_device_mb()})

    def task_timed(self, **seconds: float) -> None:
        """learn_s, eval_s, checkpoint_s of the current task."""
        self.tasks[-1].update({k: round(v, 4) for k, v in seconds.items()})

    def checkpoint_written(self, task_id: int, path: Path) -> None:
        self.checkpoints[task_id] = directory_bytes(path)

    def peak_device_mb(self) -> float | None:
        if self.device.type != "cuda":
            return None
        return round(torch.cuda.max_memory_allocated(self.device) / 2**20, 1)

    def section(self, method, run_dir: Path) -> dict:
        """metrics.json's `shape` section."""
        written = [self.checkpoints[t] for t in sorted(self.checkpoints)]
        return {
            "phase_cap": {"epochs": self.epochs, "batches": self.batches},
            "peak_rss_mb": peak_rss_mb(),
            "peak_device_mb": self.peak_device_mb(),
            "network_bytes": tensor_bytes(method.backbone.state_dict()),
            "state_bytes": tensor_bytes(method.state_dict()),
            "side_state_bytes": directory_bytes(run_dir / "side"),
            "checkpoint_bytes_per_task": written,
            "checkpoint_bytes_written": sum(written),
            "checkpoint_bytes_kept": directory_bytes(run_dir / "checkpoints"),
            "tasks": self.tasks,
        }


def peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def tensor_bytes(state: dict) -> int:
    return sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))


def directory_bytes(path: Path) -> int:
    path = Path(path)
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def summary(section: dict, task_id: int | None = None) -> str:
    """One console line: the task's phases (or, at the end, the run's totals) and the sizes."""
    mb = lambda n: f"{n / 2**20:.1f} MB"  # noqa: E731
    device = section["peak_device_mb"]
    sizes = (f"peak RSS {section['peak_rss_mb']:.0f} MB" + ("" if device is None else f", device {device:.0f} MB")
             + f"; state {mb(section['state_bytes'])}, side {mb(section['side_state_bytes'])}, checkpoints "
             f"kept {mb(section['checkpoint_bytes_kept'])} of {mb(section['checkpoint_bytes_written'])} written")
    if task_id is None:
        return "shape: " + sizes
    task = next((t for t in section["tasks"] if t["id"] == task_id), None)
    if task is None:
        return "shape: " + sizes
    phases = ", ".join(f"{p['name']} {p['s']:.2f}s" for p in task["phases"])
    return f"shape, task {task_id}: {len(task['phases'])} phases ({phases}); " + sizes
