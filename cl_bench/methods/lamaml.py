"""La-MAML, look-ahead meta-learning for online continual learning (Gupta et al., NeurIPS 2020), as its
official code (montrealrobotics/La-MAML, model/lamaml.py for MNIST, model/lamaml_cifar.py for CIFAR).

Every weight w has its own learnable learning rate α (init alpha_init). Per glance at an incoming batch: starting
from the current weights, walk an inner trajectory over the batch, one SGD step w ← w - relu(α) ⊙ g per chunk
(`trajectory_chunks`; 0 is one sample per step, the MNIST code; the CIFAR code cuts the batch into 5 chunks and
steps w - α ⊙ g without the relu, `inner_relu=false`); after each step, evaluate the meta loss on the batch
together with a replay batch from the memory; then move α down the mean meta loss's gradient (lr outer_lr) and
the weights by w ← w - relu(α) ⊙ ∇w, with the new α (La-MAML's asynchronous update). First order by default,
as the MNIST runs (the inner gradients are constants, so α's gradient flows through the steps they scale);
second_order=true differentiates through them, as the CIFAR runs. The ablations of La-MAML's table are options:
C-MAML (`learn_lr=false`: α stays at alpha_init) and Sync (`sync_update=true`: the weights take a plain SGD step
of weight_lr on the meta gradient, the code's opt_wt). Both meta gradients are clipped to grad_clip_norm. The
memory is a reservoir written once per sample, in the first pass, during the batch's first glance (after that
glance drew its meta batch, as lamaml_base.push_to_mem at pass_itr 0), so the later glances may replay it;
replay draws are uniform with replacement, as getBatch's reshuffled picks are.

Batch norm: La-MAML's networks normalise with running statistics that no pass updates (`bn_training=False`; its
MLP and pc_cnn have no batch norm at all); here too every batch norm runs on its running statistics and keeps them,
so a fast-weight pass on one sample never moves them. On a backbone with batch norm that makes each a fixed
affine map: use a BN-free backbone (mlp, pc_cnn) as La-MAML does. Defaults are La-MAML's Permuted MNIST ones.
"""
from dataclasses import dataclass, replace
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from ..checks import Choice
from ..health import Check
from .online import OnlineConfig, OnlineMethod, clamped, clip_norm, sgd_step
from .parallel import BATCH_NORMS


class MemoryWrite(Choice):
    first_glance = "first_glance"
    after_glances = "after_glances"


@dataclass
class LaMAMLConfig(OnlineConfig):
    name: str = "lamaml"
    alpha_init: float = 0.15  # initial per-weight learning rate α
    outer_lr: float = 0.3  # SGD lr of the learning rates α (La-MAML's opt_lr)
    grad_clip_norm: float = 2.0  # the meta gradients of the weights and of α are each clipped to this norm
    inner_clip: float = 0.0  # clamp inner gradients to ±inner_clip; 0: none, as La-MAML's code in effect does
    second_order: bool = False  # differentiate through the inner gradients too (costly; the CIFAR runs)
    trajectory_chunks: int = 0  # inner steps per glance, each on a chunk of the batch; 0: one per sample (MNIST)
    inner_relu: bool = True  # inner step w - relu(α)·g (MNIST code); false: w - α·g (CIFAR code)
    learn_lr: bool = True  # false: α is fixed at alpha_init (C-MAML)
    sync_update: bool = False  # true: the weights step by weight_lr on the meta gradient (Sync, C-MAML)
    weight_lr: float = 0.1  # SGD lr of the weights under sync_update (the code's opt_wt); read only then
    # When the incoming batch enters the memory: during its first glance (La-MAML's push_to_mem, at pass_itr 0),
    # so that the meta batches of its later glances may draw it; or after its last glance (after_glances).
    memory_write: MemoryWrite = MemoryWrite.first_glance
    unused: ClassVar[tuple[str, ...]] = ("lr",)  # the weights step with their learned lrs α

    def checks(self):
        return [*super().checks(),
                *((key, getattr(self, key) > 0, "a positive number") for key in ("alpha_init", "outer_lr",
                                                                                  "grad_clip_norm", "weight_lr")),
                ("inner_clip", self.inner_clip >= 0, "0 or more"),
                ("trajectory_chunks", 0 <= self.trajectory_chunks <= self.batch_size,
                 f"0 (one sample a step) up to batch_size ({self.batch_size})"),
                ("weight_lr", self.sync_update or self.weight_lr == 0.1,
                 "0.1: it is read only with method.sync_update=true"),
                ("outer_lr", self.learn_lr or self.outer_lr == 0.3,
                 "0.3: the learning rates are fixed under method.learn_lr=false and it is not read")]


class MixedNet(nn.Module):
    """The backbone and the heads' mixed-task logits as one forward, to call with fast weights. foreign: the rows'
    mask of other tasks' outputs (foreign_outputs(t)), looked up once a glance rather than once a pass."""

    def __init__(self, backbone, heads):
        super().__init__()
        self.backbone, self.heads = backbone, heads

    def foreign_outputs(self, t):
        return self.heads.foreign[t] if self.heads.per_task else None

    def forward(self, x, foreign):
        return self.heads.masked(self.backbone(x), foreign)


RATES_AT_ZERO = 0.5  # rates_at_zero trips when at least this share of the learned learning rates is at or below 0


class LaMAML(OnlineMethod):
    name = "lamaml"
    Config = LaMAMLConfig
    rates_at_zero = Check("lamaml.rates_at_zero", "half or more of the learned learning rates are at or below zero, "
                                                  "which the relu clips to zero: those weights no longer learn",
                          "lower method.outer_lr (the learning rates' own lr) or raise method.alpha_init")
    traits = replace(OnlineMethod.traits, backbone_use="functional",  # fast weights by torch.func.functional_call
                     graph_safe=("its stream is a loop of its own (glances of one-sample inner steps, then the meta "
                                 "step), not the fit() steps StepGraph captures"),
                     health_checks=(*OnlineMethod.traits.health_checks, rates_at_zero))

    def __init__(self, cfg, backbone, info, ctx):
        super().__init__(cfg, backbone, info, ctx)
        named = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        self.weight_names = [n for n, _ in named]
        self.weights = [p for _, p in named]
        self.alpha = nn.ParameterList(nn.Parameter(torch.full_like(p, cfg.alpha_init)) for p in self.weights)

    def train(self, mode: bool = True):
        """Training mode everywhere but in batch norm, which keeps normalising with its running statistics
        without updating them (La-MAML's bn_training=False)."""
        super().train(mode)
        for m in self.modules():
            if isinstance(m, BATCH_NORMS):
                m.eval()
        return self

    def observe(self, batch, task, store):
        """The glances at the batch. La-MAML writes the batch into the memory during the first glance, after
        that glance drew its meta batch: the later glances may replay it (memory_write=first_glance)."""
        for glance in range(self.cfg.inner_steps):
            loss = self.glance(batch, task)
            if store and glance == (0 if self.cfg.memory_write == "first_glance" else self.cfg.inner_steps - 1):
                self.remember(batch)
                self.replay_ready = True
        return loss

    def glance(self, batch, task):
        net = MixedNet(self.backbone, self.heads)
        n = batch.y.shape[0]
        order = torch.randperm(n, device=batch.y.device, generator=self.ctx.generator)
        x, y, t = batch.x[order], batch.y[order], batch.t[order]
        meta_x, meta_y, meta_t = x, y, t
        if self.replay_ready:
            memory, _ = self.replay()
            meta_x, meta_y, meta_t = (torch.cat(p) for p in ((x, memory.x), (y, memory.y), (t, memory.t)))
        chunk = -(-n // self.cfg.trajectory_chunks) if self.cfg.trajectory_chunks else 1
        # La-MAML's inner trajectory over the batch, a chunk a step (split: one call a tensor, not one a chunk)
        foreign = net.foreign_outputs(t)
        xs, ys = x.split(chunk), y.split(chunk)
        trajectory = list(zip(xs, ys, [None] * len(ys) if foreign is None else foreign.split(chunk), strict=True))
        meta = (meta_x, meta_y, net.foreign_outputs(meta_t))
        meta_gradients = self.differentiated if self.cfg.second_order else self.first_order
        meta_loss, weight_grads, rate_grads = meta_gradients(net, trajectory, meta)
        weight_grads = clip_norm(weight_grads, self.cfg.grad_clip_norm)
        if self.cfg.learn_lr:
            sgd_step(list(self.alpha), clip_norm(rate_grads, self.cfg.grad_clip_norm), self.cfg.outer_lr)
        if self.cfg.sync_update:
            sgd_step(self.weights, weight_grads, self.cfg.weight_lr)
        else:
            with torch.no_grad():  # relu(α) as clamp_min(α, 0), which is what relu computes
                rates = torch._foreach_clamp_min(list(self.alpha), 0.0)
                sgd_step(self.weights, torch._foreach_mul(weight_grads, rates), 1.0)
        return meta_loss

    def differentiated(self, net, trajectory, meta):
        """The mean meta loss (detached) and its gradients in the weights and in α (None unless learn_lr), by
        autograd through the whole trajectory: second order differentiates the inner gradients too."""
        fast, steps, meta_losses = list(self.weights), self.steps(), []
        for x, y, foreign in trajectory:
            fast = self.inner_step(net, fast, x, y, foreign, steps)
            meta_losses.append(self.loss(net, fast, *meta))
        meta_loss = sum(meta_losses) / len(meta_losses)
        learned = list(self.alpha) if self.cfg.learn_lr else []
        grads = torch.autograd.grad(meta_loss, self.weights + learned, allow_unused=True, materialize_grads=True)
        return meta_loss.detach(), grads[: len(self.weights)], grads[len(self.weights):] or None

    def first_order(self, net, trajectory, meta):
        """differentiated() at first order, its chain rule along the trajectory written out in foreach ops. The
        inner gradients g_k are constants there, so fast_k = fast_k-1 + g_k·s (s = -rate(α)) passes the meta
        loss's gradient G_k = ∇L_k(fast_k) + G_k+1 back to fast_k-1 unchanged and G_k·g_k to s. Autograd runs
        these as a few ops per tensor and step; here they are a few per step, each pass's backward autograd's
        own, every sum in autograd's order (tests/test_launches.py checks the weights and α to the bit). The sweep
        back keeps each step's g_k and ∇L_k (autograd kept the g_k and every pass's activations instead)."""
        with torch.no_grad():
            rates = torch._foreach_clamp_min(list(self.alpha), 0.0) if self.cfg.inner_relu else list(self.alpha)
            steps = torch._foreach_neg(rates)
        fast, inner, outer, losses, one = list(self.weights), [], [], [], None
        for x, y, foreign in trajectory:
            loss = self.loss(net, fast, x, y, foreign)
            if one is None:  # the backwards' seeds, made once a glance: ones, and ∂(mean of the meta losses)/∂L_k
                one = torch.ones_like(loss)
                share = one / len(trajectory)  # as the mean's backward computes it
            grads = self.inner_gradients(loss, fast, one)
            with torch.no_grad():
                fast = [f.requires_grad_() for f in torch._foreach_add(fast, torch._foreach_mul(grads, steps))]
            loss = self.loss(net, fast, *meta)
            outer.append(torch.autograd.grad(loss, fast, share, allow_unused=True, materialize_grads=True))
            inner.append(grads)
            losses.append(loss)  # backpropagated already: summed below without a graph
        with torch.no_grad():
            back, step_grads = outer[-1], None  # G_K, and ∂/∂s summed from the last step back, as autograd adds
            for k in reversed(range(len(trajectory))):
                back = back if k == len(trajectory) - 1 else torch._foreach_add(outer[k], back)
                if self.cfg.learn_lr and step_grads is None:
                    step_grads = torch._foreach_mul(back, inner[k])
                elif self.cfg.learn_lr:
                    torch._foreach_add_(step_grads, torch._foreach_mul(back, inner[k]))
            rate_grads = None
            # Through s = -rate(α): relu passes α's gradient where α > 0 (sign 1), else 0; the product differs from
            # relu's backward only in a zero's sign (which moves no α) or where that gradient is not finite
            if self.cfg.learn_lr:
                rate_grads = torch._foreach_neg(step_grads)
                if self.cfg.inner_relu:
                    torch._foreach_mul_(rate_grads, torch._foreach_sign(rates))
            return sum(losses) / len(losses), back, rate_grads  # under no_grad: the mean loss, detached

    def steps(self) -> list[torch.Tensor]:
        """-rate(α) per weight tensor, the inner steps' multipliers: α does not change within a glance, so they are
        computed once per glance (one relu per tensor, not one per tensor and inner step). The relu stays per tensor:
        α's gradient flows through it, and relu's backward is one op where clamp_min's takes several."""
        rates = [F.relu(a) for a in self.alpha] if self.cfg.inner_relu else list(self.alpha)
        return torch._foreach_neg(rates)

    def loss(self, net, fast, x, y, foreign):
        """The cross-entropy of the net with the weights fast on (x, y); foreign: net.foreign_outputs of x's tasks."""
        with self.ctx.autocast():
            return F.cross_entropy(functional_call(net, dict(zip(self.weight_names, fast)), (x, foreign)), y)

    def inner_gradients(self, loss, fast, seed=None):
        """The inner loss's gradients in the fast weights, clamped to ±inner_clip if set; seed: its backward's seed
        (ones), if made already."""
        grads = torch.autograd.grad(loss, fast, seed, create_graph=self.cfg.second_order, allow_unused=True,
                                    materialize_grads=True)
        return clamped(grads, self.cfg.inner_clip) if self.cfg.inner_clip > 0 else grads

    def inner_step(self, net, fast, x, y, foreign, steps=None):
        """One SGD step of the fast weights on (x, y), differentiably: w + g·steps, steps = -rate(α) (self.steps())."""
        steps = self.steps() if steps is None else steps
        grads = self.inner_gradients(self.loss(net, fast, x, y, foreign), fast)
        # w - g·rate(α) as w + g·(-rate(α)), to the bit (IEEE negation is exact), in foreach ops, which autograd
        # differentiates as the per-tensor ones: the backward negates α's summed gradient once per glance, not each
        # step's
        return torch._foreach_add(list(fast), torch._foreach_mul(list(grads), steps))

    def health(self, task):
        found = super().health(task)
        with torch.no_grad():  # one host sync per task
            at_zero = float(sum((a <= 0).sum() for a in self.alpha)) / sum(a.numel() for a in self.alpha)
        if at_zero >= RATES_AT_ZERO:
            found.append(self.rates_at_zero.found(task.id, f"{at_zero:.0%} of the learned learning rates are at or "
                                                           "below zero"))
        return found

    def variant(self):
        """La-MAML's ablations go by their own names in its table: C-MAML (fixed α, synchronous) and Sync-La-MAML."""
        if self.cfg.sync_update:
            return "sync" if self.cfg.learn_lr else "c-maml"
        return None if self.cfg.learn_lr else "fixed lr"

    def capacity(self):
        return {**super().capacity(), "learning_rates": sum(a.numel() for a in self.alpha)}
