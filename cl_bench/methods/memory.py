"""An episodic memory held on the device, shared by the rehearsal methods (er, agem, lamaml, nccl, icarl, gdumb,
bic, lucir).

Samples are stored as uint8 pixels with their label, task id and the logits the model gave them when they
were stored. Reservoir sampling (Vitter 1985) keeps a uniform sample of the whole stream; the per-task ring
(GEM's episodic memory) gives each task size // num_tasks slots and keeps its newest samples; the balanced
memory (Avalanche's default experience-balanced buffer, and Abati et al.'s episodic memory) is written at the end
of each task only, giving every task seen so far an equal share, size // tasks seen, of random samples. Updates
and draws are tensor ops, so they never synchronise with the host.

Two class-balanced policies are written once per task (or per stream chunk) and may synchronise then:
- herding (iCaRL, Rebuffi et al. 2017, Algorithms 4 and 5): each class seen so far keeps size // classes seen
  exemplars (or a fixed count per class, LUCIR's default), picked in herding order (each next pick brings the
  mean of the picked L2-normalised features closest to the class mean); an old class shrinks by dropping its
  last picks.
- greedy (GDumb, Prabhu et al. 2020): a sample is stored if its class holds fewer than size // classes seen;
  when the memory is full, a random sample of the largest class (the first seen among ties) makes room.
Both keep their samples in rows [0, stored).
"""
import torch
import torch.nn.functional as F
from torch import nn

from .. import health
from ..errors import UserError


class Memory(nn.Module):
    def __init__(self, size: int, input_shape, num_outputs: int, device, policy: str = "reservoir",
                 num_tasks: int = 1):
        super().__init__()
        self.size = size
        self.policy = policy
        # One spare row past the end absorbs the writes of samples the reservoir drops, so that an update
        # needs no data-dependent indexing (and no host sync); it is never sampled.
        rows = size + 1
        self.register_buffer("x", torch.zeros((rows, *input_shape), dtype=torch.uint8, device=device))
        self.register_buffer("y", torch.zeros(rows, dtype=torch.long, device=device))
        self.register_buffer("t", torch.zeros(rows, dtype=torch.long, device=device))
        self.register_buffer("logits", torch.zeros(rows, num_outputs, device=device))
        self.register_buffer("seen", torch.zeros((), dtype=torch.long, device=device))  # stream length so far
        if policy == "ring":
            self.per_task = size // num_tasks
            self.register_buffer("count", torch.zeros(num_tasks, dtype=torch.long, device=device))  # per task
        if policy == "balanced":  # rows [j * share, j * share + count[j]) hold task j's samples
            self.register_buffer("tasks", torch.zeros((), dtype=torch.long, device=device))  # tasks stored
            self.register_buffer("count", torch.zeros(num_tasks, dtype=torch.long, device=device))
        if policy in ("herding", "greedy"):  # rows [0, class_count.sum()) hold samples, classes in any order
            self.register_buffer("class_count", torch.zeros(num_outputs, dtype=torch.long, device=device))
        if policy == "herding":  # a row's place in its class's herding order: 0 is the first pick
            self.register_buffer("rank", torch.zeros(rows, dtype=torch.long, device=device))
        if policy == "greedy":  # the order in which classes were first seen (-1: not yet), for ties in eviction
            self.register_buffer("arrival", torch.full((num_outputs,), -1, dtype=torch.long, device=device))

    def capacity(self) -> dict:
        """What the memory costs, for a method's capacity()."""
        return {"memory_size": self.size, "memory_bytes": sum(b.numel() * b.element_size() for b in self.buffers())}

    def missing_classes(self, task_id: int, info) -> list[health.Finding]:
        """memory.classes_missing after task_id, if it trips: the classes of the tasks seen with no stored sample (a
        host sync, once per task)."""
        stored = set(self.y[self.valid()].tolist())
        seen = sorted({c for t in range(task_id + 1) for c in range(info.offsets[t], info.offsets[t] + info.sizes[t])})
        finding = health.missing_classes(task_id, stored, seen, self.size)
        return [] if finding is None else [finding]

    def filled(self) -> torch.Tensor:
        return torch.clamp(self.seen, max=self.size)

    @torch.no_grad()
    def add_task(self, x, y, t, generator=None) -> None:
        """Balanced policy, at the end of a task: shrink every stored task to the new share and fill the
        next share with a random subset of this task's samples `x, y, t` (all of them if they are fewer)."""
        tasks = int(self.tasks) + 1  # a count kept in the state: read once per task, not per step
        share, old_share = self.size // tasks, self.size // max(tasks - 1, 1)
        # Each stored share is a random subset in random order, so its first `share` rows are one too.
        row = torch.arange(share * (tasks - 1), device=self.y.device)
        keep = row // share * old_share + row % share
        new = torch.randperm(y.shape[0], device=y.device, generator=generator)[:share]
        new = torch.cat([new, new.new_zeros(share - new.shape[0])])  # rows past count[task] are never drawn
        for buf, fresh in ((self.x, x), (self.y, y), (self.t, t)):
            buf[: share * tasks] = torch.cat([buf[keep], fresh[new]])
        self.count.clamp_(max=share)
        self.count[tasks - 1] = min(share, y.shape[0])
        self.tasks += 1
        self.seen += y.shape[0]

    @torch.no_grad()
    def add(self, x, y, t, logits=None, generator=None) -> None:
        n = y.shape[0]
        slot = self._ring_slots(t) if self.policy == "ring" else self._reservoir_slots(n, y.device, generator)
        slot = self._last_writer_only(slot)
        self.x[slot], self.y[slot], self.t[slot] = x, y, t
        if logits is not None:
            self.logits[slot, : logits.shape[1]] = logits.float()
        self._clear_spare_row()
        self.seen += n

    def _last_writer_only(self, slot):
        """Where two samples of a batch draw one slot, the later one (in stream order) wins and the earlier
        goes to the spare row: a parallel scatter with repeated indices would keep either, nondeterministically."""
        later = torch.arange(slot.shape[0], device=slot.device)
        overwritten = ((slot[:, None] == slot[None, :]) & (later[None, :] > later[:, None])).any(1)
        return torch.where(overwritten, self.size, slot)

    def _clear_spare_row(self):
        """The spare row took the dropped samples in no fixed order: reset it so the state is reproducible."""
        for buf in (self.x, self.y, self.t, self.logits):
            buf[self.size] = 0

    def _reservoir_slots(self, n, device, generator):
        """The i-th sample of the stream goes to slot i while the memory fills, then replaces a uniformly
        drawn slot with probability size / (i + 1)."""
        index = self.seen + torch.arange(n, device=device)
        draw = (torch.rand(n, device=device, generator=generator) * (index + 1)).long()
        slot = torch.where(index < self.size, index, draw)
        return torch.where(slot < self.size, slot, self.size)

    def _ring_slots(self, t):
        """Each task writes its own slots cyclically; of a batch holding more than a task's share, only the
        newest samples are kept, so no slot is written twice in one update."""
        onehot = F.one_hot(t, self.count.shape[0])
        rank = (onehot.cumsum(0) - 1).gather(1, t[:, None]).squeeze(1)  # place among the batch's samples of t
        per_batch = onehot.sum(0)
        slot = t * self.per_task + (self.count[t] + rank) % self.per_task
        self.count += per_batch
        return torch.where(rank >= per_batch[t] - self.per_task, slot, self.size)

    def valid(self) -> torch.Tensor:
        """Which rows hold a sample."""
        row = torch.arange(self.size + 1, device=self.y.device)
        if self.policy == "reservoir":
            return row < self.filled()
        if self.policy in ("herding", "greedy"):
            return row < self.class_count.sum()
        if self.policy == "balanced":
            share, tasks = self.size // self.tasks.clamp(min=1), self.tasks
        else:
            share, tasks = self.per_task, self.count.shape[0]
        task = (row // share).clamp(max=self.count.shape[0] - 1)
        return (row < share * tasks) & (row % share < self.count[task])

    def sample(self, batch_size: int, generator=None, before_task: int | None = None):
        """A uniform batch (with replacement) of the stored samples, drawn on the device; with before_task,
        of those of tasks before it (all stored ones in the unlikely case none is left)."""
        if self.policy == "reservoir" and before_task is None:
            idx = (torch.rand(batch_size, device=self.y.device, generator=generator) * self.filled()).long()
        else:
            idx = self.draw(self.replay_weights(before_task), batch_size, generator)
        return self.x[idx], self.y[idx], self.t[idx], self.logits[idx]

    def replay_weights(self, before_task: int | None = None) -> torch.Tensor:
        """The rows sample() draws from (a method drawing many batches between two writes computes them once):
        the stored ones, those of tasks before before_task if given and any is stored."""
        valid = self.valid()
        if before_task is not None:
            past = valid & (self.t < before_task)
            valid = torch.where(past.any(), past, valid)
        return valid.float()

    def task_weights(self, task: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Weights for draw() of a uniform batch of the stored samples of one task, and how many it has stored (a
        tensor: no host sync); with none stored, the cleared spare row alone, for the caller to discard."""
        own = self.valid() & (self.t == task)
        count = own.sum()
        weights = own.float()
        weights[self.size] += (count == 0).float()
        return weights, count

    @staticmethod
    def draw(weights: torch.Tensor, batch_size: int, generator=None) -> torch.Tensor:
        """batch_size row indices drawn uniformly (with replacement) from the rows of nonzero weight."""
        return torch.multinomial(weights, batch_size, replacement=True, generator=generator)

    def sample_uniform_tasks(self, batch_size: int, generator=None):
        """Balanced policy: a batch (with replacement) whose task labels are uniform over the stored tasks (each row
        draws a task, then one of its samples), however many samples each task keeps; on the device."""
        share = self.size // self.tasks.clamp(min=1)
        u = torch.rand(2, batch_size, device=self.y.device, generator=generator)
        task = (u[0] * self.tasks).long()
        idx = task * share + (u[1] * self.count[task]).long()
        return self.x[idx], self.y[idx], self.t[idx]

    def sample_distinct(self, batch_size: int, generator=None):
        """Reservoir policy: batch_size distinct stored samples drawn uniformly, as Mammoth's and AML's buffers
        draw (without replacement; all of them while fewer are stored). The batch keeps its size so that no
        host sync is needed: `drawn` says which rows are real draws, and the rows past the stored count repeat
        real ones (data that batch-norm can see) for the loss to weigh by zero (mean_over_drawn)."""
        row = torch.arange(self.size + 1, device=self.y.device)
        filled = self.filled()
        score = torch.rand(self.size + 1, device=self.y.device, generator=generator)
        order = torch.where(row < filled, score, 2.0).argsort()  # a random order of the stored rows first
        k = min(batch_size, self.size)
        place = torch.arange(k, device=self.y.device)
        idx = order[place % filled.clamp(min=1)]
        return self.x[idx], self.y[idx], self.t[idx], self.logits[idx], place < filled

    def stored(self):
        """(x, y, t) of the stored samples: a host sync, for once-per-task use (a training set, class means)."""
        n = int(self.valid().sum())
        return self.x[:n], self.y[:n], self.t[:n]

    def _write(self, x, y, t) -> None:
        """Rows [0, n) become the given samples; rows past them are cleared, so that the state is reproducible."""
        n = y.shape[0]
        for buf, new in ((self.x, x), (self.y, y), (self.t, t)):
            buf[:n] = new
            buf[n:] = 0
        self.logits.zero_()

    # --- herding (iCaRL) -------------------------------------------------------------------------
    @torch.no_grad()
    def add_herding(self, x, y, t, features, per_class: int | None = None) -> None:
        """Herding policy, after a task: the classes of `y` get their exemplars from these samples, picked in
        herding order on `features` (the model's features of x), and every class stored before keeps its
        first per_class picks (by default size // classes seen; a caller that keeps part of its budget
        elsewhere, as BiC its held-out samples, or a fixed count per class, as LUCIR's 20, passes its own)."""
        new = torch.zeros_like(self.class_count, dtype=torch.bool)
        new[y] = True
        classes_seen = int(((self.class_count > 0) | new).sum())
        per_class = self.size // classes_seen if per_class is None else per_class
        if per_class * classes_seen > self.size:
            raise ValueError(f"{per_class} exemplars for each of {classes_seen} classes exceed the memory's "
                             f"{self.size} rows")
        # A class of y stored before (none in class-incremental data) is herded afresh, not kept twice.
        old = self.valid()[: self.size] & (self.rank[: self.size] < per_class) & ~new[self.y[: self.size]]
        old_rows = old.nonzero().squeeze(1)
        classes, picks = herd(features, y, per_class)
        picked = picks >= 0
        rows = picks[picked]  # class by class, each in pick order
        ranks = torch.arange(picks.shape[1], device=y.device).expand_as(picks)[picked]
        self._write(torch.cat([self.x[old_rows], x[rows]]), torch.cat([self.y[old_rows], y[rows]]),
                    torch.cat([self.t[old_rows], t[rows]]))
        n_old = old_rows.shape[0]
        self.rank[:n_old] = self.rank[old_rows].clone()
        self.rank[n_old: n_old + rows.shape[0]] = ranks
        self.rank[n_old + rows.shape[0]:] = 0
        self.class_count.clamp_(max=per_class)
        self.class_count[classes] = picked.sum(1)
        self.seen += y.shape[0]

    # --- greedy (GDumb) --------------------------------------------------------------------------
    @torch.no_grad()
    def add_greedy(self, x, y, t, generator=None) -> None:
        """Greedy policy: the stream chunk x, y, t, in order, as if its samples came one at a time. Between two
        first appearances of a class the threshold k = size // classes seen is fixed, and then the rule has a
        closed form: each class takes its first k - count samples of the stretch, and each sample taken into a
        full memory evicts one from the then largest class. Those are always classes above k, which take nothing
        in the stretch, so the evictions level the largest classes down (see _level_down) and drop random rows."""
        n = y.shape[0]
        if n == 0:
            return
        first = torch.full_like(self.class_count, n).scatter_reduce(0, y, torch.arange(n, device=y.device), "amin")
        arriving = (self.arrival < 0) & (first < n)
        starts = sorted(first[arriving].tolist())  # one sync per chunk: where the stretches begin
        bounds = sorted({0, *starts, n})
        for a, b in zip(bounds[:-1], bounds[1:]):
            if a in starts:
                self.arrival[y[a]] = self.arrival.max() + 1
            self._greedy_stretch(x[a:b], y[a:b], t[a:b], generator)
        self.seen += n

    def _greedy_stretch(self, x, y, t, generator) -> None:
        per_class = self.size // int((self.arrival >= 0).sum())
        taken = rank_within_class(y) < (per_class - self.class_count[y]).clamp(min=0)
        accepted = torch.bincount(y[taken], minlength=self.class_count.shape[0])
        evictions = max(0, int(self.class_count.sum() + accepted.sum()) - self.size)
        kept_count = level_down(self.class_count, self.arrival, evictions)
        # Which rows each eviction takes is uniform within its class: drop a random subset of the right size.
        stored = self.valid()[: self.size]
        key = torch.rand(self.size, device=y.device, generator=generator)
        key = torch.where(stored, key, 2.0)  # empty rows (class 0 in the buffer) rank after every stored one
        keep = stored & (rank_within_class(self.y[: self.size], key) < kept_count[self.y[: self.size]])
        old_rows = keep.nonzero().squeeze(1)
        self._write(torch.cat([self.x[old_rows], x[taken]]), torch.cat([self.y[old_rows], y[taken]]),
                    torch.cat([self.t[old_rows], t[taken]]))
        self.class_count.copy_(kept_count + accepted)


def check_memory_holds_every_class(memory_size: int, info) -> None:
    """A rehearsal memory smaller than the label space cannot hold one sample of each class."""
    if memory_size < info.num_outputs:
        raise UserError(f"method.memory_size={memory_size} is below the {info.num_outputs} classes of "
                        f"{info.dataset} ({info.scenario} scenario): use at least {info.num_outputs}")


def check_new_classes_every_task(name: str, info) -> None:
    """Class-incremental methods (icarl, bic, lucir) need tasks with classes of their own."""
    if len(set(info.offsets)) < info.num_tasks:
        raise UserError(f"method={name} learns new classes at every task, but the tasks of {info.dataset} share "
                        "their labels: use a split dataset (split_digits, split_mnist, split_cifar100, ...)")


def mean_over_drawn(losses: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """The mean of per-sample losses over the rows sample_distinct really drew (0 from an empty memory)."""
    drawn = drawn.to(losses.dtype)
    return (losses * drawn).sum() / drawn.sum().clamp(min=1)


def rank_within_class(y: torch.Tensor, key: torch.Tensor | None = None) -> torch.Tensor:
    """Each sample's place among the samples of its class: in order of `key` when given, else in stream order."""
    order = torch.arange(y.shape[0], device=y.device) if key is None else torch.argsort(key, stable=True)
    order = order[torch.argsort(y[order], stable=True)]  # by class, then by key (or position)
    counts = torch.bincount(y)
    first = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(y)
    rank[order] = torch.arange(y.shape[0], device=y.device) - first[y[order]]
    return rank


def level_down(count: torch.Tensor, arrival: torch.Tensor, evictions: int) -> torch.Tensor:
    """Class counts after `evictions` removals, each from the class with the most samples (the first seen among
    ties): the largest classes are cut to a common level L, and what is left over takes one more from the
    first-seen classes at L."""
    if evictions == 0:
        return count.clone()
    levels = torch.arange(int(count.max()) + 1, device=count.device)
    over = (count[None, :] - levels[:, None]).clamp(min=0).sum(1)  # removals needed to cut every class to L
    level = int(torch.nonzero(over <= evictions)[0])
    left = evictions - int(over[level])
    out = count.clamp(max=level)
    at_level = torch.nonzero(count >= level).squeeze(1)
    at_level = at_level[torch.argsort(arrival[at_level])][:left]
    out[at_level] -= 1
    return out


def herd(features: torch.Tensor, y: torch.Tensor, m: int):
    """iCaRL's herding (Algorithm 4), for every class of y at once: with φ the L2-normalised features and μ a
    class's mean of them, the k-th pick is the not yet picked sample x minimising ‖μ - (φ(x) + Σ_{j<k} φ(p_j)) / k‖.
    Returns (classes, picks): picks[c] holds class c's first m picks as indices into y, -1 past its size."""
    classes, group, counts = torch.unique(y, return_inverse=True, return_counts=True)
    width = min(m, int(counts.max()))
    place = rank_within_class(group)
    grid = torch.full((classes.shape[0], int(counts.max())), -1, dtype=torch.long, device=y.device)
    grid[group, place] = torch.arange(y.shape[0], device=y.device)  # grid[c, i]: class c's i-th sample
    present = grid >= 0
    phi = F.normalize(features.float(), dim=1)[grid.clamp(min=0)] * present[..., None]
    mean = phi.sum(1) / counts[:, None]
    picked_sum = torch.zeros_like(mean)
    unavailable = ~present
    every = torch.arange(classes.shape[0], device=y.device)
    picks = []
    for k in range(1, width + 1):
        gap = (mean[:, None] - (phi + picked_sum[:, None]) / k).pow(2).sum(-1).masked_fill(unavailable, float("inf"))
        best = gap.argmin(1)
        some_left = ~unavailable[every, best]
        picks.append(torch.where(some_left, grid[every, best], -1))
        picked_sum += phi[every, best] * some_left[:, None]
        unavailable[every, best] = True
    return classes, torch.stack(picks, 1)


class Rehearsal:
    """Mixin, before Method, of the methods that keep a rehearsal memory in self.memory: its health check, which
    such a method names in its traits (health_checks=(..., MEMORY_CLASSES))."""

    def health(self, task) -> list[health.Finding]:
        return self.memory.missing_classes(task.id, self.info)
