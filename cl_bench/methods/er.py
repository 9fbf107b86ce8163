"""Experience replay: a memory of past samples, and a replay batch beside every new batch.

The memory is a reservoir over the stream by default (Chaudhry et al. 2019; Mammoth's ER), written after every
step, so that it also holds the current task's samples; memory_policy=balanced keeps Avalanche's default instead:
written at the end of each task, an equal share per task seen, so that replay draws from past tasks only.

In the class scenario the cross-entropy of the current and the replayed samples reads every output of the single
head by default, future classes' too, as Mammoth's ER does (its tables are the ones ER is usually quoted from);
method.ce_outputs=seen reads the classes seen so far, as the project's other methods do.

La-MAML's ER (model/eralg4.py), the baseline of its tables, is online: method.epochs=1 method.batch_size=10
method.momentum=0 with replay_batch_size (10 on MNIST, 1 on CIFAR), glances (SGD steps per incoming batch, each on a
fresh replay draw), grad_clip_norm=2.0 and replay_in_first_task=true (it replays from the second batch of the
stream on, current-task samples included)."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..checks import Choice
from ..health import MEMORY_CLASSES
from .base import Batch, CEOutputs, Method, MethodConfig, Traits
from .memory import Memory, Rehearsal, check_memory_holds_every_class, mean_over_drawn


class ReplayDraw(Choice):
    distinct = "distinct"  # a batch of distinct stored samples (Mammoth's buffer.get_data; Chaudhry et al.'s ER)
    replacement = "replacement"  # each row drawn independently, repeats possible (La-MAML's eralg4 getBatch)


class ReplayPolicy(Choice):
    reservoir = "reservoir"  # every step, uniform over the whole stream (Mammoth's ER)
    balanced = "balanced"  # at each task's end, an equal share per task (Avalanche's default)


@dataclass
class ERConfig(MethodConfig):
    name: str = "er"
    memory_size: int = 500  # samples kept over the whole stream
    replay_batch_size: int = 0  # memory samples per step; 0 means batch_size
    memory_policy: ReplayPolicy = ReplayPolicy.reservoir
    ce_outputs: CEOutputs = CEOutputs.all  # class scenario: the outputs the cross-entropy reads (Mammoth: all)
    glances: int = 1  # optimiser steps on each batch, each with a fresh replay draw (La-MAML's ER: 5 or 10)
    grad_clip_norm: float = 0.0  # clip the gradient to this L2 norm before each step; 0: none (La-MAML: 2.0)
    replay_in_first_task: bool = False  # replay from the memory during task 0 too (La-MAML's ER: true)
    # How a replay batch is drawn from the reservoir (the balanced memory draws with replacement either way):
    # without repeats as Mammoth's ER, or with them as La-MAML's ER (its settings set replacement).
    replay_draw: ReplayDraw = ReplayDraw.distinct

    def checks(self):
        return [*super().checks(), ("memory_size", self.memory_size >= 1, "at least 1"),
                ("replay_batch_size", self.replay_batch_size >= 0, "0 (batch_size) or more"),
                ("glances", self.glances >= 1, "at least 1"), ("grad_clip_norm", self.grad_clip_norm >= 0, "0 or more"),
                ("replay_in_first_task", self.memory_policy == "reservoir" or not self.replay_in_first_task,
                 "false: the balanced memory is written at the end of each task, so it is empty during task 0")]


class ER(Rehearsal, Method):
    name = "er"
    Config = ERConfig
    # Data-parallel: every rank stores the global batch and draws the same replay rows, so the memories stay
    # alike; each rank trains on its shard of both.
    traits = Traits(scenarios=frozenset({"task", "class"}), distributed_scenarios=frozenset({"task", "class"}),
                    graph_safe=True,  # its replay draws come from the run's generators, which each graph registers
                    health_checks=(MEMORY_CLASSES,))

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        check_memory_holds_every_class(cfg.memory_size, info)
        self.memory = Memory(cfg.memory_size, info.input_shape, info.num_outputs, ctx.device, cfg.memory_policy,
                             num_tasks=info.num_tasks)

    def train_task(self, task):
        # In task 0 the memory holds only that task's samples (and nothing before its first batch is stored).
        replay = task.id > 0 or self.cfg.replay_in_first_task
        m = self.cfg.replay_batch_size or self.cfg.batch_size
        params = [p for p in self.parameters() if p.requires_grad]

        def clip():
            torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip_norm, foreach=True)

        def loss(batch: Batch):
            if not (replay and (task.id > 0 or batch.step > 0)):
                return self.mixed_loss(batch, self.cfg.ce_outputs)
            raw, y, t, drawn = self.draw(m)
            mixed = Batch(None, torch.cat([batch.x, self.loop.augment(raw, t)]), torch.cat([batch.y, y]),
                          torch.cat([batch.t, t]))
            if drawn is None:
                return self.mixed_loss(mixed, self.cfg.ce_outputs)
            # The mean over the incoming samples and the memory rows really drawn, as the concatenated batch of
            # a reference that draws fewer rows while its memory holds fewer than m.
            losses = F.cross_entropy(self.mixed_outputs(self.backbone(mixed.x), mixed.t, self.cfg.ce_outputs),
                                     mixed.y, reduction="none")
            return mean_over_drawn(losses, torch.cat([torch.ones_like(batch.y, dtype=torch.bool), drawn]))

        def store(batch: Batch):
            whole = batch.unsharded()
            self.memory.add(whole.raw, whole.y, whole.t, generator=self.ctx.generator)

        after_backward = clip if self.cfg.grad_clip_norm > 0 else None
        if self.cfg.memory_policy == "balanced":
            self.loop.fit(task, loss, after_backward=after_backward, glances=self.cfg.glances)
            self.memory.add_task(task.train.x, task.train.y, task.train.t, generator=self.ctx.generator)
        else:
            self.loop.fit(task, loss, after_step=store, after_backward=after_backward,
                          glances=self.cfg.glances)

    def draw(self, m: int):
        """This rank's rows of a replay batch of m (data-parallel: every rank draws alike) and, for a distinct
        draw, which rows are real draws (None: all are)."""
        if self.cfg.replay_draw == "distinct" and self.cfg.memory_policy == "reservoir":
            raw, y, t, _, drawn = self.memory.sample_distinct(m, self.ctx.generator)
            return self.loop.shard(raw, y, t, drawn)
        return (*self.loop.shard(*self.memory.sample(m, self.ctx.generator)[:3]), None)

    def capacity(self):
        return {**super().capacity(), **self.memory.capacity()}
