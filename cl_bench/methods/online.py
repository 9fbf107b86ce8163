"""The online protocol shared by nccl, agem and lamaml: each task's training data arrives once, as a stream
of small batches (10, as in GEM, La-MAML and NCCL); the learner may take `inner_steps` glances at each batch
before the next arrives, and keeps an episodic memory (reservoir or per-task ring) of what it has seen.
epochs > 1 is La-MAML's multi-pass setting: the stream is replayed that many times, stored in memory once.
Every update is a plain SGD step taken by hand, so no optimiser state needs saving for a resume."""
import abc
import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..checks import Choice
from ..errors import UserError
from ..health import MEMORY_CLASSES
from .base import Batch, Method, MethodConfig, Traits
from .loop import NonFiniteLoss, in_step
from .memory import Memory, Rehearsal, check_memory_holds_every_class


class OnlinePolicy(Choice):
    reservoir = "reservoir"  # uniform over the stream
    ring = "ring"  # GEM's episodic memory: a share per task, its newest samples


@dataclass
class OnlineConfig(MethodConfig):
    epochs: int = 1  # passes over each task's stream: 1 is online (single pass); La-MAML's multi-pass CIFAR runs: 10
    batch_size: int = 10  # samples per incoming batch (GEM, La-MAML, NCCL)
    momentum: float = 0.0  # online methods take plain SGD steps
    inner_steps: int = 5  # glances at each incoming batch (La-MAML's MNIST setting)
    memory_size: int = 200  # samples in the episodic memory (La-MAML's MNIST setting)
    replay_batch_size: int = 10  # memory samples per step (La-MAML's MNIST setting)
    memory_policy: OnlinePolicy = OnlinePolicy.reservoir
    # Task scenario: a mixed batch's logits from every head as one matmul of their concatenated weights (one launch
    # instead of one per task; NCCL's calibrated heads run apart regardless), as La-MAML's and its A-GEM's code
    # computes them: one Linear over every task's outputs, masked by the task's offsets (model/lamaml_cifar.py,
    # model/agem.py forward). Logits and gradients agree with the heads one by one to float rounding: within 8 ulps of
    # each tensor's largest (tests/test_launches.py HEADS_ULPS; Heads.every_head). false: each head apart.
    fused_heads: bool = True

    # Shared knobs the online protocol has no use for (and `unused`, those a method adds): setting one is an
    # error, not a silent no-op.
    fixed: ClassVar[tuple[str, ...]] = ("optimizer", "momentum", "nesterov", "weight_decay", "lr_milestones",
                                        "skip_nonfinite")
    unused: ClassVar[tuple[str, ...]] = ()

    def checks(self):
        defaults = {f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
                    for f in dataclasses.fields(self)}
        return [*super().checks(),
                *((key, getattr(self, key) == defaults[key],
                   f"{defaults[key]!r}: {self.name} runs the online protocol (one pass, plain SGD steps, "
                   f"method.inner_steps glances per batch) and does not read it") for key in self.fixed + self.unused),
                *((key, getattr(self, key) >= 1, "at least 1") for key in ("epochs", "inner_steps", "memory_size",
                                                                            "replay_batch_size"))]


class OnlineMethod(Rehearsal, Method):
    """Subclasses implement glance(batch, task) -> detached loss; observe() may wrap the glances."""

    Config = OnlineConfig
    traits = Traits(
        scenarios=frozenset({"task", "class"}),
        graph_safe="its stream is a loop of its own (glances, inner and outer steps, replay draws), not fit()'s steps",
        within_task_checkpoints="it learns each task from a stream of small batches, and its passes are not "
                                "checkpointed",
        health_checks=(MEMORY_CLASSES,))
    soft_targets = False  # whether the memory keeps the logits each sample got when it was stored

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        if ctx.world_size > 1:
            raise UserError(f"{self.name} runs on one device: its stream of batches of {cfg.batch_size} has "
                            "nothing to share between data-parallel processes; run it without torchrun")
        check_memory_holds_every_class(cfg.memory_size, info)
        if cfg.memory_policy == "ring" and cfg.memory_size < info.num_tasks:
            raise UserError(f"method.memory_size={cfg.memory_size} leaves no ring slot for some of the "
                            f"{info.num_tasks} tasks: use at least {info.num_tasks}, or memory_policy=reservoir")
        self.memory = Memory(cfg.memory_size, info.input_shape, info.num_outputs, ctx.device,
                             cfg.memory_policy, info.num_tasks)
        self.heads.fused = cfg.fused_heads
        self.replay_ready = False  # whether the memory holds anything yet (false only for the very first batch)

    def train_task(self, task):
        steps, epochs = self.loop.steps_per_epoch(task.train), self.loop.phase_epochs(self.cfg.epochs)
        with self.loop.phase("stream"):
            for epoch in range(epochs):  # multi-pass: the stream again; the memory keeps the first pass's
                self.learn_pass(task, epoch, epochs, steps)

    def learn_pass(self, task, epoch: int, epochs: int, steps: int) -> None:
        """One pass over the task's stream: each batch glanced at (and stored, in the first pass)."""
        self.ctx.recorder.epoch_start(task.id, epoch, epochs, steps)
        total = torch.zeros((), device=self.ctx.device)
        for i, batch in enumerate(self.stream(task)):
            with in_step():
                self.replay_ready = task.id > 0 or epoch > 0 or i > 0
                self.train()
                total += self.observe(batch, task, store=epoch == 0)  # each sample stored once, in the first pass
                self.ctx.recorder.step()
        mean_loss = float(total / steps)  # the one host sync of a pass
        if not math.isfinite(mean_loss):
            raise NonFiniteLoss(f"the loss became {mean_loss} during task {task.id}: lower the method's learning "
                                "rates (or nccl's beta); earlier checkpoints are intact")
        self.ctx.recorder.epoch_end(task.id, epoch, mean_loss)

    def stream(self, task):
        """The task's training data, once, in shuffled batches of batch_size."""
        for raw, y, t in self.loop.phase_batches(task.train.batches(self.cfg.batch_size, self.ctx.generator)):
            yield Batch(raw, self.info.view.train(raw, self.ctx.generator, t), y, t)

    def observe(self, batch: Batch, task, store: bool) -> torch.Tensor:
        """The glances at one incoming batch; then, if store, the batch into the memory."""
        for _ in range(self.cfg.inner_steps):
            loss = self.glance(batch, task)
        if store:
            self.remember(batch)
        return loss

    @abc.abstractmethod
    def glance(self, batch: Batch, task) -> torch.Tensor:
        """One step on the incoming batch (and the memory); returns the detached loss."""

    @torch.no_grad()
    def remember(self, batch: Batch) -> None:
        logits = None
        if self.soft_targets:
            self.eval()  # the prediction as it stands, on the plain images, without moving batch-norm statistics
            with self.ctx.autocast():
                logits = self.mixed_logits(self.info.view.eval(batch.raw, batch.t), batch.t)
            logits = F.pad(logits, (0, self.info.num_outputs - logits.shape[1]), value=float("-inf"))
        self.memory.add(batch.raw, batch.y, batch.t, logits, self.ctx.generator)

    def replay(self, before_task: int | None = None) -> tuple[Batch, torch.Tensor]:
        """A memory batch (of tasks before before_task, if given) and its stored logits."""
        raw, y, t, logits = self.memory.sample(self.cfg.replay_batch_size, self.ctx.generator, before_task)
        return Batch(raw, self.info.view.train(raw, self.ctx.generator, t), y, t), logits

    def mixed_logits(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Logits over the label space seen so far; in the task scenario -inf outside each row's task."""
        return self.heads.mixed(self.backbone(x), t)

    def capacity(self):
        mem = sum(b.numel() * b.element_size() for b in self.memory.buffers())
        return {**super().capacity(), "memory_size": self.memory.size, "memory_bytes": mem}


@torch.no_grad()
def sgd_step(params, grads, lr) -> None:
    """p -= lr * g for every pair, as one foreach op (one launch for many tensors on a GPU, not one per tensor);
    p + (-lr)·g is p.sub_(g, alpha=lr) to the bit."""
    torch._foreach_add_(list(params), list(grads), alpha=-lr)


def clamped(grads, bound: float) -> list[torch.Tensor]:
    """Each gradient clamped to ±bound elementwise, as g.clamp(-bound, bound) would (out of place: autograd's
    gradients may be expanded views)."""
    return torch._foreach_clamp_max(torch._foreach_clamp_min(list(grads), -bound), bound)


def clip_norm(grads, max_norm: float):
    """Scale a list of gradients so that their joint L2 norm is at most max_norm (on the device)."""
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(list(grads))))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return torch._foreach_mul(list(grads), scale)


def soft_kl(logits: torch.Tensor, stored: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(stored ‖ current) of the outputs softened by T, over the outputs both have (finite), batch mean:
    -inf marks outputs a row does not own (another task's head, or classes unseen when it was stored)."""
    if logits.dtype != torch.float32:  # autocast's half-precision logits (a cast of float32 would be a no-op call)
        logits = logits.float()
    if stored.shape[1] != logits.shape[1]:
        stored = stored[:, : logits.shape[1]]
    foreign = ~(torch.isfinite(stored) & torch.isfinite(logits))
    p = F.softmax(stored.masked_fill(foreign, float("-inf")) / temperature, dim=1)
    log_q = F.log_softmax(logits.masked_fill(foreign, float("-inf")) / temperature, dim=1)
    return (torch.xlogy(p, p) - p * log_q.masked_fill(foreign, 0)).sum(1).mean()
