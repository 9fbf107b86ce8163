"""Neuron calibration (Yin et al. 2021): layers whose weights and outputs are rescaled by learned calibration
parameters, so that the base weights θ and the calibration can be trained apart.

- WCM: θ̃ = θ ⊙ tile(ψ), with ψ one entry per output × input channel of a conv (shared over the kernel)
  and one per output unit of a linear layer, plus a calibrated bias. ψ also scales θ's gradient
  (∂L/∂θ = ∂L/∂θ̃ ⊙ ψ), a learned per-weight importance.
- FCM: λ, one per output channel, scales the layer's output (before batch norm where one follows).

At initialisation (ψ = 1, λ = 1, calibrated bias 0) a calibrated layer computes bit for bit what the plain
layer computes: the same kernel call on θ ⊙ 1 = θ, then + 0 and × 1.
"""
import torch
import torch.nn.functional as F
from torch import nn

from ..checks import Choice
from ..errors import UserError


class FCMForm(Choice):
    """How the feature calibration module applies λ to a layer's output h."""

    multiply = "multiply"  # λ ⊙ h, the seed's code
    add = "add"  # h + λ ⊙ h, the seed's formula


CALIBRATION = ("psi", "calib_bias", "lam")  # parameter names of the calibration, as opposed to base weights


class Calibrated(nn.Module):
    """A Linear or Conv2d (kept as `base`, its weight and bias are θ) with WCM and FCM around it.

    fcm_form="multiply" is the seed code's λ ⊙ h; "add" is the seed formula's h ⊕ λ ⊙ h, which at
    initialisation doubles the output (batch norm normalises that away; a plain MLP does not)."""

    def __init__(self, base: nn.Linear | nn.Conv2d, fcm_form: FCMForm):
        super().__init__()
        self.base = base
        out = base.weight.shape[0]
        per_output = (out,) + (1,) * (base.weight.dim() - 2)  # broadcasts over a conv's H×W, a linear's batch
        psi_shape = (out, 1) if isinstance(base, nn.Linear) else (*base.weight.shape[:2], 1, 1)
        like = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.psi = nn.Parameter(torch.ones(psi_shape, **like))
        self.calib_bias = nn.Parameter(torch.zeros(per_output, **like))
        self.lam = nn.Parameter(torch.ones(per_output, **like))
        self.fcm_add = fcm_form == "add"

    def calibrated_weight(self) -> torch.Tensor:
        """θ̃ = θ ⊙ tile(ψ); broadcasting is the tiling."""
        return self.base.weight * self.psi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.calibrated_weight()
        if isinstance(self.base, nn.Linear):
            h = F.linear(x, w, self.base.bias)
        else:
            b = self.base
            h = F.conv2d(x, w, b.bias, b.stride, b.padding, b.dilation, b.groups)
        h = h + self.calib_bias
        scaled = h * self.lam
        return h + scaled if self.fcm_add else scaled


def convert(module: nn.Module, fcm_form: FCMForm, keep=frozenset()) -> nn.Module:
    """Swap every Linear and Conv2d inside module (in place) for a Calibrated one sharing its weights, except
    those in `keep`, which stay plain layers (trained as base weights)."""
    for name, child in module.named_children():
        if child in keep:
            continue
        if isinstance(child, nn.Conv2d) and child.padding_mode != "zeros":
            raise UserError(f"calibrated layers support zero padding only, not {child.padding_mode!r} ({name})")
        if isinstance(child, (nn.Linear, nn.Conv2d)):
            setattr(module, name, Calibrated(child, fcm_form))
        else:
            convert(child, fcm_form, keep)
    return module


def layers(module: nn.Module) -> list[Calibrated]:
    return [m for m in module.modules() if isinstance(m, Calibrated)]


def weights(layers: list[Calibrated]) -> list[torch.Tensor]:
    """Every layer's θ̃ = θ ⊙ tile(ψ) as one foreach op, what each calibrated_weight() gives to the bit."""
    return torch._foreach_mul([layer.base.weight for layer in layers], [layer.psi for layer in layers])


def split_parameters(module: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(base parameters θ: weights, biases, batch norm, ..., calibration parameters ψ, λ, calibrated biases)."""
    base, calibration = [], []
    for name, p in module.named_parameters():
        (calibration if name.rsplit(".", 1)[-1] in CALIBRATION else base).append(p)
    return base, calibration
