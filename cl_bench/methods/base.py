"""The Method contract and the small helpers every method shares: the epoch loop, optimisers (heads: heads.py;
data-parallel training: parallel.py)."""
import abc
import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from omegaconf import MISSING
from torch import nn

from .. import hardware
from ..backbones.init import Init, initialise
from ..checkpoint import SideStore
from ..checks import Checked, Choice
from ..data.scenarios import Info, Split, Task
from ..errors import UserError
from . import parallel
from .heads import Heads


class Optimizer(Choice):
    sgd = "sgd"
    adam = "adam"
    adamw = "adamw"


class CEOutputs(Choice):
    """The outputs a rehearsal method's cross-entropy reads in the class scenario (its single head)."""
    all = "all"  # every output, future classes' too, as Mammoth's one head gives them (its er, agem, der)
    seen = "seen"  # the classes seen so far: the outputs a prediction reads


class Protocol(Choice):
    # honest: every choice a method makes (goals, pruning ratios, relevance) uses held-out validation data;
    # official: as reference code that selected on test data (ivclab/CPG): each task's whole training data is
    # trained on and the method's choices are made on its test split, in plain fp32 (no autocast, no TF32), each
    # task normalised with its own training statistics in the task scenario (data.normalization=auto); runs say
    # so in metrics.json (protocol, precision, normalization) and the report.
    honest = "honest"
    official = "official"


class DecayOn(Choice):
    """The parameters method.weight_decay applies to."""
    all = "all"  # every parameter the optimiser steps (torch's weight_decay)
    weights = "weights"  # conv and linear weights only, not batch norms or biases: ivclab/CPG adds the decay to
    # their gradients by hand (packnet_cifar100_main_normal.py:226-230), for every row of its cifar100_20 table


@dataclass
class MethodConfig(Checked):
    """Training knobs every method shares; a method's own dataclass extends this one and holds its defaults."""

    prefix = "method."
    name: str = MISSING
    epochs: int = 5  # passes over each task's training data
    batch_size: int = 64
    lr: float = 0.01
    optimizer: Optimizer = Optimizer.sgd
    momentum: float = 0.9  # SGD only
    nesterov: bool = False  # SGD only
    weight_decay: float = 0.0
    weight_decay_on: DecayOn = DecayOn.all
    lr_milestones: list[int] = field(default_factory=list)  # epochs at which the lr is multiplied by lr_gamma
    lr_gamma: float = 0.1
    skip_nonfinite: bool = False  # skip steps whose loss is NaN/inf instead of stopping (a host sync per step)
    protocol: Protocol = Protocol.honest  # what the method selects on: see Protocol

    def checks(self):
        return [("epochs", self.epochs >= 1, "at least 1"), ("batch_size", self.batch_size >= 1, "at least 1"),
                ("lr", self.lr > 0, "a positive number"), ("weight_decay", self.weight_decay >= 0, "0 or more")]


@dataclass
class Context:
    """What the run lends a method: where to compute, in what precision, its random stream, its recorder."""

    device: torch.device
    amp_dtype: torch.dtype | None
    generator: torch.Generator
    recorder: object
    rank: int = 0  # this process's place among world_size data-parallel processes
    world_size: int = 1
    seed: int = 0  # the run's seed
    eval_batch_size: int = hardware.EVAL_BATCH  # samples per forward pass when only evaluating (data.eval_batch_size)
    # Called by fit() after each epoch with (task, phase, epoch, optimizer, side optimizers): the run's
    # within-task checkpoints.
    epoch_done: Callable | None = None
    # Data-parallel: this rank's own augmentation stream (every rank draws the batch order, the replay draws and
    # the memory updates from `generator`, alike; each augments only its own shard, with this one).
    shard_generator: torch.Generator | None = None
    precision: str = "fp32"  # what the run computes in (hardware.Hardware.precision): bf16, tf32 or fp32
    # debug=shape (cl_bench/shape.py): every phase cut to one epoch of one batch, and timed; None otherwise.
    shape: object | None = None
    # Where a method keeps state too large for its state dict (files in the run directory under train.run).
    store: SideStore = field(default_factory=SideStore)
    ran_on: dict = field(default_factory=dict)  # where the run ran (hardware.ran_on): metrics.json's, not a method's

    @property
    def augment_generator(self) -> torch.Generator:
        return self.generator if self.shard_generator is None else self.shard_generator

    def autocast(self):
        return torch.autocast(self.device.type, dtype=self.amp_dtype or torch.bfloat16,
                              enabled=self.amp_dtype is not None)


@dataclass
class Batch:
    raw: torch.Tensor  # uint8 pixels, as stored (what a memory keeps)
    x: torch.Tensor  # network input: normalised, augmented in training
    y: torch.Tensor  # labels in the scenario's label space
    t: torch.Tensor  # task id of each sample
    step: int = 0  # the step's index within its fit() call, counted across epochs
    whole: "Batch | None" = None  # data-parallel: the global batch (raw, y, t) this rank's shard is taken from

    def unsharded(self) -> "Batch":
        """The global batch, as every rank holds it: what a memory stores, so that it stays alike on all ranks."""
        return self if self.whole is None else self.whole


class Method(nn.Module, metaclass=abc.ABCMeta):
    """A continual learner. Subclasses set name, scenarios and Config, and implement train_task."""

    name: ClassVar[str]
    scenarios: ClassVar[frozenset[str]]
    Config: ClassVar[type] = MethodConfig
    # Scenarios in which all training goes through fit(), so that hardware=ddp can shard its batches.
    distributed_scenarios: ClassVar[frozenset[str]] = frozenset()
    # What the method asks of its backbone beyond features (backbones/base.py Capability): checked by build().
    needs: ClassVar[frozenset[str]] = frozenset()
    # Whether a task can be resumed from a checkpoint written within it (checkpoint.every_epochs): true where
    # every phase of train_task is a fit() call and nothing between phases depends on how training went.
    # Otherwise a string saying why not.
    within_task_checkpoints: ClassVar[bool | str] = True

    def __init__(self, cfg, backbone: nn.Module, info: Info, ctx: Context):
        super().__init__()
        self.cfg, self.info, self.ctx = cfg, info, ctx
        self.backbone = backbone
        self.heads = Heads(backbone.feature_dim, info)
        # The heads are drawn as the backbone's layers: in the reference code the classifier is its network's last
        # layer, initialised with the rest (Mammoth's MNIST MLP, La-MAML's Learner).
        self.weight_init = getattr(backbone, "init", Init.pytorch)
        initialise(self.heads, self.weight_init)
        self.register_buffer("tasks_learned", torch.zeros((), dtype=torch.long))
        self._phase = 0  # fit() calls made so far in the current task
        self._resume_at: ResumePoint | None = None
        self._phase_name = "train"  # what debug=shape's record calls fit()'s phases (phase_named)

    # --- the contract -------------------------------------------------------------------------------
    def learn(self, task: Task) -> None:
        """All of one task's training, every phase it needs."""
        self.heads.seen = self.info.seen_outputs(task.id)
        self._phase = 0
        self.train_task(task)
        if self._resume_at is not None:
            raise RuntimeError(f"task {task.id} ended before reaching phase {self._resume_at.phase} of its "
                               "within-task checkpoint: the method's phases are not reproducible")
        self.tasks_learned.fill_(task.id + 1)

    @abc.abstractmethod
    def train_task(self, task: Task) -> None:
        """Every phase of one task's training (the method's own procedure)."""

    def forward(self, x: torch.Tensor, task_id: int | None) -> torch.Tensor:
        return self.heads(self.backbone(x), task_id)

    def predict(self, x: torch.Tensor, task_id: int | None) -> torch.Tensor:
        """Logits: over task_id's classes in the task scenario, over every class seen when task_id is None."""
        return self(x, task_id)

    def inferred_tasks(self) -> torch.Tensor | None:
        """Class scenario, evaluation: the task each sample of the last predict(x, None) was assigned, for a method
        whose prediction goes through a task it infers (gated's task classifier); None for the others."""
        return None

    def task_aware_logits(self, x: torch.Tensor, task_id: int, logits: torch.Tensor) -> torch.Tensor:
        """Class scenario, evaluation only: logits over task_id's classes when the task id is given (FACIL's
        task-aware accuracy), with `logits` = predict(x, None). Here the class logits restricted to the task's
        outputs; a method whose class logits depend on its own guess of the task (gated) predicts afresh."""
        start = self.info.offsets[task_id]
        return logits[:, start: start + self.info.sizes[task_id]]

    def resumed(self, learned_tasks: list[Task]) -> None:
        """Called after loading a checkpoint, with the tasks already learned (for methods that keep data)."""

    def compile_backbone(self) -> None:
        """hardware.compile: torch.compile the backbone in place (its state-dict keys unchanged)."""
        self.backbone.compile()

    def resume_within(self, point: "ResumePoint") -> None:
        """Continue the next task from a checkpoint written within it: fit() phases before point.phase are
        skipped (their result is in point.state), and point.phase continues after point.epoch."""
        self._resume_at = point

    def capacity(self) -> dict:
        return {"params_total": sum(p.numel() for p in self.parameters())}

    def variant(self) -> str | None:
        """The name the literature gives this configuration when it is a method of its own (cpg without picking
        is PAE): reports list it apart."""
        return None

    def mask_keys(self) -> set[str]:
        """State-dict keys holding masks: checkpoints store them in masks.safetensors (bool ones as bits)."""
        return set()

    def load_state_dict(self, state, strict=True, assign=False):
        result = super().load_state_dict(state, strict, assign)
        learned = int(self.tasks_learned)
        if learned:
            self.heads.seen = self.info.seen_outputs(learned - 1)
        return result

    # --- shared helpers -----------------------------------------------------------------------------
    def targets(self, y: torch.Tensor, task_id: int) -> torch.Tensor:
        """Labels as indices into forward(x, task_id)'s logits."""
        return y - self.info.offsets[task_id] if self.info.scenario == "task" else y

    def loss(self, batch: Batch, task_id: int) -> torch.Tensor:
        """Cross-entropy on a batch drawn from task task_id alone."""
        return F.cross_entropy(self(batch.x, task_id), self.targets(batch.y, task_id))

    def mixed_loss(self, batch: Batch, outputs: CEOutputs = CEOutputs.seen) -> torch.Tensor:
        """Cross-entropy on a batch mixing tasks (replay, joint training), over the outputs named (class
        scenario; the task scenario reads each row's own task head either way)."""
        return F.cross_entropy(self.mixed_outputs(self.backbone(batch.x), batch.t, outputs), batch.y)

    def mixed_outputs(self, features: torch.Tensor, t: torch.Tensor, outputs: CEOutputs) -> torch.Tensor:
        """The logits mixed_loss's cross-entropy reads."""
        if outputs == "all" and not self.heads.per_task:
            return self.heads.head(features)
        return self.heads.mixed(features, t)

    def make_optimizer(self, params, lr: float | None = None, weight_decay: float | None = None):
        cfg = self.cfg
        lr = cfg.lr if lr is None else lr
        wd = cfg.weight_decay if weight_decay is None else weight_decay
        if wd and cfg.weight_decay_on == "weights":
            params, wd = weights_decayed(params, wd), 0.0
        if cfg.optimizer == "sgd":
            return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, nesterov=cfg.nesterov, weight_decay=wd)
        if cfg.optimizer == "adam":
            return torch.optim.Adam(params, lr=lr, weight_decay=wd)
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd)

    def fit(self, task: Task, loss_fn, *args, **kwargs) -> None:
        """The common epoch loop (_fit), as one phase of the task (named by phase_named, in debug=shape's record)."""
        with self.phase(self._phase_name):
            self._fit(task, loss_fn, *args, **kwargs)

    def _fit(self, task: Task, loss_fn, data: Split | None = None, params=None, epochs: int | None = None,
             optimizer=None, after_backward=None, after_step=None, side_optimizers=(), milestones=None,
             after_epoch=None, glances: int = 1) -> None:
        """The common epoch loop: on-device shuffled batches, one optimiser and lr schedule (×lr_gamma at
        `milestones`, by default method.lr_milestones), and the loss accumulated on the device and read once per
        epoch (no host sync per step). side_optimizers: those the method steps itself in after_step; fit() only
        saves and restores them with within-task checkpoints. after_epoch(epoch) returning True ends the phase
        early (a method's own stopping rule). glances: optimiser steps on each batch (loss_fn is called afresh for
        each; after_step runs once, after the last)."""
        data = task.train if data is None else data
        epochs = self.phase_epochs(self.cfg.epochs if epochs is None else epochs)
        params = [p for p in (self.parameters() if params is None else params) if p.requires_grad]
        opt = optimizer or self.make_optimizer(params)
        milestones = self.cfg.lr_milestones if milestones is None else milestones
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, list(milestones), self.cfg.lr_gamma)
        steps = self.steps_per_epoch(data)
        phase, self._phase = self._phase, self._phase + 1
        first_epoch = 0
        if self._resume_at is not None:
            if phase < self._resume_at.phase:  # finished before the stop: its result is in the saved state
                return
            first_epoch = self._resume_at.restore(self, opt, sched, side_optimizers)
            self._resume_at = None
        objective = parallel.objective(self, loss_fn)
        for epoch in range(first_epoch, epochs):
            self.train()
            parallel.seed_shard_augmentation(self.ctx, task.id, phase, epoch)
            self.ctx.recorder.epoch_start(task.id, epoch, epochs, steps)
            total, first_bad, skipped = self._epoch(data, objective, opt, epoch * steps, glances, after_backward,
                                                    after_step)
            sched.step()
            self._epoch_done(task, epoch, total / max(steps * glances - skipped, 1), first_bad, skipped)
            if self.ctx.epoch_done is not None:
                self.ctx.epoch_done(task, phase, epoch, opt, side_optimizers)
            if after_epoch is not None and after_epoch(epoch):
                break
        if self.ctx.world_size > 1:
            parallel.average_batch_norm_statistics(self)

    def _epoch(self, data: Split, objective, opt, first_step: int, glances: int, after_backward, after_step):
        """One epoch's steps; the summed loss, the first step with a non-finite loss (-1: none) and the steps
        skipped, all on the device (no host sync per step)."""
        total = torch.zeros((), device=self.ctx.device)
        first_bad = torch.full((), -1, device=self.ctx.device)
        skipped = 0
        for step, (raw, y, t) in enumerate(self.phase_batches(data.batches(self.cfg.batch_size, self.ctx.generator))):
            batch = self._training_batch(raw, y, t, first_step + step)
            for _ in range(glances):
                with self.ctx.autocast():
                    loss = objective(batch)
                if self.cfg.skip_nonfinite and not torch.isfinite(loss):
                    skipped += 1
                    continue
                first_bad = torch.where((first_bad < 0) & ~torch.isfinite(loss.detach()), step, first_bad)
                opt.zero_grad(set_to_none=True)
                loss.backward()  # data-parallel: DistributedDataParallel averages the gradients meanwhile
                if after_backward is not None:
                    after_backward()
                opt.step()
                total += loss.detach()
            if after_step is not None:
                after_step(batch)
            self.ctx.recorder.step()
        return total, first_bad, skipped

    def _epoch_done(self, task: Task, epoch: int, mean: torch.Tensor, first_bad: torch.Tensor, skipped: int) -> None:
        """The epoch's one host read: its mean loss to the recorder, or the run stopped at a non-finite one."""
        mean_loss, bad = torch.stack([mean, first_bad.float()]).tolist()
        if bad >= 0:
            raise NonFiniteLoss(f"the loss became {mean_loss} at task {task.id}, epoch {epoch}, step {int(bad)}: "
                                "lower method.lr, or pass method.skip_nonfinite=true to skip such steps; "
                                "earlier checkpoints are intact")
        if skipped:
            self.ctx.recorder.warning(f"task {task.id}, epoch {epoch}: skipped {skipped} non-finite steps")
        self.ctx.recorder.epoch_end(task.id, epoch, mean_loss)

    # --- phases: under debug=shape (ctx.shape) each runs one epoch of one batch -------------------------------
    def phase_epochs(self, epochs: int) -> int:
        """The epochs a phase of `epochs` runs."""
        return epochs if self.ctx.shape is None else self.ctx.shape.cap_epochs(epochs)

    def steps_per_epoch(self, data: Split, batch_size: int | None = None) -> int:
        """The batches an epoch over data runs (schedules counted in steps read this, so they fit the cap)."""
        steps = -(-len(data) // (batch_size or self.cfg.batch_size))
        return steps if self.ctx.shape is None else self.ctx.shape.cap_steps(steps)

    def phase_batches(self, batches):
        """An epoch's batches, as a phase runs them: a loop a method runs outside fit() reads its batches so."""
        return batches if self.ctx.shape is None else self.ctx.shape.cap_batches(batches)

    @property
    def every_phase(self) -> bool:
        """debug=shape: a rule that ends a sequence of phases early on a measured accuracy (CPG's compacting stop)
        is passed over, so that every phase the setting can run does run (one batch measures no accuracy)."""
        return self.ctx.shape is not None

    @contextlib.contextmanager
    def phase_named(self, name: str):
        """Within it, fit()'s phases carry this name in debug=shape's record ("train" elsewhere)."""
        outer, self._phase_name = self._phase_name, name
        try:
            yield
        finally:
            self._phase_name = outer

    def phase(self, name: str):
        """Around a phase a method runs outside fit(): timed under debug=shape."""
        return contextlib.nullcontext() if self.ctx.shape is None else self.ctx.shape.phase(name)

    # --- data-parallel training (hardware=ddp; methods/parallel.py) ------------------------------------------
    def _training_batch(self, raw, y, t, step: int) -> Batch:
        """One augmented training batch: data-parallel, this rank's shard of the global batch, augmented alone."""
        if self.ctx.world_size == 1:
            return Batch(raw, self.info.view.train(raw, self.ctx.generator, t), y, t, step)
        whole = Batch(raw, None, y, t, step)
        raw, y, t = self.shard(raw, y, t)
        return Batch(raw, self.augment(raw, t), y, t, step, whole)

    def shard(self, *rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Data-parallel: this rank's rows of tensors every rank holds alike (parallel.shard)."""
        return parallel.shard(self.ctx, *rows)

    def unshard(self, x: torch.Tensor, rows: int) -> torch.Tensor:
        """Data-parallel: the global batch's rows from each rank's shard, on every rank (parallel.unshard)."""
        return parallel.unshard(self.ctx, x, rows)

    def augment(self, raw: torch.Tensor, t: torch.Tensor | None = None) -> torch.Tensor:
        """Training view of stored pixels (a replay draw) of tasks t, from this rank's augmentation stream."""
        return self.info.view.train(raw, self.ctx.augment_generator, t)


@dataclass
class ResumePoint:
    """Where a within-task checkpoint was written: after `epoch` of the task's fit() call number `phase`,
    with the method's state, the optimisers' states and the random-number states as they were then."""

    phase: int
    epoch: int
    state: dict
    optimizer: dict
    rng: dict
    set_rng: Callable
    side_optimizers: list = field(default_factory=list)

    def restore(self, method: "Method", opt, sched, side_optimizers=()) -> int:
        """Put everything back as it was after `epoch`; returns the epoch to continue with."""
        if len(side_optimizers) != len(self.side_optimizers):
            raise RuntimeError(f"the within-task checkpoint holds {len(self.side_optimizers)} side optimisers, "
                               f"the phase it resumes has {len(side_optimizers)}")
        seen = method.heads.seen
        method.load_state_dict(self.state)
        method.heads.seen = seen  # load_state_dict sets the outputs of the tasks learned; this one's are in use too
        opt.load_state_dict(self.optimizer)
        for side, saved in zip(side_optimizers, self.side_optimizers, strict=True):
            side.load_state_dict(saved)
        sched.last_epoch = self.epoch + 1  # the schedule stepped once per finished epoch
        sched._last_lr = [group["lr"] for group in opt.param_groups]
        self.set_rng(self.rng)
        return self.epoch + 1


class NonFiniteLoss(UserError):
    """Training diverged: the run stops before anything is checkpointed from the diverged weights."""


def fresh_copy(module: nn.Module) -> nn.Module:
    """A deep copy that runs on its own weights: a compiled module's copy would otherwise keep calling the
    original's compiled forward, so the copy is compiled afresh."""
    clone = copy.deepcopy(module)
    if getattr(module, "_compiled_call_impl", None) is not None:
        clone._compiled_call_impl = None
        clone.compile()
    return clone


def reset_parameters(module: nn.Module, init: Init = Init.pytorch) -> None:
    """Re-draw every layer's initial weights, as at construction (init: the backbone's, see backbones/init.py)."""
    for m in module.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    initialise(module, init)


def weights_decayed(params, wd: float) -> list[dict]:
    """Parameter groups that decay the conv and linear weights (the tensors of two or more dimensions) by wd and
    nothing else; groups given already keep theirs."""
    params = list(params)
    if params and isinstance(params[0], dict):
        return params
    return [{"params": [p for p in params if p.dim() > 1], "weight_decay": wd},
            {"params": [p for p in params if p.dim() <= 1], "weight_decay": 0.0}]
