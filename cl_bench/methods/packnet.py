"""PackNet (Mallya & Lazebnik 2018): train the free weights, prune a share of them by magnitude back to the
free pool, retrain the survivors and freeze them as the task's own. Zero forgetting by construction."""
from dataclasses import dataclass, field, replace

from ..health import Check
from .masking import MaskedConfig, MaskedMethod


@dataclass
class PackNetConfig(MaskedConfig):
    name: str = "packnet"
    prune_ratio: float = 0.6  # share of the task's weights released by magnitude after training
    retrain_epochs: int = 30  # retraining of the survivors after pruning
    retrain_lr: float = 1e-3  # lr of that retraining
    retrain_lr_milestones: list[int] = field(default_factory=lambda: [25])  # its lr ×lr_gamma at these epochs

    def checks(self):
        return [*super().checks(), ("prune_ratio", 0 <= self.prune_ratio < 1, "a fraction in [0, 1)"),
                ("retrain_epochs", self.retrain_epochs >= 0, "0 or more")]


class PackNet(MaskedMethod):
    name = "packnet"
    Config = PackNetConfig
    no_own_weights = Check("packnet.no_own_weights", "a task owns no weight, or next to none: the tasks before it "
                                                     "left none free",
                           "raise method.prune_ratio (the share each task releases) or learn fewer tasks")
    hoarded = Check("packnet.hoarded", "a task released none of its weights with tasks to come",
                    "set method.prune_ratio above 0")
    exhausted = Check("packnet.exhausted", "no weight is left free for the tasks to come",
                      "raise method.prune_ratio (the share each task releases) or learn fewer tasks")
    traits = replace(MaskedMethod.traits, health_checks=(no_own_weights, hoarded, exhausted),
                     graph_safe=True,  # its masks change between phases only; each phase is captured afresh
                     short_schedule=("method.retrain_epochs=1",))

    def train_task(self, task):
        self.begin_task(task.id)
        self.train_weights(task, self.cfg.epochs, self.cfg.lr)
        self.release(task.id, self.cfg.prune_ratio)
        self.train_weights(task, self.cfg.retrain_epochs, self.cfg.retrain_lr,
                           milestones=self.cfg.retrain_lr_milestones)
        self.finish_task(task.id)
