from dataclasses import dataclass, field

from torch import nn

from .base import Backbone, Capability


@dataclass
class ConvNetConfig:
    name: str = "convnet"
    channels: list[int] = field(default_factory=lambda: [32, 64, 64])


def conv_block(c_in, c_out):
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]


class ConvNet(Backbone):
    """A small conv net for 8×8 digits and 28×28 MNIST: conv blocks, 2×2 max-pools, global average pool."""

    capabilities = frozenset({Capability.chain, Capability.conv_bn, Capability.final_relu_switch, Capability.widen})

    def __init__(self, input_shape, channels):
        super().__init__()
        c, h, _ = input_shape
        layers, c_in = [], c
        for c_out in channels:
            layers += conv_block(c_in, c_out)
            # Pool while the map is at least 4×4: 8×8 digits take two pools, 28×28 MNIST three.
            if h >= 4:
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
