"""Masked conv and linear layers for PackNet, Piggyback and CPG: one shared weight tensor of which each task
sees its own subset.

Every weight has an owner in a uint8 mask: 0 = free, k = task k-1. Task t computes with the weights it owns
(owner t+1) plus the weights of earlier tasks (owner 1..t), all of them (PackNet) or those its binary
picking mask keeps (Piggyback, CPG). While task t is learned its picking mask is a real-valued score,
binarised in the forward pass with a straight-through gradient; afterwards only the bits are kept.

`convert(backbone, num_tasks, ...)` swaps every Conv2d and Linear for its masked twin, with a bias per task,
and every batch norm for a TaskBatchNorm holding one batch norm per task. `set_task` names the task the next
forward computes for. CPG's growth widens layers by appending output channels (and the next layer's input
channels); each task remembers the output widths it was learned at and computes on that leading slice, so
old tasks run the very same arithmetic after any growth.
"""
import contextlib
import copy
import dataclasses
import itertools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..backbones.base import backbones_in
from ..errors import UserError


class _BinarizeSTE(torch.autograd.Function):
    """Forward: 1 where the score is above the threshold, else 0. Backward: the gradient unchanged."""

    @staticmethod
    def forward(ctx, score, threshold):
        return (score > threshold).to(score.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def binarize(score: torch.Tensor, threshold: float) -> torch.Tensor:
    """The straight-through binariser of Piggyback's real-valued masks."""
    return _BinarizeSTE.apply(score, threshold)


def init_weight_(weight: torch.Tensor, official: bool) -> torch.Tensor:
    """Initialise a conv or linear weight in place: as ivclab/CPG's models do (conv kaiming-normal over fan-out,
    linear N(0, 0.01)), or with PyTorch's own default."""
    if not official:
        return nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    if weight.dim() == 4:
        return nn.init.kaiming_normal_(weight, mode="fan_out", nonlinearity="relu")
    return nn.init.normal_(weight, 0.0, 0.01)


def _versions(*tensors) -> tuple:
    """Which tensors these are and how often each was changed in place: a cache key that goes stale with them."""
    return tuple((id(x), x._version) for x in tensors if x is not None)


@dataclass(frozen=True)
class Census:
    """How many weights of a layer each owner value holds, as the host knows it without reading the owner tensor,
    so that no training step waits for the device to decide what to mask or how many weights to release: counted
    after each change made between steps (claim, growth, loading), and carried through the releases made within
    steps (CPG's pruning ramp), which move weights from the task learning (`fluid`) to free: the two counts merge
    under 0, their sum (the pool a release ranks) unchanged."""

    key: tuple  # _versions(owner) the counts hold for
    counts: dict  # owner value -> weights holding it (under 0, fluid's too once merged)
    fluid: int | None = None

    @staticmethod
    def of(owner: torch.Tensor) -> "Census":
        values, counts = torch.unique(owner, return_counts=True)
        return Census(_versions(owner), dict(zip(values.tolist(), counts.tolist(), strict=True)))

    def present(self) -> frozenset:
        """The owner values some weight holds (after a release, both 0 and fluid, though one may be gone)."""
        merged = {0, self.fluid} if self.fluid is not None and self.counts.get(0) else set()
        return frozenset({value for value, n in self.counts.items() if n} | merged)

    def pool(self, value: int) -> int | None:
        """How many weights are free or hold owner value `value` (None: unknown on the host)."""
        if self.fluid not in (None, value):
            return None
        return self.counts.get(0, 0) + (0 if self.fluid == value else self.counts.get(value, 0))

    def released(self, value: int, owner: torch.Tensor) -> "Census":
        """The census after weights of owner value `value` were released (freed) in owner."""
        counts = {**self.counts, 0: self.pool(value)}
        counts.pop(value, None)
        return Census(_versions(owner), counts, value)


@contextlib.contextmanager
def census_kept(module: nn.Module):
    """Around a write that leaves every masked layer's owners as they were in value (DistributedDataParallel's
    broadcast of rank 0's buffers at each phase's wrapping: the ranks' owners are alike already): a census current
    before stays current after, rather than counted again (a read of the owners) at the phase's first step."""
    current = [(m, m._counted) for m in module.modules() if isinstance(m, MaskedLayer)
               and m._counted is not None and m._counted.key == _versions(m.owner)]
    yield
    for m, counted in current:
        m._counted = dataclasses.replace(counted, key=_versions(m.owner))


class MaskedLayer(nn.Module):
    """What MaskedConv2d and MaskedLinear share: the weight, its owners, the picking masks, per-task biases."""

    def __init__(self, layer: nn.Module, num_tasks: int, picking: tuple[float, float] | None,
                 official_init: bool = False):
        super().__init__()
        self.official_init = official_init  # also for the weights growth adds
        self.weight = nn.Parameter(layer.weight.detach().clone())
        self.register_buffer("owner", torch.zeros_like(self.weight, dtype=torch.uint8))
        # The output width each task computes at: growth widens the tasks not yet learned.
        self.register_buffer("task_out", torch.full((num_tasks,), self.weight.shape[0], dtype=torch.long,
                                                      device=self.weight.device))
        if official_init:
            with torch.no_grad():
                init_weight_(self.weight, True)
        bias = None if layer.bias is None else (torch.zeros_like(layer.bias) if official_init else layer.bias)
        self.biases = (nn.ParameterList(nn.Parameter(bias.detach().clone()) for _ in range(num_tasks))
                       if bias is not None else None)
        self.register_parameter("score", None)  # the picking mask of the task being learned, while it is
        # picking: (initial score, threshold) of the picking masks, or None for a method without them
        self.picking = picking is not None
        self.mask_init, self.mask_threshold = picking or (0.0, 0.0)
        self.initial_out = self.weight.shape[0]
        self.task = 0  # the task the next forward computes for
        self.learning = None  # the task being learned, whose picking mask is still a real-valued score
        self._widths = self.task_out.tolist()  # task_out on the host: read every forward without a sync
        self._folded = None  # (key, masked weight) of the last task evaluated
        self._masks = None  # (key, masks) of the task being computed: see constant_masks
        self._trainable = None  # (key, mask) of the weights the task being learned may change
        self._released = None  # (key, mask) of the free weights
        self._counted = None  # the owners' Census: see census()
        # Whether free weights still compute for the task being learned: ivclab/CPG's gradual pruning, where a
        # released weight stays in the forward (frozen) until the epoch's end zeroes it (set by cpg.py).
        self.free_compute = False

    # --- the forward weight ---------------------------------------------------------------------------
    def pick(self, task_id: int) -> torch.Tensor | None:
        return getattr(self, f"pick_{task_id}", None)

    def masked_weight(self, in_width: int) -> torch.Tensor:
        w = self.weight[: self._widths[self.task], :in_width]
        masks = self.constant_masks(in_width)
        if len(masks) == 2:  # the task being learned: its own weights, and the earlier ones its score picks
            own, earlier = masks
            if earlier is None:  # no earlier weights here (the first task): nothing to pick, no score to apply
                return w if own is None else w * own
            score = self.score[: self._widths[self.task], :in_width]
            return w * ((1.0 if own is None else own) + earlier * binarize(score, self.mask_threshold))
        return w if masks[0] is None else w * masks[0]

    def constant_masks(self, in_width: int) -> tuple[torch.Tensor, ...]:
        """The parts of the task's mask that change only with ownership or picking, as float tensors: built
        once and reused by every step, so that a training step multiplies by the mask instead of comparing the
        owner tensor afresh (on small layers those comparisons cost as much as the matmul). (mask,) for a task
        computing with fixed weights; (own, earlier) for the task being learned with a picking score. A mask
        of all ones is None (the newest task of PackNet computes with every weight), and so is an `earlier` of
        all zeros (the first task has nothing to pick): the forward then skips the product, which on small
        layers costs as much as the matmul. That is decided on the host, from the owners the census counts."""
        t, k = self.task, self.task + 1
        learning = self.score is not None and t == self.learning
        pick = None if learning or not self.picking else self.pick(t)

        free = self.free_compute and t == self.learning

        def build() -> tuple[torch.Tensor, ...]:
            own, dtype = self.owner[: self._widths[t], :in_width], self.weight.dtype
            mine = (own == k) | (own == 0) if free else own == k
            if learning:
                return mine.to(dtype), ((own > 0) & (own < k)).to(dtype)
            if pick is None:
                return ((mine | ((own > 0) & (own < k))).to(dtype),)
            return ((mine | ((own > 0) & (own < k) & pick[: self._widths[t], :in_width])).to(dtype),)

        if torch.compiler.is_compiling():  # a compiled graph fuses the comparisons anyway
            return build()
        key = (t, in_width, learning, free, self._widths[t], self.weight.dtype, *_versions(self.owner, pick))
        return self._memo("_masks", key, lambda: self._drop_trivial(build(), learning, free, pick is not None))

    def _drop_trivial(self, masks: tuple[torch.Tensor, ...], learning: bool, free: bool,
                      picked: bool) -> tuple[torch.Tensor | None, ...]:
        """The masks with an all-ones one (and, while learning, an all-zeros `earlier`) as None, decided from the
        owners the layer's census holds, without reading the masks. The census is of the whole layer, the masks of
        the task's slice (the earlier tasks' weights all lie within it): a mask all ones in the slice but not in
        the layer, or one a pick makes all ones, is kept, and multiplying by ones changes no value."""
        present, k = self.census().present(), self.task + 1
        mine = {0, k} if free else {k}
        if learning:
            own, earlier = masks
            return (None if present <= mine else own), (None if all(v == 0 or v >= k for v in present) else earlier)
        computing = mine if picked else mine | set(range(1, k))  # the weights a picked task surely computes with
        return (None if present <= computing else masks[0]),

    def weight_for(self, in_width: int) -> torch.Tensor:
        """The task's masked weight; in evaluation folded once per task rather than recomputed per batch."""
        if self.training or torch.is_grad_enabled():
            return self.masked_weight(in_width)
        key = (self.task, in_width, *_versions(self.weight, self.owner, self.score, self.pick(self.task)))
        return self._memo("_folded", key, lambda: self.masked_weight(in_width).contiguous())

    def _memo(self, slot: str, key: tuple, make):
        """make(), kept in attribute `slot` as (key, value) and made again only when key changes."""
        held = getattr(self, slot)
        if held is None or held[0] != key:
            held = (key, make())
            setattr(self, slot, held)
        return held[1]

    def bias_for(self) -> torch.Tensor | None:
        return None if self.biases is None else self.biases[self.task]

    def train(self, mode: bool = True):
        self._folded = None  # weights may change in training: the fold lives from one mode switch to the next
        return super().train(mode)

    # --- ownership --------------------------------------------------------------------------------------
    @torch.no_grad()
    def inherit(self, task_id: int) -> None:
        """task_id's biases start from those task_id - 1 ended with, as the official code carries them over."""
        if self.biases is not None and task_id > 0:
            prev, new = self.biases[task_id - 1], self.biases[task_id]
            new[: prev.shape[0]] = prev[: new.shape[0]]

    @torch.no_grad()
    def claim(self, task_id: int) -> None:
        """Give every free weight to task_id, to be trained and partly released again."""
        self.owner.masked_fill_(self.owner == 0, task_id + 1)
        self.weight.requires_grad_(task_id + 1 in self.census().present())  # counted afresh, before any step

    def trainable(self, task_id: int) -> torch.Tensor:
        return self.owner == task_id + 1

    def trainable_mask(self, task_id: int) -> torch.Tensor | None:
        """trainable(task_id) as 0/1 in the weight's dtype, kept while ownership is unchanged: every training
        step multiplies the gradient by it (on CPUs a product is ~20× faster than a boolean fill or compare).
        None when the task owns every weight (PackNet's and CPG's first task before pruning): nothing to mask."""
        def build():
            owns_all = self.census().present() <= {task_id + 1}
            return None if owns_all else self.trainable(task_id).to(self.weight.dtype)
        key = (task_id, self.weight.dtype, *_versions(self.owner))
        return self._memo("_trainable", key, build)

    @torch.no_grad()
    def release(self, task_id: int, sparsity: float, cutoff: bool = False) -> None:
        """Prune task_id's weights by magnitude until `sparsity` of the weights it claimed (its own and those
        already released) are free again. By default exactly that many, the free ones first, and the released
        weights leave the forward pass with value 0 at once. With `cutoff`, ivclab/CPG's rule (utils/prune.py
        _pruning_mask): the magnitude ranked at that count among all the claimed weights (free ones with the
        values they still hold) is the cutoff, every own weight at or below it is released, and nothing is
        zeroed here (the caller zeroes at the epoch's end)."""
        census, k = self.census(), task_id + 1
        pool_size = census.pool(k)
        if pool_size is None:  # another task released since the last count: count again
            census = self._counted = Census.of(self.owner)
            pool_size = census.pool(k)
        n_release = round(sparsity * pool_size)  # the pool's size is on the host: no read within a step
        if n_release < 1:
            return
        pool = (self.owner == k) | (self.owner == 0)
        if cutoff:
            # the pool's n-th smallest magnitude, ranked among the layer's (the rest at +inf): no gather of the
            # pool, whose size would have to come to the host
            magnitude = self.weight.abs()
            kth = magnitude.masked_fill(~pool, float("inf")).flatten().kthvalue(n_release).values
            self.owner.masked_fill_((magnitude <= kth) & (self.owner == k), 0)
            self._counted = census.released(k, self.owner)
            return
        magnitude = self.weight.abs().masked_fill(~pool, float("inf")).masked_fill(self.owner == 0, -1.0)
        idx = torch.topk(magnitude.flatten(), n_release, largest=False, sorted=False).indices
        # Flat indices count in logical order, whatever the memory format (channels_last on GPUs).
        drop = torch.zeros(self.owner.numel(), dtype=torch.bool, device=idx.device)
        drop[idx] = True
        self.owner.masked_fill_(drop.view(self.owner.shape), 0)
        self._counted = census.released(k, self.owner)
        self.zero_released()

    def census(self) -> Census:
        """The owners' census (Census): counted again, a read of the owner tensor, only after a change that did
        not carry it (claim, growth and loading count it at once, between steps)."""
        if self._counted is None or self._counted.key != _versions(self.owner):
            self._counted = Census.of(self.owner)
        return self._counted

    @torch.no_grad()
    def zero_released(self) -> None:
        """Set the free weights to 0: the comparison is kept while ownership is unchanged. CPG's gradual pruning
        calls this at each epoch's end as ivclab/CPG does (Manager.validate's apply_mask, utils/manager.py:105;
        utils/prune.py:88, the per-step zeroing, is commented out), or after every step with
        method.prune_timing=immediate (PackNet's make_pruned_zero)."""
        released = self._memo("_released", _versions(self.owner), lambda: self.owner == 0)
        self.weight.masked_fill_(released, 0.0)

    def start_picking(self, task_id: int) -> None:
        """A real-valued picking mask for task_id over the weights earlier tasks own (Piggyback's init)."""
        self._masks = None
        self.learning = task_id
        if self.picking and task_id > 0:
            self.score = nn.Parameter(torch.full_like(self.weight, self.mask_init))

    @torch.no_grad()
    def freeze_picking(self, task_id: int) -> None:
        """Keep task_id's picking mask as bits and drop its score."""
        if self.score is not None:
            self.register_buffer(f"pick_{task_id}", self.score > self.mask_threshold)
        self.score = None
        self.learning = None
        self._masks = None

    # --- growth -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def widen(self, out_width: int | None, in_width: int | None, from_task: int) -> None:
        """Append output and/or input channels, owned by from_task (the task being learned) and freshly
        initialised; the tasks from from_task on compute at the new output width."""
        old = self.weight
        o0, i0 = old.shape[:2]
        o1, i1 = max(o0, out_width or o0), max(i0, in_width or i0)
        if (o1, i1) == (o0, i0):
            return
        shape = (o1, i1, *old.shape[2:])
        weight = init_weight_(torch.empty(shape, dtype=old.dtype, device=old.device), self.official_init)
        weight[:o0, :i0] = old
        self.weight = nn.Parameter(in_format(weight, memory_format(old)))  # trainable: the new weights are from_task's
        self.owner = _padded(self.owner, shape, from_task + 1)
        if self.score is not None:
            self.score = nn.Parameter(_padded(self.score, shape, self.mask_init))
        for name, pick in list(self._buffers.items()):
            if name.startswith("pick_"):
                self._buffers[name] = _padded(pick, shape, False)
        if o1 > o0:
            for j in range(from_task, len(self._widths)):
                if self.biases is not None:
                    self.biases[j] = nn.Parameter(_padded(self.biases[j].detach(), (o1,), 0.0))
            self.task_out[from_task:] = o1
            self._widths = self.task_out.tolist()
        self._folded = self._masks = self._trainable = self._released = None
        self.census()  # counted now, between steps

    # --- loading: take the shapes of the state first (a grown checkpoint into a freshly built layer) -------
    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        fmt = memory_format(self.weight)  # the layer's (channels_last on GPUs), kept by the tensors made here
        for name in ("weight", "score"):
            value = state_dict.get(prefix + name)
            current = getattr(self, name)
            if value is not None and (current is None or current.shape != value.shape):
                setattr(self, name, nn.Parameter(in_format(value.new_empty(value.shape).to(self.owner.device), fmt),
                                                 requires_grad=True))
        for key, value in state_dict.items():
            name = key[len(prefix):]
            if key.startswith(prefix) and (name == "owner" or name.startswith("pick_")):
                if getattr(self, name, None) is None or getattr(self, name).shape != value.shape:
                    self.register_buffer(name, in_format(torch.empty(value.shape, dtype=value.dtype,
                                                                     device=self.owner.device), fmt))
        if self.biases is not None:
            for j in range(len(self.biases)):
                value = state_dict.get(f"{prefix}biases.{j}")
                if value is not None and value.shape != self.biases[j].shape:
                    self.biases[j] = nn.Parameter(value.new_empty(value.shape).to(self.owner.device))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, errors)
        self._widths = self.task_out.tolist()
        self._folded = self._masks = self._trainable = self._released = None
        self.census()  # counted now, between steps


class MaskedConv2d(MaskedLayer):
    def __init__(self, conv: nn.Conv2d, *args):
        if conv.groups != 1:
            raise UserError("masked layers support ungrouped convolutions only (groups=1)")
        super().__init__(conv, *args)
        self.stride, self.padding, self.dilation = conv.stride, conv.padding, conv.dilation

    def forward(self, x):
        return F.conv2d(x, self.weight_for(x.shape[1]), self.bias_for(), self.stride, self.padding, self.dilation)


class MaskedLinear(MaskedLayer):
    def forward(self, x):
        return F.linear(x, self.weight_for(x.shape[-1]), self.bias_for())


class TaskBatchNorm(nn.Module):
    """One batch norm per task; growth widens those of the tasks not yet learned."""

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm, num_tasks: int):
        super().__init__()
        self.bns = nn.ModuleList(copy.deepcopy(bn) for _ in range(num_tasks))
        self.task = 0

    def forward(self, x):
        return self.bns[self.task](x)

    @torch.no_grad()
    def inherit(self, task_id: int) -> None:
        """task_id's batch norm starts from the one task_id - 1 ended with (statistics included)."""
        if task_id > 0:
            prev, new = self.bns[task_id - 1], self.bns[task_id]
            for a, b in zip((*new.parameters(), *new.buffers()), (*prev.parameters(), *prev.buffers())):
                if a.dim() == 1:
                    a[: b.shape[0]] = b[: a.shape[0]]
                else:
                    a.copy_(b)

    @torch.no_grad()
    def widen(self, width: int, from_task: int) -> None:
        for j in range(from_task, len(self.bns)):
            old = self.bns[j]
            if old.num_features < width:
                new = _like_bn(old, width)
                for name, value in (*old.named_parameters(), *old.named_buffers()):
                    if value.dim() == 1:
                        getattr(new, name)[: old.num_features] = value
                    else:
                        getattr(new, name).copy_(value)
                self.bns[j] = new

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        for j, bn in enumerate(self.bns):
            value = state_dict.get(f"{prefix}bns.{j}.running_mean", state_dict.get(f"{prefix}bns.{j}.weight"))
            if value is not None and value.shape[0] != bn.num_features:
                self.bns[j] = _like_bn(bn, value.shape[0])
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, errors)


def _like_bn(bn, width):
    device = next(itertools.chain(bn.parameters(), bn.buffers())).device
    return type(bn)(width, eps=bn.eps, momentum=bn.momentum, affine=bn.affine,
                    track_running_stats=bn.track_running_stats).to(device)


def _padded(x: torch.Tensor, shape, fill) -> torch.Tensor:
    """x in the leading corner of a tensor of `shape` filled with `fill` (x is cut where it is larger: a
    picking mask widened by an attempt that a restore has since narrowed the layer back from), in x's memory
    format."""
    out = torch.full(shape, fill, dtype=x.dtype, device=x.device)
    corner = tuple(slice(0, min(a, b)) for a, b in zip(x.shape, shape))
    out[corner] = x[corner]
    return in_format(out, memory_format(x))


def memory_format(x: torch.Tensor) -> torch.memory_format:
    """channels_last where x is laid out so (a conv weight of a run with hardware.channels_last), else contiguous.
    Told by the strides themselves: a 1x1 kernel's are contiguous either way, and only its strides say which."""
    if x.dim() == 4 and x.stride() == torch.empty(x.shape, device="meta", memory_format=torch.channels_last).stride():
        return torch.channels_last
    return torch.contiguous_format


def in_format(x: torch.Tensor, fmt: torch.memory_format) -> torch.Tensor:
    """x (made contiguous, values drawn in logical order) laid out in fmt: the same values, so a run computes
    alike whichever layout its layers keep."""
    if fmt == torch.contiguous_format or x.dim() != 4:
        return x
    return torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=fmt).copy_(x)


# --- whole networks ---------------------------------------------------------------------------------------
def released_share(layers: list[MaskedLayer], task_id: int) -> float:
    """The sparsity task_id's masks reach: the share of the weights it claimed (its own, and the free ones, which it
    claimed and released: every free weight while it is learned) that are free, whatever a schedule aimed at."""
    owned = sum(int(layer.trainable(task_id).sum()) for layer in layers)
    free = sum(int((layer.owner == 0).sum()) for layer in layers)
    return free / (owned + free) if owned + free else 0.0


def convert(module: nn.Module, num_tasks: int, picking: tuple[float, float] | None = None,
            official_init: bool = False) -> nn.Module:
    """Swap, in place, every Conv2d / Linear for its masked twin and every batch norm for a TaskBatchNorm.
    picking: (initial score, threshold) of per-task picking masks (Piggyback, CPG), None for none (PackNet);
    official_init: initialise the weights as ivclab/CPG does (see init_weight_), else keep the backbone's."""
    for name, child in module.named_children():
        if isinstance(child, nn.Conv2d):
            setattr(module, name, MaskedConv2d(child, num_tasks, picking, official_init))
        elif isinstance(child, nn.Linear):
            setattr(module, name, MaskedLinear(child, num_tasks, picking, official_init))
        elif isinstance(child, nn.modules.batchnorm._BatchNorm):
            setattr(module, name, TaskBatchNorm(child, num_tasks))
        else:
            convert(child, num_tasks, picking, official_init)
    return module


def masked_layers(module: nn.Module) -> list[MaskedLayer]:
    return [m for m in module.modules() if isinstance(m, MaskedLayer)]


def set_task(module: nn.Module, task_id: int) -> None:
    for m in module.modules():
        if isinstance(m, (MaskedLayer, TaskBatchNorm)):
            m.task = task_id


def growth_groups(module: nn.Module) -> list[tuple[MaskedLayer, TaskBatchNorm | None, MaskedLayer | None]]:
    """(producer, its batch norm, consumer) triples whose shared width growth widens, in each backbone of module
    (the backbone, or a method holding it) as the backbone describes itself (backbones/base.py).

    A residual block's inner triple (conv1, norm1, conv2) widens only inside, so the shortcut keeps its shape. A
    plain chain (mlp, convnet, vgg) widens every layer's output, the last one's too (consumer None: the heads read
    it), as ivclab/CPG's VGG widens its last feature layer."""
    groups = []
    for backbone in backbones_in(module):
        blocks = [block.inner() for block in backbone.residual_blocks()]
        if blocks:
            groups += [(conv1, bn1, conv2) for conv1, bn1, conv2 in blocks if isinstance(conv1, MaskedConv2d)
                       and isinstance(bn1, TaskBatchNorm) and isinstance(conv2, MaskedConv2d)]
        elif backbone.chain():
            groups += _chain_groups(backbone.chain())
        else:
            raise UserError(f"growth needs a backbone that names its residual blocks or its chain of layers "
                            f"(backbones/base.py); {type(backbone).__name__} names neither")
    return groups


def _chain_groups(chain: list[nn.Module]) -> list[tuple[MaskedLayer, TaskBatchNorm | None, MaskedLayer | None]]:
    """Each masked layer of the chain with the batch norm after it and the masked layer that reads it."""
    groups, producer, bn = [], None, None
    for m in chain:
        if isinstance(m, TaskBatchNorm):
            bn = m
        elif isinstance(m, MaskedLayer):
            if producer is not None:
                groups.append((producer, bn, m))
            producer, bn = m, None
    return groups + ([(producer, bn, None)] if producer is not None else [])


def widen(module: nn.Module, multiplier: float, from_task: int) -> int | None:
    """Grow the shared widths to int(initial width × sqrt(multiplier)), as ivclab/CPG sizes its layers
    (multiplier counts parameters); returns the new width of the features the heads read, or None when the
    network's output keeps its width (residual networks)."""
    features = None
    for producer, bn, consumer in growth_groups(module):
        width = int(producer.initial_out * math.sqrt(multiplier))
        producer.widen(width, None, from_task)
        if bn is not None:
            bn.widen(width, from_task)
        if consumer is None:
            features = width
        else:
            consumer.widen(None, width, from_task)
    return features
