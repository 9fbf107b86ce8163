"""A-GEM, averaged gradient episodic memory (Chaudhry et al., ICLR 2019), online.

Each glance computes the gradient g on the incoming batch and, from task 1 on, a reference gradient g_ref
on a memory batch of earlier tasks; when they conflict (g·g_ref < 0) g is projected onto the half-space
where the memory loss does not rise: g - (g·g_ref / g_ref·g_ref) g_ref. The test is done on the device,
with no host sync.

In the class scenario both cross-entropies read every output of the single head by default, future classes' too,
as Mammoth's A-GEM (whose figures the DER paper tables); method.ce_outputs=seen reads the classes seen so far.

La-MAML's A-GEM (model/agem.py), the baseline of its tables, is one override away: memory_policy=ring (a share per
task, its newest samples), reference=per_task (the mean over past tasks of the gradient on each one's whole share)
and grad_clip_norm=2.0 (each of those gradients and the batch's clipped to that norm before the projection)."""
from dataclasses import dataclass

import torch

from ..checks import Choice
from ..errors import UserError
from .base import CEOutputs
from .online import OnlineConfig, OnlineMethod, clip_norm, sgd_step


class Reference(Choice):
    sample = "sample"  # one random memory batch of earlier tasks (A-GEM's paper and Mammoth)
    per_task = "per_task"  # the mean of each earlier task's gradient over its whole ring share (La-MAML's A-GEM)


@dataclass
class AGEMConfig(OnlineConfig):
    name: str = "agem"
    lr: float = 0.1  # SGD lr (GEM's MNIST setting)
    inner_steps: int = 1  # glances per batch: A-GEM takes one step per batch
    replay_batch_size: int = 64  # memory samples behind the reference gradient (A-GEM uses 256 from larger memories)
    ce_outputs: CEOutputs = CEOutputs.all  # class scenario: the outputs the cross-entropies read (Mammoth: all)
    reference: Reference = Reference.sample  # how the reference gradient is taken
    grad_clip_norm: float = 0.0  # clip each gradient to this L2 norm before the projection; 0: none (La-MAML: 2.0)

    def checks(self):
        return [*super().checks(), ("grad_clip_norm", self.grad_clip_norm >= 0, "0 (none) or more"),
                ("replay_batch_size", self.reference == "sample" or self.replay_batch_size == 64,
                 "64: under reference=per_task the whole share of each task is the reference batch")]


class AGEM(OnlineMethod):
    name = "agem"
    Config = AGEMConfig
    traits = OnlineMethod.traits

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        if cfg.reference == "per_task" and cfg.memory_policy != "ring":
            raise UserError("method.reference=per_task takes each task's gradient over its own share of the memory: "
                            "use method.memory_policy=ring")
        self.params = [p for p in self.parameters() if p.requires_grad]

    def glance(self, batch, task):
        with self.ctx.autocast():
            loss = self.mixed_loss(batch, self.cfg.ce_outputs)
        grads = self.clipped(torch.autograd.grad(loss, self.params, allow_unused=True, materialize_grads=True))
        if task.id > 0:
            ref = self.per_task_reference(task) if self.cfg.reference == "per_task" else self.sample_reference(task)
            grads = project(grads, ref)
        sgd_step(self.params, grads, self.cfg.lr)
        return loss.detach()

    def sample_reference(self, task):
        memory, _ = self.replay(before_task=task.id)
        with self.ctx.autocast():
            memory_loss = self.mixed_loss(memory, self.cfg.ce_outputs)
        return self.clipped(torch.autograd.grad(memory_loss, self.params, allow_unused=True, materialize_grads=True))

    def per_task_reference(self, task):
        """The mean over tasks j < t of the (clipped) gradient of task j's loss on all its stored samples."""
        share = self.memory.per_task
        valid = self.memory.valid()
        total = [torch.zeros_like(p) for p in self.params]
        for j in range(task.id):
            rows = slice(j * share, (j + 1) * share)
            raw, y, t = self.memory.x[rows], self.memory.y[rows], self.memory.t[rows]
            weight = valid[rows].float()
            with self.ctx.autocast():
                features = self.backbone(self.info.view.train(raw, self.ctx.generator, t))
                logits = self.mixed_outputs(features, t, self.cfg.ce_outputs)
                per_sample = torch.nn.functional.cross_entropy(logits.float(), y, reduction="none")
            memory_loss = (per_sample * weight).sum() / weight.sum().clamp(min=1)
            grads = self.clipped(torch.autograd.grad(memory_loss, self.params, allow_unused=True,
                                                     materialize_grads=True))
            total = torch._foreach_add(total, grads)
        return torch._foreach_div(total, task.id)

    def clipped(self, grads):
        return clip_norm(grads, self.cfg.grad_clip_norm) if self.cfg.grad_clip_norm > 0 else list(grads)


def project(grads, ref):
    """A-GEM's projection of grads (a list of tensors, one vector as a whole) against ref."""
    grads, ref = list(grads), list(ref)
    # The elementwise parts as foreach ops; the sums stay per tensor, added in order, as before.
    dot = sum(p.sum() for p in torch._foreach_mul(grads, ref))
    ref_sq = sum(p.sum() for p in torch._foreach_mul(ref, ref))  # r·r, as r.pow(2) computes it
    coef = torch.clamp(dot, max=0) / ref_sq.clamp(min=1e-12)  # 0 when they agree: g is left as it is
    return torch._foreach_sub(grads, torch._foreach_mul(ref, coef))
