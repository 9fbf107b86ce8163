"""Piggyback (Mallya et al. 2018): the network learned on the first task is frozen; each later task learns a
binary picking mask over its weights (real-valued scores binarised with a straight-through gradient), with
its own biases, batch norms and head. Zero forgetting; each task costs one bit per weight."""
from dataclasses import dataclass, replace

from .masking import PICKS_ALL, PICKS_NONE, MaskedMethod, PickingConfig


@dataclass
class PiggybackConfig(PickingConfig):
    name: str = "piggyback"


class Piggyback(MaskedMethod):
    name = "piggyback"
    Config = PiggybackConfig
    picking = True
    traits = replace(MaskedMethod.traits,
                     graph_safe="its picking scores step outside the step (after_step), from their gradients",
                     health_checks=(PICKS_ALL, PICKS_NONE))  # later tasks own no weight by design: no capacity checks

    def train_task(self, task):
        self.begin_task(task.id)  # the first task claims every weight; later ones find none free
        self.train_weights(task, self.cfg.epochs, self.cfg.lr, mask_lr=self.cfg.mask_lr)
        self.finish_task(task.id)
