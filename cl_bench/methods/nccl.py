"""NCCL, neuron calibration for online continual learning (Yin et al., NeurIPS 2021), as the seed's code.

Every Linear/Conv2d of the backbone and heads is calibrated (cl_bench.nn.calibrated: WCM ψ and calibrated
bias, FCM λ). Per incoming batch of task t:

- inner loop, `inner_steps` glances, base weights θ only: CE(x) + γ·(CE(memory) + reg·KL(memory)) for t > 0,
  one clipped SGD step with inner_lr per glance. Glance 0 reads the incoming batch; glance k >= 1 reads a batch
  of current-task samples from the memory once it holds k·batch_size of them, else the incoming batch again
  (the seed: `memory_sampling(t, bs, intra_class=True)` when `count >= step * batch_size`). The batch and the
  memory go through separate forwards, as in the seed, so batch norm never mixes their statistics.
- outer step for t > 0, calibration parameters only, on a memory batch: F is the diagonal Fisher of θ̃ under
  reg·KL(memory), and the penalty is Σ F ⊙ (θ̃ - θ̃_old)² with θ̃_old the calibrated weights at the start of
  the last inner step (the seed deep-copies the network at the start of every step and the outer step reads the
  last copy; here only those weights are kept, detached). outer_objective=seed (default) steps on the penalty
  alone, scaled by β·reg (the seed backpropagates `ewc_loss` only; the KL serves to build F);
  outer_objective=paper on Eq. 5's ½·penalty + β·reg·KL.

The memory batches of the inner and outer losses come from tasks before t (the seed's memory_sampling(t)), with the
soft predictions each sample got when it was stored. The KL is KL(stored ‖ current), the direction of the seed
code's kl(log_softmax(z / T), stored). The Fisher is (∂L/∂θ ÷ ψ)², which is (∂L/∂θ̃)²: the seed divides the base
weights' gradient by tile(ψ), recovering the calibrated weights' gradient. On a backbone with residual blocks
(Backbone.residual_blocks: ResNet) the seed's block adds the shortcut after the second activation and leaves the 1x1
shortcut conv uncalibrated (block_form=seed, default); block_form=standard keeps the backbone's ReLU after the sum
and calibrates every conv. Defaults: no published values could be found. From La-MAML's MNIST runs
(montrealrobotics/La-MAML, run_experiments.sh:14-36): batch 10, 5 glances, 200 memories, replay 10; lr 0.1 for both
loops is the opt_wt and opt_lr of its C-MAML and Sync lines there (La-MAML's own line uses opt_lr 0.3); the
elementwise clamp of inner gradients at ±2 is the seed's, at La-MAML's grad_clip_norm default 2.0 (parser.py:94), a
clamp La-MAML's MNIST model computes but never applies (model/lamaml.py:52 discards the result; lamaml_cifar.py:83
applies it). With reg = β = 1, T = 2 and γ = 0.5 (chosen on validation data before the seed's glances and outer
objective were adopted: see REPRODUCING.md).
"""
from dataclasses import dataclass, replace
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..backbones.base import backbones_in
from ..checks import Choice
from ..health import Check
from ..nn import calibrated
from .base import Batch
from .online import OnlineConfig, OnlineMethod, clamped, sgd_step, soft_kl


class OuterObjective(Choice):
    seed = "seed"  # β·reg·Σ F (θ̃ - θ̃_old)²: the seed backpropagates the penalty alone
    paper = "paper"  # Eq. 5: ½·Σ F (θ̃ - θ̃_old)² + β·reg·KL(memory)


class BlockForm(Choice):
    seed = "seed"  # relu(bn2(conv2(.))) + shortcut(x), the shortcut conv uncalibrated (the seed's CalibratedBlock)
    standard = "standard"  # the backbone's block, relu after the sum, every conv calibrated


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
    outer_objective: OuterObjective = OuterObjective.seed  # what the outer step descends (see the docstring)
    block_form: BlockForm = BlockForm.seed  # residual backbones: the seed's block or the standard one
    unused: ClassVar[tuple[str, ...]] = ("lr",)  # the two loops have lrs of their own

    def checks(self):
        return [*super().checks(),
                *((key, getattr(self, key) > 0, "a positive number") for key in ("inner_lr", "outer_lr",
                                                                                  "temperature")),
                *((key, getattr(self, key) >= 0, "0 or more") for key in ("inner_clip", "gamma", "reg", "beta"))]


@dataclass
class Pool:
    """What an incoming batch's draws read from the memory, which no glance writes: the draw weights of the
    earlier tasks' samples (replay; None in task 0) and of the current task's, and how many the current task has."""
    past: torch.Tensor | None
    current: torch.Tensor
    count: torch.Tensor


INERT_CHANGE = 1e-6  # calibration_inert: no calibration entry moved by more than this share of its magnitude


class NCCL(OnlineMethod):
    name = "nccl"
    Config = NCCLConfig
    soft_targets = True
    calibration_inert = Check("nccl.calibration_inert", "the outer steps left every calibration parameter where "
                                                        "the task found it (within a millionth of its magnitude)",
                              "raise method.outer_lr, or method.outer_objective=paper (the seed's objective, the "
                              "penalty alone, has a vanishing gradient)")
    traits = replace(OnlineMethod.traits, backbone_use="calibrated",  # nn/calibrated.py
                     graph_safe=("its stream is a loop of its own (glances, the calibration's outer step, the memory's "
                                 "writes), not the fit() steps StepGraph captures"),
                     health_checks=(*OnlineMethod.traits.health_checks, calibration_inert))

    def __init__(self, cfg, backbone, info, ctx):
        keep = set()
        if cfg.block_form == "seed":  # each residual block as the seed's, its shortcut conv left plain
            for block in (block for b in backbones_in(backbone) for block in b.residual_blocks()):
                block.add_after_activation()
                keep.update(block.shortcut_convs())
        calibrated.convert(backbone, cfg.fcm_form, keep)
        super().__init__(cfg, backbone, info, ctx)
        calibrated.convert(self.heads, cfg.fcm_form)
        self.layers = calibrated.layers(self)
        self.base_params, self.calibration_params = calibrated.split_parameters(self)
        # Per task, the largest relative change of any calibration entry over it: how far the calibration moved
        # (metrics.json's capacity and the calibration_inert check read it; a buffer, so a resumed run keeps it).
        self.register_buffer("calibration_moved", torch.zeros(info.num_tasks, dtype=torch.float64))

    def train_task(self, task):
        start = [p.detach().clone() for p in self.calibration_params]
        super().train_task(task)
        with torch.no_grad():
            self.calibration_moved[task.id] = torch.stack([((p - s).abs() / s.abs().clamp(min=1e-12)).max()
                                                           for p, s in zip(self.calibration_params, start)]).max()

    def health(self, task):
        found = super().health(task)
        moved = float(self.calibration_moved[task.id])  # one host sync per task
        if task.id > 0 and moved <= INERT_CHANGE:  # task 0 has no outer step
            found.append(self.calibration_inert.found(
                task.id, f"the largest relative change of a calibration parameter over the task was {moved:.2e}"))
        return found

    def observe(self, batch, task, store):
        pool = self.pool(task)  # the memory changes only after the glances: its draw weights are taken once
        before = None
        for step in range(self.cfg.inner_steps):
            if task.id > 0 and step == self.cfg.inner_steps - 1:  # the last of the seed's per-step copies
                with torch.no_grad():
                    before = calibrated.weights(self.layers)
            loss = self.inner_step(self.glance_batch(batch, task, step, pool), task, pool)
        if before is not None:
            self.outer_step(task, before, pool)
        if store:
            self.remember(batch)
        return loss.detach()

    def pool(self, task) -> Pool:
        """The memory's draw weights for one incoming batch's glances and outer step."""
        current, count = self.memory.task_weights(task.id)
        past = self.memory.replay_weights(before_task=task.id) if task.id > 0 else None
        return Pool(past, current, count)

    def glance_batch(self, batch: Batch, task, step: int, pool: Pool) -> Batch:
        """Glance 0: the incoming batch; glance k >= 1: current-task memory samples once k·batch_size of them
        are stored, else the incoming batch (decided on the device, without a host sync)."""
        if step == 0:
            return batch
        mem = self.memory
        idx = mem.draw(pool.current, batch.y.shape[0], self.ctx.generator)
        use = pool.count >= step * self.cfg.batch_size  # 0-dim: torch.where broadcasts it over every row
        raw, y, t = (torch.where(use, a[idx], b) for a, b in ((mem.x, batch.raw), (mem.y, batch.y), (mem.t, batch.t)))
        return Batch(raw, self.info.view.train(raw, self.ctx.generator, t), y, t)

    def glance(self, batch, task):
        return self.inner_step(batch, task, self.pool(task)).detach()

    def inner_step(self, batch: Batch, task, pool: Pool) -> torch.Tensor:
        """One inner step: the loss on the batch (and the memory), an SGD step on the base weights only."""
        with self.ctx.autocast():
            loss = self.inner_loss(batch, task, pool)
        grads = torch.autograd.grad(loss, self.base_params, allow_unused=True, materialize_grads=True)
        if self.cfg.inner_clip > 0:
            grads = clamped(grads, self.cfg.inner_clip)
        sgd_step(self.base_params, grads, self.cfg.inner_lr)
        return loss

    def inner_loss(self, batch: Batch, task, pool: Pool) -> torch.Tensor:
        current = self.loss(batch, task.id)
        if task.id == 0:
            return current
        memory, stored = self.replay_from(pool.past)
        z = self.mixed_logits(memory.x, memory.t)  # a forward of its own: batch norm sees the memory alone
        old = F.cross_entropy(z, memory.y) + scaled(self.cfg.reg, soft_kl(z, stored, self.cfg.temperature))
        return current + self.cfg.gamma * old

    def replay_from(self, weights: torch.Tensor) -> tuple[Batch, torch.Tensor]:
        """replay(), drawn with the memory's weights taken beforehand (the same draw from the same generator)."""
        mem = self.memory
        idx = mem.draw(weights, self.cfg.replay_batch_size, self.ctx.generator)
        raw, t = mem.x[idx], mem.t[idx]
        return Batch(raw, self.info.view.train(raw, self.ctx.generator, t), mem.y[idx], t), mem.logits[idx]

    def outer_step(self, task, before: list[torch.Tensor], pool: Pool) -> None:
        """Calibration parameters only: the Fisher-weighted penalty that keeps the calibrated weights where the
        last inner step found them (seed), or Eq. 5's half of it plus β times the KL (paper)."""
        memory, stored = self.replay_from(pool.past)
        with self.ctx.autocast():
            logits = self.mixed_logits(memory.x, memory.t)
        kl = scaled(self.cfg.reg, soft_kl(logits, stored, self.cfg.temperature))
        paper = self.cfg.outer_objective == "paper"
        weights, psis = [layer.base.weight for layer in self.layers], [layer.psi for layer in self.layers]
        weight_grads = torch.autograd.grad(kl, weights, retain_graph=paper, allow_unused=True, materialize_grads=True)
        fisher = fishers(weight_grads, psis)
        if paper:
            moved = torch._foreach_pow(torch._foreach_sub(calibrated.weights(self.layers), before), 2)
            penalty = sum(term.sum() for term in torch._foreach_mul(fisher, moved))
            grads = torch.autograd.grad(0.5 * penalty + self.cfg.beta * kl, self.calibration_params,
                                        allow_unused=True, materialize_grads=True)
            sgd_step(self.calibration_params, grads, self.cfg.outer_lr)
        else:  # the penalty reaches ψ alone: the calibrated biases and λ would step by -lr·0, leaving every value
            with torch.no_grad():
                moved = torch._foreach_sub(calibrated.weights(self.layers), before)
                grads = penalty_psi_grads(fisher, moved, weights, psis, self.cfg.beta * self.cfg.reg)
            sgd_step(psis, grads, self.cfg.outer_lr)

    def variant(self):
        """Runs of the paper's Eq. 5 outer objective are listed apart from the seed code's."""
        return "paper objective" if self.cfg.outer_objective == "paper" else None

    def capacity(self):
        return {**super().capacity(), "calibration_params": sum(p.numel() for p in self.calibration_params),
                "calibration_moved": self.calibration_moved.tolist()}


@torch.no_grad()  # a constant of the penalty: no gradient reaches ψ through it
def fishers(weight_grads: list[torch.Tensor], psis: list[torch.Tensor]) -> list[torch.Tensor]:
    """Diagonal Fisher of each θ̃ = θ ⊙ ψ from the gradient of θ: (∂L/∂θ ÷ ψ)² = (∂L/∂θ̃)²; 0 where ψ is 0, where
    θ̃ does not depend on θ."""
    quotients = torch._foreach_div(list(weight_grads), psis)
    return torch._foreach_pow([torch.where(psi != 0, q, 0.0) for q, psi in zip(quotients, psis)], 2)


def penalty_psi_grads(fisher, moved, weights, psis, scale: float) -> list[torch.Tensor]:
    """∂/∂ψ of scale·Σ F ⊙ (θ ⊙ ψ - θ̃_old)², moved being θ ⊙ ψ - θ̃_old: scale·F·(2·moved)·θ summed over the
    kernel, as foreach ops (autograd's backward of that sum is a handful of calls per layer) and in the order autograd
    computes it (the scale, F, the square's 2·moved, the product's θ, then the sum to ψ's shape): the same bits."""
    grads = fisher if scale == 1 else torch._foreach_mul(fisher, scale)
    grads = torch._foreach_mul(torch._foreach_mul(grads, torch._foreach_mul(moved, 2.0)), weights)
    return [g.sum_to_size(psi.shape) for g, psi in zip(grads, psis)]


def scaled(factor: float, x: torch.Tensor) -> torch.Tensor:
    """factor·x, without the multiplication (a call, and one more in the backward) when factor is 1: x·1 is x to
    the bit, and so is its gradient."""
    return x if factor == 1 else factor * x

