"""CPG, Compacting, Picking and Growing (Hung et al. 2019): zero forgetting in one network that grows on demand.

Per task:

1. pick and train: a picking mask over earlier tasks' frozen weights, learned jointly with the free weights;
2. grow: while validation accuracy misses the task's goal, restart the task on a wider network (the
   parameter multiplier steps by grow_step up to max_multiplier; new channels start free);
3. compact: prune the task's weights gradually on the cubic schedule of Zhu & Gupta (2017) toward rising
   sparsity targets, retraining as it goes, and keep the sparsest model whose validation accuracy still
   meets the goal (or, where growth could not reach the goal, the accuracy reached); the released weights
   return to the free pool;
4. optionally retrain the picking mask with the final weights, kept only if validation accuracy improves.

With picking=false it is PAE, CPG without picking. All model selection uses the validation split.
"""
import copy
from dataclasses import dataclass, field

import torch
from torch import nn

from ..checks import Choice
from ..errors import UserError
from ..nn import masked
from .base import reset_parameters
from .masking import MaskedMethod, PickingConfig


class GoalSource(Choice):
    independent = "independent"  # a fresh model trained on the task first, with the same budget
    fixed = "fixed"  # method.goal for every task
    none = "none"  # no goal: no growth, and compacting keeps the sparsest target


@dataclass
class CPGConfig(PickingConfig):
    name: str = "cpg"
    picking: bool = True  # learn picking masks over earlier tasks' weights; false gives PAE
    goal_source: GoalSource = GoalSource.independent
    goal: float = 0.0  # the validation accuracy every task must reach when goal_source=fixed
    grow_step: float = 0.5  # growth adds this to the parameter multiplier (width grows by its square root)
    max_multiplier: float = 1.5  # no growth beyond this parameter multiplier (official: 1.5)
    prune_targets: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
                                                                0.95])  # sparsities compacting tries in turn
    prune_epochs: int = 20  # training epochs per sparsity target
    prune_ramp_epochs: int = 4  # the cubic schedule reaches the target after this many of them
    prune_frequency: int = 10  # steps between pruning updates on the ramp
    prune_lr: float = 1e-3  # SGD lr while compacting (the picking mask is frozen then)
    retrain_picking: bool = True  # refit the picking mask after compacting, kept only if it helps
    retrain_epochs: int = 30
    retrain_lr: float = 1e-3  # weights' lr in that refit
    retrain_mask_lr: float = 1e-4  # picking scores' lr in that refit

    def checks(self):
        targets = list(self.prune_targets)
        return [*super().checks(),
                ("goal", self.goal >= 0, "a validation accuracy in [0, 1] (above 1 can never be met: every task "
                                         "grows to max_multiplier)"),
                ("grow_step", self.grow_step > 0, "a positive number"),
                ("max_multiplier", self.max_multiplier >= 1, "at least 1"),
                ("prune_targets", all(0 < t < 1 for t in targets) and targets == sorted(set(targets)),
                 "sparsities rising strictly within (0, 1)"),
                ("prune_epochs", self.prune_epochs >= 1, "at least 1"),
                ("prune_ramp_epochs", 0 <= self.prune_ramp_epochs <= self.prune_epochs, "0 to method.prune_epochs"),
                ("prune_frequency", self.prune_frequency >= 1, "at least 1"),
                ("retrain_epochs", self.retrain_epochs >= 0, "0 or more")]


def cubic_sparsity(step: int, begin: int, end: int, initial: float, target: float) -> float:
    """Zhu & Gupta's (2017) gradual pruning: s = s_f + (s_i - s_f)(1 - p)³, p the progress from begin to end."""
    p = min(1.0, max(0.0, (step - begin) / max(end - begin, 1)))
    return target + (initial - target) * (1 - p) ** 3


class CPG(MaskedMethod):
    name = "cpg"
    Config = CPGConfig
    within_task_checkpoints = ("its phases choose among trained models by validation accuracy (growing, "
                               "compacting), so a task restarts from its beginning")

    def __init__(self, cfg, backbone, info, ctx):
        # The unconverted backbone, the template of goal_source=independent's models; kept out of the
        # state dict and parameters, since every goal model is trained afresh.
        template = copy.deepcopy(backbone)
        super().__init__(cfg, backbone, info, ctx)
        object.__setattr__(self, "template", template)
        # Growth's target: the shared widths are their initial ones times its square root.
        self.register_buffer("param_multiplier", torch.ones((), dtype=torch.float64))
        self.register_buffer("goal", torch.zeros(info.num_tasks))  # the validation accuracy each task aimed at
        self.register_buffer("val_acc", torch.zeros(info.num_tasks))  # its validation accuracy as kept

    @classmethod
    def uses_picking(cls, cfg) -> bool:
        return cfg.picking

    def train_task(self, task):
        if len(task.val) == 0:
            raise UserError("cpg selects models on validation data: set data.val_fraction above 0")
        goal = self.task_goal(task)
        self.begin_task(task.id)
        reached = self.pick_and_grow(task, goal)
        # Compacting may lose no validation accuracy below the goal, nor below what the task reached where
        # growth is exhausted short of it: else one hard task would keep every weight it claimed, leaving
        # later tasks no free weights (the official selection prunes such a task to its highest ratio).
        target = reached if goal is None else min(goal, reached)
        acc = self.compact(task, target, reached)
        if self.picking_on(task.id) and self.cfg.retrain_picking:
            acc = self.refit_picking(task, acc)
        self.goal[task.id], self.val_acc[task.id] = target if goal is None else goal, acc
        self.finish_task(task.id)

    def picking_on(self, task_id: int) -> bool:
        return self.cfg.picking and task_id > 0

    def pick_and_train(self, task) -> float:
        mask_lr = self.cfg.mask_lr if self.picking_on(task.id) else 0.0
        self.train_weights(task, self.cfg.epochs, self.cfg.lr, mask_lr=mask_lr)
        return self.accuracy(task.val, task.id)

    def pick_and_grow(self, task, goal: float | None) -> float:
        """Steps 1 and 2: train; while short of the goal and allowed to grow, restart wider."""
        start = self.snapshot()
        acc = self.pick_and_train(task)
        multiplier = float(self.param_multiplier)
        while (goal is not None and acc < goal
               and multiplier + self.cfg.grow_step <= self.cfg.max_multiplier + 1e-9):
            multiplier += self.cfg.grow_step
            self.restore(start)
            self.param_multiplier.fill_(multiplier)
            masked.widen(self.backbone, multiplier, task.id)
            acc = self.pick_and_train(task)
        return acc

    def compact(self, task, goal: float, acc: float) -> float:
        """Step 3: prune toward each target in turn; keep the sparsest model still meeting the goal."""
        best, best_acc, sparsity = self.snapshot(), acc, 0.0
        for target in self.cfg.prune_targets:
            self.gradual_prune(task, sparsity, target)
            sparsity = target
            acc = self.accuracy(task.val, task.id)
            if acc < goal:
                break
            best, best_acc = self.snapshot(), acc
        self.restore(best)
        return best_acc

    def gradual_prune(self, task, initial: float, target: float) -> None:
        """Retrain for prune_epochs, releasing weights every prune_frequency steps on the cubic ramp."""
        end = self.cfg.prune_ramp_epochs * -(-len(task.train) // self.cfg.batch_size)
        if end == 0:  # no ramp: prune to the target at once, then retrain
            self.release(task.id, target)

        def after_step(step):
            if step <= end and (step % self.cfg.prune_frequency == 0 or step == end):
                self.release(task.id, cubic_sparsity(step, 0, end, initial, target))
            for layer in self.layers:  # momentum would move released weights off zero
                layer.zero_released()

        self.train_weights(task, self.cfg.prune_epochs, self.cfg.prune_lr, after_step=after_step)

    def refit_picking(self, task, acc: float) -> float:
        """Step 4: retrain the picking mask with the compacted weights; keep it only if it helps."""
        before = self.snapshot()
        self.train_weights(task, self.cfg.retrain_epochs, self.cfg.retrain_lr, mask_lr=self.cfg.retrain_mask_lr)
        refit = self.accuracy(task.val, task.id)
        if refit > acc:
            return refit
        self.restore(before)
        return acc

    def task_goal(self, task) -> float | None:
        if self.cfg.goal_source == "independent":
            return self.independent_goal(task)
        return self.cfg.goal if self.cfg.goal_source == "fixed" else None

    def independent_goal(self, task) -> float:
        """The validation accuracy of a fresh, unconverted network trained on the task alone, same budget."""
        net = copy.deepcopy(self.template)
        reset_parameters(net)
        model = nn.Sequential(net, nn.Linear(net.feature_dim, task.num_classes)).to(self.ctx.device).train()
        self.fit(task, lambda b: nn.functional.cross_entropy(model(b.x), self.targets(b.y, task.id)),
                 params=model.parameters())
        model.eval()
        return self.accuracy(task.val, task.id, model)

    def capacity(self):
        learned = int(self.tasks_learned)
        return {**super().capacity(), "param_multiplier": float(self.param_multiplier),
                "goal_per_task": [round(float(g), 6) for g in self.goal[:learned]],
                "val_acc_per_task": [round(float(a), 6) for a in self.val_acc[:learned]]}
