"""Plain feature extractors. Each maps an image batch to N×feature_dim features; heads live with the method.
Each backbone's config dataclass sits beside it and holds its defaults; BACKBONES is the one registry."""
import dataclasses

from torch import nn

from ..errors import UserError
from .base import WHAT, Backbone, Capability
from .convnet import ConvNet, ConvNetConfig
from .mlp import MLP, MLPConfig
from .pc_cnn import PCCNN, PCCNNConfig
from .resnet import ReducedResNetConfig, ResNet18, ResNetConfig
from .vgg import VGG16BN, VGGConfig

BACKBONES = {  # name: (module, config dataclass)
    "mlp": (MLP, MLPConfig),
    "convnet": (ConvNet, ConvNetConfig),
    "resnet18_reduced": (ResNet18, ReducedResNetConfig),
    "resnet18": (ResNet18, ResNetConfig),
    "vgg16_bn": (VGG16BN, VGGConfig),
    "pc_cnn": (PCCNN, PCCNNConfig),
}


__all__ = ["BACKBONES", "Backbone", "Capability", "build", "remove_final_relu", "require"]


def require(backbone: nn.Module, needs, who: str) -> None:
    """Refuse, in one line naming what is missing and the backbones that have it, a backbone without a capability
    that `who` (say, "method=hat") needs."""
    for need in sorted(needs):
        if need not in getattr(backbone, "capabilities", ()):
            able = [name for name, (module, _) in BACKBONES.items() if need in module.capabilities]
            raise UserError(f"{who} needs a backbone with {WHAT[need]} (capability {need}); "
                            f"{type(backbone).__name__} has none: use backbone={' or '.join(able)}")


def remove_final_relu(backbone: nn.Module) -> None:
    """Drop the backbone's last ReLU in place, so that its features take negative values too (LUCIR, Hou et al.
    2019, Sec. 4.1; its official ResNet's last block ends at the residual sum). Used by method=lucir only: every
    other method keeps the backbones as built. Parameters and state-dict keys are unchanged."""
    require(backbone, {Capability.final_relu_switch}, "method=lucir with method.remove_final_relu=true")
    backbone.remove_final_relu()


def build(cfg, input_shape: tuple[int, int, int]) -> nn.Module:
    """The backbone cfg names: its config dataclass (say, `ResNetConfig(stem="imagenet")`), or a mapping (a
    DictConfig, a dict) whose keys go over that dataclass's defaults."""
    if dataclasses.is_dataclass(cfg):
        cfg = dataclasses.asdict(cfg)
    module, schema = BACKBONES[cfg["name"]]
    kwargs = {**dataclasses.asdict(schema()), **dict(cfg)}
    kwargs.pop("name")
    return module(tuple(input_shape), **kwargs)
