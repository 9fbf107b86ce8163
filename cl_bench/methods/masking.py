"""What PackNet, Piggyback and CPG share: the conversion to masked layers (nn/masked.py), the per-task forward,
training that touches only the task's trainable weights (gradients of other tasks' weights zeroed after backward,
weight decay added by hand to the trainable ones), the picking-mask optimiser, validation accuracy for model
selection, snapshots, and the capacity report. Their shared defaults are the CIFAR-100 schedule of CPG's code
base (ivclab/CPG), in MaskedConfig; PickingConfig adds the picking masks of Piggyback and CPG."""
import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from ..checks import Choice
from ..health import Check, Finding
from ..nn import masked
from . import parallel
from .base import DecayOn, Method, MethodConfig, Traits
from .loop import optimizer


class Init(Choice):
    official = "official"  # ivclab/CPG's: conv kaiming-normal over fan-out, linear and heads N(0, 0.01), biases 0
    pytorch = "pytorch"  # PyTorch's defaults (kaiming-uniform)


@dataclass
class MaskedConfig(MethodConfig):
    epochs: int = 100  # passes over each task's data (CPG's CIFAR-100 schedule)
    batch_size: int = 32  # CPG's CIFAR-100 scripts
    lr: float = 1e-2  # SGD lr of the task's trainable weights, biases, batch norms and head
    nesterov: bool = True  # the CPG code base's SGD
    weight_decay: float = 4e-5  # added by hand to the task's trainable conv/linear weights only
    weight_decay_on: DecayOn = DecayOn.weights  # so, and only so: the by-hand decay above
    lr_milestones: list[int] = field(default_factory=lambda: [50, 80])  # lr ×lr_gamma at these epochs
    init: Init = Init.official  # the weights', heads' and grown weights' initialisation


    def checks(self):
        return [*super().checks(), ("weight_decay_on", self.weight_decay_on == "weights",
                                    "weights: the mask methods decay the task's own conv and linear weights by hand")]


@dataclass
class PickingConfig(MaskedConfig):
    mask_lr: float = 5e-4  # Adam lr of the real-valued picking scores
    mask_lr_milestones: list[int] = field(default_factory=lambda: [50])  # mask lr ×mask_lr_gamma at these epochs
    mask_lr_gamma: float = 0.2
    mask_lr_stop: int = 70  # epoch from which the mask lr is 0 (masks settle while the heads keep training)
    mask_init: float = 1e-2  # initial score of every weight: all picked at the start
    mask_threshold: float = 5e-3  # a weight is picked while its score is above this

    def checks(self):
        return [*super().checks(), ("mask_lr", self.mask_lr >= 0, "0 or more"),
                ("mask_init", self.mask_init > self.mask_threshold,
                 f"a score above method.mask_threshold={self.mask_threshold}, or no weight is picked at the start")]


OWN_SHARE_MIN = 0.001  # no_own_weights: a task owning fewer than this share of the shared weights has next to none
PICKS_ALL = Check("masks.picks_all", "a task's picking mask keeps every earlier weight: it never learned to choose",
                  "raise method.mask_lr or train longer (method.epochs); method.mask_threshold is the cut")
PICKS_NONE = Check("masks.picks_none", "a task's picking mask drops every earlier weight",
                   "lower method.mask_lr or raise method.mask_init above method.mask_threshold")


class MaskedMethod(Method):
    """Base of the methods whose tasks own subsets of one network's weights."""

    traits = Traits(scenarios=frozenset({"task"}), distributed_scenarios=frozenset({"task"}),
                    backbone_use="masked")  # nn/masked.py's layers (packnet, piggyback, cpg)
    picking: ClassVar[bool] = False  # whether tasks learn picking masks over earlier tasks' weights

    def __init__(self, cfg, backbone, info, ctx):
        picking = (cfg.mask_init, cfg.mask_threshold) if self.uses_picking(cfg) else None
        masked.convert(backbone, info.num_tasks, picking, official_init=cfg.init == "official")
        super().__init__(cfg, backbone, info, ctx)
        if cfg.init == "official":
            for head in self.heads.heads:
                init_head(head)
        self.layers = masked.masked_layers(self.backbone)
        self.initial_shared = sum(layer.weight.numel() for layer in self.layers)
        self.register_buffer("sparsity", torch.zeros(info.num_tasks))  # share of its claimed weights each task released

    # Health: a method whose tasks own weights names, with the keys that change them in it, the checks that a task
    # owns none, kept all it claimed while tasks remain, or left none free for the tasks after it.
    no_own_weights: ClassVar[Check | None] = None
    hoarded: ClassVar[Check | None] = None
    exhausted: ClassVar[Check | None] = None

    @classmethod
    def uses_picking(cls, cfg) -> bool:
        return cls.picking

    def forward(self, x, task_id):
        masked.set_task(self.backbone, task_id)
        return self.heads(self.backbone(x), task_id)

    # --- one task's phases ------------------------------------------------------------------------------
    def begin_task(self, task_id: int) -> None:
        """Claim every free weight for the task and start its picking mask; its biases and batch norms start
        from those the task before ended with (the official code trains on from the last checkpoint)."""
        for layer in self.layers:
            layer.inherit(task_id)
            layer.claim(task_id)
            layer.start_picking(task_id)
        for m in self.backbone.modules():
            if isinstance(m, masked.TaskBatchNorm):
                m.inherit(task_id)

    def owns_weights(self, task_id: int) -> bool:
        """Whether task_id has weights of its own (none when it found no free weight to claim)."""
        return any(bool(layer.trainable(task_id).any()) for layer in self.layers)

    def widen(self, multiplier: float, task_id: int) -> None:
        """Grow the network (CPG): the shared layers and, where the features widen, the heads that read them."""
        features = masked.widen(self.backbone, multiplier, task_id)
        if features is not None:
            self.heads.widen(features, task_id, init_head if self.cfg.init == "official" else None)

    def finish_task(self, task_id: int) -> None:
        for layer in self.layers:
            layer.freeze_picking(task_id)
        # Every free weight now is one the task claimed (at its start or by growth) and released again.
        owned = sum(int(layer.trainable(task_id).sum()) for layer in self.layers)
        free = sum(int((layer.owner == 0).sum()) for layer in self.layers)
        self.sparsity[task_id] = free / (owned + free) if owned + free else 0.0

    def release(self, task_id: int, sparsity: float, cutoff: bool = False) -> None:
        for layer in self.layers:
            layer.release(task_id, sparsity, cutoff)

    def task_params(self, task_id: int) -> list[torch.nn.Parameter]:
        """What training task_id may change besides picking scores: its weights, biases, batch norms, head."""
        params = [layer.weight for layer in self.layers if layer.weight.requires_grad]
        params += [layer.biases[task_id] for layer in self.layers if layer.biases is not None]
        for m in self.backbone.modules():
            if isinstance(m, masked.TaskBatchNorm):
                params += list(m.bns[task_id].parameters())
        return params + list(self.heads.heads[task_id].parameters())

    def protect(self, task_id: int) -> None:
        """After backward: no gradient reaches weights the task does not own; weight decay only on its own."""
        for layer in self.layers:
            grad = layer.weight.grad
            if grad is None:
                continue
            # A product, not a fill, for speed: a NaN gradient would pass it, but a step whose loss is not finite
            # is skipped (skip_nonfinite) or ends the run before any checkpoint is written.
            trainable = layer.trainable_mask(task_id)
            if trainable is None:  # the task owns every weight of the layer
                if self.cfg.weight_decay:
                    grad.add_(layer.weight.detach(), alpha=self.cfg.weight_decay)
                continue
            grad.mul_(trainable)
            if self.cfg.weight_decay:
                grad.addcmul_(layer.weight.detach(), trainable, value=self.cfg.weight_decay)

    def train_weights(self, task, epochs: int, lr: float, mask_lr: float = 0.0, after_step=None, milestones=None,
                      after_epoch=None, loss_fn=None) -> None:
        """Train the task's weights (SGD, ×lr_gamma at milestones, by default method.lr_milestones) and, when
        mask_lr > 0, its picking scores (Adam) jointly."""
        params = self.task_params(task.id)
        scores = [layer.score for layer in self.layers if layer.score is not None]
        for score in scores:
            score.requires_grad_(mask_lr > 0)
        mask_opt = optimizer("adam", scores, self.ctx.fused_optimizer, lr=mask_lr) if scores and mask_lr > 0 else None
        steps_per_epoch = self.loop.steps_per_epoch(task.train)
        # The official code keeps the masks learning to the end when the task has no weights of its own.
        stop_masks = self.owns_weights(task.id)

        def on_step(batch):
            # Counted from the batch, not here: a resumed phase continues its schedules where they were.
            if mask_opt is not None:
                self.step_scores(mask_opt, self.mask_lr_at(batch.step // steps_per_epoch, mask_lr, stop_masks),
                                 self.mask_lr_at((batch.step + 1) // steps_per_epoch, mask_lr, stop_masks))
            if after_step is not None:
                after_step(batch.step + 1)

        self.loop.fit(task, loss_fn or (lambda batch: self.loss(batch, task.id)), params=params,
                      epochs=epochs,
                      optimizer=self.loop.make_optimizer(params, lr=lr, weight_decay=0.0),
                      after_backward=lambda: self.protect(task.id), after_step=on_step,
                      side_optimizers=(mask_opt,) if mask_opt is not None else (), milestones=milestones,
                      after_epoch=after_epoch)

    def step_scores(self, mask_opt, lr: float, next_lr: float) -> None:
        """The picking scores' Adam step at lr, none at lr 0: Adam (no weight decay here) then moves no score, and its
        moments, which a zero lr never applies, stay with the phase's optimiser, dropped at its end. On one process
        the scores need no gradient while the next step's lr is 0 (past mask_lr_stop), so the backward pass skips
        them; data-parallel, every parameter DistributedDataParallel was given keeps its gradient."""
        if lr > 0:
            for group in mask_opt.param_groups:
                group["lr"] = lr
            mask_opt.step()
        mask_opt.zero_grad(set_to_none=True)
        if self.ctx.world_size == 1:
            for group in mask_opt.param_groups:
                for score in group["params"]:
                    score.requires_grad_(next_lr > 0)

    def mask_lr_at(self, epoch: int, base: float, stop: bool = True) -> float:
        """The picking masks' step schedule: ×mask_lr_gamma at each milestone, and 0 from mask_lr_stop on
        unless stop is False (a task without weights of its own, as the official code does)."""
        if stop and epoch >= self.cfg.mask_lr_stop:
            return 0.0
        return base * self.cfg.mask_lr_gamma ** sum(epoch >= m for m in self.cfg.mask_lr_milestones)

    # --- model selection ------------------------------------------------------------------------------------
    @torch.no_grad()
    def accuracy(self, split, task_id: int, model=None) -> float:
        """Accuracy on split (validation data) of this method for task_id, or of another model of the task.
        Data-parallel, each rank measures its share of the batches and the counts are summed: every rank decides
        on the same figure."""
        self.eval()
        parallel.agree_batch_norms(self if model is None else model)
        model = model or (lambda x: self(x, task_id))
        correct = torch.zeros((), dtype=torch.long, device=self.ctx.device)
        seen = 0
        for raw, y, t in parallel.own_batches(split.batches(self.ctx.eval_batch_size)):
            with self.ctx.autocast():
                logits = model(self.info.view.eval(raw, t))
            correct += (logits.argmax(1) == self.targets(y, task_id)).sum()
            seen += y.shape[0]
        return parallel.all_ranks_fraction(correct, seen)

    def snapshot(self) -> dict:
        """Everything training the current task may change (earlier tasks' picking masks cannot change)."""
        return {k: v.detach().clone() for k, v in self.state_dict().items() if ".pick_" not in k}

    def restore(self, snapshot: dict) -> None:
        self.load_state_dict(snapshot, strict=False)

    # --- health -------------------------------------------------------------------------------------------
    def health(self, task) -> list[Finding]:
        t, later = task.id, self.info.num_tasks - 1 - task.id
        owned = sum(int(layer.trainable(t).sum()) for layer in self.layers)
        free = sum(int((layer.owner == 0).sum()) for layer in self.layers)
        found = []
        shared = sum(layer.weight.numel() for layer in self.layers)
        if self.no_own_weights is not None and owned < OWN_SHARE_MIN * shared:
            found.append(self.no_own_weights.found(t, f"it owns {owned} of the {shared} shared weights (under "
                                                      f"{OWN_SHARE_MIN:.1%}): the tasks before it left next to none "
                                                      "free, so it learned little beyond its biases, batch norms and "
                                                      "head"))
        if self.hoarded is not None and owned and later and float(self.sparsity[t]) == 0:
            found.append(self.hoarded.found(t, f"it kept all {owned} weights it claimed, released none, with {later} "
                                               f"tasks to come{self.why_hoarded(t)}"))
        if self.exhausted is not None and owned and later and free == 0 and not self.can_grow():
            found.append(self.exhausted.found(t, f"no shared weight is left free for the {later} tasks to come"))
        if self.uses_picking(self.cfg) and t > 0:
            density = self.picking_density(t)
            if density >= 1.0 or density <= 0.0:
                check = PICKS_ALL if density >= 1.0 else PICKS_NONE
                found.append(check.found(t, f"its picking mask keeps {density:.0%} of the earlier tasks' weights"))
        return found

    def why_hoarded(self, task_id: int) -> str:
        """What made the task keep every weight, after a colon, where the method knows."""
        return ""

    def can_grow(self) -> bool:
        """Whether a later task can still widen the network (CPG)."""
        return False

    # --- the contract -------------------------------------------------------------------------------------
    def mask_keys(self):
        return {k for k in self.state_dict() if k.endswith(".owner") or ".pick_" in k}

    def capacity(self):
        """What the network costs, as the CPG paper counts it: the weights of the shared layers (total, in use
        by some task, free) against the initial network's, per task its own weights and those it computes with
        (its own plus the earlier ones it picks), and everything else the methods keep per task."""
        learned = int(self.tasks_learned)
        shared = sum(layer.weight.numel() for layer in self.layers)
        free = sum(int((layer.owner == 0).sum()) for layer in self.layers)
        picks = [p for layer in self.layers for n, p in layer.named_buffers() if n.startswith("pick_")]
        cap = {
            "weights_initial": self.initial_shared,
            "weights_in_use": shared - free,
            "weights_free": free,
            "in_use_over_initial": round((shared - free) / self.initial_shared, 6),  # CPG's "1.09×" figure
            "weights_in_use_per_task": [self.weights_in_use(t) for t in range(learned)],
            "params_total": sum(p.numel() for p in self.parameters()),
            "params_used": shared - free + sum(self.task_specific_params(t) for t in range(learned)),
            "params_shared": shared,
            "params_owned_per_task": [sum(int(layer.trainable(t).sum()) for layer in self.layers)
                                      for t in range(learned)],
            "free_fraction": free / shared,
            "growth": shared / self.initial_shared,
            "sparsity_per_task": [round(float(s), 6) for s in self.sparsity[:learned]],
            "mask_bytes": sum(layer.owner.numel() for layer in self.layers) + sum(math.ceil(p.numel() / 8)
                                                                                  for p in picks),
        }
        if self.uses_picking(self.cfg):
            cap["picking_density_per_task"] = [self.picking_density(t) for t in range(1, learned)]
        return cap

    def weights_in_use(self, task_id: int) -> int:
        """The shared weights task_id computes with: its own, and the earlier tasks' ones it picks (all of them
        without picking masks)."""
        k, n = task_id + 1, 0
        for layer in self.layers:
            used = (layer.owner > 0) & (layer.owner <= k)
            pick = layer.pick(task_id)
            if pick is not None:
                used &= (layer.owner == k) | pick
            n += int(used.sum())
        return n

    def task_specific_params(self, task_id: int) -> int:
        n = sum(layer.biases[task_id].numel() for layer in self.layers if layer.biases is not None)
        n += sum(p.numel() for m in self.backbone.modules() if isinstance(m, masked.TaskBatchNorm)
                 for p in m.bns[task_id].parameters())
        return n + sum(p.numel() for p in self.heads.heads[task_id].parameters())

    def picking_density(self, task_id: int) -> float:
        """Share of the weights earlier tasks own that task_id's picking mask keeps."""
        kept = total = 0
        for layer in self.layers:
            earlier = (layer.owner > 0) & (layer.owner <= task_id)
            total += int(earlier.sum())
            kept += int((earlier & layer.pick(task_id)).sum())
        return round(kept / total, 6) if total else 0.0


@torch.no_grad()
def init_head(head: torch.nn.Linear) -> None:
    """ivclab/CPG's classifier initialisation: N(0, 0.01) weights, zero bias."""
    torch.nn.init.normal_(head.weight, 0.0, 0.01)
    torch.nn.init.zeros_(head.bias)
