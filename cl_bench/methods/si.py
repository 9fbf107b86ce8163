"""SI, Synaptic Intelligence (Zenke, Poole & Ganguli 2017, "Continual Learning Through Synaptic Intelligence").

While a task μ trains, every parameter accumulates its contribution to the drop in the task's loss along the
training path, ω = Σ_steps -g·Δθ, with g the gradient of the task's own loss (not of the penalty) at the step and
Δθ the update the optimiser actually made (momentum, penalty and all). At the task's end the importance is
Ω_μ = ω / ((θ_end - θ_start)² + ξ), the running importance becomes Ω = max(0, Ω + Ω_μ), and later tasks pay
c Σ Ω (θ - θ_end)², anchored at the weights at the end of the last task only: one term, re-anchored each task
(QuadraticPenalty.reanchor), not a sum of per-task anchors as in EWC.

As the authors' code (ganguli-lab/pathint: protocols.PATH_INT_PROTOCOL, optimizers.KOOptimizer) does it: ω uses the
gradient of the unregularised loss ('unreg_grads') times the weight change ('deltas'); the running importance is
summed over tasks (omega_decay='sum') and clipped at zero (tf.nn.relu); the penalty has no 1/2. FACIL's
path_integral.py is the same without the clip; Mammoth's si.py approximates -g·Δθ by lr·g² with g the gradient of
the penalised loss, and Avalanche's plugin also takes the penalised gradient. Defaults: the paper's split MNIST
setting, c = 1 and ξ = 1e-3 (pathint's split MNIST notebook: xi=1e-3, cvals=[0, 1.0]); on permuted MNIST the
paper used c = 0.1, ξ = 0.1 (Mammoth's perm-mnist config and FACIL's defaults).

Step size (quadratic.py): on split_mnist/mlp in the class scenario with lr 0.01 and momentum 0.9, c = 1 runs
through and c = 10 diverges in the third task; a stronger c wants a smaller lr.

Per step the accumulation costs four foreach passes over the parameters on the device and no host sync: the task
gradient and the weights are copied before the step, ω += g·(θ_before - θ_after) after it. ω and θ_start are
buffers, so a checkpoint written within a task resumes the path integral where it was.
"""
from dataclasses import dataclass

import torch

from .base import MethodConfig
from .quadratic import QuadraticPenalty


@dataclass
class SIConfig(MethodConfig):
    name: str = "si"
    c: float = 1.0  # strength of the surrogate loss (the paper's split MNIST value; 0.1 on permuted MNIST)
    xi: float = 1e-3  # ξ, damping of Ω = ω / (Δθ² + ξ) (the paper's split MNIST value; 0.1 on permuted MNIST)

    def checks(self):
        return [*super().checks(), ("c", self.c >= 0, "0 or more"), ("xi", self.xi > 0, "a positive number")]


class SI(QuadraticPenalty):
    name = "si"
    Config = SIConfig
    traits = QuadraticPenalty.traits
    key_prefix = "si"

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        for n in self.anchored:
            p = self.get_parameter(n)
            self.register_buffer(self._key("omega", n), torch.zeros_like(p))  # ω of the task in training
            self.register_buffer(self._key("start", n), torch.zeros_like(p))  # θ at the task's start
            # Per-step scratch: the task gradient and the weights before the step (not state: refilled each step).
            self.register_buffer(self._key("grad", n), torch.zeros_like(p), persistent=False)
            self.register_buffer(self._key("before", n), torch.zeros_like(p), persistent=False)

    def strength(self) -> float:
        return self.cfg.c

    def _slots(self, kind) -> list[torch.Tensor]:
        return [getattr(self, self._key(kind, n)) for n in self.anchored]

    def train_task(self, task):
        with torch.no_grad():  # a within-task resume loads the values saved mid-task over these
            torch._foreach_copy_(self._slots("start"), self.anchored_params())
            torch._foreach_zero_(self._slots("omega"))
        self.loop.fit(task, lambda batch: self.loss(batch, task.id) + self.penalty(),
                      after_backward=self.before_step, after_step=self.after_step)
        self.consolidate(task)

    @torch.no_grad()
    def before_step(self) -> None:
        """After backward: the gradients are the task loss's alone (the penalty's value joins the loss without a
        graph); keep them and the weights, then add the penalty's gradient for the step."""
        self.ensure_grads()
        params = self.anchored_params()
        torch._foreach_copy_(self._slots("grad"), [p.grad for p in params])
        torch._foreach_copy_(self._slots("before"), params)
        self.penalty_grad()

    @torch.no_grad()
    def after_step(self, batch=None) -> None:
        """ω += -g·Δθ = g·(θ_before - θ_after)."""
        before = self._slots("before")
        torch._foreach_sub_(before, self.anchored_params())
        torch._foreach_addcmul_(self._slots("omega"), self._slots("grad"), before)

    @torch.no_grad()
    def task_importance(self) -> dict[str, torch.Tensor]:
        """Ω_μ = ω / ((θ - θ_start)² + ξ) for the task just trained."""
        return {n: getattr(self, self._key("omega", n)) / ((p - getattr(self, self._key("start", n))) ** 2
                                                            + self.cfg.xi)
                for n, p in zip(self.anchored, self.anchored_params(), strict=True)}

    def consolidate(self, task):
        self.reanchor(self.task_importance(), decay=1.0, floor=0.0)
