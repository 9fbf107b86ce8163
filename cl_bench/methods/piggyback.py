"""Piggyback (Mallya et al. 2018): the network learned on the first task is frozen; each later task learns a
binary picking mask over its weights (real-valued scores binarised with a straight-through gradient), with
its own biases, batch norms and head. Zero forgetting; each task costs one bit per weight."""
from dataclasses import dataclass, field

from ..errors import UserError
from .base import MethodConfig
from .packnet import MaskedMethod


@dataclass
class PiggybackConfig(MethodConfig):
    name: str = "piggyback"
    epochs: int = 100  # passes over each task's data (CPG's CIFAR-100 schedule)
    batch_size: int = 32  # CPG's CIFAR-100 scripts
    lr: float = 1e-2  # SGD lr of the first task's weights and every task's biases, batch norms and head
    nesterov: bool = True  # the CPG code base's SGD
    weight_decay: float = 4e-5  # added by hand to the first task's conv/linear weights only
    lr_milestones: list[int] = field(default_factory=lambda: [50, 80])  # lr ×lr_gamma at these epochs
    mask_lr: float = 5e-4  # Adam lr of the real-valued picking scores
    mask_lr_milestones: list[int] = field(default_factory=lambda: [50])  # mask lr ×mask_lr_gamma at these epochs
    mask_lr_gamma: float = 0.2
    mask_lr_stop: int = 70  # epoch from which the mask lr is 0 (masks settle while the heads keep training)
    mask_init: float = 1e-2  # initial score of every weight: all picked at the start
    mask_threshold: float = 5e-3  # a weight is picked while its score is above this


def check_picking(cfg) -> None:
    if cfg.mask_lr < 0:
        raise UserError(f"method.mask_lr={cfg.mask_lr} is out of range: use 0 or more")
    if cfg.mask_init <= cfg.mask_threshold:
        raise UserError(f"method.mask_init={cfg.mask_init} must be above method.mask_threshold="
                        f"{cfg.mask_threshold}, or no weight is picked at the start")


class Piggyback(MaskedMethod):
    name = "piggyback"
    Config = PiggybackConfig
    picking = True

    @classmethod
    def check_config(cls, cfg):
        super().check_config(cfg)
        check_picking(cfg)

    def train_task(self, task):
        self.begin_task(task.id)  # the first task claims every weight; later ones find none free
        self.train_weights(task, self.cfg.epochs, self.cfg.lr, mask_lr=self.cfg.mask_lr)
        self.finish_task(task.id)
