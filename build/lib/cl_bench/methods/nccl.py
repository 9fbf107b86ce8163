"""NCCL, neuron calibration for online continual learning (Yin et al., NeurIPS 2021).

Every Linear/Conv2d of the backbone and heads is calibrated (cl_bench.nn.calibrated: WCM ψ and calibrated
bias, FCM λ). Per incoming batch of task t:

- inner loop (inner_steps glances), base weights θ only: CE(batch) + γ·(CE(memory) + reg·KL(memory)) for
  t > 0, one clipped SGD step with inner_lr per glance;
- outer step for t > 0, calibration parameters only: reg·KL(memory) + β·reg·Σ F ⊙ (θ̃ - θ̃_before)², where
  θ̃_before are the calibrated weights from before the inner loop (detached tensors, no copy of the network)
  and F the diagonal Fisher of θ̃ under the KL loss, one SGD step with outer_lr.

The memory batches come from tasks before t (the seed code's memory_sampling(t)), with the soft predictions
each sample got when it was stored. The KL is KL(stored ‖ current), the direction of the seed code's
kl(log_softmax(z / T), stored) and of distillation in general. The Fisher is (∂L/∂θ ÷ ψ)², which is
(∂L/∂θ̃)²: the seed code divides the base weights' gradient by tile(ψ), recovering the calibrated weights'
gradient, the weights the penalty is on. Defaults: no published values could be found; they are La-MAML's
MNIST settings (batch 10, 5 glances, 200 memories, replay 10, lr 0.1, clip 2) with reg = β = 1 and T = 2, and
γ = 0.5, the best of a small grid on the validation splits of 5-task permuted MNIST (seed 0). There β (0 to
1000), T (1 to 4) and outer_lr (0.01 to 0.1) moved validation accuracy by about a point, dropping the KL
(reg = 0) cost two, and β = 10⁴ diverged.
"""
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..nn import calibrated
from .base import Batch
from .online import OnlineConfig, OnlineMethod, sgd_step, soft_kl


@dataclass
class NCCLConfig(OnlineConfig):
    name: str = "nccl"
    inner_lr: float = 0.1  # SGD lr of the base weights θ in the inner loop (La-MAML's opt_wt)
    outer_lr: float = 0.1  # SGD lr of the calibration parameters ψ, λ, calibrated biases (La-MAML's opt_lr)
    inner_clip: float = 2.0  # inner gradients are clamped to ±inner_clip elementwise; 0 turns it off
    gamma: float = 0.5  # γ, weight of the memory terms in the inner loss (validation: 0.5 over 0.25 and 1)
    reg: float = 1.0  # weight of the KL distillation on memory (inner and outer)
    beta: float = 1.0  # β, strength of the Fisher-weighted penalty, which is scaled by β·reg
    temperature: float = 2.0  # T of the softened outputs in the KL
    fcm_form: calibrated.FCMForm = calibrated.FCMForm.multiply
    unused: ClassVar[tuple[str, ...]] = ("lr",)  # the two loops have lrs of their own

    def checks(self):
        return [*super().checks(),
                *((key, getattr(self, key) > 0, "a positive number") for key in ("inner_lr", "outer_lr",
                                                                                  "temperature")),
                *((key, getattr(self, key) >= 0, "0 or more") for key in ("inner_clip", "gamma", "reg", "beta"))]


class NCCL(OnlineMethod):
    name = "nccl"
    Config = NCCLConfig
    soft_targets = True

    def __init__(self, cfg, backbone, info, ctx):
        calibrated.convert(backbone, cfg.fcm_form)
        super().__init__(cfg, backbone, info, ctx)
        calibrated.convert(self.heads, cfg.fcm_form)
        self.layers = calibrated.layers(self)
        self.base_params, self.calibration_params = calibrated.split_parameters(self)

    def observe(self, batch, task):
        if task.id == 0:  # nothing to protect yet: the inner loop alone
            return super().observe(batch, task)
        with torch.no_grad():
            before = [layer.calibrated_weight() for layer in self.layers]
        loss = super().observe(batch, task)
        self.outer_step(task, before)
        return loss

    def glance(self, batch, task):
        """One inner step: the loss on the batch (and the memory), an SGD step on the base weights only."""
        with self.ctx.autocast():
            loss = self.inner_loss(batch, task)
        grads = torch.autograd.grad(loss, self.base_params, allow_unused=True, materialize_grads=True)
        if self.cfg.inner_clip > 0:
            grads = [g.clamp(-self.cfg.inner_clip, self.cfg.inner_clip) for g in grads]
        sgd_step(self.base_params, grads, self.cfg.inner_lr)
        return loss.detach()

    def inner_loss(self, batch: Batch, task) -> torch.Tensor:
        if task.id == 0:
            return self.loss(batch, task.id)
        memory, stored = self.replay(before_task=task.id)
        n = batch.y.shape[0]
        features = self.backbone(torch.cat([batch.x, memory.x]))  # one pass over batch and memory
        current = F.cross_entropy(self.heads(features[:n], task.id), self.targets(batch.y, task.id))
        z = self.heads.mixed(features[n:], memory.t)
        old = F.cross_entropy(z, memory.y) + self.cfg.reg * soft_kl(z, stored, self.cfg.temperature)
        return current + self.cfg.gamma * old

    def outer_step(self, task, before: list[torch.Tensor]) -> None:
        """Calibration parameters only: the KL on a memory batch plus the Fisher-weighted penalty that keeps
        the calibrated weights where the inner loop found them important."""
        memory, stored = self.replay(before_task=task.id)
        with self.ctx.autocast():
            logits = self.mixed_logits(memory.x, memory.t)
        kl = self.cfg.reg * soft_kl(logits, stored, self.cfg.temperature)
        weights = [layer.base.weight for layer in self.layers]
        grads = torch.autograd.grad(kl, self.calibration_params + weights, allow_unused=True,
                                    materialize_grads=True)
        kl_grads, weight_grads = grads[: len(self.calibration_params)], grads[len(self.calibration_params):]
        penalty = sum((fisher(g, layer.psi) * (layer.calibrated_weight() - old).pow(2)).sum()
                      for layer, g, old in zip(self.layers, weight_grads, before))
        penalty_grads = torch.autograd.grad(self.cfg.beta * self.cfg.reg * penalty, self.calibration_params,
                                            allow_unused=True, materialize_grads=True)
        sgd_step(self.calibration_params, [a + b for a, b in zip(kl_grads, penalty_grads)], self.cfg.outer_lr)

    def capacity(self):
        return {**super().capacity(), "calibration_params": sum(p.numel() for p in self.calibration_params)}


def fisher(weight_grad: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """Diagonal Fisher of θ̃ = θ ⊙ ψ from the gradient of θ: (∂L/∂θ ÷ ψ)² = (∂L/∂θ̃)²; 0 where ψ is 0, where
    θ̃ does not depend on θ."""
    grad = torch.where(psi != 0, weight_grad / psi, torch.zeros_like(weight_grad))
    return grad.detach().pow(2)
