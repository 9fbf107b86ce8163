"""The classifier heads a method puts on its backbone's features: one per task, or one over every class seen."""
import torch
from torch import nn

from ..data.scenarios import Info


class Heads(nn.Module):
    """A linear head per task in the task scenario; one head over the outputs seen so far in the class one."""

    def __init__(self, feature_dim: int, info: Info):
        super().__init__()
        self.info = info
        self.per_task = info.scenario == "task"
        if self.per_task:
            self.heads = nn.ModuleList(nn.Linear(feature_dim, n) for n in info.sizes)
            # Each task's output range, kept on the device so that mixed batches cost no host transfer.
            self.register_buffer("first", torch.tensor(info.offsets), persistent=False)
            self.register_buffer("end", torch.tensor(info.offsets) + torch.tensor(info.sizes), persistent=False)
        else:
            self.head = nn.Linear(feature_dim, info.num_outputs)
        self.seen = info.seen_outputs(0)  # outputs seen so far (class scenario); set by Method.learning and on load

    def forward(self, features: torch.Tensor, task_id: int | None) -> torch.Tensor:
        if self.per_task:
            return self.heads[task_id](features)
        return self.head(features)[:, : self.seen]

    @torch.no_grad()
    def widen(self, in_features: int, from_task: int, init=None) -> None:
        """CPG's growth widened the features that from_task and the tasks after it read: their heads take the
        new inputs, the old columns kept and the new ones drawn by init (PyTorch's default when None)."""
        for j in range(from_task, len(self.heads)):
            old = self.heads[j]
            if old.in_features < in_features:
                new = nn.Linear(in_features, old.out_features, device=old.weight.device, dtype=old.weight.dtype)
                if init is not None:
                    init(new)
                new.weight[:, : old.in_features] = old.weight
                new.bias.copy_(old.bias)
                self.heads[j] = new

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        if self.per_task:  # a grown checkpoint into freshly built heads: take its shapes first
            for j, head in enumerate(self.heads):
                weight = state_dict.get(f"{prefix}heads.{j}.weight")
                if weight is not None and weight.shape != head.weight.shape:
                    self.heads[j] = nn.Linear(weight.shape[1], weight.shape[0], device=head.weight.device)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, errors)

    def mixed(self, features: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Logits for a batch mixing tasks, over the whole label space (targets are the global labels):
        in the task scenario each row keeps only its own task's outputs, the rest set to -inf."""
        if not self.per_task:
            return self.forward(features, None)
        logits = torch.cat([h(features) for h in self.heads], dim=1)
        col = torch.arange(logits.shape[1], device=t.device)
        own = (col >= self.first[t, None]) & (col < self.end[t, None])
        return logits.masked_fill(~own, float("-inf"))
