"""ER-ACE: experience replay with the asymmetric cross-entropy of Caccia et al., "New Insights on Reducing Abrupt
Representation Change in Online Continual Learning", ICLR 2022, as its official code (pclucas14/AML,
methods/er_ace.py over methods/er.py) runs it.

Each step adds two losses, each from its own forward pass:
- the incoming batch's cross-entropy over its logits masked to the classes present in the batch, plus every
  class from the newest one met so far in the stream on (those the stream has not reached yet stay in the
  softmax): old classes absent from the batch get no gradient from new data;
- a memory batch's plain cross-entropy over every class seen so far.
The memory is a reservoir over the stream, written after each step with the non-augmented samples, and drawn
without replacement. Defaults are the official code's: one pass over the stream (online), batches of 10 incoming
and 10 memory samples, plain SGD at lr 0.1, 20 samples per class of split CIFAR-10 (200). The official code runs
ER-ACE task-free: the mask and the replay apply from the first step, task 0 included; task_free=false gives
Mammoth's models/er_ace.py instead, with neither during the first task.
The classifier is the official one (method.head=cosine): main.py:112-117 builds ER-ACE's ResNet-18 with
dist_linear, whose head (model.py:17-35, distLinear) scores class c as 10 · cos(f(x), w_c), a bias-free weight
row per class, each norm taken with 1e-5 added; Mammoth's models/er_ace.py does the same by default
(use_custom_classifier, lines 15-33, 45, 50-52). method.head=linear keeps the backbone's plain linear head.
Where the paper is silent: the official model has an output for every class of the dataset from the start, so
its mask also keeps the outputs of future tasks, and its memory's cross-entropy reads them all (AML and Mammoth
alike): method.ce_outputs=all, the default. ce_outputs=seen confines both losses to the outputs of the tasks seen
so far, as a prediction reads them (cl-bench's rule before docs/parity.md's Mammoth rows measured the difference).
Class scenario only: in the task scenario each task has its own head, which already keeps new data off old
classes, and ACE would be ER.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import Choice
from ..health import MEMORY_CLASSES
from .base import Batch, CEOutputs, Method, MethodConfig, Traits
from .memory import Memory, Rehearsal, check_memory_holds_every_class, mean_over_drawn


class Head(Choice):
    cosine = "cosine"  # the official code's distLinear: 10 · cos(f(x), w_c) (AML model.py:17-35, main.py:116)
    linear = "linear"  # the backbone's linear head, as every other method's


class CosineLinear(nn.Module):
    """s · cos(x, w_c) per class c, without bias, as AML's distLinear (model.py:17-35): each of x and the weight
    rows divided by its L2 norm plus eps; the weight initialised as nn.Linear's, s fixed at 10."""

    def __init__(self, in_features: int, out_features: int, scale: float = 10.0, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Linear(in_features, out_features, bias=False).weight
        self.scale, self.eps = scale, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x / (x.norm(p=2, dim=1, keepdim=True) + self.eps)
        w = self.weight / (self.weight.norm(p=2, dim=1, keepdim=True) + self.eps)
        return self.scale * (x @ w.t())


@dataclass
class ERACEConfig(MethodConfig):
    name: str = "er_ace"
    epochs: int = 1  # online: a single pass over each task's stream
    batch_size: int = 10  # incoming samples per step (AML's --batch_size)
    lr: float = 0.1  # AML's --lr
    momentum: float = 0.0  # AML's plain SGD
    memory_size: int = 200  # AML's --mem_size 20 per class, times the 10 classes of split CIFAR-10
    replay_batch_size: int = 10  # memory samples per step (AML's --buffer_batch_size)
    task_free: bool = True  # mask and replay from the first step (AML); false: not during task 0 (Mammoth)
    head: Head = Head.cosine  # the class head: see Head
    ce_outputs: CEOutputs = CEOutputs.all  # the outputs both losses read: every class (AML, Mammoth) or seen ones

    def checks(self):
        return [*super().checks(), ("memory_size", self.memory_size >= 1, "at least 1"),
                ("replay_batch_size", self.replay_batch_size >= 1, "at least 1")]


class ERACE(Rehearsal, Method):
    name = "er_ace"
    Config = ERACEConfig
    traits = Traits(scenarios=frozenset({"class"}),
                    distributed_scenarios=frozenset({"class"}),  # the memory stores the global batch, alike per rank
                    graph_safe=True,  # its replay draws come from the run's generators, which each graph registers
                    health_checks=(MEMORY_CLASSES,))

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        check_memory_holds_every_class(cfg.memory_size, info)
        if cfg.head == "cosine":
            self.heads.head = CosineLinear(backbone.feature_dim, info.num_outputs)
        self.memory = Memory(cfg.memory_size, info.input_shape, info.num_outputs, ctx.device)
        # The classes the incoming stream has shown so far (the official seen_so_far), kept for resumes.
        self.register_buffer("stream_classes", torch.zeros(info.num_outputs, dtype=torch.bool, device=ctx.device))

    def train_task(self, task):
        asymmetric = self.cfg.task_free or task.id > 0

        def loss(batch: Batch):
            logits = self.logits(batch.x)
            keep = self.incoming_classes(batch.unsharded().y)  # the global batch's classes, alike on all ranks
            if asymmetric:
                logits = logits.masked_fill(~keep[: logits.shape[1]], float("-inf"))
            total = F.cross_entropy(logits, batch.y)
            # The memory is empty only before the stream's first step.
            if task.id > 0 or (self.cfg.task_free and batch.step > 0):
                total = total + self.replay_loss()
            return total

        def store(batch: Batch):
            whole = batch.unsharded()
            self.memory.add(whole.raw, whole.y, whole.t, generator=self.ctx.generator)

        self.loop.fit(task, loss, after_step=store)

    def incoming_classes(self, y: torch.Tensor) -> torch.Tensor:
        """Record the batch's classes as met, and return the outputs its loss keeps: the classes present in the
        batch and every class from the newest one met on."""
        present = F.one_hot(y, self.info.num_outputs).any(0)
        self.stream_classes |= present
        label = torch.arange(self.info.num_outputs, device=y.device)
        newest = torch.where(self.stream_classes, label, -1).max()
        return present | (label >= newest)

    def replay_loss(self) -> torch.Tensor:
        raw, y, _, _, drawn = self.memory.sample_distinct(self.cfg.replay_batch_size, self.ctx.generator)
        raw, y, drawn = self.loop.shard(raw, y, drawn)
        return mean_over_drawn(F.cross_entropy(self.logits(self.loop.augment(raw)), y, reduction="none"), drawn)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The outputs the training losses read (method.ce_outputs)."""
        return self.mixed_outputs(self.backbone(x), None, self.cfg.ce_outputs)

    def capacity(self):
        return {**super().capacity(), **self.memory.capacity()}
