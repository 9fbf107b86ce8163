"""The Method contract: what a method author implements (train_task) and what a run asks of every method (learn,
predict, capacity, its state), with the loss helpers methods share. Training itself runs through the epoch loop it
owns, `self.loop` (loop.py); what the run lends it is context.py, heads are in heads.py, data-parallel training in
parallel.py."""
import abc
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from omegaconf import MISSING
from torch import nn

from ..backbones.init import Init, initialise
from ..checks import Checked, Choice
from ..data.scenarios import Info, Task
from ..health import Check, Finding
from .context import Context
from .heads import Heads
from .loop import Batch, EpochEnd, Loop


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


@dataclass(frozen=True)
class Traits:
    """What a method declares about itself (`traits = Traits(...)`; a family's member, a replace() of its family's),
    read by the run, `cl-bench list` (through catalog.py) and the tests; each field says what it decides."""

    scenarios: frozenset[str]
    """The scenarios (task, class) it runs in: config validation refuses the others in one line."""
    distributed_scenarios: frozenset[str] = frozenset()
    """The scenarios in which all its training goes through fit(), so that hardware=ddp can shard its batches; ddp
    is refused in the others (the `hardware=ddp` column of `cl-bench list`)."""
    needs: frozenset[str] = frozenset()
    """The backbone capabilities (backbones/base.py Capability) it relies on beyond features: build() refuses a
    backbone without one, naming the backbones that have it (Method.needs_for adds what an option needs)."""
    backbone_use: str = ""
    """Its backbone family: how it uses its backbone beyond calling it, the converter that rewrites it ("masked",
    "gated", "calibrated", "hat", "final_relu") or the transforms that run it ("functional"); "" for plain calls.
    It decides whether the method is tested on one backbone or on all six: tests/test_method_backbone_pairs.py
    trains each family's representatives on every registered backbone and every other method on convnet alone."""
    short_schedule: tuple[str, ...] = ()
    """Overrides that cut the phases beyond training (goal models, compacting, retraining) to one epoch each: the
    quick runs of the tests and of scripts/bench.py add them, to compare one training pass."""
    within_task_checkpoints: bool | str = True
    """Whether a task can be resumed from a checkpoint written within it (checkpoint.every_epochs, else refused): true
    where every phase of train_task is a fit() and nothing between phases depends on how training went; else why not."""
    graph_safe: bool | str = "its steps have not been checked for capture"
    """Whether hardware.cuda_graphs captures its fit() steps (loop.py StepGraph): true where a step reads only the batch
    and tensors updated in place, draws only from the run's generators (each graph registers them) and reads no Python
    value that changes between steps (batch.step, a counter); else why not, and its steps run eagerly."""
    graph_phases: tuple[str, ...] = ()
    """Where graph_safe is not True: the phases (Loop.phase_named's names) captured all the same (CPG's goal models)."""
    health_checks: tuple[Check, ...] = ()
    """Its degenerate states (health.py), which Method.health evaluates after every task and metrics.json lists
    (a method with a rehearsal memory names MEMORY_CLASSES)."""

    def captures(self, phase: str | None = None) -> bool:
        """Whether hardware.cuda_graphs captures the steps of the named phase (None: of any phase of the method)."""
        return self.graph_safe is True or (bool(self.graph_phases) if phase is None else phase in self.graph_phases)


class Method(nn.Module, metaclass=abc.ABCMeta):
    """A continual learner. Subclasses set name, Config and traits, and implement train_task."""

    name: ClassVar[str]  # its option: method=<name>
    Config: ClassVar[type] = MethodConfig  # its config dataclass, the one source of its defaults
    traits: ClassVar[Traits]  # what it declares about itself (Traits)

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
        self.loop = Loop(self)  # the epoch loop the method trains through, with its state (loop.py)

    # --- the contract -------------------------------------------------------------------------------
    def learn(self, task: Task, at_epoch_end: Callable[[EpochEnd], None] | None = None) -> None:
        """All of one task's training, every phase it needs; at_epoch_end, where given, is called with where the
        loop stands after each epoch of each fit() phase: the run decides there whether to checkpoint (train.py)."""
        self.heads.seen = self.info.seen_outputs(task.id)
        self.loop.start_task(at_epoch_end)
        try:
            self.train_task(task)
        finally:
            self.loop.at_epoch_end = None
        self.loop.finish_task(task)
        self.tasks_learned.fill_(task.id + 1)

    @abc.abstractmethod
    def train_task(self, task: Task) -> None:
        """Every phase of one task's training (the method's own procedure), each a `self.loop.fit(...)` call or
        the method's own loop."""

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

    def health(self, task: Task) -> list[Finding]:
        """After learning task: the checks of traits.health_checks that trip, from state the method already has (no pass
        over data). They report only: nothing the method does depends on them."""
        return []

    def resumed(self, learned_tasks: list[Task]) -> None:
        """Called after loading a checkpoint, with the tasks already learned (for methods that keep data)."""

    @classmethod
    def needs_for(cls, cfg) -> frozenset[str]:
        """What this run of the method asks of its backbone: traits.needs, and what its options add."""
        return cls.traits.needs

    def compile_backbone(self) -> None:
        """hardware.compile: torch.compile the backbone in place (its state-dict keys unchanged)."""
        self.backbone.compile()

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


# Batch: what a method's loss functions take, part of the contract a method author reads here.
__all__ = ["Batch", "CEOutputs", "Context", "DecayOn", "Method", "MethodConfig", "Optimizer", "Protocol", "Traits",
           "fresh_copy", "reset_parameters"]
