"""An episodic memory held on the device, shared by the rehearsal methods (er, and later agem, lamaml, nccl).

Samples are stored as uint8 pixels with their label, task id and the logits the model gave them when they
were stored. Reservoir sampling (Vitter 1985) keeps a uniform sample of the whole stream; the update for a
batch is computed with tensor ops, so it never synchronises with the host.
"""
import torch
from torch import nn


class Memory(nn.Module):
    def __init__(self, size: int, input_shape, num_outputs: int, device):
        super().__init__()
        self.size = size
        # One spare row past the end absorbs the writes of samples the reservoir drops, so that an update
        # needs no data-dependent indexing (and no host sync); it is never sampled.
        rows = size + 1
        self.register_buffer("x", torch.zeros((rows, *input_shape), dtype=torch.uint8, device=device))
        self.register_buffer("y", torch.zeros(rows, dtype=torch.long, device=device))
        self.register_buffer("t", torch.zeros(rows, dtype=torch.long, device=device))
        self.register_buffer("logits", torch.zeros(rows, num_outputs, device=device))
        self.register_buffer("seen", torch.zeros((), dtype=torch.long, device=device))  # stream length so far

    def filled(self) -> torch.Tensor:
        return torch.clamp(self.seen, max=self.size)

    @torch.no_grad()
    def add(self, x, y, t, logits=None, generator=None) -> None:
        """Reservoir update: the i-th sample of the stream goes to slot i while the memory fills, then
        replaces a uniformly drawn slot with probability size / (i + 1)."""
        n = y.shape[0]
        index = self.seen + torch.arange(n, device=y.device)
        draw = (torch.rand(n, device=y.device, generator=generator) * (index + 1)).long()
        slot = torch.where(index < self.size, index, draw)
        keep = slot < self.size
        slot = torch.where(keep, slot, self.size)
        self.x[slot], self.y[slot], self.t[slot] = x, y, t
        if logits is not None:
            self.logits[slot, : logits.shape[1]] = logits.float()
        self.seen += n

    def sample(self, batch_size: int, generator=None):
        """A uniform batch (with replacement) from the filled part, drawn on the device."""
        idx = (torch.rand(batch_size, device=self.y.device, generator=generator) * self.filled()).long()
        return self.x[idx], self.y[idx], self.t[idx], self.logits[idx]
