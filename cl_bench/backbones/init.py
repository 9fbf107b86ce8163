"""Weight initialisation a backbone can be built with."""
from torch import nn

from ..checks import Choice


class Init(Choice):
    pytorch = "pytorch"  # each layer's own reset_parameters (kaiming-uniform with a=√5, uniform biases)
    kaiming_normal = "kaiming_normal"  # La-MAML's Learner: kaiming_normal_ (fan in, gain √2), zero biases
    xavier_uniform = "xavier_uniform"  # Mammoth's MNIST MLP: linear weights U(±√(6 / (fan_in + fan_out))), zero biases


def initialise(module: nn.Module, init: Init) -> None:
    """Draw the module's layers as `init` says (pytorch: leave each layer's own draw). Mammoth's xavier touches its
    linear layers only, La-MAML's kaiming-normal its convolutions too."""
    if init == "pytorch":
        return
    kinds = (nn.Linear,) if init == "xavier_uniform" else (nn.Linear, nn.Conv2d)
    draw = nn.init.xavier_uniform_ if init == "xavier_uniform" else nn.init.kaiming_normal_
    for m in module.modules():
        if isinstance(m, kinds):
            draw(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
