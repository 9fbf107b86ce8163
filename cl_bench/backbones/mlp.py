from dataclasses import dataclass, field

from torch import nn

from .init import Init, initialise


@dataclass
class MLPConfig:
    name: str = "mlp"
    hidden_sizes: list[int] = field(default_factory=lambda: [100, 100])  # GEM, La-MAML, NCCL and the DER paper
    init: Init = Init.pytorch  # La-MAML's MNIST runs: kaiming_normal; Mammoth's: xavier_uniform (heads drawn alike)


class MLP(nn.Module):
    """Fully connected ReLU network over flattened pixels."""

    def __init__(self, input_shape, hidden_sizes, init=Init.pytorch):
        super().__init__()
        c, h, w = input_shape
        sizes = [c * h * w, *hidden_sizes]
        layers = [nn.Flatten()]
        for d_in, d_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(d_in, d_out), nn.ReLU(inplace=True)]
        self.body = nn.Sequential(*layers)
        self.feature_dim = sizes[-1]
        self.init = init  # the method draws its heads alike (methods/base.py)
        initialise(self, init)

    def remove_final_relu(self) -> None:
        """Features straight from the last linear layer (see backbones.remove_final_relu)."""
        self.body[-1] = nn.Identity()

    def forward(self, x):
        return self.body(x)
