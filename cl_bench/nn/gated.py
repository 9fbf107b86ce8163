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
        # On a sigmoid's range [0, 1], rounding half to even is the threshold soft > 0.5, in one op, in soft's dtype
        return torch.round(soft)

    @staticmethod
    def backward(ctx, grad):
        return grad


def uniform(shape, device: torch.device) -> torch.Tensor:
    """The float32 uniform draws a gate's noise is made of, kept off 0 and 1."""
    return torch.rand(shape, device=device).clamp_(1e-6, 1 - 1e-6)


def logistic(u: torch.Tensor) -> torch.Tensor:
    """The difference of two Gumbel(0, 1) draws, which is what a binary Gumbel-softmax adds to a logit."""
    return torch.log(u) - torch.log1p(-u)


def gumbel(u: torch.Tensor) -> torch.Tensor:
    """One Gumbel(0, 1) draw per logit (mean +0.577: lit-leo/cgate's gates, more of them open at the start)."""
    return -torch.log(-torch.log(u))


NOISE_OF_UNIFORM = {"logistic": logistic, "gumbel": gumbel}


def logistic_noise(like: torch.Tensor) -> torch.Tensor:
    return in_dtype(logistic(uniform(like.shape, like.device)), like.dtype)


def gumbel_noise(like: torch.Tensor) -> torch.Tensor:
    return in_dtype(gumbel(uniform(like.shape, like.device)), like.dtype)


def in_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x as dtype, without a call where it already is (x.to would return x itself, after an op call)."""
    return x if x.dtype == dtype else x.to(dtype)


GATE_NOISES = {"logistic": logistic_noise, "gumbel": gumbel_noise}


class _Density(torch.autograd.Function):
    """The mean over units of each unit's mean gate, mean(stack(means)) as before, with the backward that autograd
    gave that chain, to the bit (the gradient over L, then over each unit's gate count, spread over its gates), in
    1 + 2L ops where the chain's backward took 2 + 3L."""

    @staticmethod
    def forward(ctx, *gates):
        ctx.shapes = [g.shape for g in gates]
        return torch.stack([g.mean() for g in gates]).mean()

    @staticmethod
    def backward(ctx, grad):
        share = grad / len(ctx.shapes)
        return tuple((share / shape.numel()).expand(shape) for shape in ctx.shapes)


def density(units: list["GatedUnit"]) -> torch.Tensor:
    """1/L Σ_l ‖G^l‖₁ / c_out^l over the units, of their last forward, averaged over its samples."""
    return _Density.apply(*(unit.last_gates for unit in units))


def straight_through(soft: torch.Tensor) -> torch.Tensor:
    return _StraightThrough.apply(soft)


def gumbel_sigmoid(logits: torch.Tensor, tau: float, noise: str = "logistic",
                   drawn: torch.Tensor | None = None) -> torch.Tensor:
    """Binary gates sampled with a relaxed Bernoulli of temperature tau, hard in the forward pass; drawn: the noise
    (float32) where it was drawn beforehand (draw_noise), else drawn here."""
    noise = GATE_NOISES[noise](logits) if drawn is None else in_dtype(drawn, logits.dtype)
    return straight_through(torch.sigmoid((logits + noise) / tau))


class Gate(nn.Module):
    """One task's gating module for one unit: pool -> Linear(c_in, hidden) -> BN -> ReLU -> Linear(hidden, c_out)."""

    def __init__(self, c_in: int, c_out: int, hidden: int, open_bias: float | None):
        super().__init__()
        self.fc1 = nn.Linear(c_in, hidden)
        self.norm = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, c_out)
        if open_bias is not None:  # None: PyTorch's default initialisation, as the paper
            nn.init.constant_(self.fc2.bias, open_bias)

    def forward(self, x: torch.Tensor, norm: str = "train", owed: list | None = None) -> torch.Tensor:
        h = self.fc1(x.mean((2, 3)))
        # A one-sample batch (the tail of an epoch) has no batch statistics: use the running ones.
        norm = norm if self.training and h.shape[0] > 1 else "running"
        return self.fc2(F.relu(_normalise(self.norm, h, norm, owed)))


class TaskNorm(nn.Module):
    """A batch norm per task in place of a shared one: the routed task's in training, each row's own task's
    (as an affine of its running statistics) in a stacked evaluation."""

    def __init__(self, bn: nn.BatchNorm2d, num_tasks: int):
        super().__init__()
        self.bns = nn.ModuleList(nn.BatchNorm2d(bn.num_features, bn.eps, bn.momentum, bn.affine)
                                 for _ in range(num_tasks))
        self.tasks: list[int] = [0]
        self.norm = "train"  # how a training forward normalises (NORM_MODES; set by route)
        self.owed: list[torch.Tensor] = []  # batch counts its training forwards left to count_batches

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if self.training:
            return _normalise(self.bns[self.tasks[0]], z, self.norm, self.owed)
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
        self.frozen_rows: list[torch.Tensor] = []  # `frozen` viewed as each kernel parameter's rows (start_task)
        self.guarded = False  # whether the current task has frozen kernels to guard (start_task)
        self.drawn: torch.Tensor | None = None  # the next training forward's gate noise, where draw_noise drew it
        self.owed: list[torch.Tensor] = []  # see TaskNorm.owed (its gating module's batch norm)
        self._task_index: dict[tuple, torch.Tensor] = {}  # see task_index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        self.out_pixels = h.shape[2] * h.shape[3]
        if self.training:  # one task's path, routed alone
            logits = self.gates[self.tasks[0]](x, self.norm, self.owed)
            self.last_gates = (straight_through(torch.sigmoid(logits)) if self.hard
                               else gumbel_sigmoid(logits, self.tau, self.noise, self._take_drawn(logits)))
        else:
            self.last_gates = self._stacked_gates(x).to(h.dtype)
        return h * self.last_gates.view(*self.last_gates.shape, 1, 1)

    def _take_drawn(self, logits: torch.Tensor) -> torch.Tensor | None:
        """The noise draw_noise drew for this forward (None: the unit draws its own), used once."""
        drawn, self.drawn = self.drawn, None
        if drawn is not None and drawn.shape != logits.shape:
            raise RuntimeError(f"gate noise drawn for {tuple(drawn.shape)} logits; the forward has "
                               f"{tuple(logits.shape)}")
        return drawn

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
        """Remember the kernels' weights, so that steps that touch frozen ones (weight decay) can be undone, and view
        `frozen` as each kernel parameter's rows once for the task's steps (freeze() changes it in place, between
        tasks). A unit with no frozen kernel (all of them in the first task) has nothing to guard: a host read once a
        task spares its steps the mask and the restore."""
        self.guarded = bool(self.frozen.any())
        self.anchor = [p.detach().clone() for p in self.kernel_params()] if self.guarded else []
        self.frozen_rows = [_rows(self.frozen, p) for p in self.kernel_params()] if self.guarded else []

    @torch.no_grad()
    def mask_frozen_grads(self) -> None:
        """Zero the frozen kernels' gradient rows in place: a fill through the mask, with no host sync (a boolean
        index would read how many rows it selects), so that a captured step (StepGraph) can hold it."""
        if not self.guarded:
            return
        for p, rows in zip(self.kernel_params(), self.frozen_rows):
            if p.grad is not None:
                p.grad.masked_fill_(rows, 0)

    @torch.no_grad()
    def restore_frozen(self) -> None:
        """The frozen rows back to their anchor, written into the parameter by the select itself (one op)."""
        if not self.guarded:
            return
        for p, a, rows in zip(self.kernel_params(), self.anchor, self.frozen_rows):
            torch.where(rows, a, p, out=p)

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


def _normalise(bn: nn.BatchNorm1d | nn.BatchNorm2d, z: torch.Tensor, norm: str,
               owed: list | None = None) -> torch.Tensor:
    """z normalised by bn as `norm` says (NORM_MODES). In plain training with a momentum, what bn's forward does
    but for its batch count (num_batches_tracked, read only by a momentum of None), which is left in owed for
    count_batches to add with all the others in one op."""
    if norm == "train":
        if owed is None or bn.momentum is None or bn.num_batches_tracked is None or not bn.training:
            return bn(z)
        owed.append(bn.num_batches_tracked)
        return F.batch_norm(z, bn.running_mean, bn.running_var, bn.weight, bn.bias, True, bn.momentum, bn.eps)
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


def forward_order(units: list[GatedUnit], forward) -> list[GatedUnit]:
    """The units in the order in which forward() computes their gates, each at the end of its own forward (after
    the units nested in its body: a residual block's inner gate before its outer one): the order of their draws."""
    order = []
    handles = [unit.register_forward_hook(lambda unit, args, out: order.append(unit)) for unit in units]
    try:
        forward()
    finally:
        for handle in handles:
            handle.remove()
    return order


def draw_noise(units: list[GatedUnit], rows: int, device: torch.device) -> None:
    """The gate noise of the next sampled training forward of `rows` samples, for every unit at once (units in
    forward_order): one uniform draw split unit by unit, in the order and shapes in which the units would draw their
    own, so that the noise ops run once, not once a unit (on a CPU the same numbers, tests/test_launches.py; on CUDA
    the same distribution from one draw of the stream instead of one a unit). route() drops what a forward left."""
    kinds = {unit.noise for unit in units}
    if len(kinds) != 1:
        raise ValueError(f"one gate noise for all units, not {sorted(kinds)}")
    sizes = [rows * unit.out_channels for unit in units]
    noise = NOISE_OF_UNIFORM[kinds.pop()](uniform(sum(sizes), device))
    for unit, part in zip(units, noise.split(sizes)):
        unit.drawn = part.view(rows, unit.out_channels)


def count_batches(modules: list[GatedUnit | TaskNorm]) -> None:
    """Add to the batch counts of the batch norms that trained on a batch since the last call (_normalise), all in
    one op where nn.BatchNorm's forward adds to each in turn; route() calls it too, so that no count is left behind
    a forward its caller did not count."""
    owed = [count for m in modules for count in m.owed]
    if owed:
        torch._foreach_add_(owed, 1)
        for m in modules:
            m.owed.clear()


def route(modules: list[GatedUnit | TaskNorm], tasks: list[int], norm: str = "train", hard: bool = False) -> None:
    """Make the next forward of routed(backbone) run these tasks' paths (inputs stacked task-major when there are
    several). A training forward normalises as `norm` says (NORM_MODES) and, with hard, thresholds its gates as
    evaluation does."""
    if norm not in NORM_MODES:
        raise ValueError(f"norm {norm!r}: one of {', '.join(NORM_MODES)}")
    count_batches(modules)
    for m in modules:
        m.tasks, m.norm = tasks, norm
        if isinstance(m, GatedUnit):
            m.hard, m.drawn = hard, None
