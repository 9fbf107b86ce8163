"""Dark Experience Replay (DER) and DER++: Buzzega et al., "Dark Experience for General Continual Learning: a
Strong, Simple Baseline", NeurIPS 2020, as its authors' Mammoth (models/der.py, models/derpp.py) runs it.

A reservoir memory over the whole stream keeps each sample (its raw pixels) with the logits the network gave it
when it was stored. Every step minimises

    CE(current batch) + alpha * MSE(logits of memory samples, their stored logits)            (der)
                      + beta * CE(other memory samples, their stored labels)                   (derpp)

What the paper leaves to the code, done as Mammoth does:
- the stored logits are those of the training forward pass, on the augmented input, taken before the step;
  the memory keeps the non-augmented sample and replays it augmented afresh;
- replay starts as soon as the memory holds a sample (the second step of the first task), not at task 1;
- memory batches are drawn without replacement, and DER++ draws its alpha and beta batches independently;
- the current and the memory batches go through the network in separate forward passes;
- plain SGD (no momentum); defaults are Mammoth's best arguments for seq-cifar10 with a 500-sample buffer,
  the paper's main benchmark (utils/best_args.py). The number of epochs stays the run's setting (Mammoth uses
  50 on seq-cifar10, 1 on seq-mnist).
Which logits: in the class scenario, every output of the single head, future classes' too, as Mammoth's one
head gives them, for the stored logits and, by default, for the CE terms too (Mammoth's cross-entropy runs over
every output; method.ce_outputs=seen restricts it to the classes seen so far, as the project's other methods
do); in the task scenario,
where each task has its own head, the outputs of the sample's own task head: the logits its prediction reads.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..health import MEMORY_CLASSES
from .base import Batch, CEOutputs, Method, MethodConfig, Traits
from .memory import Memory, Rehearsal, check_memory_holds_every_class, mean_over_drawn


@dataclass
class DERConfig(MethodConfig):
    name: str = "der"
    batch_size: int = 32  # Mammoth, seq-cifar10
    lr: float = 0.03  # Mammoth, seq-cifar10, buffer 500
    momentum: float = 0.0  # Mammoth's plain SGD
    memory_size: int = 500  # samples kept over the whole stream (the paper's middle buffer size)
    replay_batch_size: int = 32  # memory samples per draw (Mammoth's minibatch_size)
    alpha: float = 0.3  # weight of the logit-matching MSE (Mammoth, seq-cifar10, buffer 500)
    ce_outputs: CEOutputs = CEOutputs.all  # the outputs the class scenario's cross-entropy terms read

    def checks(self):
        return [*super().checks(), ("memory_size", self.memory_size >= 1, "at least 1"),
                ("replay_batch_size", self.replay_batch_size >= 1, "at least 1"),
                ("alpha", self.alpha >= 0, "0 or more")]


@dataclass
class DERppConfig(DERConfig):
    name: str = "derpp"
    alpha: float = 0.2  # Mammoth's derpp, seq-cifar10, buffer 500
    beta: float = 0.5  # weight of the CE on stored labels (same source)

    def checks(self):
        return [*super().checks(), ("beta", self.beta >= 0, "0 or more")]


class DER(Rehearsal, Method):
    name = "der"
    Config = DERConfig
    # Data-parallel: every rank stores the global batch with its logits (gathered) and draws the same replay rows.
    traits = Traits(scenarios=frozenset({"task", "class"}), distributed_scenarios=frozenset({"task", "class"}),
                    graph_safe=True,  # its replay draws come from the run's generators, which each graph registers
                    health_checks=(MEMORY_CLASSES,))

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        check_memory_holds_every_class(cfg.memory_size, info)
        self.memory = Memory(cfg.memory_size, info.input_shape, info.num_outputs, ctx.device)
        # The current batch's logits, from its loss to the memory update after the step: written in place, rows
        # [0, batch), so that a captured step (StepGraph) writes them where the update reads them.
        self.batch_logits = torch.zeros(cfg.batch_size, info.num_outputs, device=ctx.device)

    def train_task(self, task):
        def loss(batch: Batch):
            logits = self.dark_logits(batch.x, batch.t)
            self.batch_logits[: logits.shape[0]].copy_(logits.detach())
            total = self.ce(logits, batch.y)
            if task.id > 0 or batch.step > 0:  # the memory is empty only before the stream's first step
                total = total + self.replay_loss()
            return total

        def store(batch: Batch):
            whole = batch.unsharded()  # data-parallel: the global batch and its logits, gathered from the ranks
            logits = self.loop.unshard(self.batch_logits[: len(batch.y)], len(whole.y))
            self.memory.add(whole.raw, whole.y, whole.t, logits=logits.masked_fill(logits.isinf(), 0),
                            generator=self.ctx.generator)

        self.loop.fit(task, loss, after_step=store)

    def dark_logits(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The logits DER stores and matches, in the label space's layout: the single head's every output
        (class scenario), or the sample's own task head with the other tasks' columns at -inf (task scenario)."""
        features = self.backbone(x)
        return self.heads.mixed(features, t) if self.heads.per_task else self.heads.head(features)

    def ce(self, logits: torch.Tensor, y: torch.Tensor, drawn: torch.Tensor | None = None) -> torch.Tensor:
        """Cross-entropy over every output of the class scenario's head (or, with ce_outputs=seen, the classes
        seen so far), over the own task's head in the task scenario."""
        if not self.heads.per_task and self.cfg.ce_outputs == "seen":
            logits = logits[:, : self.heads.seen]
        losses = F.cross_entropy(logits, y, reduction="none")
        return losses.mean() if drawn is None else mean_over_drawn(losses, drawn)

    def replay(self):
        """One memory batch, augmented as training batches are: (x, y, t, stored logits, which rows are real)."""
        drawn = self.memory.sample_distinct(self.cfg.replay_batch_size, self.ctx.generator)
        raw, y, t, logits, drawn = self.loop.shard(*drawn)  # data-parallel: every rank draws alike, trains on its rows
        return self.loop.augment(raw, t), y, t, logits, drawn

    def replay_loss(self) -> torch.Tensor:
        x, _, t, stored, drawn = self.replay()
        return self.cfg.alpha * dark_mse(self.dark_logits(x, t), stored, drawn)

    def capacity(self):
        return {**super().capacity(), **self.memory.capacity()}


class DERpp(DER):
    name = "derpp"
    Config = DERppConfig

    def replay_loss(self) -> torch.Tensor:
        dark = super().replay_loss()  # drawn first, as Mammoth's derpp draws its alpha batch first
        x, y, t, _, drawn = self.replay()  # a second, independent draw for the labels
        return dark + self.cfg.beta * self.ce(self.dark_logits(x, t), y, drawn)


def dark_mse(logits: torch.Tensor, stored: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """Mean squared difference over the compared logits (the finite ones: all in the class scenario, the own
    task's in the task one) of the rows really drawn; Mammoth's F.mse_loss when every entry counts."""
    compared = logits.isfinite() & drawn[:, None]
    squared = (logits - stored).masked_fill(~compared, 0).square()
    return squared.sum() / compared.sum().clamp(min=1)
