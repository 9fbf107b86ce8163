from dataclasses import dataclass, field
from typing import ClassVar

from torch import nn

from ..checks import Checked
from ..errors import UserError
from .base import Backbone, Capability


@dataclass
class ConvNetConfig(Checked):
    prefix: ClassVar[str] = "backbone."
    name: str = "convnet"
    channels: list[int] = field(default_factory=lambda: [32, 64, 64])
    # Max-pool after the first `pools` conv blocks only; null: after each block while its map is at least 4×4 (8×8
    # digits take two pools, 28×28 MNIST and 32×32 CIFAR three). lit-leo/cgate's SimpleCNN (Abati et al.'s Split
    # MNIST net) pools after its first two units and not after the third: pools=2 (its CIFAR parity row).
    pools: int | None = None

    def checks(self):
        return [("pools", self.pools is None or 0 <= self.pools <= len(self.channels),
                 f"null (pool while the map is at least 4×4) or 0 to {len(self.channels)} (one per conv block)")]


def conv_block(c_in, c_out):
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]


class ConvNet(Backbone):
    """A small conv net for 8×8 digits and 28×28 MNIST: conv blocks, 2×2 max-pools, global average pool."""

    capabilities = frozenset({Capability.chain, Capability.conv_bn, Capability.final_relu_switch, Capability.widen})

    def __init__(self, input_shape, channels, pools=None):
        super().__init__()
        c, h, _ = input_shape
        layers, c_in = [], c
        for i, c_out in enumerate(channels):
            layers += conv_block(c_in, c_out)
            # By default pool while the map is at least 4×4: 8×8 digits take two pools, 28×28 MNIST three.
            pool = h >= 4 if pools is None else i < pools
            if pool:
                if h < 2:
                    raise UserError(f"backbone.pools={pools}: the map is {h}×{h} after conv block {i + 1}, too "
                                    "small to pool: use fewer pools")
                layers.append(nn.MaxPool2d(2))
                h //= 2
            c_in = c_out
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.body = nn.Sequential(*layers)
        self.feature_dim = c_in

    def remove_final_relu(self) -> None:
        """The last conv block ends at its batch norm (see backbones.remove_final_relu)."""
        last = max(i for i, m in enumerate(self.body) if isinstance(m, nn.ReLU))
        self.body[last] = nn.Identity()

    def chain(self) -> list[nn.Module]:
        return list(self.body)

    def forward(self, x):
        return self.body(x)
