"""LUCIR: Learning a Unified Classifier Incrementally via Rebalancing (Hou, Pan, Loy, Wang & Lin, CVPR 2019).

The classifier is cosine-normalised: a class's logit is σ·cos(f(x), w_c), with one learnable scale σ shared by
every class, and the backbone's last ReLU is removed so that features can be negative (Sec. 3.2 and 4.1). The
first task trains with cross-entropy on these logits. Each later task trains on its data and the stored exemplars
with the sum of (Eq. 9)
- cross-entropy on the scaled cosine logits of every class seen so far;
- the less-forget constraint (Eq. 6): λ·(1 - cos(f(x), f*(x))) on every sample, f* the backbone as it was before
  the task (frozen, in evaluation mode), with the adaptive weight λ = λ_base·sqrt(|C_old| / |C_new|) (Eq. 7);
- the margin ranking loss (Eq. 8) on the samples of old classes in the batch (the exemplars): for each, its
  ground-truth cosine must exceed each of the K largest new-class cosines by the margin m, as max(0, m - cos_gt +
  cos_k), averaged over those samples and the K negatives.
After each task the memory keeps exemplars of the task's classes picked by herding (the `herding` policy of
memory.py) on the features of the trained network.

Where the paper is silent, as the official code (hshustc/CVPR19_Incremental_Learning,
cifar100-class-incremental/class_incremental_cosine_cifar100.py, its run.sh, modified_resnet_cifar.py,
utils_incremental/incremental_train_and_eval_MR_LF.py; modified_linear.py as FACIL and forks copy it):
- each new class's weight vector starts "imprinted": the normalised mean of the normalised features of its
  training samples (the network before the task, in evaluation mode, without augmentation), scaled to the mean
  norm of the old classes' weight vectors (method.imprint=false: the uniform initialisation, as FACIL);
- during a later task the old classes' weight vectors are frozen (official: lr 0 and no weight decay for them);
  the backbone, σ and the new classes' vectors train, σ and the vectors with weight decay like every parameter;
- σ starts at 1 and the weight vectors uniformly in ±1/sqrt(feature_dim); the less-forget and margin terms act on
  the cosines before scaling; the margin term has weight 1 (official lw_mr);
- the memory keeps 20 exemplars per class (official nb_protos, without --fix_budget), so it grows with the
  classes seen: here memory_size is the memory's capacity and each class keeps memory_size // (classes in the
  whole stream) exemplars, 2000 // 100 = 20 on CIFAR-100 (method.memory_budget=fixed: memory_size // classes seen,
  the official --fix_budget as iCaRL, rounded down here so that the memory never exceeds memory_size);
- herding as iCaRL's (memory.py): distinct picks on the normalised features, in evaluation mode;
- class-balanced finetuning (official cbf_class_incremental_cosine_cifar100.py with its default ft_flag 2; a
  separate script and run in run.sh, so off by default here, method.balanced_finetune=true): after herding, 20
  epochs at lr 0.01 (÷10 after epoch 10) on the exemplars alone (every class, the new ones included), the
  backbone frozen with its batch norms in evaluation mode, the weight vectors of every class trained and σ fixed,
  with cross-entropy and the margin ranking loss (the official loss also adds the less-forget term, a constant
  once the backbone is frozen: left out, the gradients are the same);
- predictions are the network's scaled cosine logits (the paper's CNN classifier); the official code also prints
  nearest-mean-of-exemplars accuracies, which are not offered here.
The official CIFAR-100 runs learn 50 classes first; a split dataset here has equal tasks. Defaults are the
paper's CIFAR-100 settings (Sec. 4.1, official run.sh): λ_base 5, m 0.5, K 2, 160 epochs, SGD lr 0.1 with
momentum 0.9, ÷10 after epochs 80 and 120, weight decay 5e-4, batch 128.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .. import backbones
from ..checks import Choice
from ..data.scenarios import Split
from ..errors import UserError
from ..health import MEMORY_CLASSES
from .base import Method, MethodConfig, Traits, fresh_copy
from .memory import Memory, Rehearsal, check_memory_holds_every_class, check_new_classes_every_task


class Budget(Choice):
    per_class = "per_class"  # memory_size // classes in the stream per class: the memory grows (official default)
    fixed = "fixed"  # memory_size // classes seen per class: the memory stays full (official --fix_budget)


@dataclass
class LUCIRConfig(MethodConfig):
    name: str = "lucir"
    epochs: int = 160  # per task (official epochs)
    batch_size: int = 128  # official train_batch_size
    lr: float = 0.1  # official base_lr; momentum 0.9 is MethodConfig's default, as official
    weight_decay: float = 5e-4  # official custom_weight_decay
    lr_milestones: list[int] = field(default_factory=lambda: [80, 120])  # ×lr_gamma (0.1) after these (lr_strat)
    memory_size: int = 2000  # exemplar capacity: 20 per class over CIFAR-100's 100 classes (official nb_protos 20)
    memory_budget: Budget = Budget.per_class  # how memory_size is shared among classes (see Budget)
    lambda_base: float = 5.0  # λ_base of the less-forget constraint (paper: 5 on CIFAR-100, 10 on ImageNet)
    adaptive_lambda: bool = True  # λ = λ_base·sqrt(|C_old| / |C_new|) (Eq. 7); false: λ = λ_base
    margin: float = 0.5  # m of the margin ranking loss (official dist)
    hard_negatives: int = 2  # K: new classes with the largest cosines taken as hard negatives (official K)
    margin_weight: float = 1.0  # weight of the margin ranking loss (official lw_mr)
    imprint: bool = True  # new classes' weight vectors start at their normalised feature means (official run.sh)
    remove_final_relu: bool = True  # drop the backbone's last ReLU (official modified ResNet); false keeps it
    balanced_finetune: bool = False  # class-balanced finetuning on the exemplars after each later task (official cbf)
    finetune_epochs: int = 20  # its epochs (official ft_epochs)
    finetune_lr: float = 0.01  # its lr (official ft_base_lr)
    finetune_milestones: list[int] = field(default_factory=lambda: [10])  # its lr ×lr_gamma after these (ft_lr_strat)

    def checks(self):
        return [*super().checks(), ("memory_size", self.memory_size >= 1, "at least 1"),
                ("lambda_base", self.lambda_base >= 0, "0 or more"), ("margin", self.margin >= 0, "0 or more"),
                ("hard_negatives", self.hard_negatives >= 1, "at least 1"),
                ("margin_weight", self.margin_weight >= 0, "0 or more"),
                ("finetune_epochs", self.finetune_epochs >= 1, "at least 1"),
                ("finetune_lr", self.finetune_lr > 0, "a positive number")]


def adaptive_lambda(base: float, old_classes: int, new_classes: int, adaptive: bool = True) -> float:
    """Eq. 7: the less-forget weight grows with the share of old classes, λ_base·sqrt(|C_old| / |C_new|)."""
    return base * math.sqrt(old_classes / new_classes) if adaptive else base


def less_forget(features: torch.Tensor, old_features: torch.Tensor) -> torch.Tensor:
    """Eq. 6: 1 - cos(f(x), f*(x)) between the current and the frozen features, averaged over the batch."""
    return (1 - F.cosine_similarity(features, old_features, dim=1)).mean()


def margin_ranking(cos: torch.Tensor, y: torch.Tensor, old_classes: int, k: int, margin: float) -> torch.Tensor:
    """Eq. 8 on the cosines before scaling: for each sample of an old class (label < old_classes), max(0, margin -
    cos_gt + cos_j) over the k new classes j with the largest cosines, averaged over those sample-negative pairs
    (0 when the batch has no old-class sample). Masked rather than selected, so that it needs no host sync."""
    old = (y < old_classes).to(cos.dtype)
    gt = cos.gather(1, y[:, None])
    hardest = cos[:, old_classes:].topk(k, dim=1).values
    return (F.relu(margin - gt + hardest) * old[:, None]).sum() / (old.sum() * k).clamp(min=1)


class CosineHead(nn.Module):
    """σ·cos(f, w_c) over the classes seen so far. The weight vectors are kept one matrix per task, so that a
    task's classes train or stay frozen apart (the official SplitCosineLinear's old and new parts), with one σ."""

    def __init__(self, feature_dim: int, info):
        super().__init__()
        bound = 1 / math.sqrt(feature_dim)
        self.weights = nn.ParameterList(nn.Parameter(torch.empty(n, feature_dim).uniform_(-bound, bound))
                                        for n in info.sizes)
        self.sigma = nn.Parameter(torch.ones(1))
        self.seen = info.seen_outputs(0)  # outputs in use: set by Method.learn and on load

    def cosine(self, features: torch.Tensor) -> torch.Tensor:
        weight = F.normalize(torch.cat(list(self.weights)), dim=1)
        return F.linear(F.normalize(features, dim=1), weight)[:, : self.seen]

    def forward(self, features: torch.Tensor, task_id: int | None) -> torch.Tensor:
        return self.sigma * self.cosine(features)

    def mixed(self, features: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self(features, None)


class LUCIR(Rehearsal, Method):
    name = "lucir"
    Config = LUCIRConfig
    traits = Traits(
        scenarios=frozenset({"class"}),
        distributed_scenarios=frozenset({"class"}),  # every phase is one fit(); imprinting, herding alike on every rank
        backbone_use="final_relu",  # backbones.remove_final_relu
        # The teacher and the imprinted vectors are rebuilt from the task-start state; the herding and the
        # finetuning's data follow the main phase, and are taken from the saved state when the finetuning phase is
        # resumed.
        within_task_checkpoints=True,
        graph_safe=True, health_checks=(MEMORY_CLASSES,))

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        check_new_classes_every_task("lucir", info)
        fewest = min(info.sizes[1:], default=cfg.hard_negatives)
        if cfg.hard_negatives > fewest:
            raise UserError(f"method.hard_negatives={cfg.hard_negatives} exceeds the {fewest} new classes of a task "
                            f"of {info.dataset}: use at most {fewest}")
        check_memory_holds_every_class(cfg.memory_size, info)
        if cfg.remove_final_relu:
            backbones.remove_final_relu(backbone)
        self.heads = CosineHead(backbone.feature_dim, info)
        self.memory = Memory(cfg.memory_size, info.input_shape, info.num_outputs, ctx.device, "herding")
        self._features_frozen = False  # class-balanced finetuning: the backbone stays in evaluation mode

    def train(self, mode: bool = True):
        super().train(mode)
        if mode and self._features_frozen:
            self.backbone.eval()
        return self

    def train_task(self, task):
        data = Split.cat([task.train, Split(*self.memory.stored())])
        # the old classes' weight vectors are left out: frozen
        params = [*self.backbone.parameters(), self.heads.sigma, self.heads.weights[task.id]]
        if task.id == 0:
            self.loop.fit(task, lambda batch: self.loss(batch, task.id), data=data, params=params)
        else:
            teacher = fresh_copy(self.backbone).eval().requires_grad_(False)
            if self.cfg.imprint:
                self.imprint(task)
            self.loop.fit(task, self.incremental_loss(task, teacher), data=data, params=params)
        if self.loop.resume_at is not None:
            # Resuming within the finetuning phase: the phase above was skipped, and the saved state holds this
            # task's exemplars and the backbone they were herded with (the finetuning leaves it unchanged).
            seen = self.heads.seen
            self.load_state_dict(self.loop.resume_at.state)
            self.heads.seen = seen
        else:
            per_class = self.cfg.memory_size // self.info.num_outputs if self.cfg.memory_budget == "per_class" else None
            self.memory.add_herding(task.train.x, task.train.y, task.train.t, self.features(task.train.x),
                                    per_class=per_class)
        if self.cfg.balanced_finetune and task.id > 0:
            self.balanced_finetune(task)

    def incremental_loss(self, task, teacher):
        old_classes = self.info.seen_outputs(task.id - 1)
        lam = adaptive_lambda(self.cfg.lambda_base, old_classes, self.info.sizes[task.id], self.cfg.adaptive_lambda)
        cfg = self.cfg

        def loss(batch):
            features = self.backbone(batch.x)
            cos = self.heads.cosine(features)
            with torch.no_grad():
                old_features = teacher(batch.x)
            return (F.cross_entropy(self.heads.sigma * cos, batch.y) + lam * less_forget(features, old_features)
                    + cfg.margin_weight * margin_ranking(cos, batch.y, old_classes, cfg.hard_negatives, cfg.margin))

        return loss

    def balanced_finetune(self, task):
        """The official class-balanced finetuning: the class weight vectors alone, on the exemplars alone."""
        old_classes = self.info.seen_outputs(task.id - 1)
        cfg = self.cfg
        params = list(self.heads.weights[: task.id + 1])

        def loss(batch):
            with torch.no_grad():
                features = self.backbone(batch.x)
            cos = self.heads.cosine(features)
            return (F.cross_entropy(self.heads.sigma.detach() * cos, batch.y)
                    + cfg.margin_weight * margin_ranking(cos, batch.y, old_classes, cfg.hard_negatives, cfg.margin))

        self._features_frozen = True
        try:
            self.loop.fit(task, loss, data=Split(*self.memory.stored()), params=params,
                          epochs=cfg.finetune_epochs,
                          optimizer=self.loop.make_optimizer(params, lr=cfg.finetune_lr),
                          milestones=cfg.finetune_milestones)
        finally:
            self._features_frozen = False

    @torch.no_grad()
    def imprint(self, task) -> None:
        """The new classes' weight vectors: each class's mean of normalised features, normalised, times the mean
        norm of the old classes' weight vectors."""
        phi = F.normalize(self.features(task.train.x), dim=1)
        start, n = self.info.offsets[task.id], self.info.sizes[task.id]
        sums = phi.new_zeros(n, phi.shape[1]).index_add_(0, task.train.y - start, phi)
        old_norm = torch.cat(list(self.heads.weights[: task.id])).norm(dim=1).mean()
        self.heads.weights[task.id].copy_(F.normalize(sums, dim=1) * old_norm)

    @torch.no_grad()
    def features(self, raw: torch.Tensor) -> torch.Tensor:
        """The backbone's features of uint8 samples, in evaluation mode and without augmentation, in float32."""
        was_training = self.training
        self.eval()
        out = []
        for part in raw.split(self.ctx.eval_batch_size):
            with self.ctx.autocast():
                out.append(self.backbone(self.info.view.eval(part)).float())
        self.train(was_training)
        return torch.cat(out)

    def capacity(self):
        return {**super().capacity(), **self.memory.capacity()}
