"""ER's balanced memory (memory_policy=balanced, Avalanche's experience-balanced buffer): written at the end of
each task, an equal share per task seen, each share a random subset of its task; replay during a task draws from
earlier tasks only. iCaRL's herding memory and GDumb's greedy class-balanced memory, against hand examples and a
one-sample-at-a-time reference of the greedy rule."""
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import cl_bench
from test_online import build

from cl_bench.methods.memory import Memory, herd


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


@pytest.mark.slow
def test_unknown_memory_policy_is_a_one_line_error():
    proc = cl_bench("train", "method=er", "method.memory_policy=fifo", "logger=none")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("cl-bench: error: Error merging override method.memory_policy=fifo; Invalid "
                                   "value 'fifo', expected one of [reservoir, balanced]")


# --- herding (iCaRL) and greedy (GDumb): class-balanced memories --------------------------------------------

def unit(*degrees):
    return torch.tensor([[math.cos(math.radians(a)), math.sin(math.radians(a))] for a in degrees])


def test_herding_picks_what_brings_the_mean_of_picks_closest_to_the_class_mean():
    # One class on the unit circle at 0°, 10°, 20° and 80°: its mean μ = (0.7745, 0.3751) lies at about 26°.
    # 1st pick: the sample nearest μ, 20° (distances 0.438, 0.291, 0.168, 0.856).
    # 2nd: the mean of 20° with 10° is the nearest to μ: 10°.
    # 3rd: with 80° the mean of the three is (0.6994, 0.5002), 0.146 from μ; with 0° it is (0.9748, 0.1719),
    # 0.285 from μ: 80°, although 0° is nearer μ itself. Then 0°. The scale of a feature does not matter.
    features = unit(0, 10, 20, 80) * torch.tensor([[1.0], [3.0], [0.5], [2.0]])
    classes, picks = herd(features, torch.zeros(4, dtype=torch.long), 4)
    assert classes.tolist() == [0] and picks.tolist() == [[2, 1, 3, 0]]
    mu = F.normalize(features, dim=1).mean(0)
    assert (F.normalize(features, dim=1) - mu).norm(dim=1).argsort().tolist() == [2, 1, 0, 3]  # not the same


def test_herding_handles_classes_at_once_and_stops_at_a_class_size():
    y = torch.tensor([1, 0, 1, 0, 1])  # class 1: 0°, 10°, 20° (samples 0, 2, 4); class 0: 80°, 0° (samples 1, 3)
    classes, picks = herd(unit(0, 80, 10, 0, 20), y, 3)
    # class 1's mean is at 10°: 10° first, then 0° and 20° balance around it (0° first: a tie, the lower index)
    assert classes.tolist() == [0, 1] and picks[1].tolist() == [2, 0, 4]
    assert picks[0, 2] == -1 and sorted(picks[0, :2].tolist()) == [1, 3]  # only two samples to pick


def herding_task(classes, per_class=4):
    """per_class samples of each class at 0°, 10°, 20°, 80° (pixel value = its row, so that rows can be traced):
    herding order 20°, 10°, 80°, 0°, i.e. rows 2, 1, 3, 0 of each class."""
    n = per_class * len(classes)
    y = torch.tensor(classes).repeat_interleave(per_class)
    features = unit(0, 10, 20, 80).repeat(len(classes), 1)
    return torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1), y, torch.zeros(n, dtype=torch.long), features


def herded(mem, c):
    rows = mem.valid()[: mem.size] & (mem.y[: mem.size] == c)
    order = mem.rank[: mem.size][rows].argsort()
    return mem.x[: mem.size][rows].flatten()[order].tolist()


def test_herding_memory_keeps_size_over_classes_seen_and_shrinks_to_the_first_picks():
    mem = Memory(6, (1, 1, 1), 4, torch.device("cpu"), "herding")
    mem.add_herding(*herding_task([0, 1]))  # 6 // 2 = 3 exemplars per class
    assert herded(mem, 0) == [2, 1, 3] and herded(mem, 1) == [6, 5, 7]
    x, y, t, f = herding_task([2, 3])
    mem.add_herding(x + 8, y, t, f)  # 6 // 4 = 1 per class: the old classes keep their first pick
    assert [herded(mem, c) for c in range(4)] == [[2], [6], [10], [14]]
    assert mem.class_count.tolist() == [1, 1, 1, 1] and int(mem.valid().sum()) == 4


def greedy_reference(stream, size):
    """GDumb's greedy sampler, one sample at a time: class counts after the stream."""
    counts, arrival = {}, []
    for c in stream:
        if c not in counts:
            counts[c] = 0
            arrival.append(c)
        if counts[c] < size // len(counts):
            if sum(counts.values()) >= size:
                largest = max(arrival, key=lambda k: counts[k])  # the first seen among ties
                counts[largest] -= 1
            counts[c] += 1
    return counts


def greedy_stream(labels):
    """A stream of the given labels whose two pixels tell each sample's place in it (high and low byte)."""
    y = torch.tensor(labels)
    place = torch.arange(y.shape[0])
    return torch.stack([place // 256, place % 256], 1).to(torch.uint8).view(-1, 2, 1, 1), y, torch.zeros_like(y)


def places(mem):
    x = mem.x[: int(mem.valid().sum())].long()
    return (x[:, 0] * 256 + x[:, 1]).flatten().tolist()


def test_greedy_by_hand():
    # size 4. a (0) five times: 4 kept (4 // 1 = 4), the fifth refused. b (1): 4 // 2 = 2; the memory is full, so
    # each b replaces an a: a 2, b 2. c (2): 4 // 3 = 1; a and b tie as the largest: a, seen first, gives one up.
    mem = Memory(4, (2, 1, 1), 3, torch.device("cpu"), "greedy")
    mem.add_greedy(*greedy_stream([0, 0, 0, 0, 0, 1, 1, 2]), torch.Generator().manual_seed(0))
    assert mem.class_count.tolist() == [1, 2, 1] and int(mem.valid().sum()) == 4
    kept = sorted(places(mem))
    assert kept[0] in (0, 1, 2, 3) and kept[1:] == [5, 6, 7]  # one of the first four a's, both b's, the c


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_greedy_memory_stays_class_balanced_on_an_unbalanced_stream(chunk):
    g = torch.Generator().manual_seed(1)
    # Three tasks of an unbalanced stream: class 0 ten times as frequent as class 1, class 3 scarce.
    tasks = [[0] * 200 + [1] * 20, [2] * 60 + [3] * 3, [4] * 90 + [5] * 30]
    labels = [c for task in tasks for c in torch.tensor(task)[torch.randperm(len(task), generator=g)].tolist()]
    mem = Memory(30, (2, 1, 1), 6, torch.device("cpu"), "greedy")
    x, y, t = greedy_stream(labels)
    for a in range(0, len(labels), chunk):
        mem.add_greedy(x[a: a + chunk], y[a: a + chunk], t[a: a + chunk], g)
        assert int(mem.valid().sum()) <= 30
        assert mem.class_count.tolist() == [greedy_reference(labels[: a + chunk], 30).get(c, 0) for c in range(6)]
    # By hand: classes 3, 4 and 5 end at 30 // 6 = 5 (class 3 has only 3); classes 0, 1 and 2, last cut when full,
    # share the 17 slots left, 6 each but one: the first seen, class 0, gave up the last one.
    assert mem.class_count.tolist() == [5, 6, 6, 3, 5, 5]
    stored = places(mem)
    assert [labels[p] for p in stored] == mem.y[:30].tolist() and len(set(stored)) == 30  # real, distinct samples
