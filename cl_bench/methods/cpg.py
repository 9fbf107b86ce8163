"""CPG, Compacting, Picking and Growing (Hung et al. 2019): zero forgetting in one network that grows on demand,
run as ivclab/CPG's scripts run it (CPG_cifar100_scratch_mul_1.5.sh with its main and tools). Per task:

1. pick and train: a picking mask over earlier tasks' frozen weights, learned jointly with the free weights;
2. grow: unless the last epoch's training accuracy tops train_acc_bar (0.95) and the selection accuracy meets
   the task's goal, restart the task on a wider network: the parameter multiplier steps by grow_step up to
   max_multiplier, and every shared layer (the last feature layer and the heads' input too) widens to
   int(width × √multiplier), the new weights free;
3. compact: prune the task's weights gradually (Zhu & Gupta's cubic schedule) through every sparsity target
   in turn, recording the selection accuracy at each while the training accuracy stays above the bar; keep
   the highest recorded ratio that meets the goal. A task that misses its goal at full width is pruned all
   the same, to the highest recorded ratio up to 1 - round(1/(tasks left + 1), 1), so that later tasks find
   room; a task that found no free weight is not pruned;
4. refit the picking mask (restarted at mask_init) with the compacted weights for up to retrain_epochs,
   stopping after refit_patience epochs without gain; its best epoch is kept if it beats the restarted mask.

With picking=false it is PAE, CPG without picking (and without step 4). Selection data is each task's
validation split, or with method.protocol=official, as the official code does, its test split.
"""
import copy
import itertools
import logging
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn

from ..backbones.base import Capability
from ..checks import Choice
from ..errors import UserError
from ..health import Check
from ..nn import masked
from . import parallel
from .base import reset_parameters
from .masking import PICKS_ALL, PICKS_NONE, MaskedMethod, PickingConfig, init_head

log = logging.getLogger(__name__)  # each task's decisions, in the run's train.log


class GoalSource(Choice):
    # Goals are selection accuracies of separate goal models, trained before the task with the same schedule
    # (ivclab/CPG's README step 3 offers the first two; which goals gave the published 80.9 is not documented).
    independent = "independent"  # a fresh model trained on the task alone (baseline_cifar100.sh: scratch)
    finetune = "finetune"  # a model fine-tuned at finetune_goal_lr from the goal model of an earlier task drawn
    # at random, the first task's trained fresh (finetune_cifar100_normal.sh); every goal model is kept
    all_max = "all_max"  # the higher of the two above, per task (the released checkpoints' all_max setting)
    fixed = "fixed"  # method.goal for every task
    none = "none"  # no goal: no growth, and compacting keeps the sparsest target


class RefitBaseline(Choice):
    restarted = "restarted"  # the official rule: an epoch is kept if it beats the restarted mask's accuracy,
    # even when that is below what compacting reached (a short refit can then leave the task worse off)
    compacted = "compacted"  # an epoch is kept only if it beats the compacted model's accuracy


class PruneTiming(Choice):
    official = "official"  # ivclab/CPG's gradual pruning (utils/prune.py, utils/manager.py): 0-based step k
    # updates the masks after its optimiser step when k is a multiple of prune_frequency within the ramp (no
    # forced update at its end); the own weights at or under the magnitude ranked at the count are released
    # and keep computing, frozen, until the epoch's end zeroes them
    immediate = "immediate"  # released at steps prune_frequency, 2 x prune_frequency, ... and the ramp's end,
    # exactly the count, zeroed at once and after every step (PackNet's make_pruned_zero)


@dataclass
class CPGConfig(PickingConfig):
    name: str = "cpg"
    picking: bool = True  # learn picking masks over earlier tasks' weights; false gives PAE
    goal_source: GoalSource = GoalSource.independent
    goal: float = 0.0  # the validation accuracy every task must reach when goal_source=fixed
    goal_repeats: int = 1  # goals are the best of this many goal models (fine-tune chains) per source; the
    # committed PAE script reads finetune_max goals, the best of finetune_cifar100.sh's 5 chains: goal_repeats=5
    finetune_goal_lr: float = 5e-3  # the fine-tuned goal models' lr (the first task's uses method.lr)
    grow_step: float = 0.5  # growth adds this to the parameter multiplier (width grows by its square root)
    max_multiplier: float = 1.5  # no growth beyond this parameter multiplier (official: 1.5)
    prune_targets: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
                                                                0.95])  # sparsities compacting tries in turn
    prune_epochs: int = 20  # training epochs per sparsity target
    prune_ramp_epochs: int = 4  # the cubic schedule reaches the target after this many of them
    prune_frequency: int = 10  # steps between pruning updates on the ramp
    prune_timing: PruneTiming = PruneTiming.official  # when the ramp releases weights and when they turn 0
    prune_lr: float = 1e-3  # SGD lr while compacting (the picking mask is frozen then)
    allow_acc_loss: float = 0.0  # a compacted ratio passes when its selection accuracy plus this meets the criterion
    # (ivclab/CPG's chooser, tools/choose_appropriate_pruning_ratio_for_next_task.py --allow_acc_loss: 0.0 in its
    # scripts): room for a goal measured on few validation images; an exhausted task's choice ignores it, as there
    retrain_picking: bool = True  # refit the picking mask after compacting, kept only if it helps
    retrain_epochs: int = 30  # at most, in that refit
    retrain_lr: float = 1e-3  # weights' lr in that refit
    retrain_mask_lr: float = 1e-4  # picking scores' lr in that refit
    refit_patience: int = 5  # the refit stops after this many epochs without a better selection accuracy
    refit_baseline: RefitBaseline = RefitBaseline.restarted  # what a refit epoch must beat to be kept
    train_acc_bar: float = 0.95  # a phase counts only when its last epoch's training accuracy is above this:
    # below it the task grows (if it can), and compacting stops (the official scripts' fixed 0.95)

    def checks(self):
        targets = list(self.prune_targets)
        return [*super().checks(),
                ("goal", self.goal >= 0, "a validation accuracy in [0, 1] (above 1 can never be met: every task "
                                         "grows to max_multiplier)"),
                ("goal_repeats", self.goal_repeats >= 1, "at least 1"),
                ("finetune_goal_lr", self.finetune_goal_lr > 0, "a positive number"),
                ("grow_step", self.grow_step > 0, "a positive number"),
                ("max_multiplier", self.max_multiplier >= 1, "at least 1"),
                ("prune_targets", all(0 < t < 1 for t in targets) and targets == sorted(set(targets)),
                 "sparsities rising strictly within (0, 1)"),
                ("prune_epochs", self.prune_epochs >= 1, "at least 1"),
                ("prune_ramp_epochs", 0 <= self.prune_ramp_epochs <= self.prune_epochs, "0 to method.prune_epochs"),
                ("prune_frequency", self.prune_frequency >= 1, "at least 1"),
                ("allow_acc_loss", 0 <= self.allow_acc_loss < 1, "a fraction in [0, 1)"),
                ("retrain_epochs", self.retrain_epochs >= 0, "0 or more"),
                ("refit_patience", self.refit_patience >= 1, "at least 1"),
                ("train_acc_bar", 0 <= self.train_acc_bar < 1, "a fraction in [0, 1)")]


REFIT_OUTCOMES = ("not run", "kept nothing", "kept an epoch")  # refit_per_task's codes, in order


def must_ratio(tasks_left: int) -> float:
    """The ratio the official code prunes a task to when growth could not reach its goal: it keeps about a
    1/(tasks left + 1) share of what it claimed, rounded to tenths as Python rounds (0.9 for most tasks, 0.5 for
    the second-to-last, 0 for the last)."""
    return 1.0 - round(1.0 / (tasks_left + 1), 1)


def goal_net_name(chain: int) -> str:
    return f"cpg_goal_chain{chain}"


def flatten_state(net: nn.Module) -> torch.Tensor:
    """A network's floating-point state (weights, biases, batch-norm statistics) as one vector; the official
    fine-tuning copies everything but num_batches_tracked."""
    return torch.cat([v.detach().flatten().float() for v in net.state_dict().values() if v.is_floating_point()])


def load_flat_state(net: nn.Module, flat: torch.Tensor) -> None:
    at = 0
    with torch.no_grad():
        for v in net.state_dict().values():
            if v.is_floating_point():
                v.copy_(flat[at:at + v.numel()].view_as(v))
                at += v.numel()


def cubic_sparsity(step: int, begin: int, end: int, initial: float, target: float) -> float:
    """Zhu & Gupta's (2017) gradual pruning: s = s_f + (s_i - s_f)(1 - p)³, p the progress from begin to end."""
    p = min(1.0, max(0.0, (step - begin) / max(end - begin, 1)))
    return target + (initial - target) * (1 - p) ** 3


# What keeps compacting from running, in the official rules: the training-accuracy bar and a short schedule.
COMPACTING = "lower method.train_acc_bar (the bar each phase must top) or train longer (method.epochs, " \
             "method.prune_epochs)"


class CPG(MaskedMethod):
    name = "cpg"
    Config = CPGConfig
    no_own_weights = Check("cpg.no_own_weights", "a task owns no weight, or next to none: the tasks before it left "
                                                 "none free and growth had reached method.max_multiplier", COMPACTING)
    hoarded = Check("cpg.hoarded", "a task kept every weight it claimed with tasks to come: compacting released "
                                   "nothing", f"{COMPACTING}; or give the pruning ramp a step at "
                                              "method.prune_frequency (a lower one, or more method.prune_ramp_epochs)")
    exhausted = Check("cpg.exhausted", "no weight is left free, nor growth, for the tasks to come", COMPACTING)
    refit_worse = Check("cpg.refit_worse", "the picking refit kept a mask worse than the compacted model it "
                                           "replaced", "method.refit_baseline=compacted keeps only a refit that "
                                                       "beats the compacted model; or raise method.retrain_epochs")
    traits = replace(
        MaskedMethod.traits,
        graph_safe=("its pruning ramp changes the masks, and the branches taken on them, between the steps of a "
                    "phase; its picking scores step outside the step, from their gradients"),
        graph_phases=("goal",),  # the goal models: a plain network, its loss and weight decay
        within_task_checkpoints=("its phases choose among trained models by validation accuracy (growing, "
                                 "compacting), so a task restarts from its beginning"),
        health_checks=(no_own_weights, hoarded, exhausted, refit_worse, PICKS_ALL, PICKS_NONE),
        short_schedule=("method.goal_source=none", "method.prune_epochs=1", "method.prune_ramp_epochs=1",
                        "method.prune_targets=[0.5,0.9]", "method.retrain_epochs=1"))

    @classmethod
    def needs_for(cls, cfg) -> frozenset[str]:
        """Growth (max_multiplier above 1) widens the backbone's layers: pc_cnn flattens a 4x4 conv map into its
        first linear layer, whose input a widened conv would grow by the map's area, so it is refused there."""
        return cls.traits.needs | ({Capability.widen} if cfg.max_multiplier > 1 else set())

    def __init__(self, cfg, backbone, info, ctx):
        # The unconverted backbone, the template of goal_source=independent's models; kept out of the
        # state dict and parameters, since every goal model is trained afresh.
        template = copy.deepcopy(backbone)
        super().__init__(cfg, backbone, info, ctx)
        object.__setattr__(self, "template", template)
        # The current task's compacting, for health(): (target, train acc) where the bar stopped it, and the
        # selection accuracy a kept sparsity had to meet (None when growth ran out short of the goal).
        self.compacting_stop: tuple[float, float] | None = None
        self.compacting_criterion: float | None = None
        self.refit_kept: tuple[float, float] | None = None  # (refit's kept accuracy, the compacted one), when below
        self.ramp_short: int | None = None  # the current task's last ramp step, when its ramp releases nothing
        self.ramp_warned = False  # that warning is said once a run
        # Growth's target: the shared widths are their initial ones times its square root.
        self.register_buffer("param_multiplier", torch.ones((), dtype=torch.float64))
        self.register_buffer("goal", torch.zeros(info.num_tasks))  # the validation accuracy each task aimed at
        self.register_buffer("val_acc", torch.zeros(info.num_tasks))  # its validation accuracy as kept
        # Each task's decisions, as metrics.json's capacity reports them: the parameter multiplier it ended at (how
        # far it grew), and its picking refit's outcome (REFIT_OUTCOMES: not run, kept nothing, kept an epoch).
        self.register_buffer("multiplier_per_task", torch.zeros(info.num_tasks, dtype=torch.float64))
        self.register_buffer("refit_per_task", torch.zeros(info.num_tasks, dtype=torch.int8))
        # finetune goals: every chain's goal network of every task but the last, flattened (a later task fine-tunes
        # one drawn at random among all earlier ones), goal_repeats × (tasks - 1) × backbone size in all (PAE's
        # 5 × 19 VGG16-BN: 12.8 GB): kept in the side store (files in the run directory, each written once and read
        # when drawn), neither on the device nor in snapshots and checkpoints; a resume finds them there.

    @classmethod
    def uses_picking(cls, cfg) -> bool:
        return cfg.picking

    def variant(self):
        return None if self.cfg.picking else "pae"

    def train_task(self, task):
        if len(task.val) == 0:
            raise UserError("cpg selects models on validation data: set data.val_fraction above 0, or "
                            "method.protocol=official to select on the test split as the official code does")
        self.ramp_short = self.short_ramp(task)
        goal = self.task_goal(task)
        self.compacting_stop = self.compacting_criterion = self.refit_kept = None
        self.begin_task(task.id)
        acc, exhausted = self.pick_and_grow(task, goal)
        self.multiplier_per_task[task.id] = self.param_multiplier
        criterion = acc if goal is None else goal  # without a goal compacting may lose nothing
        if self.owns_weights(task.id):  # else nothing of its own to prune, nor a mask worth refitting
            acc = self.compact(task, criterion, acc, exhausted)
            if self.picking_on(task.id) and self.cfg.retrain_picking:
                acc = self.refit_picking(task, acc)
        self.goal[task.id], self.val_acc[task.id] = criterion, acc
        self.finish_task(task.id)

    def picking_on(self, task_id: int) -> bool:
        return self.cfg.picking and task_id > 0

    def train_measured(self, task, epochs: int, lr: float, **kwargs) -> float:
        """train_weights, returning the last epoch's training accuracy (counted on the device, read once; over
        every rank's shard when data-parallel)."""
        hits, seen = torch.zeros((), dtype=torch.long, device=self.ctx.device), 0
        last = (self.loop.phase_epochs(epochs) - 1) * self.loop.steps_per_epoch(task.train)

        def loss(batch):
            nonlocal seen
            logits = self(batch.x, task.id)
            target = self.targets(batch.y, task.id)
            if batch.step >= last:
                hits.add_((logits.argmax(1) == target).sum())
                seen += target.shape[0]
            return F.cross_entropy(logits, target)

        self.train_weights(task, epochs, lr, loss_fn=loss, **kwargs)
        return parallel.all_ranks_fraction(hits, seen)

    def pick_and_train(self, task) -> tuple[float, float]:
        """(selection accuracy, last epoch's training accuracy)."""
        mask_lr = self.cfg.mask_lr if self.picking_on(task.id) else 0.0
        train_acc = self.train_measured(task, self.cfg.epochs, self.cfg.lr, mask_lr=mask_lr)
        return self.accuracy(task.val, task.id), train_acc

    def pick_and_grow(self, task, goal: float | None) -> tuple[float, bool]:
        """Steps 1 and 2: train; unless training accuracy tops the bar and the goal is met, restart wider while
        growth is allowed. Returns the selection accuracy and whether growth ran out short of the goal."""
        start = self.snapshot()
        acc, train_acc = self.pick_and_train(task)
        multiplier = float(self.param_multiplier)
        log.info(f"task {task.id}: goal {'none' if goal is None else f'{goal:.4f}'}; at {multiplier}x: selection acc "
                 f"{acc:.4f}, train acc {train_acc:.4f}")
        while (goal is not None and not (train_acc > self.cfg.train_acc_bar and acc >= goal)
               and multiplier + self.cfg.grow_step <= self.cfg.max_multiplier + 1e-9):
            multiplier += self.cfg.grow_step
            self.restore(start)
            self.param_multiplier.fill_(multiplier)
            self.widen(multiplier, task.id)
            with self.loop.phase_named(f"grow_{multiplier}x"):
                acc, train_acc = self.pick_and_train(task)
            log.info(f"task {task.id}: grown to {multiplier}x: selection acc {acc:.4f}, train acc {train_acc:.4f}")
        return acc, goal is not None and acc < goal

    def compact(self, task, criterion: float, acc: float, exhausted: bool) -> float:
        """Step 3: prune through every target in turn; keep the highest recorded ratio whose selection
        accuracy meets the criterion, or, when exhausted (growth ran out short of the goal), the highest
        recorded one, the sweep ending at must_ratio. Nothing chosen: the unpruned model stays."""
        chosen, chosen_acc, sparsity, kept = self.snapshot(), acc, 0.0, 0.0
        must = must_ratio(self.info.num_tasks - (task.id + 1)) if exhausted else None
        for target in self.cfg.prune_targets:
            if must is not None and sparsity >= must:
                break
            with self.loop.phase_named(f"prune_{target}"):
                train_acc = self.gradual_prune(task, sparsity, target)
            sparsity = target
            if train_acc <= self.cfg.train_acc_bar and not self.loop.every_phase:  # the official script stops here
                log.info(f"task {task.id}: sparsity {target}: train acc {train_acc:.4f}, compacting stops")
                self.compacting_stop = (target, train_acc)
                break
            acc = self.accuracy(task.val, task.id)
            log.info(f"task {task.id}: sparsity {target}: reached {masked.released_share(self.layers, task.id):.4f}, "
                     f"selection acc {acc:.4f}, train acc {train_acc:.4f}")
            if exhausted or acc + self.cfg.allow_acc_loss >= criterion:
                chosen, chosen_acc, kept = self.snapshot(), acc, target
        self.restore(chosen)
        self.compacting_criterion = None if exhausted else criterion
        why = f"growth ran out short of the goal: up to {must}" if exhausted else f"criterion {criterion:.4f}"
        reached = masked.released_share(self.layers, task.id)  # what the masks hold, not the target's name
        log.info(f"task {task.id}: keeps sparsity {reached:.4f} (target {kept}; {why})")
        return chosen_acc

    def gradual_prune(self, task, initial: float, target: float) -> float:
        """Retrain for prune_epochs (no lr drops), releasing weights every prune_frequency steps on the cubic
        ramp from the initial to the target sparsity (method.prune_timing: when, and when they turn 0); returns
        the last epoch's training accuracy."""
        end = self.ramp_steps(task)
        if end == 0:  # no ramp: prune to the target at once, then retrain
            self.release(task.id, target)
        # debug=shape's ramp of one batch never reaches the official grid (step k = 0): it prunes at once there
        if self.cfg.prune_timing == "immediate" or self.ctx.shape is not None:
            def at_once(step):
                self.prune_at_once(task, step, end, initial, target)

            return self.train_measured(task, self.cfg.prune_epochs, self.cfg.prune_lr, milestones=[],
                                       after_step=at_once)

        def after_step(step):  # the official Manager.train: step k = step - 1 is done, then gradually_prune(k)
            k = step - 1
            if 0 < k <= end and k % self.cfg.prune_frequency == 0:
                self.release(task.id, cubic_sparsity(k, 0, end, initial, target), cutoff=True)

        def after_epoch(epoch: int) -> bool:  # the official Manager.validate's apply_mask
            for layer in self.layers:
                layer.zero_released()
            return False

        for layer in self.layers:
            layer.free_compute = True
        try:
            return self.train_measured(task, self.cfg.prune_epochs, self.cfg.prune_lr,
                                       after_step=after_step, after_epoch=after_epoch, milestones=[])
        finally:  # after_epoch zeroed the last epoch's releases
            for layer in self.layers:
                layer.free_compute = False

    def prune_at_once(self, task, step: int, end: int, initial: float, target: float) -> None:
        """method.prune_timing=immediate: release at multiples of prune_frequency and at the ramp's end."""
        if step <= end and (step % self.cfg.prune_frequency == 0 or step == end):
            self.release(task.id, cubic_sparsity(step, 0, end, initial, target))
        for layer in self.layers:  # momentum would move released weights off zero
            layer.zero_released()

    def ramp_steps(self, task) -> int:
        """The steps of the cubic ramp within a compacting phase as it runs (debug=shape cuts it to one batch)."""
        ramp = min(self.cfg.prune_ramp_epochs, self.loop.phase_epochs(self.cfg.prune_epochs))
        return ramp * self.loop.steps_per_epoch(task.train)

    def short_ramp(self, task) -> int | None:
        """prune_timing=official updates the masks after ramp step k (0-based, k <= the ramp's steps and below the
        phase's) only where k is a multiple of prune_frequency: with none such, compacting releases nothing and every
        sparsity target is a name only. Said in one line before the task trains (the steps need the task's data),
        once a run; returns the last step an update could follow then, None when the ramp releases."""
        per_epoch, every = self.loop.steps_per_epoch(task.train), self.cfg.prune_frequency
        end, phase = self.ramp_steps(task), self.loop.phase_epochs(self.cfg.prune_epochs) * per_epoch
        last = min(end, phase - 1)
        if self.cfg.prune_timing != "official" or self.ctx.shape is not None or end == 0 or last >= every:
            return None
        if not self.ramp_warned:
            self.ramp_warned = True
            ramp, epochs = -(-every // per_epoch), -(-(every + 1) // per_epoch)
            frequency = f"method.prune_frequency={last} or less, or " if last >= 1 else ""
            self.ctx.recorder.warning(
                f"task {task.id}: CPG's pruning ramp can update the masks after steps 1 to {last} of a compacting "
                f"phase ({per_epoch} batches an epoch), none a multiple of method.prune_frequency={every}, so it "
                f"releases no weight: set {frequency}method.prune_ramp_epochs={ramp} or more and "
                f"method.prune_epochs={max(ramp, epochs)} or more")
        return last

    def refit_picking(self, task, acc: float) -> float:
        """Step 4 (the official --finetune_again): restart the picking mask at mask_init and train it with the
        compacted weights; keep the best epoch if it beats the refit_baseline accuracy (the restarted mask's, or
        the compacted model's), else the compacted model as it was."""
        before = self.snapshot()
        for layer in self.layers:
            layer.start_picking(task.id)
        restarted = self.accuracy(task.val, task.id)
        best, best_acc, stale = None, restarted if self.cfg.refit_baseline == "restarted" else acc, 0
        top = 0.0  # the epochs' best, kept or not: the log sets it beside the compacted model's (the parity records)

        def after_epoch(epoch: int) -> bool:
            nonlocal best, best_acc, stale, top
            epoch_acc = self.accuracy(task.val, task.id)
            top = max(top, epoch_acc)
            if epoch_acc > best_acc:
                best, best_acc, stale = self.snapshot(), epoch_acc, 0
            else:
                stale += 1
            return stale >= self.cfg.refit_patience

        with self.loop.phase_named("refit"):
            self.train_weights(task, self.cfg.retrain_epochs, self.cfg.retrain_lr,
                               mask_lr=self.cfg.retrain_mask_lr, milestones=[], after_epoch=after_epoch)
        self.restore(before if best is None else best)
        self.refit_per_task[task.id] = REFIT_OUTCOMES.index("kept nothing" if best is None else "kept an epoch")
        log.info(f"task {task.id}: picking refit " + ("kept nothing" if best is None else f"kept, {best_acc:.4f}")
                 + f" (epochs' best {top:.4f}, compacted {acc:.4f}, restarted mask {restarted:.4f})")
        if best is not None and best_acc < acc:
            self.refit_kept = (best_acc, acc)
        return acc if best is None else best_acc

    def health(self, task):
        found = super().health(task)
        if self.refit_kept is not None:
            kept, compacted = self.refit_kept
            found.append(self.refit_worse.found(task.id, f"the refit's best epoch (selection accuracy {kept:.4f}) beat "
                                                         f"the restarted mask and replaced the compacted model "
                                                         f"({compacted:.4f})"))
        return found

    def why_hoarded(self, task_id: int) -> str:
        if self.ramp_short is not None:
            return (f": its pruning ramp could update the masks after steps 1 to {self.ramp_short} only, none a "
                    f"multiple of method.prune_frequency {self.cfg.prune_frequency}, so it released no weight")
        if self.compacting_stop is not None and self.compacting_stop[0] == self.cfg.prune_targets[0]:
            target, train_acc = self.compacting_stop
            return (f": compacting stopped at its first sparsity {target}, the training accuracy {train_acc:.4f} not "
                    f"above method.train_acc_bar {self.cfg.train_acc_bar}")
        if self.compacting_criterion is not None:
            return f": no sparsity kept the selection accuracy at the criterion {self.compacting_criterion:.4f}"
        return ""

    def can_grow(self) -> bool:
        return (self.cfg.goal_source != "none"  # no goal, no growth
                and float(self.param_multiplier) + self.cfg.grow_step <= self.cfg.max_multiplier + 1e-9)

    def task_goal(self, task) -> float | None:
        """The best selection accuracy among the goal models of the task's goal source."""
        source = self.cfg.goal_source
        if source in ("fixed", "none"):
            return self.cfg.goal if source == "fixed" else None
        goals = []
        for chain in range(self.cfg.goal_repeats):
            if source in ("independent", "all_max"):
                goals.append(self.goal_model(task)[0])
            if source in ("finetune", "all_max"):
                goals.append(self.finetune_goal(task, chain))
        log.info(f"task {task.id}: {source} goal models' selection accuracies " + ", ".join(f"{g:.4f}" for g in goals))
        return max(goals)

    def finetune_goal(self, task, chain: int) -> float:
        """finetune_cifar100_normal.sh's goal: the first task's model trained fresh at method.lr, every later
        one fine-tuned at finetune_goal_lr from the chain's goal network of an earlier task drawn at random
        (its own new head). The network is kept for the tasks after."""
        start, lr = None, self.cfg.lr
        if task.id > 0:
            g = self.ctx.generator
            start = self.ctx.store.get(int(torch.randint(task.id, (1,), generator=g, device=g.device)),
                                       goal_net_name(chain))
            lr = self.cfg.finetune_goal_lr
        acc, net = self.goal_model(task, start, lr)
        if task.id + 1 < self.info.num_tasks:  # no task after the last draws from it
            self.ctx.store.put(task.id, goal_net_name(chain), flatten_state(net))
        return acc

    def load_state_dict(self, state, strict=True, assign=False):
        """A checkpoint of an older cl-bench holds the goal chains as the buffer goal_nets: moved to the side
        store, so that its run resumes and evaluates."""
        if "goal_nets" in state:
            state = dict(state)
            nets = state.pop("goal_nets")
            for chain, task_id in itertools.product(range(nets.shape[0]), range(int(state["tasks_learned"]))):
                self.ctx.store.put(task_id, goal_net_name(chain), nets[chain, task_id])
        return super().load_state_dict(state, strict, assign)

    def goal_model(self, task, start: torch.Tensor | None = None, lr: float | None = None) -> tuple[float, nn.Module]:
        """Train an unconverted network (fresh, or loaded from a flattened start) with a new head on the task alone
        with the same schedule, as the official baseline and finetune scripts train goal models: weight decay added
        by hand to the conv and linear weights of the network only (not to batch norms, biases or the head).
        Returns its selection accuracy and the network."""
        net = copy.deepcopy(self.template)
        reset_parameters(net)
        head = nn.Linear(net.feature_dim, task.num_classes)
        if self.cfg.init == "official":
            with torch.no_grad():
                for m in net.modules():
                    if isinstance(m, (nn.Conv2d, nn.Linear)):
                        masked.init_weight_(m.weight, True)
                        if m.bias is not None:
                            m.bias.zero_()
            init_head(head)
        # in the run's memory format (channels_last on GPUs), as the method's own layers are
        model = nn.Sequential(net, head).to(self.ctx.device, memory_format=self.info.view.memory_format).train()
        if start is not None:
            load_flat_state(net, start)
        decayed = [m.weight for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]

        def decay():
            with torch.no_grad():
                for w in decayed:
                    w.grad.add_(w, alpha=self.cfg.weight_decay)

        params = list(model.parameters())
        with self.loop.phase_named("goal"):
            self.loop.fit(task, lambda b: F.cross_entropy(model(b.x), self.targets(b.y, task.id)),
                          params=params, model=model,  # data-parallel: its gradients averaged too
                          optimizer=self.loop.make_optimizer(params, lr=lr, weight_decay=0.0),
                          after_backward=decay)
        model.eval()
        return self.accuracy(task.val, task.id, model), net

    def capacity(self):
        learned = int(self.tasks_learned)
        return {**super().capacity(), "param_multiplier": float(self.param_multiplier),
                "width_multiplier": round(float(self.param_multiplier) ** 0.5, 6),
                "goal_per_task": [round(float(g), 6) for g in self.goal[:learned]],
                "val_acc_per_task": [round(float(a), 6) for a in self.val_acc[:learned]],
                "param_multiplier_per_task": [float(m) for m in self.multiplier_per_task[:learned]],
                "refit_per_task": [REFIT_OUTCOMES[int(r)] for r in self.refit_per_task[:learned]]}
