"""Data-parallel training (hardware=ddp): each rank trains on its shard of every global batch and of every replay
draw (drawn alike on every rank from the shared generator), DistributedDataParallel averages the gradients, and the
batch norms' statistics are averaged at the end of a phase. One process alone: every function here is the identity."""
import torch
import torch.nn.functional as F
from torch import nn

BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


class Objective(nn.Module):
    """A step's loss as a module over the method (DistributedDataParallel wraps a module whose forward makes
    the output that backward starts from)."""

    def __init__(self, method: nn.Module, loss_fn):
        super().__init__()
        self.method, self.loss_fn = method, loss_fn

    def forward(self, batch) -> torch.Tensor:
        return self.loss_fn(batch)


def objective(method: nn.Module, loss_fn):
    """The step's loss as DistributedDataParallel's module, so that its gradients are all-reduced in buckets while
    the backward pass runs; loss_fn itself when alone."""
    ctx = method.ctx
    if ctx.world_size == 1:
        return loss_fn
    from torch.nn.parallel import DistributedDataParallel
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    # find_unused_parameters: a step need not reach every parameter (other tasks' heads, frozen paths).
    # forward_sync_buffers=False: buffers hold memories and masks, alike on every rank already; the batch-norm
    # statistics, which are not, are averaged at the end of the phase.
    return DistributedDataParallel(Objective(method, loss_fn), device_ids=device_ids, find_unused_parameters=True,
                                   forward_sync_buffers=False)


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
