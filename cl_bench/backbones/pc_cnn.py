from dataclasses import dataclass

from torch import nn

from .base import Backbone
from .init import Init, initialise


@dataclass
class PCCNNConfig:
    name: str = "pc_cnn"
    channels: int = 160  # La-MAML's CIFAR and TinyImageNet nets
    conv_layers: int = 0  # 0: 3 for inputs up to 32 px (La-MAML's CIFAR net), 4 above (its 64x64 TinyImageNet net)
    hidden: int = 0  # width of the two FC layers; 0: 320 with 3 conv layers, 640 with 4 (La-MAML's)
    init: Init = Init.kaiming_normal  # La-MAML's Learner: kaiming-normal weights, zero biases


class PCCNN(Backbone):
    """La-MAML's BN-free conv net: 3x3 convs of stride 2 with ReLU, then two ReLU FC layers (the head follows)."""

    # No capability declared: a chain without batch norm, but HAT's conversion was never tested on it

    def __init__(self, input_shape, channels, conv_layers, hidden, init):
        super().__init__()
        c, h, w = input_shape
        conv_layers = conv_layers or (3 if max(h, w) <= 32 else 4)
        hidden = hidden or (320 if conv_layers == 3 else 640)
        layers = []
        for i in range(conv_layers):
            layers += [nn.Conv2d(c if i == 0 else channels, channels, 3, 2, 1), nn.ReLU(inplace=True)]
            h, w = (h + 1) // 2, (w + 1) // 2
        layers += [nn.Flatten(), nn.Linear(channels * h * w, hidden), nn.ReLU(inplace=True),
                   nn.Linear(hidden, hidden), nn.ReLU(inplace=True)]
        self.body = nn.Sequential(*layers)
        self.feature_dim = hidden
        self.init = init  # the method draws its heads alike (methods/base.py)
        initialise(self, init)

    def chain(self) -> list[nn.Module]:
        return list(self.body)

    def forward(self, x):
        return self.body(x)
