"""ResNet-18: BasicBlocks [2, 2, 2, 2] behind the CIFAR stem (3×3 conv, no max-pool) for 32×32 to 64×64 inputs, or
ImageNet's (7×7 conv of stride 2, then a 3×3 max-pool of stride 2; He et al. 2016) for 224×224 ones."""
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from ..errors import UserError
from .base import Backbone, Capability, ResidualBlock

STEMS = ("cifar", "imagenet")


class BasicBlock(nn.Module, ResidualBlock):
    """relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the shortcut empty or a 1x1 conv and its batch norm;
    implements the ResidualBlock contract (backbones/base.py) by its places, whatever module a converter put there."""

    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.final_relu = True  # False: the block's output is the residual sum itself (remove_final_relu)
        self.activation_before_add = False  # True: relu(bn2(conv2(.))) + shortcut(x), NCCL's seed block
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.activation_before_add:
            return self.relu(out) + self.shortcut(x)
        out = out + self.shortcut(x)
        return self.relu(out) if self.final_relu else out

    # --- the ResidualBlock contract ----------------------------------------------------------------------
    def inner(self) -> tuple[nn.Module, nn.Module, nn.Module]:
        return self.conv1, self.bn1, self.conv2

    def shortcut_convs(self) -> list[nn.Module]:
        return list(self.shortcut)[:1]  # the 1x1 conv, first in its place

    def output_convs(self) -> list[nn.Module]:
        return [self.conv2, *self.shortcut_convs()]

    def replace_first(self, unit: nn.Module) -> None:
        self.conv1, self.bn1 = unit, nn.Identity()

    def replace_norms(self, make: Callable[[nn.Module], nn.Module]) -> None:
        for owner, name in ((self, "bn1"), (self, "bn2"), (self.shortcut, "1")):
            norm = getattr(owner, name, None)
            if isinstance(norm, nn.BatchNorm2d):
                setattr(owner, name, make(norm))

    def add_after_activation(self) -> None:
        self.activation_before_add = True


class ResNet18(Backbone):
    """ResNet-18 with the CIFAR stem (3×3 conv, no max-pool) or, with stem="imagenet", ImageNet's."""

    capabilities = frozenset({Capability.conv_bn, Capability.final_relu_switch, Capability.widen})

    def __init__(self, input_shape, nf, stem: str = "cifar"):
        super().__init__()
        c = input_shape[0]
        if stem not in STEMS:
            raise UserError(f"backbone.stem={stem!r} is unknown: use {' or '.join(STEMS)}")
        if stem == "cifar":
            self.stem = nn.Sequential(nn.Conv2d(c, nf, 3, 1, 1, bias=False), nn.BatchNorm2d(nf), nn.ReLU(inplace=True))
        else:
            self.stem = nn.Sequential(nn.Conv2d(c, nf, 7, 2, 3, bias=False), nn.BatchNorm2d(nf), nn.ReLU(inplace=True),
                                      nn.MaxPool2d(3, 2, 1))
        blocks, c_in = [], nf
        for i, mult in enumerate((1, 2, 4, 8)):
            for j in range(2):
                blocks.append(BasicBlock(c_in, nf * mult, 2 if i > 0 and j == 0 else 1))
                c_in = nf * mult
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.feature_dim = c_in

    def residual_blocks(self) -> list[BasicBlock]:
        return [m for m in self.modules() if isinstance(m, BasicBlock)]  # found wherever a converter wrapped them

    def remove_final_relu(self) -> None:
        """The last block ends at its residual sum, as the official LUCIR ResNet's last block (see
        backbones.remove_final_relu)."""
        self.layers[-1].final_relu = False

    def forward(self, x):
        return self.pool(self.layers(self.stem(x)))


@dataclass
class ResNetConfig:
    name: str = "resnet18"
    nf: int = 64  # base filters: the usual CIFAR ResNet-18
    stem: str = "cifar"  # cifar (3×3, stride 1) or imagenet (7×7 stride 2 and a max-pool: inputs of 224×224)


@dataclass
class ReducedResNetConfig(ResNetConfig):
    name: str = "resnet18_reduced"
    nf: int = 20  # the reduced ResNet-18 of GEM, La-MAML and NCCL (about 1.1 M parameters)
