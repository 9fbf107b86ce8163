"""The contract every backbone implements, and what a method may ask of one.

A backbone is an nn.Module built as `Class(input_shape, **its config's fields)` (its config dataclass sits beside it,
registered in BACKBONES) that maps a batch of images to N x `feature_dim` features; heads belong to the method. What
else a method may rely on is declared, not guessed from the class: `capabilities`, checked by methods.build against
the method's `needs` before anything is built, so that a pair that cannot work is refused in one line that names
what is missing. What it is made of, the converters (nn/gated.py, nn/masked.py's growth, NCCL's calibration) ask
through `residual_blocks()` and `chain()`, never through its class or attribute names."""
from collections.abc import Callable
from typing import ClassVar, Protocol, runtime_checkable

from torch import nn

from ..checks import Choice


class Capability(Choice):
    chain = "chain"  # each conv / linear layer reads the units of the layer before it, no skip connection (HAT)
    conv_bn = "conv_bn"  # convolutions, each followed by its own batch norm (gated's channel gates, task norms)
    final_relu_switch = "final_relu_switch"  # remove_final_relu(): features that take negative values (LUCIR)
    widen = "widen"  # growth widens its layers: residual blocks inside, or a chain pooled before its linear layers


WHAT = {Capability.chain: "its layers in one chain, each reading the layer before it (no skip connection)",
        Capability.conv_bn: "convolutions each followed by a batch norm",
        Capability.final_relu_switch: "a final ReLU it can drop (remove_final_relu)",
        Capability.widen: "layers growth can widen (residual blocks, or convs pooled before any linear layer: a "
                          "flattened conv map would widen a linear layer's input by its area)"}


@runtime_checkable
class ResidualBlock(Protocol):
    """A residual block as converters see it: out = act(norm2(conv2(act(norm1(conv1(x))))) + shortcut(x)), the
    shortcut empty or convs with their norms. The modules it hands out are those in its places now: a converter
    that swapped a conv or a norm in place (masked layers, per-task norms) gets its own modules back."""

    def inner(self) -> tuple[nn.Module, nn.Module, nn.Module]:
        """(conv1, norm1, conv2): the conv-norm-conv triple inside the block, whose width the shortcut never sees."""
        ...

    def shortcut_convs(self) -> list[nn.Module]:
        """The shortcut's convs (none for an identity shortcut)."""
        ...

    def output_convs(self) -> list[nn.Module]:
        """The convs whose output channels are the block's: conv2 and the shortcut's convs."""
        ...

    def replace_first(self, unit: nn.Module) -> None:
        """Put unit, which computes conv1 -> norm1 (-> its activation) itself, in conv1's place; norm1's place
        becomes an identity (the block's own activation of unit's output stays)."""
        ...

    def replace_norms(self, make: Callable[[nn.Module], nn.Module]) -> None:
        """Each batch norm in the block's own places (norm1 unless replace_first took it, norm2, the shortcut's)
        becomes make(norm)."""
        ...

    def add_after_activation(self) -> None:
        """From now on act(norm2(conv2(.))) + shortcut(x), no activation after the sum (NCCL's seed block)."""
        ...


class Backbone(nn.Module):
    """Features of N x feature_dim for a batch; `capabilities` says what a method may ask of it beyond that. One
    that declares Capability.final_relu_switch implements remove_final_relu(): drop the last ReLU, so that the
    features take negative values too (backbones.remove_final_relu refuses the others).

    What it is made of: `residual_blocks()` (none by default) or, for a backbone without skip connections,
    `chain()`, its modules in data-flow order (none by default). A converter that rewrites a backbone reads these,
    so a backbone that answers neither cannot be grown (nn/masked.py refuses it)."""

    feature_dim: int
    capabilities: ClassVar[frozenset[Capability]] = frozenset()

    def residual_blocks(self) -> list[ResidualBlock]:
        """Its residual blocks in data-flow order (gated gates each block's inside and its sum, CPG widens each
        block's inner triple, NCCL's seed form rewires them); none for a backbone without skip connections."""
        return []

    def chain(self) -> list[nn.Module]:
        """Its modules in data-flow order, each reading the output of the one before (convs, norms, activations,
        pools, linear layers: those in the places now, converted or not), for a backbone without skip connections;
        none for one with them. CPG widens every conv or linear layer of the chain, the last one's too."""
        return []


def backbones_in(module: nn.Module) -> list[Backbone]:
    """The backbones in module: itself, or those of a method holding one (its modules in registration order)."""
    return [m for m in module.modules() if isinstance(m, Backbone)]
