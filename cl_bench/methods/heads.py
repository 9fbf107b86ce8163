"""The classifier heads a method puts on its backbone's features: one per task, or one over every class seen."""
import torch
import torch.nn.functional as F
from torch import nn

from ..data.scenarios import Info


class Heads(nn.Module):
    """A linear head per task in the task scenario; one head over the outputs seen so far in the class one."""

    fused = False  # mixed(): every plain head in one matmul (a method's option: the online methods' fused_heads)

    def __init__(self, feature_dim: int, info: Info):
        super().__init__()
        self.info = info
        self.per_task = info.scenario == "task"
        if self.per_task:
            self.heads = nn.ModuleList(nn.Linear(feature_dim, n) for n in info.sizes)
            # Per task, the outputs outside its range, kept on the device so that a mixed batch's mask is one
            # lookup with no host transfer (rather than a comparison of every row's range with every column).
            first, end = torch.tensor(info.offsets), torch.tensor(info.offsets) + torch.tensor(info.sizes)
            col = torch.arange(sum(info.sizes))
            self.register_buffer("foreign", (col < first[:, None]) | (col >= end[:, None]), persistent=False)
        else:
            self.head = nn.Linear(feature_dim, info.num_outputs)
        self.seen = info.seen_outputs(0)  # outputs seen so far (class scenario); set by Method.learn and on load

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
        return self.masked(features, self.foreign[t] if self.per_task else None)

    def masked(self, features: torch.Tensor, foreign: torch.Tensor | None) -> torch.Tensor:
        """mixed() with the rows' mask of other tasks' outputs (self.foreign[t]; None in the class scenario) looked
        up by the caller: La-MAML looks it up once a glance, not once a pass of its inner trajectory."""
        if not self.per_task:
            return self.forward(features, None)
        return self.every_head(features).masked_fill(foreign, float("-inf"))

    def every_head(self, features: torch.Tensor) -> torch.Tensor:
        """Every task head's logits side by side, each head apart; when `fused`, plain linear heads reading the same
        features as one matmul of their weights concatenated (one launch instead of one per task). Fused, the
        logits and gradients agree to float rounding only: the matmul's blocking and the features' gradient (one
        sum over every output, not a sum of per-head ones) run in another order, which can move a long run's
        accuracy. The parameters stay each head's own either way, so state dicts keep their keys."""
        heads = list(self.heads)
        if self.fused and all(type(h) is nn.Linear and h.bias is not None and h.in_features == features.shape[-1]
                              for h in heads):
            return F.linear(features, torch.cat([h.weight for h in heads]), torch.cat([h.bias for h in heads]))
        return torch.cat([h(features) for h in heads], dim=1)
