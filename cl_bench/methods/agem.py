"""A-GEM, averaged gradient episodic memory (Chaudhry et al., ICLR 2019), online.

Each glance computes the gradient g on the incoming batch and, from task 1 on, a reference gradient g_ref
on a memory batch of earlier tasks; when they conflict (g·g_ref < 0) g is projected onto the half-space
where the memory loss does not rise: g - (g·g_ref / g_ref·g_ref) g_ref. The test is done on the device,
with no host sync.

In the class scenario both cross-entropies read every output of the single head by default, future classes' too,
as Mammoth's A-GEM (whose figures the DER paper tables); method.ce_outputs=seen reads the classes seen so far."""
from dataclasses import dataclass

import torch

from .base import CEOutputs
from .online import OnlineConfig, OnlineMethod, sgd_step


@dataclass
class AGEMConfig(OnlineConfig):
    name: str = "agem"
    lr: float = 0.1  # SGD lr (GEM's MNIST setting)
    inner_steps: int = 1  # glances per batch: A-GEM takes one step per batch
    replay_batch_size: int = 64  # memory samples behind the reference gradient (A-GEM uses 256 from larger memories)
    ce_outputs: CEOutputs = CEOutputs.all  # class scenario: the outputs the cross-entropies read (Mammoth: all)


class AGEM(OnlineMethod):
    name = "agem"
    Config = AGEMConfig

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        self.params = [p for p in self.parameters() if p.requires_grad]

    def glance(self, batch, task):
        with self.ctx.autocast():
            loss = self.mixed_loss(batch, self.cfg.ce_outputs)
        grads = torch.autograd.grad(loss, self.params, allow_unused=True, materialize_grads=True)
        if task.id > 0:
            memory, _ = self.replay(before_task=task.id)
            with self.ctx.autocast():
                memory_loss = self.mixed_loss(memory, self.cfg.ce_outputs)
            ref = torch.autograd.grad(memory_loss, self.params, allow_unused=True, materialize_grads=True)
            grads = project(grads, ref)
        sgd_step(self.params, grads, self.cfg.lr)
        return loss.detach()


def project(grads, ref):
    """A-GEM's projection of grads (a list of tensors, one vector as a whole) against ref."""
    dot = sum((g * r).sum() for g, r in zip(grads, ref))
    ref_sq = sum(r.pow(2).sum() for r in ref)
    coef = torch.clamp(dot, max=0) / ref_sq.clamp(min=1e-12)  # 0 when they agree: g is left as it is
    return [g - coef * r for g, r in zip(grads, ref)]
