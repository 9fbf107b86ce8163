"""La-MAML, look-ahead meta-learning for online continual learning (Gupta et al., NeurIPS 2020).

Every weight w has its own learnable learning rate α (init alpha_init). Per glance at an incoming batch:
starting from the current weights, take one inner SGD step per sample of the batch, w ← w - relu(α) ⊙ g;
after each, evaluate the meta loss on the batch together with a replay batch from the memory; then move α
down the mean meta loss's gradient (lr outer_lr) and the weights by w ← w - relu(α) ⊙ ∇w, with the new α
(La-MAML's asynchronous update). First order by default, as in La-MAML's MNIST runs: the inner gradients are
constants, so α's gradient flows through the steps they scale. Defaults are La-MAML's Permuted MNIST ones.
"""
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from .online import OnlineConfig, OnlineMethod, sgd_step


@dataclass
class LaMAMLConfig(OnlineConfig):
    name: str = "lamaml"
    alpha_init: float = 0.15  # initial per-weight learning rate α
    outer_lr: float = 0.3  # SGD lr of the learning rates α (La-MAML's opt_lr)
    grad_clip_norm: float = 2.0  # the meta gradients of the weights and of α are each clipped to this norm
    inner_clip: float = 0.0  # clamp inner gradients to ±inner_clip; 0: none, as La-MAML's code in effect does
    second_order: bool = False  # differentiate through the inner gradients too (costly)
    unused: ClassVar[tuple[str, ...]] = ("lr",)  # the weights step with their learned lrs α

    def checks(self):
        return [*super().checks(),
                *((key, getattr(self, key) > 0, "a positive number") for key in ("alpha_init", "outer_lr",
                                                                                  "grad_clip_norm")),
                ("inner_clip", self.inner_clip >= 0, "0 or more")]


class MixedNet(nn.Module):
    """The backbone and the heads' mixed-task logits as one forward, to call with fast weights."""

    def __init__(self, backbone, heads):
        super().__init__()
        self.backbone, self.heads = backbone, heads

    def forward(self, x, t):
        return self.heads.mixed(self.backbone(x), t)


class LaMAML(OnlineMethod):
    name = "lamaml"
    Config = LaMAMLConfig

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        named = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        self.weight_names = [n for n, _ in named]
        self.weights = [p for _, p in named]
        self.alpha = nn.ParameterList(nn.Parameter(torch.full_like(p, cfg.alpha_init)) for p in self.weights)

    def glance(self, batch, task):
        net = MixedNet(self.backbone, self.heads)
        n = batch.y.shape[0]
        order = torch.randperm(n, device=batch.y.device, generator=self.ctx.generator)
        x, y, t = batch.x[order], batch.y[order], batch.t[order]
        meta_x, meta_y, meta_t = x, y, t
        if self.replay_ready:
            memory, _ = self.replay()
            meta_x, meta_y, meta_t = (torch.cat(p) for p in ((x, memory.x), (y, memory.y), (t, memory.t)))
        fast = list(self.weights)
        meta_loss = 0.0
        for i in range(n):  # La-MAML's inner trajectory: one step per sample of the batch
            fast = self.inner_step(net, fast, x[i: i + 1], y[i: i + 1], t[i: i + 1])
            with self.ctx.autocast():
                logits = functional_call(net, dict(zip(self.weight_names, fast)), (meta_x, meta_t))
                meta_loss = meta_loss + F.cross_entropy(logits, meta_y)
        meta_loss = meta_loss / n
        grads = torch.autograd.grad(meta_loss, self.weights + list(self.alpha), allow_unused=True,
                                    materialize_grads=True)
        weight_grads = clip_norm(grads[: len(self.weights)], self.cfg.grad_clip_norm)
        alpha_grads = clip_norm(grads[len(self.weights):], self.cfg.grad_clip_norm)
        sgd_step(self.alpha, alpha_grads, self.cfg.outer_lr)
        with torch.no_grad():
            sgd_step(self.weights, [g * F.relu(a) for g, a in zip(weight_grads, self.alpha)], 1.0)
        return meta_loss.detach()

    def inner_step(self, net, fast, x, y, t):
        with self.ctx.autocast():
            loss = F.cross_entropy(functional_call(net, dict(zip(self.weight_names, fast)), (x, t)), y)
        grads = torch.autograd.grad(loss, fast, create_graph=self.cfg.second_order, allow_unused=True,
                                    materialize_grads=True)
        if self.cfg.inner_clip > 0:
            grads = [g.clamp(-self.cfg.inner_clip, self.cfg.inner_clip) for g in grads]
        return [w - g * F.relu(a) for w, g, a in zip(fast, grads, self.alpha)]

    def capacity(self):
        return {**super().capacity(), "learning_rates": sum(a.numel() for a in self.alpha)}


def clip_norm(grads, max_norm: float):
    """Scale a list of gradients so that their joint L2 norm is at most max_norm (on the device)."""
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return [g * scale for g in grads]
