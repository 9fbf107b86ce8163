"""Channel-gated networks (Abati et al., CVPR 2020): per task, a gating module decides per sample which output
channels of a shared block are computed, and every batch norm keeps per-task statistics and affines.

`convert(backbone, num_tasks)` puts the gates where the paper does, after the activation:
- a conv -> batch norm -> ReLU triple of a Sequential (convnet, VGG, ResNet's stem) becomes one GatedUnit;
- each residual block the backbone names (Backbone.residual_blocks: ResNet's) gets one gate after
  ReLU(BN1(conv1)) and one after ReLU(residual sum), the latter owning conv2 and the 1x1 shortcut conv, which have
  no gate of their own (lit-leo/cgate's ResNet-18 places them so);
- every batch norm becomes a TaskNorm (one BatchNorm2d per task), so that old tasks' statistics stay theirs.
A unit's gating module reads the unit's input (for a residual block, the block's input) and its hard 0/1 gates
multiply the unit's output; the kernels it guards are the output channels of the convs it owns.

The units run the paths of the tasks named by `route`: one task while training, or several stacked along the
batch dimension (task-major rows) in evaluation, where all gates and batch norms are batched tensor ops.
"""
import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..backbones import BACKBONES, Capability
from ..backbones.base import ResidualBlock, backbones_in
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
    return in_dtype(torch.log(u) - torch.log1p(-u), like.dtype)


def gumbel_noise(like: torch.Tensor) -> torch.Tensor:
    """One Gumbel(0, 1) draw per logit (mean +0.577: lit-leo/cgate's gates, more of them open at the start)."""
    u = torch.rand_like(like, dtype=torch.float32).clamp_(1e-6, 1 - 1e-6)
    return in_dtype(-torch.log(-torch.log(u)), like.dtype)


def in_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x as dtype, without a call where it already is (x.to would return x itself, after an op call)."""
    return x if x.dtype == dtype else x.to(dtype)


GATE_NOISES = {"logistic": logistic_noise, "gumbel": gumbel_noise}


def straight_through(soft: torch.Tensor) -> torch.Tensor:
    return _StraightThrough.apply(soft)


def gumbel_sigmoid(logits: torch.Tensor, tau: float, noise: str = "logistic") -> torch.Tensor:
    """Binary gates sampled with a relaxed Bernoulli of temperature tau, hard in the forward pass."""
    return straight_through(torch.sigmoid((logits + GATE_NOISES[noise](logits)) / tau))


class Gate(nn.Module):
    """One task's gating module for one unit: pool -> Linear(c_in, hidden) -> BN -> ReLU -> Linear(hidden, c_out)."""

    def __init__(self, c_in: int, c_out: int, hidden: int, open_bias: float | None):
        super().__init__()
        self.fc1 = nn.Linear(c_in, hidden)
        self.norm = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, c_out)
        if open_bias is not None:  # None: PyTorch's default initialisation, as the paper
            nn.init.constant_(self.fc2.bias, open_bias)

    def forward(self, x: torch.Tensor, norm: str = "train") -> torch.Tensor:
        h = self.fc1(x.mean((2, 3)))
        # A one-sample batch (the tail of an epoch) has no batch statistics: use the running ones.
        return self.fc2(F.relu(_normalise(self.norm, h, norm if self.training and h.shape[0] > 1 else "running")))


class TaskNorm(nn.Module):
    """A batch norm per task in place of a shared one: the routed task's in training, each row's own task's
    (as an affine of its running statistics) in a stacked evaluation."""

    def __init__(self, bn: nn.BatchNorm2d, num_tasks: int):
        super().__init__()
        self.bns = nn.ModuleList(nn.BatchNorm2d(bn.num_features, bn.eps, bn.momentum, bn.affine)
                                 for _ in range(num_tasks))
        self.tasks: list[int] = [0]
        self.norm = "train"  # how a training forward normalises (NORM_MODES; set by route)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if self.training:
            return _normalise(self.bns[self.tasks[0]], z, self.norm)
        n = z.shape[0] // len(self.tasks)
        scale, shift = (v.repeat_interleave(n, 0)[:, :, None, None] for v in _affine([self.bns[t] for t in self.tasks]))
        return z * scale + shift


class GatedUnit(nn.Module):
    """out = G_t(x) ⊙ body(x): task t's gating module reads the unit's input and picks the output channels.

    The unit guards the kernels of `convs` (the convs whose output channels are the unit's): `frozen` marks those
    some task has frozen; `usable[t]` those task t may fire once it has been learned (the kernels frozen by then),
    so that its path reads frozen weights only."""

    def __init__(self, body: nn.Module, convs: list[nn.Conv2d], c_in: int, num_tasks: int, hidden: int = 16,
                 tau: float = 2 / 3, open_bias: float | None = None, noise: str = "logistic"):
        super().__init__()
        self.body, self.tau, self.noise = body, tau, noise
        self.convs = convs  # a plain list: the convs are registered in body
        c_out = convs[0].out_channels
        self.out_channels = c_out
        self.gates = nn.ModuleList(Gate(c_in, c_out, hidden, open_bias) for _ in range(num_tasks))
        self.register_buffer("frozen", torch.zeros(c_out, dtype=torch.bool))
        self.register_buffer("usable", torch.ones(num_tasks, c_out, dtype=torch.bool))
        self.tasks: list[int] = [0]  # the paths the next forward runs; set by route()
        self.norm = "train"  # see TaskNorm.norm
        self.hard = False  # training forward with evaluation's hard gates instead of Gumbel samples (set by route)
        self.last_gates: torch.Tensor | None = None  # gates of the last forward, rows as the input's
        self.out_pixels = 0  # H×W of the last output, for FLOP counts
        self.anchor: list[torch.Tensor] = []  # the kernels' weights when the current task started
        self._task_index: dict[tuple, torch.Tensor] = {}  # see task_index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        self.out_pixels = h.shape[2] * h.shape[3]
        if self.training:  # one task's path, routed alone
            logits = self.gates[self.tasks[0]](x, self.norm)
            self.last_gates = (straight_through(torch.sigmoid(logits)) if self.hard
                               else gumbel_sigmoid(logits, self.tau, self.noise))
        else:
            self.last_gates = self._stacked_gates(x).to(h.dtype)
        return h * self.last_gates[:, :, None, None]

    def _stacked_gates(self, x: torch.Tensor) -> torch.Tensor:
        """Evaluation of every routed path's gates at once: per-row gate weights gathered by task, a hard
        threshold at logit 0, kernels a learned task may not use switched off."""
        tasks = self.task_index(x.device)
        gates = [self.gates[t] for t in self.tasks]
        pooled = x.mean((2, 3)).view(len(self.tasks), x.shape[0] // len(self.tasks), -1)
        h = torch.einsum("tnc,tkc->tnk", pooled, _stack(gates, "fc1.weight")) + _stack(gates, "fc1.bias")[:, None]
        scale, shift = _affine([g.norm for g in gates])
        h = F.relu(h * scale[:, None] + shift[:, None])
        logits = torch.einsum("tnk,tok->tno", h, _stack(gates, "fc2.weight")) + _stack(gates, "fc2.bias")[:, None]
        return ((logits > 0) & self.usable[tasks][:, None, :]).reshape(x.shape[0], -1)

    def task_index(self, device: torch.device) -> torch.Tensor:
        """The routed tasks as an index tensor on device, built the first time this task list is routed and kept:
        made afresh it would be a blocking host-to-device copy in every unit at every stacked forward (each step of
        the class scenario's task loss). The lists routed are few (one task, or the first k)."""
        key = (tuple(self.tasks), device)
        index = self._task_index.get(key)
        if index is None:
            index = self._task_index[key] = torch.tensor(self.tasks, device=device)
        return index

    # --- freezing -----------------------------------------------------------------------------------
    def kernel_params(self) -> list[torch.Tensor]:
        return [p for conv in self.convs for p in (conv.weight, conv.bias) if p is not None]

    def start_task(self) -> None:
        """Remember the kernels' weights, so that steps that touch frozen ones (weight decay) can be undone."""
        self.anchor = [p.detach().clone() for p in self.kernel_params()]

    @torch.no_grad()
    def mask_frozen_grads(self) -> None:
        """Zero the frozen kernels' gradient rows in place: a fill through the mask, with no host sync (a boolean
        index would read how many rows it selects), so that a captured step (StepGraph) can hold it."""
        for p in self.kernel_params():
            if p.grad is not None:
                p.grad.masked_fill_(_rows(self.frozen, p), 0)

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
        for conv in self.convs:
            fresh = copy.deepcopy(conv)
            fresh.reset_parameters()
            for p, f in zip([q for q in (conv.weight, conv.bias) if q is not None],
                            [q for q in (fresh.weight, fresh.bias) if q is not None]):
                p.copy_(torch.where(_rows(self.frozen, p), p, f))

    # --- cost ---------------------------------------------------------------------------------------
    def flops(self, active_out: torch.Tensor) -> torch.Tensor:
        """FLOPs per sample of the owned convs computing active_out kernels each, plus the gating module; zero
        input channels are not counted as saved."""
        per_kernel = sum(2 * (c.in_channels // c.groups) * c.kernel_size[0] * c.kernel_size[1] for c in self.convs)
        gate = self.gates[0]
        return active_out * per_kernel * self.out_pixels + 2 * gate.fc1.out_features * (
            gate.fc1.in_features + self.out_channels)


# How a training forward normalises a task's batch norms:
NORM_MODES = {
    "train": "the batch's statistics, moving the running ones (plain training)",
    "running": "the running statistics, left as they are (the normalisation evaluation applies)",
    "batch": "the batch's statistics, leaving the running ones as they are",
}


def _normalise(bn: nn.BatchNorm1d | nn.BatchNorm2d, z: torch.Tensor, norm: str) -> torch.Tensor:
    if norm == "train":
        return bn(z)
    stats = (bn.running_mean, bn.running_var) if norm == "running" else (None, None)
    return F.batch_norm(z, *stats, bn.weight, bn.bias, norm == "batch", 0.0, bn.eps)


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
            open_bias: float | None = None, noise: str = "logistic") -> list[GatedUnit]:
    """Gate the backbone in place as the module docstring says; returns its gated units in registration order."""
    def unit(body, convs, c_in):
        return GatedUnit(body, convs, c_in, num_tasks, hidden, tau, open_bias, noise)

    residual = {id(block) for b in backbones_in(backbone) for block in b.residual_blocks()}
    blocks = [(parent, name, child) for parent in backbone.modules() for name, child in parent.named_children()
              if id(child) in residual]
    in_blocks = {id(m) for _, _, block in blocks for m in block.modules()}
    for seq in [m for m in backbone.modules() if isinstance(m, nn.Sequential) and id(m) not in in_blocks]:
        _gate_triples(seq, unit, num_tasks)
    for parent, name, block in blocks:
        c_in = block.inner()[0].in_channels
        setattr(parent, name, unit(_gate_block(block, unit, num_tasks), block.output_convs(), c_in))
    layers = layers_of(backbone)
    if not layers:
        able = ", ".join(name for name, (cls, _) in BACKBONES.items() if Capability.conv_bn in cls.capabilities)
        raise UserError(f"gated needs a conv backbone with batch norm ({able}); {type(backbone).__name__} has no "
                        "conv to gate")
    owned = {id(c) for layer in layers for c in layer.convs}
    norms = {id(bn) for norm in norms_of(backbone) for bn in norm.bns}
    if any(isinstance(m, nn.Conv2d) and id(m) not in owned or isinstance(m, nn.BatchNorm2d) and id(m) not in norms
           for m in backbone.modules()):
        raise UserError(f"gated cannot guard every conv and batch norm of {type(backbone).__name__}: old tasks' "
                        "paths would change")
    return layers


def _gate_block(block: ResidualBlock, unit, num_tasks: int) -> ResidualBlock:
    """One gate after ReLU(BN1(conv1)), inside the block, and per-task batch norms; the block's own forward stays
    as it is (its ReLU of the gated, non-negative output changes nothing)."""
    conv1, bn1, _ = block.inner()
    block.replace_first(unit(nn.Sequential(conv1, TaskNorm(bn1, num_tasks), nn.ReLU()), [conv1], conv1.in_channels))
    block.replace_norms(lambda bn: TaskNorm(bn, num_tasks))
    return block


def _gate_triples(seq: nn.Sequential, unit, num_tasks: int) -> None:
    """Each conv -> batch norm (-> ReLU) of the Sequential becomes one unit at the conv's place; the batch norm's
    and the activation's places become Identity, so that the other modules keep their names."""
    children = list(seq.named_children())
    for i, (name, conv) in enumerate(children[:-1]):
        bn_name, bn = children[i + 1]
        if type(conv) is not nn.Conv2d or not isinstance(bn, nn.BatchNorm2d):
            continue
        body = [conv, TaskNorm(bn, num_tasks)]
        setattr(seq, bn_name, nn.Identity())
        if i + 2 < len(children) and isinstance(children[i + 2][1], nn.ReLU):
            body.append(nn.ReLU())
            setattr(seq, children[i + 2][0], nn.Identity())
        setattr(seq, name, unit(nn.Sequential(*body), [conv], conv.in_channels))


def layers_of(backbone: nn.Module) -> list[GatedUnit]:
    return [m for m in backbone.modules() if isinstance(m, GatedUnit)]


def norms_of(backbone: nn.Module) -> list[TaskNorm]:
    return [m for m in backbone.modules() if isinstance(m, TaskNorm)]


def routed(backbone: nn.Module) -> list[GatedUnit | TaskNorm]:
    """The modules route() sets: found once, so that the steps that route three times do not walk the backbone."""
    return [m for m in backbone.modules() if isinstance(m, GatedUnit | TaskNorm)]


def build_index(modules: list["GatedUnit | TaskNorm"], tasks: list[int], device: torch.device) -> None:
    """The index a stacked forward of these tasks reads (GatedUnit.task_index), built now, between steps: built by a
    step's first forward, it would be a host-to-device copy inside that step."""
    for m in modules:
        if isinstance(m, GatedUnit):
            m.tasks = tasks
            m.task_index(device)


def route(modules: list[GatedUnit | TaskNorm], tasks: list[int], norm: str = "train", hard: bool = False) -> None:
    """Make the next forward of routed(backbone) run these tasks' paths (inputs stacked task-major when there are
    several). A training forward normalises as `norm` says (NORM_MODES) and, with hard, thresholds its gates as
    evaluation does."""
    if norm not in NORM_MODES:
        raise ValueError(f"norm {norm!r}: one of {', '.join(NORM_MODES)}")
    for m in modules:
        m.tasks, m.norm = tasks, norm
        if isinstance(m, GatedUnit):
            m.hard = hard
