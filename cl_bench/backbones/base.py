"""The contract every backbone implements, and what a method may ask of one.

A backbone is an nn.Module built as `Class(input_shape, **its config's fields)` (its config dataclass sits beside it,
registered in BACKBONES) that maps a batch of images to N x `feature_dim` features; heads belong to the method. What
else a method may rely on is declared, not guessed from the class: `capabilities`, checked by methods.build against
the method's `needs` before anything is built, so that a pair that cannot work is refused in one line that names
what is missing."""
from typing import ClassVar

from torch import nn

from ..checks import Choice


class Capability(Choice):
    chain = "chain"  # each conv / linear layer reads the units of the layer before it, no skip connection (HAT)
    conv_bn = "conv_bn"  # convolutions, each followed by its own batch norm (gated's channel gates, task norms)
    final_relu_switch = "final_relu_switch"  # remove_final_relu(): features that take negative values (LUCIR)


WHAT = {Capability.chain: "its layers in one chain, each reading the layer before it (no skip connection)",
        Capability.conv_bn: "convolutions each followed by a batch norm",
        Capability.final_relu_switch: "a final ReLU it can drop (remove_final_relu)"}


class Backbone(nn.Module):
    """Features of N x feature_dim for a batch; `capabilities` says what a method may ask of it beyond that. One
    that declares Capability.final_relu_switch implements remove_final_relu(): drop the last ReLU, so that the
    features take negative values too (backbones.remove_final_relu refuses the others)."""

    feature_dim: int
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
