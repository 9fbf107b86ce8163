"""An episodic memory held on the device, shared by the rehearsal methods (er, agem, lamaml, nccl).

Samples are stored as uint8 pixels with their label, task id and the logits the model gave them when they
were stored. Reservoir sampling (Vitter 1985) keeps a uniform sample of the whole stream; the per-task ring
(GEM's episodic memory) gives each task size // num_tasks slots and keeps its newest samples; the balanced
memory (Avalanche's default experience-balanced buffer) is written at the end of each task only, giving every
task seen so far an equal share, size // tasks seen, of random samples. Updates and draws are tensor ops, so
they never synchronise with the host.
"""
import torch
import torch.nn.functional as F
from torch import nn


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

    def capacity(self) -> dict:
        """What the memory costs, for a method's capacity()."""
        return {"memory_size": self.size, "memory_bytes": sum(b.numel() * b.element_size() for b in self.buffers())}

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
            valid = self.valid()
            if before_task is not None:
                past = valid & (self.t < before_task)
                valid = torch.where(past.any(), past, valid)
            idx = torch.multinomial(valid.float(), batch_size, replacement=True, generator=generator)
        return self.x[idx], self.y[idx], self.t[idx], self.logits[idx]

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


def mean_over_drawn(losses: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """The mean of per-sample losses over the rows sample_distinct really drew (0 from an empty memory)."""
    drawn = drawn.to(losses.dtype)
    return (losses * drawn).sum() / drawn.sum().clamp(min=1)
