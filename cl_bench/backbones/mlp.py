from dataclasses import dataclass, field
from typing import ClassVar

from torch import nn

from ..checks import Checked
from .base import Backbone, Capability
from .init import Init, initialise


@dataclass
class MLPConfig(Checked):
    prefix: ClassVar[str] = "backbone."
    name: str = "mlp"
    hidden_sizes: list[int] = field(default_factory=lambda: [100, 100])  # GEM, La-MAML, NCCL and the DER paper
    init: Init = Init.pytorch  # La-MAML's MNIST runs: kaiming_normal; Mammoth's: xavier_uniform (heads drawn alike)
    # Dropout on the flattened pixels and after each hidden ReLU. 0 in the MLPs of GEM, La-MAML and the DER paper;
    # HAT's mlp_hat drops 0.2 of the input and 0.5 of each hidden layer (conf/backbone/hat_mlp.yaml).
    input_dropout: float = 0.0
    hidden_dropout: float = 0.0

    def checks(self):
        return [(key, 0 <= getattr(self, key) < 1, "a probability in [0, 1)")
                for key in ("input_dropout", "hidden_dropout")]


class MLP(Backbone):
    """Fully connected ReLU network over flattened pixels."""

    capabilities = frozenset({Capability.chain, Capability.final_relu_switch, Capability.widen})

    def __init__(self, input_shape, hidden_sizes, init=Init.pytorch, input_dropout=0.0, hidden_dropout=0.0):
        super().__init__()
        c, h, w = input_shape
        sizes = [c * h * w, *hidden_sizes]
        layers = [nn.Flatten(), *_dropout(input_dropout)]
        for d_in, d_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(d_in, d_out), nn.ReLU(inplace=True), *_dropout(hidden_dropout)]
        self.body = nn.Sequential(*layers)
        self.feature_dim = sizes[-1]
        self.init = init  # the method draws its heads alike (methods/base.py)
        initialise(self, init)

    def remove_final_relu(self) -> None:
        """Features straight from the last linear layer (see backbones.remove_final_relu)."""
        last = max(i for i, m in enumerate(self.body) if isinstance(m, nn.ReLU))
        self.body[last] = nn.Identity()

    def chain(self) -> list[nn.Module]:
        return list(self.body)

    def forward(self, x):
        return self.body(x)


def _dropout(p: float) -> list[nn.Module]:
    # No module at p = 0, so that the default MLP's layers and state-dict keys stay as they were.
    return [nn.Dropout(p)] if p > 0 else []
