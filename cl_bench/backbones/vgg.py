from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from ..checks import Checked
from .base import Backbone, Capability

# Channels per conv; "M" is a 2×2 max-pool. The VGG-16 stack, as in CPG's CIFAR experiments.
VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


@dataclass
class VGGConfig(Checked):
    prefix: ClassVar[str] = "backbone."
    name: str = "vgg16_bn"
    hidden: int = 4096  # width of the classifier body
    width: float = 1.0  # multiplier of every conv's channels (VGG-16's 64 to 512 at 1), for smaller CPU-sized runs

    def checks(self):
        return [("hidden", self.hidden >= 1, "at least 1"), ("width", self.width > 0, "a positive number")]


class VGG16BN(Backbone):
    """VGG-16 with batch norm for 32×32 inputs: conv stack to 512×1×1, then the 512-4096-4096 classifier body."""

    capabilities = frozenset({Capability.chain, Capability.conv_bn, Capability.final_relu_switch, Capability.widen})

    def __init__(self, input_shape, hidden, width=1.0):
        super().__init__()
        layers, c_in = [], input_shape[0]
        for v in VGG16:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                v = max(1, round(v * width))
                layers += [nn.Conv2d(c_in, v, 3, padding=1, bias=False), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                c_in = v
        self.features = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Sequential(nn.Linear(c_in, hidden), nn.ReLU(inplace=True),
                                        nn.Linear(hidden, hidden), nn.ReLU(inplace=True))
        self.feature_dim = hidden

    def remove_final_relu(self) -> None:
        """Features straight from the classifier body's last linear layer (see backbones.remove_final_relu)."""
        self.classifier[-1] = nn.Identity()

    def chain(self) -> list[nn.Module]:
        return [*self.features, *self.classifier]

    def forward(self, x):
        return self.classifier(self.features(x))
