"""iCaRL: Incremental Classifier and Representation Learning (Rebuffi, Kolesnikov, Sperl & Lampert, CVPR 2017).

Each task trains the network on the new data together with the stored exemplars (Algorithm 3). Every output is
a sigmoid trained with binary cross-entropy: the new classes' targets are the one-hot labels, the old classes'
targets the sigmoid outputs of the network as it was before the task (distillation). After training, the
memory (policy `herding` of memory.py) keeps memory_size // classes seen exemplars per class: the new classes'
picked by herding on the L2-normalised features (Algorithm 4), the old ones cut to their first picks
(Algorithm 5). Classification is by the nearest mean of exemplars (Algorithm 1): a sample goes to the class
whose mean of normalised exemplar features, renormalised, is closest to its normalised feature; predict()
returns the negative squared distances as logits.

Where the paper is silent, as the authors' code (srebuffi/iCaRL, iCaRL-TheanoLasagne/main_cifar_100_theano.py):
- the class means average the exemplars' features and those of the exemplars flipped left-right; here where
  the dataset's training augmentation flips (split_cifar*), method.mean_flips=always|never otherwise;
- herding picks distinct samples, on the mean of the normalised features (not renormalised), with the model
  in evaluation mode and without augmentation; FACIL and Mammoth do the same;
- the loss is the mean over the batch and the outputs; the paper's sum runs over the classes seen so far,
  the authors' code averages over all 100 outputs, the future ones with target 0 (method.loss_outputs=all; so
  does Mammoth's models/icarl.py at the commit docs/parity.md pins, with flipped exemplars in its class means),
  which makes each output's gradient seen/all times as large at the same lr: lr 2.0 was tuned with it, and a
  network without batch norm (backbone=mlp) may need a lower method.lr;
- the exemplars per class are memory_size // classes seen (Algorithm 2's K/t; the authors' code rounds up),
  so the memory never exceeds memory_size;
- the teacher is the whole network, copied and frozen at the start of each task, run in evaluation mode.
Defaults are the paper's CIFAR-100 settings (Sec. 4): 70 epochs, batch 128, lr 2.0 divided by 5 after epochs
49 and 63, weight decay 1e-5, memory 2000; momentum 0.9 as the authors' code.
"""
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..checks import Choice
from ..data.scenarios import Split
from ..health import MEMORY_CLASSES
from .base import Method, MethodConfig, Traits, fresh_copy
from .memory import Memory, Rehearsal, check_memory_holds_every_class, check_new_classes_every_task


class Classifier(Choice):
    nme = "nme"  # nearest mean of exemplars (the paper's iCaRL)
    cnn = "cnn"  # the network's own sigmoid outputs (the paper's "hybrid1")


class MeanFlips(Choice):
    augment = "augment"  # exemplars and their flips where the dataset trains with flips, else exemplars only
    always = "always"
    never = "never"


class LossOutputs(Choice):
    seen = "seen"  # the classes seen so far (the paper's sum, Mammoth)
    all = "all"  # every output of the label space, future classes with target 0 (the authors' code)


@dataclass
class ICaRLConfig(MethodConfig):
    name: str = "icarl"
    epochs: int = 70  # per task (paper, Sec. 4)
    batch_size: int = 128
    lr: float = 2.0
    weight_decay: float = 1e-5
    lr_milestones: list[int] = field(default_factory=lambda: [49, 63])  # lr divided by 5 after these epochs
    lr_gamma: float = 0.2
    memory_size: int = 2000  # K: exemplars kept over every class (paper's CIFAR-100 setting)
    classifier: Classifier = Classifier.nme  # what predict() classifies by
    mean_flips: MeanFlips = MeanFlips.augment  # whether the class means include the flipped exemplars
    loss_outputs: LossOutputs = LossOutputs.seen  # the outputs the binary cross-entropy averages over

    def checks(self):
        return [*super().checks(), ("memory_size", self.memory_size >= 1, "at least 1")]


class ICaRL(Rehearsal, Method):
    name = "icarl"
    Config = ICaRLConfig
    traits = Traits(scenarios=frozenset({"class"}),
                    distributed_scenarios=frozenset({"class"}),  # training is one fit(); herding alike on every rank
                    graph_safe=True, health_checks=(MEMORY_CLASSES,))

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        check_new_classes_every_task("icarl", info)
        check_memory_holds_every_class(cfg.memory_size, info)
        self.memory = Memory(cfg.memory_size, info.input_shape, info.num_outputs, ctx.device, "herding")
        # Each class's mean of normalised exemplar features, renormalised: the nearest-mean classifier.
        self.register_buffer("class_means", torch.zeros(info.num_outputs, backbone.feature_dim, device=ctx.device))

    def train_task(self, task):
        exemplars = Split(*self.memory.stored())
        self.loop.fit(task, self.distillation_loss(task), data=Split.cat([task.train, exemplars]))
        self.memory.add_herding(task.train.x, task.train.y, task.train.t, self.features(task.train.x))
        self.update_class_means()

    def distillation_loss(self, task):
        """Binary cross-entropy on every output in use: one-hot targets for the new classes, the frozen
        pre-task network's sigmoid outputs for the old ones."""
        outputs = self.info.num_outputs if self.cfg.loss_outputs == "all" else self.info.seen_outputs(task.id)
        old_outputs = self.info.offsets[task.id]
        teacher = None
        if task.id > 0:
            teacher = (fresh_copy(self.backbone).eval().requires_grad_(False),
                       fresh_copy(self.heads).eval().requires_grad_(False))

        def loss(batch):
            logits = self.heads.head(self.backbone(batch.x))[:, :outputs]
            targets = F.one_hot(batch.y, outputs).to(logits.dtype)
            if teacher is not None:
                with torch.no_grad():
                    old = teacher[1].head(teacher[0](batch.x))[:, :old_outputs]
                targets[:, :old_outputs] = torch.sigmoid(old).to(logits.dtype)
            return F.binary_cross_entropy_with_logits(logits, targets)

        return loss

    @torch.no_grad()
    def features(self, raw: torch.Tensor, flip: bool = False) -> torch.Tensor:
        """The backbone's features of uint8 samples, in evaluation mode and without augmentation (flipped
        left-right when asked), in float32."""
        was_training = self.training
        self.eval()
        out = []
        for part in raw.split(self.ctx.eval_batch_size):
            x = self.info.view.eval(part)
            with self.ctx.autocast():
                out.append(self.backbone(x.flip(3) if flip else x).float())
        self.train(was_training)
        return torch.cat(out)

    def flips_in_means(self) -> bool:
        if self.cfg.mean_flips == "augment":
            return self.info.view.augment
        return self.cfg.mean_flips == "always"

    @torch.no_grad()
    def update_class_means(self) -> None:
        """Each stored class's mean of normalised exemplar features (averaged with that of the flipped exemplars
        where flips are used), renormalised."""
        x, y, _ = self.memory.stored()
        phi = F.normalize(self.features(x), dim=1)
        if self.flips_in_means():
            phi = (phi + F.normalize(self.features(x, flip=True), dim=1)) / 2
        sums = torch.zeros_like(self.class_means).index_add_(0, y, phi)
        self.class_means.copy_(F.normalize(sums, dim=1))  # classes without exemplars stay 0

    def predict(self, x, task_id):
        """Nearest mean of exemplars: logits are the negative squared distances of the normalised features to the
        class means (method.classifier=cnn: the network's outputs)."""
        if self.cfg.classifier == "cnn":
            return self(x, task_id)
        phi = F.normalize(self.backbone(x).float(), dim=1)
        return -torch.cdist(phi, self.class_means[: self.heads.seen]).pow(2)

    def capacity(self):
        mem = sum(b.numel() * b.element_size() for b in self.memory.buffers())
        return {**super().capacity(), "memory_size": self.memory.size, "memory_bytes": mem}
