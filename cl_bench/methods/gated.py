"""Conditional channel gated networks (Abati et al., CVPR 2020).

Every conv of the backbone is shared by all tasks; each task has, per gated unit, a gating module that picks per
sample which kernels run, its own batch norms and a head (nn/gated.py places the gates after the activations, as
the paper). Task t trains its gates, batch norms and head and the shared kernels, with an L1 sparsity term on its
gates. Afterwards every kernel its gates fire for on any validation sample is frozen (relevance threshold 0) and
the rest re-initialised; task t's gates keep only kernels frozen by then, so its path never reads a weight a
later task may change: old tasks are bit-for-bit unchanged.

Without a task id (class scenario), every seen task's path runs over the input, stacked along the batch
dimension; a task classifier (an MLP over the concatenated pooled features of all paths) picks the task, whose
head then gives the class. As the paper (eq. 3: log p(y | x, t) + log p(t | x)), it is trained jointly with the
task: while task t is learned, the loss adds the task classifier's cross-entropy over the paths of tasks 0..t,
on the current batch and on a rehearsal batch of the episodic memory (C slots; at the end of task t every task
keeps C/(t+1) random samples), re-sampled so that task labels are uniform; earlier paths are frozen, so its
gradient shapes the current path and the classifier. task_classifier_fit=after_task fits the classifier after
each task instead, on detached features (the project's earlier version, kept for comparison).

Where the paper is silent, chosen here: the task classifier's inputs from the current path (current and
rehearsal batch together) come from a second forward on the path's running batch-norm statistics, left as they are
(task_loss_norm=running), so that the task's statistics stay its own and the classifier sees the normalisation it
meets in evaluation (a first version normalised only the rehearsal batch so; the classifier then told the tasks
apart by that, and named no sample the new task right after it was learned); that forward samples the current
path's gates as training does (task_loss_gates=sampled: the official code's training forward, as its description
reads, draws every gate from the Gumbel-sigmoid), and evaluation's hard gates are an option (task_loss_gates=hard,
measured in REPRODUCING.md: it names the newest task more often right after it is learned, without raising RA at
the CPU schedule). The task loss weighs the current batch 1/(t+1) and the rehearsal batch t/(t+1), the uniform
task distribution; one optimiser for the path and the classifier (the classifier's lr: task_classifier_lr, default
method.lr); the sparsity term reads the gates of the current batch's class-loss forward. Each of these choices'
other readings is an option, measured one at a time in REPRODUCING.md. offline_bound_epochs is a diagnostic: the
same classifier fitted offline on every seen task's whole training data, the upper bound the paths' features allow.
"""
import copy
import dataclasses
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ..backbones.base import Capability
from ..checks import Choice
from ..data.scenarios import Split
from ..health import MEMORY_CLASSES, Check
from ..nn import gated
from . import parallel
from .base import Method, MethodConfig, Optimizer, Traits
from .heads import Heads
from .memory import Memory


class TaskClassifierFit(Choice):
    joint = "joint"  # the paper: trained with each task, its loss beside the class loss (eq. 3)
    after_task = "after_task"  # fitted after each task on detached features of the frozen paths


class TaskLossGates(Choice):
    """The current path's gates in the task classifier's forward of the joint objective."""
    sampled = "sampled"  # Gumbel-sigmoid samples, as the class loss's forward
    hard = "hard"  # thresholded at logit 0 as in evaluation (straight-through gradient of the noiseless sigmoid)


class GateNoise(Choice):
    logistic = "logistic"  # the difference of two Gumbel(0, 1) draws: the binary Gumbel-softmax (paper)
    gumbel = "gumbel"  # one Gumbel(0, 1) draw: lit-leo/cgate's gates (blocks.py), about 63% open at the start


class TaskLossNorm(Choice):
    """The current path's batch norms in the task classifier's forward of the joint objective."""
    running = "running"  # its running statistics, left as they are: the normalisation evaluation applies
    batch = "batch"  # the statistics of the current and rehearsal batch together, leaving the running ones as they are


@dataclass
class GatedConfig(MethodConfig):
    name: str = "gated"
    optimizer: Optimizer = Optimizer.adam
    lr: float = 0.001
    sparsity: float = 0.5  # λ_s, weight of the gates' L1 term λ_s/L Σ_l ‖G_t^l‖₁ / c_out^l over the gated units
    sparsity_warmup_epochs: int = 0  # first epochs of each task trained without the sparsity term (cgate: 10-20)
    grad_clip: float | None = None  # clip the gradient norm of each step (cgate: 1.0); None: no clipping
    tau: float = 2 / 3  # temperature of the Gumbel-sigmoid gate sampling in training
    # the noise added to a gate's logit in training: logistic (two Gumbel draws' difference, the binary
    # Gumbel-softmax of the paper), or gumbel (one draw, as lit-leo/cgate; docs/parity.md measures both: on Split
    # MNIST's learning row gumbel left fewer gates open in evaluation, froze about 150 of 300 kernels after the first
    # task against about 200, and its last task scored 97% against 89-94%)
    gate_noise: GateNoise = GateNoise.logistic
    gate_hidden: int = 16  # hidden units of each gating module (with batch norm and ReLU)
    gate_open_bias: float | None = None  # None: gate logits from the default init (paper); a number: fc2's bias
    # The per-task batch norms' eps and momentum; None: the backbone's (torch's 1e-5 and 0.1). lit-leo/cgate's are
    # 1.0 and 1.0: src/freezable_layers.py:23 passes affine and track_running_stats positionally into eps and
    # momentum (its parity row sets both; docs/parity.md measures the effect).
    norm_eps: float | None = None
    norm_momentum: float | None = None
    freeze_threshold: float = 0.0  # a kernel is frozen when its gate fires on more than this fraction of val
    memory_size: int = 500  # class scenario: C, the episodic memory's slots, shared equally by the tasks seen
    replay_batch_size: int = 0  # class scenario, joint: rehearsal samples per step; 0 means batch_size
    task_classifier_hidden: int = 64  # class scenario: hidden ReLU units of the task classifier
    task_classifier_fit: TaskClassifierFit = TaskClassifierFit.joint
    task_classifier_epochs: int = 5  # after_task only: passes over the task's data plus the memory
    task_classifier_lr: float | None = None  # the task classifier's learning rate; None: method.lr
    # joint only: the choices the paper leaves open, each measured one at a time in REPRODUCING.md
    task_loss_gates: TaskLossGates = TaskLossGates.sampled
    task_loss_norm: TaskLossNorm = TaskLossNorm.running
    task_loss_current_weight: float | None = None  # the current batch's share of the task loss; None: 1/(t+1)
    task_classifier_refit_epochs: int = 0  # passes over the task's data plus the memory once the path is frozen
    task_loss_warmup_epochs: int = 0  # first epochs of each task trained without the task loss (the path first)
    # Diagnostic, off by default: after each task, a fresh task classifier of the same shape fitted offline on the
    # frozen paths' features of every seen task's full training data (this many epochs); its validation accuracy is
    # the upper bound the paths' features allow (capacity: val_task_accuracy_offline). Predictions never read it.
    offline_bound_epochs: int = 0

    def checks(self):
        return [*super().checks(), ("sparsity", self.sparsity >= 0, "0 or more"),
                ("sparsity_warmup_epochs", self.sparsity_warmup_epochs >= 0, "0 or more"),
                ("grad_clip", self.grad_clip is None or self.grad_clip > 0, "null or a positive number"),
                ("tau", self.tau > 0, "a positive number"), ("gate_hidden", self.gate_hidden >= 1, "at least 1"),
                ("freeze_threshold", 0 <= self.freeze_threshold < 1, "a fraction in [0, 1)"),
                ("norm_eps", self.norm_eps is None or self.norm_eps > 0, "null (the backbone's) or a positive number"),
                ("norm_momentum", self.norm_momentum is None or 0 <= self.norm_momentum <= 1,
                 "null (the backbone's) or a fraction in [0, 1]"),
                ("memory_size", self.memory_size >= 1, "at least 1"),
                ("replay_batch_size", self.replay_batch_size >= 0, "0 (batch_size) or more"),
                ("task_classifier_hidden", self.task_classifier_hidden >= 1, "at least 1"),
                ("task_classifier_epochs", self.task_classifier_epochs >= 1, "at least 1"),
                ("task_classifier_lr", self.task_classifier_lr is None or self.task_classifier_lr > 0,
                 "null (method.lr) or a positive number"),
                ("task_loss_current_weight", self.task_loss_current_weight is None
                 or 0 <= self.task_loss_current_weight <= 1, "null (1/(t+1)) or a fraction in [0, 1]"),
                ("task_classifier_refit_epochs", self.task_classifier_refit_epochs >= 0, "0 or more"),
                ("task_loss_warmup_epochs", self.task_loss_warmup_epochs >= 0, "0 or more"),
                ("offline_bound_epochs", self.offline_bound_epochs >= 0, "0 (off) or more"),
                *((f.name, self.task_classifier_fit == fit or getattr(self, f.name) == f.default,
                   f"{f.default}: it is read with task_classifier_fit={fit} only")
                  for f in dataclasses.fields(self) for fit, names in READ_BY.items() if f.name in names)]


# The options that only one way of fitting the task classifier reads: set with the other, an error.
READ_BY = {"after_task": ("task_classifier_epochs",),
           "joint": ("task_loss_gates", "task_loss_norm", "task_loss_current_weight", "replay_batch_size",
                     "task_classifier_refit_epochs", "task_loss_warmup_epochs")}


class Gated(Method):
    name = "gated"
    Config = GatedConfig
    path_closed = Check("gated.path_closed", "a task's gates fire for no kernel of some unit: its path is cut there",
                        "lower method.sparsity (the gates' L1 weight) or start it later "
                        "(method.sparsity_warmup_epochs)")
    all_frozen = Check("gated.all_frozen", "every kernel is frozen with tasks to come: they can only reuse old ones",
                       "raise method.sparsity (fewer kernels fire) or method.freeze_threshold (a kernel must fire "
                       "on more of the validation samples to be frozen)")
    traits = Traits(
        scenarios=frozenset({"task", "class"}),
        # Every phase is a fit(); the class scenario's rehearsal draws are made alike on every rank and sharded, and
        # relevance (which kernels freeze) is counted over every rank's share of the validation batches.
        distributed_scenarios=frozenset({"task", "class"}),
        needs=frozenset({Capability.conv_bn}),  # a gate per conv and a batch norm per task behind it (nn/gated.py)
        backbone_use="gated",  # nn/gated.py
        # its warm-ups end between captures (LoopOptions.graph_key); frozen rows are masked in place
        graph_safe=True,
        health_checks=(path_closed, all_frozen, MEMORY_CLASSES))  # the memory's in the class scenario

    def __init__(self, cfg, backbone, info, ctx):
        layers = gated.convert(backbone, info.num_tasks, cfg.gate_hidden, cfg.tau, cfg.gate_open_bias,
                               str(cfg.gate_noise))
        super().__init__(cfg, backbone, info, ctx)
        self.layers = layers
        self.norms = gated.norms_of(backbone)
        for bn in (bn for norm in self.norms for bn in norm.bns):
            bn.eps = bn.eps if cfg.norm_eps is None else cfg.norm_eps
            bn.momentum = bn.momentum if cfg.norm_momentum is None else cfg.norm_momentum
        self.routed = gated.routed(backbone)
        self.layer_names = [n for n, m in backbone.named_modules() if isinstance(m, gated.GatedUnit)]
        # A head per task in both scenarios: without a task id, the predicted task's head gives the class.
        self.heads = Heads(backbone.feature_dim, replace(info, scenario="task"))
        # Mean number of kernels each task's path runs per sample, per unit (measured on its validation split).
        self.register_buffer("active", torch.zeros(info.num_tasks, len(layers)))
        if info.scenario == "class":
            self.memory = Memory(cfg.memory_size, info.input_shape, info.num_outputs, ctx.device, "balanced",
                                 info.num_tasks)
            self.task_classifier = nn.Sequential(
                nn.Linear(info.num_tasks * backbone.feature_dim, cfg.task_classifier_hidden), nn.ReLU(),
                nn.Linear(cfg.task_classifier_hidden, info.num_tasks))
        self.seen_tasks = []  # tasks learned so far; their validation splits give capacity()'s task_accuracy
        self.last_task_prediction: torch.Tensor | None = None  # the task each sample of the last class forward got
        if info.scenario == "class" and cfg.offline_bound_epochs:
            # row i: after task i, the offline classifier's validation accuracy per seen task (NaN: not measured)
            self.register_buffer("offline_task_acc", torch.full((info.num_tasks, info.num_tasks), float("nan")))
        self.to(ctx.device)
        self._probe()

    @torch.no_grad()
    def _probe(self):
        """One forward of a blank input, so that every layer knows its output size for FLOP counts, and the order in
        which the units compute their gates is known."""
        self.eval()
        gated.route(self.routed, [0])
        blank = torch.zeros(1, *self.info.input_shape, device=self.ctx.device)
        self.sampling_order = gated.forward_order(self.layers, lambda: self.backbone(blank))  # see draw_noise

    # --- training -----------------------------------------------------------------------------------
    def train_task(self, task):
        self.seen_tasks.append(task)
        self._fit_path(task)
        self._consolidate(task)
        if self.info.scenario == "class":
            if self.cfg.task_classifier_fit == "after_task":
                self._fit_task_classifier(task, self.cfg.task_classifier_epochs)
            elif self.cfg.task_classifier_refit_epochs:
                self._fit_task_classifier(task, self.cfg.task_classifier_refit_epochs)
            if self.cfg.offline_bound_epochs:
                self.offline_task_acc[task.id, : task.id + 1] = self._offline_bound(task.id + 1)
            self.memory.add_task(task.train.x, task.train.y, task.train.t, generator=self.ctx.generator)

    def resumed(self, learned_tasks):
        self.seen_tasks = list(learned_tasks)

    def variant(self):
        """Reports list the post-hoc task classifier apart from the paper's joint objective."""
        after = self.info.scenario == "class" and self.cfg.task_classifier_fit == "after_task"
        return "after_task" if after else None

    def _joint(self, task) -> bool:
        return self.info.scenario == "class" and self.cfg.task_classifier_fit == "joint" and task.id > 0

    def _fit_path(self, task):
        for layer in self.layers:
            layer.start_task()
        steps = self.loop.steps_per_epoch(task.train)
        params = self._path_params(task.id)
        optimizer = self.loop.make_optimizer(params)
        if self._joint(task):
            classifier = [*self.task_classifier.parameters()]
            optimizer.add_param_group({"params": classifier, "lr": self._classifier_lr()})  # the path's decay
            params = params + classifier

        def warmed_up(step: int) -> tuple[bool, bool]:
            """Whether the sparsity term and the task loss are on at this step."""
            return (step >= self.cfg.sparsity_warmup_epochs * steps,
                    self._joint(task) and step >= self.cfg.task_loss_warmup_epochs * steps)

        def loss(batch):
            sparse, task_loss = warmed_up(batch.step)
            gated.route(self.routed, [task.id])
            gated.draw_noise(self.sampling_order, batch.x.shape[0], batch.x.device)
            features = self.backbone(batch.x)
            gated.count_batches(self.routed)  # in this step: a captured one counts each replay's batch
            total = F.cross_entropy(self.heads(features, task.id), batch.y - task.offset)
            if sparse:
                total = total + self.cfg.sparsity * self.gate_density()  # of this forward, before the rehearsal one
            if task_loss:
                total = total + self.task_loss(batch, task.id)
            return total

        def after_backward():
            self._mask_frozen_grads()
            if self.cfg.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip)

        self.loop.fit(task, loss, params=params, optimizer=optimizer, after_backward=after_backward,
                      after_step=lambda _: self._restore_frozen(), graph_key=warmed_up)

    def _classifier_lr(self) -> float:
        return self.cfg.lr if self.cfg.task_classifier_lr is None else self.cfg.task_classifier_lr

    def task_loss(self, batch, task_id: int) -> torch.Tensor:
        """-log p(t | x) of the task classifier over the paths of tasks 0..task_id, for the current batch and a
        rehearsal batch with uniform task labels over the earlier tasks, weighted by default so that every seen
        task counts alike (the current batch 1/(t+1))."""
        raw, _, t_memory = self.memory.sample_uniform_tasks(self.cfg.replay_batch_size or self.cfg.batch_size,
                                                            self.ctx.generator)
        raw, t_memory = self.loop.shard(raw, t_memory)  # data-parallel: this rank's rows of the draw all ranks make
        x = torch.cat([batch.x, self.loop.augment(raw, t_memory)])
        # The current path on both batches alike (task_loss_norm, default: its running statistics, as evaluation):
        # were the current batch on its batch statistics and the memory not, the classifier could tell the tasks
        # apart by that alone, and at evaluation, where every sample is on running statistics, name no sample the
        # new task.
        hard = self.cfg.task_loss_gates == "hard"
        gated.route(self.routed, [task_id], norm=str(self.cfg.task_loss_norm), hard=hard)
        if not hard:
            gated.draw_noise(self.sampling_order, x.shape[0], x.device)
        current = self.backbone(x)
        self.backbone.eval()  # the earlier paths are settled: hard gates, their batch norms' running statistics
        with torch.no_grad():
            earlier = self._paths(x, task_id)
        self.backbone.train()
        logits = self._task_logits(torch.cat([earlier, current[None]]))
        n = batch.x.shape[0]
        weight = 1 / (task_id + 1) if self.cfg.task_loss_current_weight is None else self.cfg.task_loss_current_weight
        return weight * F.cross_entropy(logits[:n], batch.t) + (1 - weight) * F.cross_entropy(logits[n:], t_memory)

    def gate_density(self) -> torch.Tensor:
        """1/L Σ_l ‖G^l‖₁ / c_out^l over the gated units, of the last forward, averaged over its samples."""
        return gated.density(self.layers)

    def _path_params(self, task_id: int) -> list[nn.Parameter]:
        """The shared kernels (their frozen rows are guarded step by step), task_id's gates, batch norms and head,
        and, for the first task only, the layers no gate guards (VGG's fully connected body): they fire for every
        sample, so the first task finds all of them relevant and freezes them."""
        own = [*self.heads.heads[task_id].parameters()]
        for layer in self.layers:
            own += [*layer.kernel_params(), *layer.gates[task_id].parameters()]
        for norm in self.norms:
            own += [*norm.bns[task_id].parameters()]
        in_units = {id(p) for layer in self.layers for p in layer.parameters()}
        ungated = [p for p in self.backbone.parameters() if id(p) not in in_units]
        return own + (ungated if task_id == 0 else [])

    def _mask_frozen_grads(self):
        for layer in self.layers:
            layer.mask_frozen_grads()

    def _restore_frozen(self):
        for layer in self.layers:
            layer.restore_frozen()

    def _consolidate(self, task):
        """Freeze the kernels relevant to the task, re-initialise those no task holds, and measure the path's cost."""
        data = task.val if len(task.val) else task.train  # with data.val_fraction=0 the training split stands in
        for layer, relevance in zip(self.layers, self._firing(data, task.id)):
            layer.freeze(relevance, self.cfg.freeze_threshold, task.id)
            layer.reinit_unfrozen()
            parallel.same_draw(layer.kernel_params())
        self.active[task.id] = torch.stack([f.sum() for f in self._firing(data, task.id)])

    @torch.no_grad()
    def _firing(self, data: Split, task_id: int) -> list[torch.Tensor]:
        """Per unit, the fraction of samples for which each kernel's gate fires on task_id's path (data-parallel:
        each rank counts its share of the batches, and the counts are summed, so every rank freezes alike)."""
        self.eval()
        gated.route(self.routed, [task_id])
        sizes = [layer.out_channels for layer in self.layers]
        counts = torch.zeros(sum(sizes) + 1, device=self.ctx.device)  # every unit's kernels, then the samples
        for raw, _, t in parallel.own_batches(data.batches(self.ctx.eval_batch_size)):
            with self.ctx.autocast():
                self.backbone(self.info.view.eval(raw, t))
            counts[:-1] += torch.cat([layer.last_gates.sum(0).float() for layer in self.layers])
            counts[-1] += raw.shape[0]
        counts = parallel.all_ranks_sum(counts)
        return list((counts[:-1] / counts[-1]).split(sizes))

    # --- class scenario: the task classifier fitted after the task (task_classifier_fit=after_task) ---------
    def _fit_task_classifier(self, task, epochs: int):
        """Rehearsal: the task's training data and the memory of earlier tasks, with the cross-entropy weighted
        so that every task counts alike however many samples it has there."""
        if task.id == 0:
            return  # one task: nothing to tell apart
        count = task.id + 1
        stored = self.memory.valid()
        data = Split.cat([task.train, Split(self.memory.x[stored], self.memory.y[stored], self.memory.t[stored])])
        per_task = torch.bincount(data.t, minlength=count).float()
        weight = per_task.sum() / (count * per_task)

        def loss(batch):
            self.backbone.eval()  # the paths are settled: hard gates, batch norms on their running statistics
            with torch.no_grad():
                features = self._paths(batch.x, count)
            return F.cross_entropy(self._task_logits(features), batch.t, weight=weight)

        params = list(self.task_classifier.parameters())
        gated.build_index(self.routed, list(range(count)), self.ctx.device)  # before the steps that read it
        with self.loop.phase_named("task_classifier"):
            self.loop.fit(task, loss, data=data, params=params, epochs=epochs,
                          optimizer=self.loop.make_optimizer(params, lr=self._classifier_lr(),
                                                             weight_decay=0.0))

    # --- class scenario: the diagnostic upper bound of task prediction (offline_bound_epochs) ---------------
    def _offline_bound(self, count: int) -> torch.Tensor:
        """Accuracy per seen task's validation split of a fresh task classifier of the same shape, fitted on the
        frozen paths' features of every seen task's whole training data (uniform task weights), offline. The run's
        random streams are left as they were: learning is the same with the diagnostic on or off."""
        devices = [self.ctx.device] if self.ctx.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            generator = torch.Generator(self.ctx.device).manual_seed(count)
            torch.manual_seed(count)
            classifier = copy.deepcopy(self.task_classifier)
            for m in classifier:
                if isinstance(m, nn.Linear):
                    m.reset_parameters()
            features, tasks = self._path_features([task.train for task in self.seen_tasks], count)
            weight = len(tasks) / (count * torch.bincount(tasks, minlength=count).float())
            opt = self.loop.make_optimizer(list(classifier.parameters()), lr=self._classifier_lr(), weight_decay=0.0)
            for _ in range(self.cfg.offline_bound_epochs):
                for idx in torch.randperm(len(tasks), device=tasks.device, generator=generator).split(
                        self.cfg.batch_size):
                    loss = F.cross_entropy(self._task_logits(features[idx].transpose(0, 1), classifier), tasks[idx],
                                           weight=weight)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
            features, tasks = self._path_features([task.val for task in self.seen_tasks], count)
            with torch.no_grad():
                hits = self._task_logits(features.transpose(0, 1), classifier).argmax(1) == tasks
            return torch.stack([hits[tasks == t].float().mean() for t in range(count)])

    @torch.no_grad()
    def _path_features(self, splits: list[Split], count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `count` paths' features (evaluation mode) of every sample of splits, as N × count × dim, and
        each sample's task."""
        self.eval()
        features, tasks = [], []
        for split in splits:
            for raw, _, t in split.batches(self.ctx.eval_batch_size):
                features.append(self._paths(self.info.view.eval(raw, t), count).float().transpose(0, 1))
                tasks.append(t)
        return torch.cat(features), torch.cat(tasks)

    def _paths(self, x: torch.Tensor, count: int) -> torch.Tensor:
        """Features of the first `count` tasks' paths (evaluation mode), as count × N × feature_dim, in one
        stacked forward."""
        gated.route(self.routed, list(range(count)))
        return self.backbone(x.repeat(count, *[1] * (x.dim() - 1))).view(count, x.shape[0], -1)

    def _task_logits(self, features: torch.Tensor, classifier: nn.Module | None = None) -> torch.Tensor:
        """Task classifier over the concatenated path features; paths not learned yet enter as zeros."""
        count, n, dim = features.shape
        inputs = features.new_zeros(n, self.info.num_tasks, dim)
        inputs[:, :count] = features.transpose(0, 1)
        return (classifier or self.task_classifier)(inputs.flatten(1))[:, :count]

    # --- prediction ---------------------------------------------------------------------------------
    def forward(self, x, task_id):
        if task_id is None:
            return self._predict_class(x)
        gated.route(self.routed, [task_id])
        return self.heads(self.backbone(x), task_id)

    def inferred_tasks(self) -> torch.Tensor | None:
        return self.last_task_prediction if self.info.scenario == "class" else None

    def task_aware_logits(self, x, task_id, logits):
        """With the task id given, its own path and head: the class logits above are -inf outside the predicted
        task, so slicing them would count a mispredicted sample as its task's first class."""
        return self(x, task_id)

    def _predict_class(self, x: torch.Tensor) -> torch.Tensor:
        """Logits over every class seen: the predicted task's head in its range of the label space, -inf elsewhere.
        Before any task is learned (eval_future's reference) the first task's path is the only candidate."""
        count, n = max(len(self.seen_tasks), 1), x.shape[0]
        features = self._paths(x, count)
        task_pred = self._task_logits(features).argmax(1)
        self.last_task_prediction = task_pred
        logits = features.new_full((count, n, self.info.seen_outputs(count - 1)), float("-inf"), dtype=torch.float)
        for t in range(count):
            start = self.info.offsets[t]
            logits[t, :, start:start + self.info.sizes[t]] = self.heads(features[t], t).float()
        return logits[task_pred, torch.arange(n, device=x.device)]

    # --- health -------------------------------------------------------------------------------------
    def health(self, task):
        """From what _consolidate measured on the task's validation data and the frozen kernels."""
        found = []
        closed = [n for n, a in zip(self.layer_names, self.active[task.id].tolist()) if a == 0]
        if closed:
            shown = ", ".join(closed[:4]) + (", ..." if len(closed) > 4 else "")
            found.append(self.path_closed.found(task.id, f"no gate fires in {len(closed)} of {len(self.layers)} "
                                                         f"units ({shown})"))
        later = self.info.num_tasks - 1 - task.id
        if later and all(bool(layer.frozen.all()) for layer in self.layers):
            found.append(self.all_frozen.found(task.id, f"all {sum(layer.out_channels for layer in self.layers)} "
                                                        f"kernels are frozen with {later} tasks to come"))
        if self.info.scenario == "class":
            found += self.memory.missing_classes(task.id, self.info)
        return found

    # --- cost ---------------------------------------------------------------------------------------
    def capacity(self):
        seen = len(self.seen_tasks)
        flops = [sum(layer.flops(a) for layer, a in zip(self.layers, self.active[t])).item() for t in range(seen)]
        out = {
            "params_total": sum(p.numel() for p in self.parameters()),
            "kernels_frozen": sum(int(layer.frozen.sum()) for layer in self.layers),
            "kernels_total": sum(layer.out_channels for layer in self.layers),
            "kernels_frozen_per_layer": {n: int(layer.frozen.sum()) for n, layer in zip(self.layer_names, self.layers)},
            "frozen_fraction": {n: layer.frozen.float().mean().item()
                                for n, layer in zip(self.layer_names, self.layers)},
            "active_channels_per_sample": self.active[:seen].sum(1).tolist(),
            "flops_per_sample": flops,  # each task's path, gated convs and gating modules
            "flops_dense_per_sample": sum(layer.flops(layer.out_channels) for layer in self.layers),
        }
        if self.info.scenario == "class" and seen:
            classifier = sum(2 * m.weight.numel() for m in self.task_classifier if isinstance(m, nn.Linear))
            out["inference_flops_per_sample"] = sum(flops) + classifier  # every seen path, then the task classifier
            out["val_task_accuracy"] = self.task_accuracy()  # on validation: capacity() is the method's own report
            if self.cfg.offline_bound_epochs:
                out["val_task_accuracy_offline"] = [row[: i + 1] for i, row in
                                                    enumerate(self.offline_task_acc[:seen].tolist())]
            out["memory_size"] = self.cfg.memory_size
        return out

    @torch.no_grad()
    def task_accuracy(self) -> list[float | None]:
        """Per seen task, the fraction of its validation samples whose task the task classifier names (None for
        a task without validation data)."""
        self.eval()
        count = len(self.seen_tasks)
        hits = torch.zeros(count, dtype=torch.long, device=self.ctx.device)
        for task in self.seen_tasks:
            for raw, _, t in task.val.batches(self.ctx.eval_batch_size):
                with self.ctx.autocast():
                    logits = self._task_logits(self._paths(self.info.view.eval(raw, t), count))
                hits[task.id] += (logits.argmax(1) == t).sum()
        sizes = [len(task.val) for task in self.seen_tasks]
        return [h / n if n else None for h, n in zip(hits.cpu().tolist(), sizes)]

    def mask_keys(self):
        return {f"backbone.{n}.{key}" for n in self.layer_names for key in ("frozen", "usable")}
