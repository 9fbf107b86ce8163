"""ER's balanced memory (memory_policy=balanced, Avalanche's experience-balanced buffer): written at the end of
each task, an equal share per task seen, each share a random subset of its task; replay during a task draws from
earlier tasks only."""
import pytest
import torch
from conftest import cl_bench
from test_online import build

from cl_bench.methods.memory import Memory


def task_samples(task: int, n: int):
    """n samples whose pixel value is their index within the task, so that the memory's rows can be traced."""
    ids = torch.arange(n)
    return ids.to(torch.uint8).view(n, 1, 1, 1), ids % 3, torch.full((n,), task)


def stored(mem: Memory, task: int) -> list[int]:
    rows = mem.valid() & (mem.t == task)
    return mem.x[rows].flatten().tolist()


def test_each_task_keeps_an_equal_share_of_distinct_samples():
    mem = Memory(10, (1, 1, 1), 3, torch.device("cpu"), "balanced", num_tasks=3)
    g = torch.Generator().manual_seed(0)
    mem.add_task(*task_samples(0, 30), generator=g)
    first = stored(mem, 0)
    assert len(first) == 10 and len(set(first)) == 10
    mem.add_task(*task_samples(1, 30), generator=g)
    assert stored(mem, 0) == first[:5]  # shrunk to the new share, a subset of what it held
    assert len(set(stored(mem, 1))) == 5
    mem.add_task(*task_samples(2, 2), generator=g)  # fewer samples than its share of 3: all of them
    assert stored(mem, 0) == first[:3] and len(set(stored(mem, 1))) == 3 and sorted(stored(mem, 2)) == [0, 1]
    assert int(mem.valid().sum()) == 8
    x, _, t, _ = mem.sample(3000, g)
    counts = torch.bincount(t, minlength=3)
    assert counts.tolist() == pytest.approx([3000 * 3 / 8, 3000 * 3 / 8, 3000 * 2 / 8], rel=0.15)  # uniform
    assert all(v in stored(mem, 2) for v in x[t == 2].flatten().tolist())


def test_er_balanced_replays_only_earlier_tasks_and_ends_balanced():
    method, tasks = build("method=er", "method.memory_size=50", "method.memory_policy=balanced", "method.epochs=1")
    replayed = []
    sample = method.memory.sample

    def recording_sample(*args, **kwargs):
        out = sample(*args, **kwargs)
        replayed.append((current, out[2]))
        return out

    method.memory.sample = recording_sample
    for current, task in enumerate(tasks):
        method.learn(task)
        assert int(method.memory.tasks) == current + 1
    assert replayed and all((t < task).all() for task, t in replayed)
    share = 50 // len(tasks)
    assert torch.bincount(method.memory.t[method.memory.valid()]).tolist() == [share] * len(tasks)


def test_unknown_memory_policy_is_a_one_line_error():
    proc = cl_bench("train", "method=er", "method.memory_policy=fifo", "logger=none")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("cl-bench: error: Error merging override method.memory_policy=fifo; Invalid "
                                   "value 'fifo', expected one of [reservoir, balanced]")
