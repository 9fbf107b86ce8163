"""BiC: bias correction (Wu, Chen, Wang, Ye, Liu, Guo & Fu, "Large Scale Incremental Learning", CVPR 2019).

A class-incremental learner with an exemplar memory of memory_size samples in all, shared equally by the classes
seen so far. Each class's share is split 9:1 into exemplars that are trained on and held-out samples that never
are. A task has two stages:
1. the network learns the new data together with the trained exemplars, with cross-entropy over every class seen
   and distillation (temperature T = 2) of the old classes' outputs of the network as it was before the task,
   weighted (1 - λ) and λ with λ = n / (n + m), n old and m new classes (Sec. 3);
2. the network is frozen and a bias correction layer, two scalars α and β, turns the new classes' logits z into
   α·z + β, fitted with cross-entropy on the held-out samples: those of the old classes and as many of each new
   class, a balanced set (Sec. 4). The old classes' logits are left as they are (Eq. 4).
Then every class seen keeps its share of exemplars, picked by herding (memory.py's herding policy).

Where the paper is silent, as the official code (wuyuebupt/LargeScaleIncrementalLearning, resnet.py and
imagenet_main.py) and FACIL (mmasana/FACIL, src/approach/bic.py):
- the distillation target is the previous network's bias-corrected output: only the newest correction layer is
  ever applied, at test time and in the teacher (the official code); method.correction_layers=all keeps every
  task's layer, fixed after its task, on its classes' logits in training, correction and prediction (FACIL);
- the distillation is the cross-entropy between the softened outputs, averaged over the batch, without FACIL's
  output smoothing and without Hinton's T² factor (neither is in the paper or the official code);
- stage 2 adds 0.1·β²/2 to the loss (both codes), runs 200 epochs of SGD with momentum at lr 0.1, divided by 10
  after epochs 60, 120, 160 and 180 (the official schedule; FACIL keeps the lr constant: bias_lr_milestones=[]),
  on batches of batch_size, without augmentation and with the network in evaluation mode, so that the frozen
  network's logits are computed once and only α and β are fitted on them;
- the budget is split as FACIL splits it, so that the memory never exceeds memory_size: with C classes seen
  after the task, each class holds memory_size // C samples, of which ceil(val_fraction · that) are held out and
  the rest trained on (the official code sizes the held-out part by the old classes alone and keeps the new
  classes' apart from the memory); the held-out samples of a new class are its first ones in the task's (random)
  order, taken out of stage 1's data, and an old class keeps its first ones as its share shrinks;
- herding runs after stage 1 on the features of everything stage 1 trained on, so that the old classes are
  re-herded from their stored exemplars (both codes), on L2-normalised features as memory.py's herding (iCaRL,
  FACIL; the official code herds on raw features);
- the first task has no stage 2, but its held-out samples are already kept apart (both codes);
- a new class with fewer samples than its share (tiny tasks, debug=fast) holds out ceil(val_fraction · its count)
  of them instead, so that stage 1 keeps some to train on (neither code meets the case).
Defaults are the paper's CIFAR-100 settings (Sec. 6): 250 epochs, batch 128, lr 0.1 divided by 10 after epochs
100, 150 and 200, weight decay 2e-4, momentum 0.9, 2,000 exemplars, a 9:1 split, T = 2.
"""
import itertools
import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..checks import Choice
from ..data.scenarios import Split
from ..errors import UserError
from ..health import MEMORY_CLASSES
from .base import Method, MethodConfig, Traits, fresh_copy
from .loop import in_step, optimizer
from .memory import Memory, Rehearsal, check_new_classes_every_task, rank_within_class


class CorrectionLayers(Choice):
    latest = "latest"  # the newest task's layer only; the older classes' logits as they are (paper, official code)
    all = "all"  # every task's layer on its own classes, fixed after its task (FACIL)


@dataclass
class BiCConfig(MethodConfig):
    name: str = "bic"
    epochs: int = 250  # stage 1, per task (paper Sec. 6, CIFAR-100)
    batch_size: int = 128  # both stages
    lr: float = 0.1
    weight_decay: float = 2e-4
    lr_milestones: list[int] = field(default_factory=lambda: [100, 150, 200])  # stage 1: lr × lr_gamma after these
    memory_size: int = 2000  # samples kept over every class, trained-on and held-out together (paper, CIFAR-100)
    val_fraction: float = 0.1  # share of each class's samples held out for stage 2 (paper: train:val 9:1)
    temperature: float = 2.0  # T of the distillation (paper Sec. 6)
    bias_epochs: int = 200  # stage 2 passes over the held-out samples (official code and FACIL)
    bias_lr: float = 0.1  # stage 2 lr (official code at its batch 256, FACIL)
    bias_lr_milestones: list[int] = field(default_factory=lambda: [60, 120, 160, 180])  # stage 2: × lr_gamma
    beta_l2: float = 0.1  # weight of β²/2 in stage 2's loss (official code and FACIL; not in the paper)
    correction_layers: CorrectionLayers = CorrectionLayers.latest  # which tasks' correction layers are applied
    read_anyway: ClassVar[tuple[str, ...]] = ("momentum",)  # stage 2's SGD takes it, whatever stage 1's optimiser

    def checks(self):
        return [*super().checks(), ("memory_size", self.memory_size >= 1, "at least 1"),
                ("val_fraction", 0 < self.val_fraction < 1, "a fraction in (0, 1)"),
                ("temperature", self.temperature > 0, "a positive number"),
                ("bias_epochs", self.bias_epochs >= 1, "at least 1"),
                ("bias_lr", self.bias_lr > 0, "a positive number"),
                ("beta_l2", self.beta_l2 >= 0, "0 or more")]


def budget(memory_size: int, classes: int, val_fraction: float) -> tuple[int, int]:
    """(held out, trained on) samples per class when `classes` classes share the memory. The small slack keeps
    a product such as 0.1 · 30 = 3.0000000000000004 from rounding up to 4."""
    per_class = memory_size // classes
    held = math.ceil(val_fraction * per_class - 1e-9)
    return held, per_class - held


def distillation(logits: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """The paper's L_d: cross-entropy of the student's softened distribution against the teacher's, summed over
    the old classes and averaged over the batch."""
    target = F.softmax(teacher / temperature, dim=1)
    return -(target * F.log_softmax(logits / temperature, dim=1)).sum(1).mean()


class BiC(Rehearsal, Method):
    name = "bic"
    Config = BiCConfig
    # graph_safe: stage 1 is its one fit(); stage 2, the bias correction, runs a loop of its own eagerly.
    # distributed_scenarios stays empty: stage 2 is a loop of its own over logits computed once, not fit().
    # within_task_checkpoints stays True: stage 1 is the task's one fit() call; the hold-out and the teacher before
    # it are rebuilt from the task-start state on a resume, and stage 2 and herding after it depend only on stage
    # 1's result and the random state saved with it.
    traits = Traits(scenarios=frozenset({"class"}), graph_safe=True, health_checks=(MEMORY_CLASSES,))

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        check_new_classes_every_task("bic", info)
        held, trained = budget(cfg.memory_size, info.num_outputs, cfg.val_fraction)
        if trained < 1:
            least = next(p for p in itertools.count(2) if budget(p, 1, cfg.val_fraction)[1] >= 1)
            raise UserError(f"method.memory_size={cfg.memory_size} leaves no exemplar to train on for the "
                            f"{info.num_outputs} classes of {info.dataset} once {held} per class are held out: use "
                            f"at least {least * info.num_outputs}")
        shares = [budget(cfg.memory_size, info.seen_outputs(t), cfg.val_fraction) for t in range(info.num_tasks)]
        classes = [info.seen_outputs(t) for t in range(info.num_tasks)]
        trained_rows = max(k * c for (_, k), c in zip(shares, classes))
        held_rows = max(v * c for (v, _), c in zip(shares, classes))
        self.memory = Memory(trained_rows, info.input_shape, info.num_outputs, ctx.device, "herding")
        # The held-out samples, class by class in the order they were taken: rows [0, held_count).
        self.register_buffer("held_x", torch.zeros((held_rows, *info.input_shape), dtype=torch.uint8,
                                                   device=ctx.device))
        self.register_buffer("held_y", torch.zeros(held_rows, dtype=torch.long, device=ctx.device))
        self.register_buffer("held_t", torch.zeros(held_rows, dtype=torch.long, device=ctx.device))
        self.register_buffer("held_count", torch.zeros((), dtype=torch.long, device=ctx.device))
        # Each task's correction layer (task 0's is never fitted and stays the identity).
        self.register_buffer("alpha", torch.ones(info.num_tasks, device=ctx.device))
        self.register_buffer("beta", torch.zeros(info.num_tasks, device=ctx.device))
        output_task = torch.zeros(info.num_outputs, dtype=torch.long)
        for t, (offset, size) in enumerate(zip(info.offsets, info.sizes)):
            output_task[offset: offset + size] = t
        self.register_buffer("output_task", output_task.to(ctx.device), persistent=False)

    # --- the task ---------------------------------------------------------------------------------
    def train_task(self, task):
        self.alpha[task.id], self.beta[task.id] = 1.0, 0.0
        held, trained = budget(self.cfg.memory_size, self.info.seen_outputs(task.id), self.cfg.val_fraction)
        data = Split.cat([self.hold_out(task.train, held), Split(*self.memory.stored())])
        self.loop.fit(task, self.stage1_loss(task), data=data)
        if task.id > 0:
            with self.loop.phase("bias_correction"):
                self.correct_bias(task)
        self.memory.add_herding(data.x, data.y, data.t, self.eval_outputs(data.x, self.backbone), per_class=trained)

    @torch.no_grad()
    def hold_out(self, new: Split, per_class: int) -> Split:
        """Keep per_class samples of each class apart for stage 2: the old classes their first ones, the new
        classes their first ones in the task's order (which is random). Returns the new data left to train on."""
        n = int(self.held_count)  # one sync per task
        old_y = self.held_y[:n]
        keep = rank_within_class(old_y) < per_class
        count = torch.bincount(new.y, minlength=self.info.num_outputs)
        cap = torch.clamp((count * self.cfg.val_fraction - 1e-9).ceil().long(), max=per_class)
        taken = rank_within_class(new.y) < torch.where(count > per_class, per_class, cap)[new.y]
        parts = [(self.held_x[:n][keep], new.x[taken]), (old_y[keep], new.y[taken]),
                 (self.held_t[:n][keep], new.t[taken])]
        for buf, (old, fresh) in zip((self.held_x, self.held_y, self.held_t), parts):
            rows = torch.cat([old, fresh])
            buf[: rows.shape[0]] = rows
            buf[rows.shape[0]:] = 0
        self.held_count.fill_(parts[1][0].shape[0] + parts[1][1].shape[0])
        return Split(new.x[~taken], new.y[~taken], new.t[~taken])

    def held_out(self) -> Split:
        """The held-out samples (a host sync, once per task)."""
        n = int(self.held_count)
        return Split(self.held_x[:n], self.held_y[:n], self.held_t[:n])

    def correction(self, latest: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(scale, shift) of every output: its task's α and β where that task's layer is applied (the task
        `latest` alone, or every task with correction_layers=all), else 1 and 0. No host sync."""
        scale, shift = self.alpha[self.output_task], self.beta[self.output_task]
        if self.cfg.correction_layers == "latest":
            applied = self.output_task == latest
            scale, shift = torch.where(applied, scale, 1.0), torch.where(applied, shift, 0.0)
        return scale, shift

    def stage1_loss(self, task):
        """(1 - λ)·cross-entropy over every class seen + λ·distillation of the old classes' outputs of the frozen
        pre-task network, bias-corrected as it predicted; λ = old classes / classes seen (0 in the first task)."""
        seen, old = self.info.seen_outputs(task.id), self.info.offsets[task.id]
        if task.id == 0:
            return lambda batch: F.cross_entropy(self.heads(self.backbone(batch.x), None), batch.y)
        lam, temperature = old / seen, self.cfg.temperature
        teacher = (fresh_copy(self.backbone).eval().requires_grad_(False),
                   fresh_copy(self.heads).eval().requires_grad_(False))
        teacher_scale, teacher_shift = (v[:old].clone() for v in self.correction(self.tasks_learned - 1))
        keep_layers = self.cfg.correction_layers == "all"
        scale, shift = (v[:seen].clone() for v in self.correction(self.tasks_learned - 1))  # task's own is 1, 0

        def loss(batch):
            logits = self.heads(self.backbone(batch.x), None)
            if keep_layers:
                logits = logits * scale + shift
            with torch.no_grad():
                target = teacher[1].head(teacher[0](batch.x))[:, :old] * teacher_scale + teacher_shift
            ce = F.cross_entropy(logits, batch.y)
            return (1 - lam) * ce + lam * distillation(logits[:, :old], target, temperature)

        return loss

    def correct_bias(self, task) -> None:
        """Stage 2: α and β of this task's layer, fitted on the held-out samples with everything else frozen."""
        cfg = self.cfg
        held = self.held_out()
        logits = self.eval_outputs(held.x, lambda x: self.heads(self.backbone(x), None))
        seen = logits.shape[1]
        fixed_scale, fixed_shift = (v[:seen] for v in self.correction(torch.tensor(-1, device=logits.device)))
        new = self.output_task[:seen] == task.id
        alpha = torch.ones((), device=logits.device, requires_grad=True)
        beta = torch.zeros((), device=logits.device, requires_grad=True)
        opt = optimizer("sgd", [alpha, beta], self.ctx.fused_optimizer, lr=cfg.bias_lr, momentum=cfg.momentum)
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, list(cfg.bias_lr_milestones), cfg.lr_gamma)
        for _ in range(self.loop.phase_epochs(cfg.bias_epochs)):
            order = torch.randperm(len(held), device=logits.device, generator=self.ctx.generator)
            for idx in self.loop.phase_batches(order.split(cfg.batch_size)):
                with in_step():
                    corrected = logits[idx] * torch.where(new, alpha, fixed_scale) + torch.where(new, beta, fixed_shift)
                    loss = F.cross_entropy(corrected, held.y[idx]) + cfg.beta_l2 * beta ** 2 / 2
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
            sched.step()
        self.alpha[task.id], self.beta[task.id] = alpha.detach(), beta.detach()

    @torch.no_grad()
    def eval_outputs(self, raw: torch.Tensor, fn) -> torch.Tensor:
        """fn of uint8 samples, in evaluation mode and without augmentation, in float32."""
        was_training = self.training
        self.eval()
        out = []
        for part in raw.split(self.ctx.eval_batch_size):
            with self.ctx.autocast():
                out.append(fn(self.info.view.eval(part)).float())
        self.train(was_training)
        return torch.cat(out)

    # --- prediction -------------------------------------------------------------------------------
    def predict(self, x, task_id):
        """The network's logits with the bias correction applied (the newest task's layer, or every task's)."""
        logits = self(x, task_id)
        scale, shift = self.correction(self.tasks_learned - 1)
        seen = logits.shape[1]
        return logits * scale[:seen] + shift[:seen]

    def capacity(self):
        held = sum(b.numel() * b.element_size() for b in (self.held_x, self.held_y, self.held_t))
        return {**super().capacity(), "memory_size": self.cfg.memory_size,
                "memory_bytes": self.memory.capacity()["memory_bytes"] + held}
