"""Data-parallel training (hardware=ddp): each rank trains on its shard of every global batch and of every replay
draw (drawn alike on every rank from the shared generator), DistributedDataParallel averages the gradients, and the
batch norms' statistics are averaged at the end of a phase. One process alone: every function here is the identity.

Every decision a method makes from data (a selection accuracy, a training-accuracy bar, a goal, a relevance) reads
a measurement summed over the ranks (own_batches, all_ranks_sum, all_ranks_fraction): the ranks then take the same
phases, grow alike and keep the same masks, and their collectives keep matching."""
import itertools

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import masked

BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


class Objective(nn.Module):
    """A step's loss as a module over the method (DistributedDataParallel wraps a module whose forward makes
    the output that backward starts from)."""

    def __init__(self, method: nn.Module, loss_fn, model: nn.Module | None = None):
        super().__init__()
        self.method, self.loss_fn = method, loss_fn
        self.model = model  # a module the phase trains besides the method's own (CPG's goal models)

    def forward(self, batch) -> torch.Tensor:
        return self.loss_fn(batch)


def objective(method: nn.Module, loss_fn, params=(), model: nn.Module | None = None):
    """The step's loss as DistributedDataParallel's module, so that its gradients are all-reduced in buckets while
    the backward pass runs; loss_fn itself when alone. Every parameter the phase steps (params) must lie in the
    method or in model, the module it trains besides (CPG's goal models): one outside both would take each rank's
    own gradient, and the ranks would drift apart."""
    ctx = method.ctx
    if ctx.world_size == 1:
        return loss_fn
    wrapped = {id(p) for m in (method, model) if m is not None for p in m.parameters()}
    if any(id(p) not in wrapped for p in params):
        raise RuntimeError(f"{type(method).__name__}: a phase steps parameters outside the method; pass their "
                           "module to fit() as model=, so that data-parallel training averages their gradients")
    from torch.nn.parallel import DistributedDataParallel
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    # find_unused_parameters: a step need not reach every parameter (other tasks' heads, frozen paths).
    # forward_sync_buffers=False: buffers hold memories and masks, alike on every rank already; the batch-norm
    # statistics, which are not, are averaged at the end of the phase.
    # The wrapping broadcasts rank 0's parameters and buffers: the masked layers' owner counts hold through it
    with masked.census_kept(method):
        return DistributedDataParallel(Objective(method, loss_fn, model), device_ids=device_ids,
                                       find_unused_parameters=True, forward_sync_buffers=False)


def seed_shard_augmentation(ctx, task_id: int, phase: int, epoch: int) -> None:
    """Each rank's augmentation stream for the epoch, seeded from the run's seed, the place in the run and the
    rank: the shared stream is left as one process would draw it, and a resumed epoch augments as the first try
    did."""
    if ctx.world_size > 1:
        if ctx.shard_generator is None:
            ctx.shard_generator = torch.Generator(ctx.device)
        place = (ctx.seed, task_id, phase, epoch, ctx.rank)
        ctx.shard_generator.manual_seed(hash(place) & (2**63 - 1))  # ints hash alike in every process


def shard(ctx, *rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """This rank's rows (r, r + w, ...) of tensors every rank holds alike, such as a replay draw; the tensors
    themselves when alone."""
    if ctx.world_size == 1:
        return rows
    r, w = ctx.rank, ctx.world_size
    return tuple(x[r::w] for x in rows)


def unshard(ctx, x: torch.Tensor, rows: int) -> torch.Tensor:
    """The `rows` rows of the global batch from a tensor computed on each rank's shard (say, its logits), gathered
    in the global batch's order on every rank; x itself when alone."""
    if ctx.world_size == 1:
        return x
    import torch.distributed as dist
    w = ctx.world_size
    per_rank = -(-rows // w)  # rank 0's shard, the largest: the others are padded to it for the gather
    padded = F.pad(x, (0, 0) * (x.dim() - 1) + (0, per_rank - len(x)))
    shards = [torch.empty_like(padded) for _ in range(w)]
    dist.all_gather(shards, padded)
    # shards[r][i] is global row i * w + r: interleaved back into order, the padding (rows past the end) cut
    return torch.stack(shards, dim=1).reshape(w * per_rank, *x.shape[1:])[:rows]


@torch.no_grad()
def average_batch_norm_statistics(module: nn.Module) -> None:
    """Each rank's batch norms tracked the statistics of its own shards; their average is the global batch's mean
    (and nearly its variance), set on every rank so that they evaluate alike."""
    import torch.distributed as dist
    world_size = dist.get_world_size()
    for m in module.modules():
        if isinstance(m, BATCH_NORMS) and m.running_mean is not None:  # None: track_running_stats=False
            for stat in (m.running_mean, m.running_var):
                dist.all_reduce(stat)
                stat.div_(world_size)


def distributed() -> bool:
    """Whether torch.distributed is initialised with more than one rank."""
    import torch.distributed as dist
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def own_batches(batches):
    """An evaluation's batches that this rank measures (every world_size-th, from its rank), whose counts
    all_ranks_sum adds up to those of every batch; all of them when not distributed."""
    if not distributed():
        return batches
    import torch.distributed as dist
    return itertools.islice(batches, dist.get_rank(), None, dist.get_world_size())


def all_ranks_sum(x: torch.Tensor) -> torch.Tensor:
    """x summed over every rank (each rank's counts of what it measured), the same tensor on all of them; x
    itself when not distributed."""
    if not distributed():
        return x
    import torch.distributed as dist
    x = x.clone()
    dist.all_reduce(x)
    return x


def all_ranks_fraction(correct: torch.Tensor, total) -> float:
    """correct / total, both summed over every rank (one host read): the figure every rank decides on."""
    counts = torch.stack([correct.double(), torch.as_tensor(total, dtype=torch.float64, device=correct.device)])
    hits, seen = all_ranks_sum(counts).tolist()
    return hits / max(seen, 1)


def agree_batch_norms(module: nn.Module) -> None:
    """Before a measurement within a phase (an epoch's selection accuracy), each rank's batch norms have tracked
    their own shards: their statistics are averaged first, so that every rank measures, and keeps, the same
    model. The running statistics are linear in the batches', so the phase's closing average is unchanged."""
    if distributed():
        average_batch_norm_statistics(module)


@torch.no_grad()
def same_draw(tensors) -> None:
    """Rank 0's values of tensors a method has just drawn from torch's global stream (gated's re-initialised
    kernels), set on every rank: that stream is each rank's own (dropout and gate noise draw from it for the
    rank's shard), so its draws differ from rank to rank."""
    if distributed():
        import torch.distributed as dist
        for t in tensors:
            dist.broadcast(t, src=0)
