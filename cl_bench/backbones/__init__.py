"""Plain feature extractors. Each maps an image batch to N×feature_dim features; heads live with the method."""
from torch import nn

from .convnet import ConvNet
from .mlp import MLP
from .resnet import ResNet18, resnet18_reduced
from .vgg import VGG16BN

BACKBONES = {
    "mlp": MLP,
    "convnet": ConvNet,
    "resnet18_reduced": resnet18_reduced,
    "resnet18": ResNet18,
    "vgg16_bn": VGG16BN,
}


def build(cfg, input_shape: tuple[int, int, int]) -> nn.Module:
    """Build the backbone named by cfg.name with the remaining keys as its arguments."""
    kwargs = {k: v for k, v in dict(cfg).items() if k != "name"}
    return BACKBONES[cfg["name"]](tuple(input_shape), **kwargs)
