"""Weight initialisation a backbone can be built with."""
from torch import nn

from ..checks import Choice


class Init(Choice):
    pytorch = "pytorch"  # each layer's own reset_parameters (kaiming-uniform with a=√5, uniform biases)
    kaiming_normal = "kaiming_normal"  # La-MAML's Learner: kaiming_normal_ (fan in, gain √2), zero biases


def initialise(module: nn.Module, init: Init) -> None:
    if init == "pytorch":
        return
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.kaiming_normal_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
