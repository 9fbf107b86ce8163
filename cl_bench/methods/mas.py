"""MAS, Memory Aware Synapses (Aljundi, Babiloni, Elhoseiny, Rohrbach & Tuytelaars 2018, "Memory Aware Synapses:
Learning what (not) to forget"), the global version.

After each task the importance of every parameter is the mean over the task's training samples of the magnitude
of the gradient of the squared L2 norm of the network's output (Eq. 2: Ω = 1/N Σ_k |∂ ||F(x_k; θ)||²₂ / ∂θ|), no
labels needed; later tasks pay λ Σ Ω (θ - θ*)² (Eq. 3, no 1/2), anchored at the weights at the end of the last
task, the importances summed over tasks (QuadraticPenalty.reanchor).

Choices, against the references:
- The output F(x) is the logits the task trained: its own head in the task scenario, every seen class in the
  class one; the network is in eval mode (the authors' compute_importance_l2 calls model.eval()).
- |gradient| per sample, as Eq. 2 writes it and as the authors' code defaults to when accumulating over a
  sequence (MAS_Omega_Acuumelation: b1=True, batch size 1 "to mimic online importance weight computation"); here
  with torch.func's vmap over each batch. method.per_sample=false takes |gradient| of each batch's summed squared
  norms instead, as the authors' split MNIST script calls it (b1=False, batches of 200): one backward per batch,
  as cheap as EWC's Fisher. FACIL's mas.py and Avalanche's MASPlugin take |gradient| of the batch mean of the
  (unsquared) norm, times the batch size: batched, and smaller by a factor 2||f(x)||.
- Accumulation: Ω = Ω_old + Ω_new, the authors' code (accumelate_reg_params: torch.add(prev_omega, new_omega)).
  FACIL and Avalanche fuse Ω = α Ω_old + (1 - α) Ω_new with α = 0.5: method.alpha=0.5 selects that.
- λ = 1, the paper's value for object recognition and the authors' default (reg_lambda=1). FACIL's penalty is
  λ/2 Σ Ω (θ - θ*)², so its lamb=1 is mas_lambda=0.5 here.

Step size (quadratic.py): Ω summed over tasks grows, most in the class scenario, whose output is every seen
logit. The lr defaults to 0.001 with momentum 0.9, the authors' split MNIST script (lr 0.1e-2): at the project's
shared 0.01, λ = 1 on split_mnist/mlp in the class scenario diverges (NaN) in the fifth task, per sample or per
batch; alpha=0.5 also runs through at 0.01.

The per-sample gradients of a batch are held at once (batch_size × the parameters' size): batch_size 64 on
VGG16-BN (15M parameters) wants about 4 GB; lower method.batch_size if the importance pass runs short of memory.
"""
from dataclasses import dataclass, replace

import torch
from torch.func import functional_call, grad, vmap

from .base import MethodConfig
from .quadratic import QuadraticPenalty


@dataclass
class MASConfig(MethodConfig):
    name: str = "mas"
    lr: float = 0.001  # the authors' split MNIST script; 0.01 with summed Ω diverges there (docstring)
    mas_lambda: float = 1.0  # λ, strength of the penalty λ Σ Ω (θ - θ*)² (the paper's and its code's value)
    # |gradient| per sample (Eq. 2); false: |gradient of a batch's summed squared norms| per batch of batch_size,
    # as the authors' split MNIST script runs it (b1=False), one backward per batch instead of per-sample gradients
    per_sample: bool = True
    # None: Ω = Ω_old + Ω_new (the authors' code); α in [0, 1): Ω = α Ω_old + (1 - α) Ω_new (FACIL, Avalanche: 0.5)
    alpha: float | None = None

    def checks(self):
        return [*super().checks(), ("mas_lambda", self.mas_lambda >= 0, "0 or more"),
                ("alpha", self.alpha is None or 0 <= self.alpha < 1, "null (sum) or a weight in [0, 1)")]


class MAS(QuadraticPenalty):
    name = "mas"
    Config = MASConfig
    traits = replace(QuadraticPenalty.traits, backbone_use="functional")  # per-sample gradients by torch.func
    key_prefix = "mas"

    def strength(self) -> float:
        return self.cfg.mas_lambda

    def output_importance(self, task) -> dict[str, torch.Tensor]:
        """1/N Σ_k |∂ ||f(x_k)||²₂ / ∂θ| over the task's N training samples, f the logits task.id trains
        (per_sample=false: 1/N Σ_batches |∂ Σ_(k in batch) ||f(x_k)||²₂ / ∂θ|)."""
        self.eval()
        params = {n: self.get_parameter(n).detach() for n in self.anchored}
        total = {n: torch.zeros_like(p) for n, p in params.items()}

        def squared_norm(params, x):
            with self.ctx.autocast():
                out = functional_call(self, params, (x, task.id))
            return out.float().pow(2).sum()

        if self.cfg.per_sample:
            batch_grad = vmap(grad(lambda params, x: squared_norm(params, x.unsqueeze(0))), in_dims=(None, 0))
        else:
            batch_grad = grad(squared_norm)
        # A compiled backbone runs eagerly here: the transforms trace the plain modules.
        with torch.compiler.set_stance("force_eager"):
            for raw, _, t in self.loop.phase_batches(task.train.batches(self.cfg.batch_size)):
                grads = batch_grad(params, self.info.view.eval(raw, t))
                for n, g in grads.items():
                    total[n].add_(g.abs().sum(0) if self.cfg.per_sample else g.abs())
        return {n: t / len(task.train) for n, t in total.items()}

    def consolidate(self, task):
        with self.loop.phase("importance"):
            importance = self.output_importance(task)
        alpha = self.cfg.alpha
        if alpha is None:
            self.reanchor(importance)
        else:
            self.reanchor({n: (1 - alpha) * o for n, o in importance.items()}, decay=alpha)
