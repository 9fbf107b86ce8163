"""Learning without Forgetting (Li & Hoiem 2016): while learning a new task, keep the old heads' outputs
on the new data close to those of the model from before the task (distillation at temperature T)."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .base import Method, MethodConfig, Traits, fresh_copy


@dataclass
class LwFConfig(MethodConfig):
    name: str = "lwf"
    distill_weight: float = 1.0  # weight of the distillation term against the new task's cross-entropy
    temperature: float = 2.0  # T of the softened outputs

    def checks(self):
        return [*super().checks(), ("distill_weight", self.distill_weight >= 0, "0 or more"),
                ("temperature", self.temperature > 0, "a positive number")]


def distillation(new_logits, old_logits, temperature):
    """KL(old ‖ new) on outputs softened by T, times T² so its gradients keep their scale (Hinton et al.)."""
    old = F.softmax(old_logits / temperature, dim=1)
    return F.kl_div(F.log_softmax(new_logits / temperature, dim=1), old, reduction="batchmean") * temperature ** 2


class LwF(Method):
    name = "lwf"
    Config = LwFConfig
    traits = Traits(scenarios=frozenset({"task", "class"}), distributed_scenarios=frozenset({"task", "class"}),
                    graph_safe=True)  # the teacher is copied before the phase; its forward is captured with the step

    def train_task(self, task):
        if task.id == 0:
            self.loop.fit(task, lambda batch: self.loss(batch, 0))
            return
        # A frozen copy of the network as it was before this task: the teacher.
        old_backbone = fresh_copy(self.backbone).eval().requires_grad_(False)
        old_heads = fresh_copy(self.heads).eval().requires_grad_(False)
        old_tasks = range(task.id)
        old_outputs = self.info.seen_outputs(task.id - 1)

        def loss(batch):
            features = self.backbone(batch.x)
            with torch.no_grad():
                old_features = old_backbone(batch.x)
            ce = F.cross_entropy(self.heads(features, task.id), self.targets(batch.y, task.id))
            if self.info.scenario == "task":
                kd = sum(distillation(self.heads(features, k), old_heads(old_features, k), self.cfg.temperature)
                         for k in old_tasks)
            else:
                kd = distillation(self.heads(features, None)[:, :old_outputs],
                                  old_heads.head(old_features)[:, :old_outputs], self.cfg.temperature)
            return ce + self.cfg.distill_weight * kd

        self.loop.fit(task, loss)
