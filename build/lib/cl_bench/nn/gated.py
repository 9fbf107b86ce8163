"""Channel-gated convolutions (Abati et al., CVPR 2020): per task, a gating module decides per sample which
output channels of a shared conv are computed, and a batch norm of its own normalises them.

`convert(backbone, num_tasks)` swaps every Conv2d that a BatchNorm2d follows for a GatedConv2d holding the conv,
one batch norm and one gating module per task, and the batch norm for an Identity. The layers run the paths of
the tasks named by `route`: one task while training, or several stacked along the batch dimension (task-major
rows) in evaluation, where all gates and batch norms are applied as batched tensor ops.
"""
import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError


class _StraightThrough(torch.autograd.Function):
    """Forward: the hard 0/1 decision. Backward: the gradient unchanged, i.e. that of the soft sigmoid."""

    @staticmethod
    def forward(ctx, soft):
        return (soft > 0.5).to(soft.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad


def logistic_noise(like: torch.Tensor) -> torch.Tensor:
    """The difference of two Gumbel(0, 1) draws, which is what a binary Gumbel-softmax adds to a logit."""
    u = torch.rand_like(like, dtype=torch.float32).clamp_(1e-6, 1 - 1e-6)
    return (torch.log(u) - torch.log1p(-u)).to(like.dtype)


def straight_through(soft: torch.Tensor) -> torch.Tensor:
    return _StraightThrough.apply(soft)


def gumbel_sigmoid(logits: torch.Tensor, tau: float) -> torch.Tensor:
    """Binary gates sampled with a relaxed Bernoulli of temperature tau, hard in the forward pass."""
    return straight_through(torch.sigmoid((logits + logistic_noise(logits)) / tau))


class Gate(nn.Module):
    """One task's gating module for one layer: pool -> Linear(c_in, hidden) -> BN -> ReLU -> Linear(hidden, c_out)."""

    def __init__(self, c_in: int, c_out: int, hidden: int, open_bias: float):
        super().__init__()
        self.fc1 = nn.Linear(c_in, hidden)
        self.norm = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, c_out)
        # Gates fire with probability sigmoid(logit): near-zero logits would switch every kernel on and off
        # at random per sample, which drowns a new task's signal; starting open lets sparsity close them.
        nn.init.constant_(self.fc2.bias, open_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x.mean((2, 3)))
        # A one-sample batch (the tail of an epoch) has no batch statistics: use the running ones.
        use_batch = self.training and h.shape[0] > 1
        h = F.batch_norm(h, self.norm.running_mean, self.norm.running_var, self.norm.weight, self.norm.bias,
                         use_batch, self.norm.momentum, self.norm.eps)
        return self.fc2(F.relu(h))


class GatedConv2d(nn.Module):
    """A shared conv, then per task its batch norm and its gates: out = G_t(x) ⊙ BN_t(conv(x)).

    `frozen` marks the kernels (output channels) some task has frozen; `usable[t]` the kernels task t may fire
    once it has been learned (the kernels frozen by then), so that its path reads frozen weights only."""

    def __init__(self, conv: nn.Conv2d, bn: nn.BatchNorm2d, num_tasks: int, hidden: int = 16, tau: float = 2 / 3,
                 open_bias: float = 1.0):
        super().__init__()
        self.conv, self.tau = conv, tau
        c_in, c_out = conv.in_channels, conv.out_channels
        self.bns = nn.ModuleList(nn.BatchNorm2d(c_out, bn.eps, bn.momentum, bn.affine) for _ in range(num_tasks))
        self.gates = nn.ModuleList(Gate(c_in, c_out, hidden, open_bias) for _ in range(num_tasks))
        self.register_buffer("frozen", torch.zeros(c_out, dtype=torch.bool))
        self.register_buffer("usable", torch.ones(num_tasks, c_out, dtype=torch.bool))
        self.tasks: list[int] = [0]  # the paths the next forward runs; set by route()
        self.last_gates: torch.Tensor | None = None  # gates of the last forward, rows as the input's
        self.out_pixels = 0  # H×W of the last output, for FLOP counts
        self.anchor: list[torch.Tensor] = []  # the kernels' weights when the current task started

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.conv(x)
        self.out_pixels = z.shape[2] * z.shape[3]
        if self.training:  # one task's path, routed alone
            t = self.tasks[0]
            self.last_gates = gumbel_sigmoid(self.gates[t](x), self.tau)
            return self.bns[t](z) * self.last_gates[:, :, None, None]
        return self._stacked(x, z)

    @torch.no_grad()
    def _stacked(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Evaluation of every routed path at once: per-row gate weights and batch-norm affines gathered by task."""
        tasks = torch.tensor(self.tasks, device=x.device)
        n = x.shape[0] // len(self.tasks)
        gates, bns = [self.gates[t] for t in self.tasks], [self.bns[t] for t in self.tasks]
        pooled = x.mean((2, 3)).view(len(self.tasks), n, -1)
        h = torch.einsum("tnc,tkc->tnk", pooled, _stack(gates, "fc1.weight")) + _stack(gates, "fc1.bias")[:, None]
        scale, shift = _affine([g.norm for g in gates])
        h = F.relu(h * scale[:, None] + shift[:, None])
        logits = torch.einsum("tnk,tok->tno", h, _stack(gates, "fc2.weight")) + _stack(gates, "fc2.bias")[:, None]
        on = (logits > 0) & self.usable[tasks][:, None, :]
        self.last_gates = on.reshape(x.shape[0], -1).to(z.dtype)
        scale, shift = (v.repeat_interleave(n, 0)[:, :, None, None] for v in _affine(bns))
        return (z * scale + shift) * self.last_gates[:, :, None, None]

    # --- freezing -----------------------------------------------------------------------------------
    def kernel_params(self) -> list[torch.Tensor]:
        return [p for p in (self.conv.weight, self.conv.bias) if p is not None]

    def start_task(self) -> None:
        """Remember the kernels' weights, so that steps that touch frozen ones (weight decay) can be undone."""
        self.anchor = [p.detach().clone() for p in self.kernel_params()]

    @torch.no_grad()
    def mask_frozen_grads(self) -> None:
        for p in self.kernel_params():
            if p.grad is not None:
                p.grad[self.frozen] = 0

    @torch.no_grad()
    def restore_frozen(self) -> None:
        for p, a in zip(self.kernel_params(), self.anchor):
            p.copy_(torch.where(_rows(self.frozen, p), a, p))

    @torch.no_grad()
    def freeze(self, relevance: torch.Tensor, threshold: float, task_id: int) -> None:
        """Freeze the kernels whose relevance exceeds the threshold; task_id keeps the frozen ones only."""
        self.frozen |= relevance > threshold
        self.usable[task_id] = self.frozen

    @torch.no_grad()
    def reinit_unfrozen(self) -> None:
        """Fresh capacity for the next task: every kernel no task has frozen is drawn anew as at construction."""
        fresh = copy.deepcopy(self.conv)
        fresh.reset_parameters()
        for p, f in zip(self.kernel_params(), [q for q in (fresh.weight, fresh.bias) if q is not None]):
            p.copy_(torch.where(_rows(self.frozen, p), p, f))

    # --- cost ---------------------------------------------------------------------------------------
    def flops(self, active_out: torch.Tensor) -> torch.Tensor:
        """FLOPs per sample of the conv computing active_out kernels, plus the gating module; zero input
        channels are not counted as saved."""
        c = self.conv
        per_kernel = 2 * (c.in_channels // c.groups) * c.kernel_size[0] * c.kernel_size[1] * self.out_pixels
        hidden = self.gates[0].fc1.out_features
        return active_out * per_kernel + 2 * hidden * (c.in_channels + c.out_channels)


def _stack(modules, name: str) -> torch.Tensor:
    return torch.stack([m.get_parameter(name) for m in modules])


def _affine(norms) -> tuple[torch.Tensor, torch.Tensor]:
    """Evaluation-mode batch norms as (scale, shift) per task and channel."""
    scale = torch.stack([n.weight / torch.sqrt(n.running_var + n.eps) for n in norms])
    shift = torch.stack([n.bias - n.running_mean * s for n, s in zip(norms, scale)])
    return scale, shift


def _rows(mask: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return mask.view(-1, *([1] * (p.dim() - 1)))


def convert(backbone: nn.Module, num_tasks: int, hidden: int = 16, tau: float = 2 / 3,
            open_bias: float = 1.0) -> list[GatedConv2d]:
    """Gate every conv that a batch norm follows (in registration order, as in all our backbones); returns the
    gated layers in registration order."""
    for module in list(backbone.modules()):
        children = list(module.named_children())
        for (name, child), (next_name, after) in zip(children, children[1:]):
            if type(child) is nn.Conv2d and isinstance(after, nn.BatchNorm2d):
                setattr(module, name, GatedConv2d(child, after, num_tasks, hidden, tau, open_bias))
                setattr(module, next_name, nn.Identity())
    layers = layers_of(backbone)
    if not layers:
        raise UserError(f"gated needs a conv backbone with batch norm (convnet, resnet18_reduced, resnet18, "
                        f"vgg16_bn); {type(backbone).__name__} has no conv to gate")
    return layers


def layers_of(backbone: nn.Module) -> list[GatedConv2d]:
    return [m for m in backbone.modules() if isinstance(m, GatedConv2d)]


def route(layers: list[GatedConv2d], tasks: list[int]) -> None:
    """Make the next forward run these tasks' paths (inputs stacked task-major when there are several)."""
    for layer in layers:
        layer.tasks = tasks
