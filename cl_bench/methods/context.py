"""What the run lends a method (Context): where to compute, in what precision, its random streams, its recorder and
its side store. The run builds it (train.py); a method reads it as self.ctx."""
from dataclasses import dataclass, field

import torch

from ..checkpoint import SideStore
from ..data import EVAL_BATCH


@dataclass
class Context:
    """What the run lends a method: where to compute, in what precision, its random stream, its recorder."""

    device: torch.device
    amp_dtype: torch.dtype | None
    generator: torch.Generator
    recorder: object
    rank: int = 0  # this process's place among world_size data-parallel processes
    world_size: int = 1
    seed: int = 0  # the run's seed
    eval_batch_size: int = EVAL_BATCH  # samples per forward pass when only evaluating (data.eval_batch_size)
    # Data-parallel: this rank's own augmentation stream (every rank draws the batch order, the replay draws and
    # the memory updates from `generator`, alike; each augments only its own shard, with this one).
    shard_generator: torch.Generator | None = None
    precision: str = "fp32"  # what the run computes in (hardware.Hardware.precision): bf16, tf32 or fp32
    # debug=shape (cl_bench/shape.py): every phase cut to one epoch of one batch, and timed; None otherwise.
    shape: object | None = None
    # Where a method keeps state too large for its state dict (files in the run directory under train.run).
    store: SideStore = field(default_factory=SideStore)
    ran_on: dict = field(default_factory=dict)  # where the run ran (hardware.ran_on): metrics.json's, not a method's
    # hardware.cuda_graphs granted (hardware.graph_mode): fit()'s full-size steps go through a StepGraph (loop.py),
    # captured on a GPU and run eagerly through the same buffers elsewhere.
    cuda_graphs: bool = False
    # hardware.fused_optimizer as the run passes it (train.py; on by default there): the optimisers as torch's fused
    # kernels (loop.optimizer). A Context built without a run, as some tests build one, takes torch's foreach ops.
    fused_optimizer: bool = False

    @property
    def augment_generator(self) -> torch.Generator:
        return self.generator if self.shard_generator is None else self.shard_generator

    def autocast(self):
        # A captured step may not keep autocast's cache of cast weights: the cache is freed when the region exits,
        # and a replay would read the freed copies.
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.bfloat16,
                              enabled=self.amp_dtype is not None, cache_enabled=not self.cuda_graphs)
