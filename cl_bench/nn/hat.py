"""Layers for HAT (Serrà et al., ICML 2018): each conv or linear layer of a plain chain backbone gets a task
embedding per output unit (channel of a conv, unit of a linear layer), and its output is scaled by the
attention a = σ(s·e_t) of the task being run.

`convert(backbone, num_tasks, s_max, batch_norm)` swaps every Conv2d / Linear for a HATLayer wrapping it, in
place. A batch norm that follows a conv either goes (batch_norm="none": the official networks have none, and
the conv gets a bias in its place, as their convs have) or becomes one batch norm per task placed before the
attention (batch_norm="per_task"). The attention multiplies the layer's output before the ReLU and max-pool
that follow it, which equals the official placement after them because a ≥ 0 scales each unit alone.
"""
import torch
from torch import nn

from ..backbones import Capability, require
from ..errors import UserError


class HATLayer(nn.Module):
    """A conv or linear layer with a task embedding per output unit: out = a_t ⊙ [BN_t](layer(x)).

    `cumulative` is a_{≤t} of the tasks learned so far, the elementwise max of their attentions at s_max;
    `s` the scale of the training forward (annealed by the method), evaluation runs at s_max."""

    def __init__(self, layer: nn.Conv2d | nn.Linear, bn: nn.BatchNorm2d | None, num_tasks: int, s_max: float):
        super().__init__()
        self.layer = layer
        self.units = layer.out_channels if isinstance(layer, nn.Conv2d) else layer.out_features
        # An embedding row per task, drawn as nn.Embedding draws its weights (N(0, 1)), as the official nets.
        self.embedding = nn.Parameter(torch.randn(num_tasks, self.units))
        self.bns = None if bn is None else nn.ModuleList(
            nn.BatchNorm2d(bn.num_features, bn.eps, bn.momentum, bn.affine) for _ in range(num_tasks))
        self.register_buffer("cumulative", torch.zeros(self.units))
        # A tensor, so that changing it each step neither syncs nor makes a compiled backbone recompile.
        self.register_buffer("s", torch.ones(()), persistent=False)
        self.s_max = s_max
        self.task = 0
        self.previous: HATLayer | None = None  # the layer whose units this one reads (None: the input)

    def attention(self, task_id: int, s: float | torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(s * self.embedding[task_id])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.layer(x)
        if self.bns is not None:
            z = self.bns[self.task](z)
        a = self.attention(self.task, self.s if self.training else self.s_max)
        return z * (a.view(1, -1, 1, 1) if z.dim() == 4 else a.view(1, -1))

    # --- the weights' gradient masks ------------------------------------------------------------------
    def input_attention(self, per_unit: torch.Tensor) -> torch.Tensor:
        """A per-unit vector of the previous layer spread over this layer's inputs: a conv reads channels,
        a linear layer after a flatten reads each channel at every spatial position."""
        width = self.layer.in_channels if isinstance(self.layer, nn.Conv2d) else self.layer.in_features
        return per_unit.repeat_interleave(width // per_unit.numel())

    @torch.no_grad()
    def gradient_masks(self) -> dict[nn.Parameter, torch.Tensor]:
        """1 - min(a_{<t} of the weight's output unit, a_{<t} of its input unit) for the weight, 1 - a_{<t} of
        the output unit for the bias: what multiplies their gradients while the next task trains."""
        w = self.layer.weight
        shape = (-1,) + (1,) * (w.dim() - 1)
        used = self.cumulative.view(shape).expand_as(w)
        if self.previous is not None:
            inputs = self.input_attention(self.previous.cumulative)
            used = torch.minimum(used, inputs.view((1, -1) + (1,) * (w.dim() - 2)).expand_as(w))
        masks = {w: 1 - used}
        if self.layer.bias is not None:
            masks[self.layer.bias] = 1 - self.cumulative
        return masks

    def weight_count(self) -> int:
        return self.layer.weight.numel()


def convert(backbone: nn.Module, num_tasks: int, s_max: float, per_task_bn: bool) -> list[HATLayer]:
    """Wrap every conv / linear layer of a plain chain backbone in a HATLayer; returns them in data-flow order."""
    require(backbone, {Capability.chain}, "method=hat")  # methods.build checked it already: direct calls too
    _convert(backbone, num_tasks, s_max, per_task_bn)
    # a unit's mask gates the next's input: the order is the data flow, which the backbone's chain() gives
    layers = [m for m in backbone.chain() if isinstance(m, HATLayer)]
    if len(layers) != len(layers_of(backbone)):
        raise UserError(f"method=hat: {type(backbone).__name__}'s chain() leaves out some of its conv or linear "
                        "layers, so their masks would not be chained")
    for before, after in zip(layers, layers[1:]):
        after.previous = before
    return layers


def _convert(module: nn.Module, num_tasks: int, s_max: float, per_task_bn: bool) -> None:
    children = list(module.named_children())
    for i, (name, child) in enumerate(children):
        if isinstance(child, (nn.Conv2d, nn.Linear)):
            after = children[i + 1] if i + 1 < len(children) else None
            bn = after[1] if after is not None and isinstance(after[1], nn.BatchNorm2d) else None
            if bn is not None:
                setattr(module, after[0], nn.Identity())
                if not per_task_bn and child.bias is None:
                    child = _with_bias(child)
            setattr(module, name, HATLayer(child, bn if per_task_bn else None, num_tasks, s_max))
        elif not isinstance(child, nn.BatchNorm2d):
            _convert(child, num_tasks, s_max, per_task_bn)


def _with_bias(conv: nn.Conv2d) -> nn.Conv2d:
    """The conv with a bias, drawn as PyTorch draws a conv's bias; its weights kept."""
    new = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                    conv.dilation, conv.groups, bias=True, padding_mode=conv.padding_mode,
                    device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(conv.weight)
    return new


def layers_of(backbone: nn.Module) -> list[HATLayer]:
    return [m for m in backbone.modules() if isinstance(m, HATLayer)]


def set_task(layers: list[HATLayer], task_id: int) -> None:
    for layer in layers:
        layer.task = task_id


def set_scale(layers: list[HATLayer], s: float) -> None:
    """The s of the next training forwards (a device-side fill, no host sync)."""
    for layer in layers:
        layer.s.fill_(s)
