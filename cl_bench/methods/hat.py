"""HAT: hard attention to the task (Serrà, Surís, Miron & Karatzoglou, "Overcoming catastrophic forgetting with
hard attention to the task", ICML 2018), as the official code (joansj/hat: src/approaches/hat.py,
src/networks/mlp_hat.py and alexnet_hat.py) trains it.

Every conv / linear layer of the backbone gets a task embedding per unit (nn/hat.py); task t's forward scales
each unit by a_t = σ(s·e_t). While t trains, s grows within every epoch from 1/s_max towards s_max over the
batches; evaluation uses s_max. The loss adds c·Σ a_t(1 - a_{<t}) / Σ(1 - a_{<t}) over all layers, which keeps
t from claiming units earlier tasks left free. After backward, in the official order: each weight's gradient
is multiplied by 1 - min(a_{<t} of its output unit, a_{<t} of its input unit) and each bias's by
1 - a_{<t} of its unit; the embeddings' gradients are compensated by s_max·[cosh(clamp(s·e)) + 1] /
(s·[cosh(e) + 1]); the gradient norm is clipped; after the step the embeddings are clamped to ±thres_emb.
At the end of the task a_{≤t} = max(a_{<t}, σ(s_max·e_t)). Heads are per task and not masked.

What the paper leaves to the code, and what the code does (the defaults here):
- s within an epoch follows the code: s = 1/s_max + (s_max - 1/s_max)·i/N with i the index of the batch's
  first sample and N the task's training samples (the last batch stays below s_max); method.anneal=paper
  gives the paper's Eq. 3 over the batch index b = 1..B instead, reaching s_max at the last batch.
- plain SGD (no momentum, no weight decay), lr 0.05, batches of 64, up to 200 epochs; the lr is divided by 3
  when the validation loss (cross-entropy plus the regulariser, at s_max) has not improved for 5 epochs, the
  optimiser restarted, the task ended when the lr falls below 1e-4, and the best-validation model restored
  at its end (method.lr_schedule=milestones runs the project's fixed milestones instead, keeping the last model).
- the official networks have no batch norm, and their convs have biases: a batch norm that follows a conv in
  our backbones is left out and the conv gets a bias (method.batch_norm=per_task keeps one batch norm per task
  instead, the usual way to fit HAT to a batch-normalised net; old tasks' batch norms are never touched).
- the official networks' dropout belongs to their architecture, not to HAT: backbone=hat_mlp is mlp_hat's 2×2000
  MLP with its dropout (0.2 on the input, 0.5 after each hidden layer); the other backbones have none.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..backbones.base import Capability
from ..checks import Choice
from ..errors import UserError
from ..health import Check
from ..nn import hat
from .base import Method, MethodConfig, Traits

USED = 0.5  # capacity(): a unit counts as used when its attention is at least this (our reporting threshold)


class Anneal(Choice):
    official = "official"  # joansj/hat: s from the batch's first sample index over the task's samples
    paper = "paper"  # Eq. 3 of the paper: s from the batch index over the number of batches, s_max at the last


class LRSchedule(Choice):
    plateau = "plateau"  # the official: ÷lr_factor after lr_patience epochs without a better validation loss
    milestones = "milestones"  # the project's: ×lr_gamma at method.lr_milestones, every epoch run


class BatchNorm(Choice):
    none = "none"  # the official networks': no batch norm (a conv that one followed gets a bias instead)
    per_task = "per_task"  # one batch norm per task before the attention


@dataclass
class HATConfig(MethodConfig):
    name: str = "hat"
    epochs: int = 200  # the official run.py's nepochs; the plateau schedule usually ends a task well before
    batch_size: int = 64  # sbatch
    lr: float = 0.05  # the official SGD lr
    momentum: float = 0.0  # the official optimiser is plain SGD
    s_max: float = 400.0  # the attention's largest scale (the paper's grid search chose 400)
    c: float = 0.75  # weight of the attention regulariser (lamb; the paper's grid search chose 0.75)
    clipgrad: float = 10000.0  # max norm of the gradient (after masking and compensation)
    thres_cosh: float = 50.0  # |s·e| is clamped to this inside cosh of the embedding gradient compensation
    thres_emb: float = 6.0  # embeddings are clamped to ±this after every step
    anneal: Anneal = Anneal.official  # how s grows over an epoch's batches: see Anneal
    lr_schedule: LRSchedule = LRSchedule.plateau  # see LRSchedule; plateau selects on the validation split
    lr_factor: float = 3.0  # plateau: the lr is divided by this when the validation loss stalls
    lr_patience: int = 5  # plateau: epochs without a better validation loss before the lr drops
    lr_min: float = 1e-4  # plateau: the task's training ends when the lr falls below this
    batch_norm: BatchNorm = BatchNorm.none  # what becomes of the backbone's batch norms: see BatchNorm

    def checks(self):
        return [*super().checks(), ("weight_decay_on", self.weight_decay_on == "all",
                                    "all: HAT decays the parameters it owns by hand, as joansj/hat"),
                ("s_max", self.s_max >= 1, "a number of at least 1 (s grows from 1/s_max)"),
                ("c", self.c >= 0, "0 or more"), ("clipgrad", self.clipgrad > 0, "a positive number"),
                ("thres_cosh", self.thres_cosh > 0, "a positive number"),
                ("thres_emb", self.thres_emb > 0, "a positive number"),
                ("lr_factor", self.lr_factor > 1, "a number above 1"),
                ("lr_patience", self.lr_patience >= 1, "at least 1"), ("lr_min", self.lr_min > 0, "a positive number"),
                ("lr_milestones", self.lr_schedule == "milestones" or not self.lr_milestones,
                 "[] with method.lr_schedule=plateau (the official schedule), or set method.lr_schedule=milestones")]


def anneal_s(step: int, steps: int, batch_size: int, samples: int, s_max: float, formula: str) -> float:
    """s for batch `step` (0-based) of an epoch of `steps` batches over `samples` training samples."""
    if formula == "paper":
        fraction = step / (steps - 1) if steps > 1 else 0.0
    else:
        fraction = step * batch_size / samples
    return 1 / s_max + (s_max - 1 / s_max) * fraction


def compensation(embedding: torch.Tensor, s: float, s_max: float, thres_cosh: float) -> torch.Tensor:
    """The factor the embeddings' gradient is multiplied by: s_max·[cosh(clamp(s·e)) + 1] / (s·[cosh(e) + 1])."""
    num = torch.cosh(torch.clamp(s * embedding, -thres_cosh, thres_cosh)) + 1
    return s_max / s * num / (torch.cosh(embedding) + 1)


def attention_regulariser(masks: list[torch.Tensor], cumulative: list[torch.Tensor]) -> torch.Tensor:
    """Σ_l Σ_i a_t(1 - a_{<t}) / Σ_l Σ_i (1 - a_{<t}): the share of the units earlier tasks left free that task t
    claims (with nothing learned yet, a_{<t} = 0 and it is the mean attention)."""
    free = [1 - c for c in cumulative]
    num = sum((m * f).sum() for m, f in zip(masks, free))
    den = sum(f.sum() for f in free)
    return torch.where(den > 0, num / den, torch.zeros_like(num))  # every unit taken: nothing left to claim


class HAT(Method):
    name = "hat"
    Config = HATConfig
    path_closed = Check("hat.path_closed", "a task's attention is off (below 0.5) for every unit of some layer: its "
                                           "path is cut there", "lower method.c (the attention regulariser's weight)")
    exhausted = Check("hat.exhausted", "every unit of every layer is in use with tasks to come: no weight is left "
                                       "for them to change", "raise method.c (sparser attention per task)")
    traits = Traits(
        scenarios=frozenset({"task"}),
        needs=frozenset({Capability.chain}),  # a unit's mask reads the previous layer's (nn/hat.py)
        backbone_use="hat",  # nn/hat.py
        within_task_checkpoints=("its official lr schedule follows the validation loss across epochs and restores "
                                 "the best model at the task's end, state a within-task checkpoint does not hold"),
        graph_safe="its gates' scale anneals with the step's index, a number a captured step would hold fixed",
        health_checks=(path_closed, exhausted))

    def __init__(self, cfg, backbone, info, ctx):
        layers = hat.convert(backbone, info.num_tasks, cfg.s_max, cfg.batch_norm == "per_task")
        super().__init__(cfg, backbone, info, ctx)
        self.layers = layers
        self.layer_names = [n for n, m in backbone.named_modules() if isinstance(m, hat.HATLayer)]
        wrapped = {id(p) for layer in layers for p in layer.parameters()}
        loose = [n for n, p in backbone.named_parameters() if id(p) not in wrapped]
        if loose:
            raise UserError(f"hat cannot mask the backbone's parameters {', '.join(loose)}")

    def forward(self, x, task_id):
        hat.set_task(self.layers, task_id)
        return self.heads(self.backbone(x), task_id)

    # --- training -----------------------------------------------------------------------------------
    def train_task(self, task):
        cfg = self.cfg
        if cfg.lr_schedule == "plateau" and not len(task.val):
            raise UserError("hat's official lr schedule follows the validation loss: set data.val_fraction above 0 "
                            "or method.lr_schedule=milestones")
        t = task.id
        masks = {} if t == 0 else {p: m for layer in self.layers for p, m in layer.gradient_masks().items()}
        masked, embeddings, own = self._task_parameters(t)
        params = masked + embeddings + own
        # Weight decay (none in the official) is added by hand to the masked weights' gradients before their mask,
        # so that it never moves what earlier tasks use; the optimiser decays the task's own head and batch norms;
        # the embeddings are never decayed.
        opt = self.loop.make_optimizer([{"params": masked + embeddings, "weight_decay": 0.0},
                                   {"params": own, "weight_decay": cfg.weight_decay}])
        steps = self.loop.steps_per_epoch(task.train)
        samples = len(task.train)
        current = {"s": 1.0}

        def loss(batch):
            s = anneal_s(batch.step % steps, steps, cfg.batch_size, samples, cfg.s_max, cfg.anneal)
            current["s"] = s
            hat.set_scale(self.layers, s)
            ce = F.cross_entropy(self(batch.x, t), batch.y - task.offset)
            return ce + cfg.c * self.regulariser(t, s)

        def after_backward():
            with torch.no_grad():
                for p in masked:
                    if p.grad is None:
                        continue
                    if cfg.weight_decay:
                        p.grad.add_(p.detach(), alpha=cfg.weight_decay)
                    if p in masks:
                        p.grad.mul_(masks[p])
                for e in embeddings:
                    if e.grad is not None:
                        e.grad.mul_(compensation(e.detach(), current["s"], cfg.s_max, cfg.thres_cosh))
            torch.nn.utils.clip_grad_norm_(params, cfg.clipgrad)

        def after_step(_):
            with torch.no_grad():
                for e in embeddings:
                    e.clamp_(-cfg.thres_emb, cfg.thres_emb)

        after_epoch = self._plateau(task, opt) if cfg.lr_schedule == "plateau" else None
        self.loop.fit(task, loss, params=params, optimizer=opt, after_backward=after_backward,
                      after_step=after_step, after_epoch=after_epoch)
        if after_epoch is not None:
            after_epoch.restore_best()
        self._accumulate_attention(t)

    def _task_parameters(self, t: int) -> tuple[list, list, list]:
        """What task t trains: the masked layers' weights and biases, the task embeddings, and the task's own head
        and batch norms."""
        embeddings = [layer.embedding for layer in self.layers]
        masked = [p for layer in self.layers for p in (layer.layer.weight, layer.layer.bias) if p is not None]
        own = [*self.heads.heads[t].parameters()]
        for layer in self.layers:
            if layer.bns is not None:
                own += [*layer.bns[t].parameters()]
        return masked, embeddings, own

    @torch.no_grad()
    def _accumulate_attention(self, t: int) -> None:
        """a_{<=t} = max(a_{<t}, sigma(s_max e_t)): what later tasks' gradient masks protect."""
        for layer in self.layers:
            layer.cumulative.copy_(torch.maximum(layer.cumulative, layer.attention(t, self.cfg.s_max)))

    def regulariser(self, task_id: int, s: float | torch.Tensor) -> torch.Tensor:
        return attention_regulariser([layer.attention(task_id, s) for layer in self.layers],
                                     [layer.cumulative for layer in self.layers])

    def _plateau(self, task, opt):
        """The official schedule as fit()'s after_epoch: the validation loss after every epoch; a better one keeps
        a copy of the model, 5 epochs without one divide the lr by 3 and restart the optimiser, an lr below lr_min
        ends the task. restore_best() puts the best copy back (the model before training if none was better)."""
        cfg = self.cfg
        state = {"best": float("inf"), "patience": cfg.lr_patience, "lr": cfg.lr,
                 "model": {k: v.clone() for k, v in self.state_dict().items()}}

        def after_epoch(epoch):
            val = self.validation_loss(task)  # the epoch's one host sync
            if val < state["best"]:
                state.update(best=val, patience=cfg.lr_patience,
                             model={k: v.clone() for k, v in self.state_dict().items()})
                return False
            state["patience"] -= 1
            if state["patience"] > 0:
                return False
            state["lr"] /= cfg.lr_factor
            if state["lr"] < cfg.lr_min:
                return True
            state["patience"] = cfg.lr_patience
            for group in opt.param_groups:  # the official builds a new optimiser: the lr changes, its state goes
                group["lr"] = state["lr"]
            opt.state.clear()
            return False

        @torch.no_grad()
        def restore_best():
            live = self.state_dict()
            for k, v in state["model"].items():
                live[k].copy_(v)

        after_epoch.restore_best = restore_best
        return after_epoch

    @torch.no_grad()
    def validation_loss(self, task) -> float:
        """Mean cross-entropy on the task's validation split plus c times the regulariser, at s_max (what the
        official code compares between epochs)."""
        self.eval()
        total = torch.zeros((), device=self.ctx.device)
        for raw, y, t in task.val.batches(self.ctx.eval_batch_size):
            with self.ctx.autocast():
                logits = self(self.info.view.eval(raw, t), task.id)
            total += F.cross_entropy(logits.float(), y - task.offset, reduction="sum")
        return (total / len(task.val) + self.cfg.c * self.regulariser(task.id, self.cfg.s_max)).item()

    # --- cost ---------------------------------------------------------------------------------------
    @torch.no_grad()
    def capacity(self):
        learned = int(self.tasks_learned)
        weights = sum(layer.weight_count() for layer in self.layers)
        # A weight counts as used when min(a_out, a_in) of a_{≤t} is at least USED: later tasks barely move it.
        used = sum(int((layer.gradient_masks()[layer.layer.weight] <= 1 - USED).sum()) for layer in self.layers)
        units = sum(layer.units for layer in self.layers)
        return {
            "params_total": sum(p.numel() for p in self.parameters()),
            "units_used_fraction": {n: (layer.cumulative >= USED).float().mean().item()
                                    for n, layer in zip(self.layer_names, self.layers)},
            "units_used_per_task": [sum(int((layer.attention(t, self.cfg.s_max) >= USED).sum())
                                        for layer in self.layers) / units for t in range(learned)],
            "weights_used_fraction": used / weights,
        }

    def mask_keys(self):
        return {f"backbone.{n}.cumulative" for n in self.layer_names}

    def health(self, task):
        """From the task's attention at s_max and the accumulated one (a unit is on at USED)."""
        found = []
        closed = [n for n, layer in zip(self.layer_names, self.layers)
                  if not bool((layer.attention(task.id, self.cfg.s_max) >= USED).any())]
        if closed:
            found.append(self.path_closed.found(task.id, f"no unit on in {len(closed)} of {len(self.layers)} layers "
                                                         f"({', '.join(closed[:4])})"))
        later = self.info.num_tasks - 1 - task.id
        if later and all(bool((layer.cumulative >= USED).all()) for layer in self.layers):
            found.append(self.exhausted.found(task.id, f"all {sum(layer.units for layer in self.layers)} units are in "
                                                       f"use with {later} tasks to come"))
        return found
