"""GDumb: Greedy sampler and Dumb learner (Prabhu, Torr & Dokania, ECCV 2020).

While a task's stream passes, the learner only stores samples, in a greedy class-balanced memory (policy
`greedy` of memory.py): a sample is kept if its class holds fewer than memory_size // classes seen, and into a
full memory it replaces a random sample of the largest class. At the end of every task, before evaluation, a
network is trained from scratch (freshly initialised, as at construction) on the memory alone. It has one output
per class, trained with cross-entropy over every class seen; in the task scenario the logits are masked to the
task's classes at test time, as the official code's task accuracy does.

As the official code (drimpossible/GDumb, src/main.py, src/opts.py, scripts/replicate.sh): SGD with momentum
0.9, lr 0.05, weight decay 1e-6, batch 16, gradient norm clipped at 10; one warm-up epoch at lr 0.005, then
cosine annealing with warm restarts (periods 1, 2, 4, ... epochs, down to 0.0005) stepped once per epoch from the
third epoch on; CutMix (alpha 1, on half of the batches) and 256 epochs, as its CIFAR and SVHN runs (its MNIST
runs use no CutMix and 128 epochs: method.regularization=none method.epochs=128).
Where the official code differs or is silent:
- it trains once, after the last task, with as many slots per class as classes in the whole stream (first
  samples of each class); here after every task, as its continual evaluation protocol (and Mammoth) needs, so
  the memory is the greedy sampler of the paper's Sec. 3, with the eviction rule of the sampler used by
  RaptorMai/online-continual-learning's GDumb (the first seen class wins ties for the largest);
- it reports the best test accuracy over epochs; here the network after its last epoch (no selection on test);
- it trains in half precision; here in the run's precision (hardware.amp).
Mammoth's GDumb (models/gdumb.py) keeps a reservoir instead of the greedy memory: method.sampler=reservoir.
"""
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from ..checks import Choice
from ..data.scenarios import Split
from ..health import MEMORY_CLASSES
from .base import Batch, Method, MethodConfig, Traits, reset_parameters
from .heads import Heads
from .memory import Memory, Rehearsal, check_memory_holds_every_class


class Regularization(Choice):
    cutmix = "cutmix"  # CutMix on a share cutmix_prob of the batches (official CIFAR and SVHN runs)
    none = "none"  # plain cross-entropy (official MNIST runs)


class Sampler(Choice):
    greedy = "greedy"  # the paper's class-balanced greedy sampler (the official code's)
    reservoir = "reservoir"  # a uniform sample of the stream, as Mammoth's GDumb keeps (utils/buffer.py)


@dataclass
class GDumbConfig(MethodConfig):
    name: str = "gdumb"
    epochs: int = 256  # passes over the memory after each task (official CIFAR and SVHN runs)
    batch_size: int = 16
    lr: float = 0.05  # the peak of the schedule (official maxlr)
    min_lr: float = 0.0005  # the floor of the cosine annealing (official minlr)
    weight_decay: float = 1e-6
    memory_size: int = 500  # samples kept over the whole stream (official CIFAR-10 and MNIST runs use 200 to 4400)
    clip_norm: float = 10.0  # gradients are rescaled to at most this norm
    regularization: Regularization = Regularization.cutmix
    cutmix_alpha: float = 1.0  # the box's share of the image is drawn from Beta(alpha, alpha)
    cutmix_prob: float = 0.5  # share of the batches that are cut and mixed
    sampler: Sampler = Sampler.greedy  # how the memory is kept while the stream passes

    def checks(self):
        return [*super().checks(), ("memory_size", self.memory_size >= 1, "at least 1"),
                ("min_lr", 0 <= self.min_lr <= self.lr, "0 to method.lr"),
                ("clip_norm", self.clip_norm > 0, "a positive number"),
                ("cutmix_alpha", self.cutmix_alpha > 0, "a positive number"),
                ("cutmix_prob", 0 <= self.cutmix_prob <= 1, "a probability in [0, 1]"),
                ("lr_milestones", not self.lr_milestones, "[] (GDumb's schedule is warm-up then warm restarts)")]


def warm_restart_lr(epoch: int, lr: float, min_lr: float) -> float:
    """The official schedule: epoch 0 at lr / 10, epoch 1 at lr, then cosine annealing from lr to min_lr with
    warm restarts after 1, 2, 4, ... epochs (CosineAnnealingWarmRestarts(T_0=1, T_mult=2) stepped once per epoch
    from epoch 2 on)."""
    if epoch == 0:
        return lr * 0.1
    steps = epoch - 1  # scheduler steps taken
    period = 1 << ((steps + 1).bit_length() - 1)  # the cycle holding `steps`: it began after period - 1 steps
    since_restart = steps - (period - 1)
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * since_restart / period)) / 2


def cutmix(x: torch.Tensor, y: torch.Tensor, alpha: float, prob: float, generator=None):
    """CutMix (Yun et al. 2019) as the official code applies it, without a host sync: with probability prob, one
    box (side sqrt(1 - lam) of the image's, lam ~ Beta(alpha, alpha), centred uniformly and clipped to the image)
    is pasted into every image from a shuffled partner. Returns (x, y, partner labels, weight of y), the weight
    being the share of each image left uncovered (1 where the batch is not mixed)."""
    n, _, h, w = x.shape
    dev = x.device
    apply = torch.rand((), device=dev, generator=generator) < prob
    # Beta draws take no generator; the device's global stream is in every checkpoint. Its parameters are filled on
    # the device (not copied from the host) and not validated (the check reads them back): alpha > 0 is checked
    # with the config.
    concentration = torch.full((), alpha, device=dev)
    lam = torch.distributions.Beta(concentration, concentration, validate_args=False).sample()
    cut = torch.sqrt(1 - lam)
    cut_h, cut_w = (h * cut).floor().long(), (w * cut).floor().long()
    cy = torch.randint(h, (), device=dev, generator=generator)
    cx = torch.randint(w, (), device=dev, generator=generator)
    y1, y2 = (cy - cut_h // 2).clamp(0, h), (cy + cut_h // 2).clamp(0, h)
    x1, x2 = (cx - cut_w // 2).clamp(0, w), (cx + cut_w // 2).clamp(0, w)
    rows, cols = torch.arange(h, device=dev), torch.arange(w, device=dev)
    box = ((rows >= y1) & (rows < y2))[:, None] & ((cols >= x1) & (cols < x2))[None, :] & apply
    partner = torch.randperm(n, device=dev, generator=generator)
    mixed = torch.where(box, x[partner], x)
    kept = 1 - box.sum() / (h * w)
    return mixed, y, y[partner], kept


class GDumb(Rehearsal, Method):
    name = "gdumb"
    Config = GDumbConfig
    traits = Traits(scenarios=frozenset({"task", "class"}), health_checks=(MEMORY_CLASSES,),
                    graph_safe="its loss sets each epoch's learning rate (warm restarts), which a replayed step "
                               "would not run")

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        check_memory_holds_every_class(cfg.memory_size, info)
        # One output per class in both scenarios, as the official network: the task scenario masks at test time.
        self.heads = Heads(backbone.feature_dim, replace(info, scenario="class"))
        self.memory = Memory(cfg.memory_size, info.input_shape, info.num_outputs, ctx.device, str(cfg.sampler))

    def forward(self, x, task_id):
        logits = self.heads(self.backbone(x), None)
        if task_id is None:
            return logits
        start = self.info.offsets[task_id]
        return logits[:, start: start + self.info.sizes[task_id]]

    def train_task(self, task):
        add = self.memory.add_greedy if self.cfg.sampler == "greedy" else self.memory.add
        add(task.train.x, task.train.y, task.train.t, generator=self.ctx.generator)
        reset_parameters(self.backbone, self.weight_init)  # the dumb learner starts from scratch every time
        reset_parameters(self.heads, self.weight_init)
        self.fit_memory(task)

    def fit_memory(self, task):
        data = Split(*self.memory.stored())
        params = [p for p in self.parameters() if p.requires_grad]
        optimizer = self.loop.make_optimizer(params)
        steps = self.loop.steps_per_epoch(data)
        mix = self.cfg.regularization == "cutmix"

        def loss(batch: Batch):
            lr = warm_restart_lr(batch.step // steps, self.cfg.lr, self.cfg.min_lr)
            for group in optimizer.param_groups:  # the lr of the step's epoch (set on the host: no sync)
                group["lr"] = lr
            if not mix:
                return F.cross_entropy(self(batch.x, None), batch.y)
            x, y, partner, kept = cutmix(batch.x, batch.y, self.cfg.cutmix_alpha, self.cfg.cutmix_prob,
                                         self.ctx.generator)
            logits = self(x, None)
            return kept * F.cross_entropy(logits, y) + (1 - kept) * F.cross_entropy(logits, partner)

        def clip():
            torch.nn.utils.clip_grad_norm_(params, self.cfg.clip_norm)

        self.loop.fit(task, loss, data=data, params=params, optimizer=optimizer, after_backward=clip,
                      milestones=[])

    def capacity(self):
        mem = sum(b.numel() * b.element_size() for b in self.memory.buffers())
        return {**super().capacity(), "memory_size": self.memory.size, "memory_bytes": mem}
