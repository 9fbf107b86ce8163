"""The epoch loop every method trains through (Loop.fit), its phases under debug=shape, a task resumed from
within, and the training batch. Each Method (methods/base.py) owns one Loop, `method.loop`, which keeps the
loop's own state (the phase counter, the resume point, the phase names); the method keeps the contract a method
author implements. Data-parallel training's own pieces are in parallel.py.

fit() is a plain call that returns when its phase has trained; a method's train_task and its helpers are plain
functions around such calls. After every epoch fit() hands an EpochEnd to the one callback the run gave the task
(Method.learn's at_epoch_end), which decides there whether to checkpoint (train.py); the loop knows nothing else of
the run."""
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..data.scenarios import Split, Task
from ..errors import UserError
from . import parallel


@dataclass
class Batch:
    raw: torch.Tensor  # uint8 pixels, as stored (what a memory keeps)
    x: torch.Tensor  # network input: normalised, augmented in training
    y: torch.Tensor  # labels in the scenario's label space
    t: torch.Tensor  # task id of each sample
    step: int = 0  # the step's index within its fit() call, counted across epochs
    whole: "Batch | None" = None  # data-parallel: the global batch (raw, y, t) this rank's shard is taken from

    def unsharded(self) -> "Batch":
        """The global batch, as every rank holds it: what a memory stores, so that it stays alike on all ranks."""
        return self if self.whole is None else self.whole


@dataclass
class LoopOptions:
    """What one fit() call (a phase of a task) may set; each left at None takes the method's own."""

    data: Split | None = None  # what the phase trains on (the task's training split)
    params: list | None = None  # what the optimiser steps (every parameter that requires a gradient)
    model: torch.nn.Module | None = None  # a module outside the method that params belong to (CPG's goal models):
    # data-parallel, it is wrapped with the method, its gradients averaged and its batch norms too
    epochs: int | None = None  # (method.epochs)
    optimizer: torch.optim.Optimizer | None = None  # (make_optimizer(params))
    after_backward: Callable[[], None] | None = None  # after each backward pass, before the step (masks, clipping)
    after_step: Callable[[Batch], None] | None = None  # once per batch, after its last glance's step
    side_optimizers: tuple = ()  # those the method steps itself in after_step: saved with within-task checkpoints
    milestones: list | tuple | None = None  # epochs at which the lr is multiplied by lr_gamma (method.lr_milestones)
    after_epoch: Callable[[int], bool | None] | None = None  # returning True ends the phase (a stopping rule)
    glances: int = 1  # optimiser steps on each batch, loss_fn called afresh for each
    # hardware.cuda_graphs: what the step's branches read of its index (say, whether a warm-up has ended), a value
    # of batch.step; the step is captured afresh when it changes, as at a new learning rate
    graph_key: Callable[[int], object] | None = None


@dataclass
class EpochEnd:
    """Where the loop stands after an epoch of a phase, handed by fit() to the run's at_epoch_end, which decides
    whether to checkpoint it: state() is what a within-task checkpoint keeps and ResumePoint restores."""

    task: Task
    phase: int  # the fit() call's index within the task
    epoch: int  # the epoch just finished
    optimizer: torch.optim.Optimizer
    side_optimizers: tuple = ()

    def state(self) -> dict:
        return {"phase": self.phase, "epoch": self.epoch, "optimizer": self.optimizer.state_dict(),
                "side_optimizers": [o.state_dict() for o in self.side_optimizers]}


class StepMarker:
    """Entered around each training step (the batch's augmentation, forward, loss, backward, the optimiser's step
    and the hooks between): `with loop.in_step():`. It only counts, so costs nothing that changes numerics; an
    audit that watches torch calls (tests/test_sync_audit.py) reads stepping() to tell a host sync inside a step,
    which stalls the device every batch, from one at an epoch's or a task's end."""

    depth = 0  # steps entered and not yet left (a step inside a step counts once)

    def __enter__(self):
        StepMarker.depth += 1

    def __exit__(self, *exc):
        StepMarker.depth -= 1


_STEP = StepMarker()


def in_step() -> StepMarker:
    """The context a training step runs in (StepMarker)."""
    return _STEP


def stepping() -> bool:
    """Whether a training step is running."""
    return StepMarker.depth > 0


class Loop:
    """A method's training: fit() and the helpers a method's own loops use (phases, shards, augmentation), with
    the loop's state. It reads its method's cfg, ctx and info and trains the method's parameters; the method
    calls start_task() and finish_task() around each task (Method.learn)."""

    def __init__(self, method):
        self.method = method
        self.phase_index = 0  # fit() calls made so far in the current task
        self.resume_at: ResumePoint | None = None  # where a within-task checkpoint resumes the next task
        self.phase_name = "train"  # what debug=shape's record calls fit()'s phases (phase_named)
        self.at_epoch_end: Callable[[EpochEnd], None] | None = None  # the run's, for the task learning now

    @property
    def cfg(self):
        return self.method.cfg

    @property
    def ctx(self):
        return self.method.ctx

    def start_task(self, at_epoch_end: Callable[[EpochEnd], None] | None) -> None:
        self.phase_index, self.at_epoch_end = 0, at_epoch_end

    def finish_task(self, task: Task) -> None:
        """The check at a task's end: a within-task resume point was reached."""
        if self.resume_at is not None:
            raise RuntimeError(f"task {task.id} ended before reaching phase {self.resume_at.phase} of its "
                               "within-task checkpoint: the method's phases are not reproducible")

    def make_optimizer(self, params, lr: float | None = None, weight_decay: float | None = None):
        cfg = self.cfg
        lr = cfg.lr if lr is None else lr
        wd = cfg.weight_decay if weight_decay is None else weight_decay
        if wd and cfg.weight_decay_on == "weights":
            params, wd = weights_decayed(params, wd), 0.0
        if cfg.optimizer == "sgd":
            return optimizer("sgd", params, self.ctx.fused_optimizer, lr=lr, momentum=cfg.momentum,
                             nesterov=cfg.nesterov, weight_decay=wd)
        # capturable: Adam's step counts stay on the device (fused kernels keep them there anyway), so that a captured
        # step (StepGraph) advances them; torch refuses to capture the step of an optimiser not built capturable
        capturable = self.ctx.cuda_graphs and self.ctx.device.type == "cuda"
        return optimizer(cfg.optimizer, params, self.ctx.fused_optimizer, lr=lr, weight_decay=wd,
                         capturable=capturable)

    def fit(self, task: Task, loss_fn, **options) -> None:
        """One phase of the task through the epoch loop (_fit), trained when it returns; named by phase_named in
        debug=shape's record; options: LoopOptions' fields."""
        with self.phase(self.phase_name):
            self._fit(task, loss_fn, LoopOptions(**options))

    def _fit(self, task: Task, loss_fn, options: LoopOptions) -> None:
        """The common epoch loop: on-device shuffled batches, one optimiser and lr schedule (×lr_gamma at the
        milestones), and the loss accumulated on the device and read once per epoch (no host sync per step)."""
        data, params, optimizer, milestones = options.data, options.params, options.optimizer, options.milestones
        side_optimizers, after_epoch, glances = options.side_optimizers, options.after_epoch, options.glances
        epochs = options.epochs
        data = task.train if data is None else data
        epochs = self.phase_epochs(self.cfg.epochs if epochs is None else epochs)
        params = [p for p in (self.method.parameters() if params is None else params) if p.requires_grad]
        opt = optimizer or self.make_optimizer(params)
        milestones = self.cfg.lr_milestones if milestones is None else milestones
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, list(milestones), self.cfg.lr_gamma)
        steps = self.steps_per_epoch(data)
        phase, self.phase_index = self.phase_index, self.phase_index + 1
        first_epoch = 0
        if self.resume_at is not None:
            if phase < self.resume_at.phase:  # finished before the stop: its result is in the saved state
                return
            first_epoch = self.resume_at.restore(self.method, opt, sched, side_optimizers)
            self.resume_at = None
        objective = parallel.objective(self.method, loss_fn, params, options.model)
        graph = self.step_graph(objective, opt, glances, options.after_backward)
        if graph is not None:
            graph.key = options.graph_key
        for epoch in range(first_epoch, epochs):
            self.method.train()
            parallel.seed_shard_augmentation(self.ctx, task.id, phase, epoch)
            self.ctx.recorder.epoch_start(task.id, epoch, epochs, steps)
            total, first_bad, skipped = self._epoch(data, objective, opt, epoch * steps, glances,
                                                    options.after_backward, options.after_step, graph)
            sched.step()
            self._epoch_done(task, epoch, total / max(steps * glances - skipped, 1), first_bad, skipped)
            if self.at_epoch_end is not None:
                self.at_epoch_end(EpochEnd(task, phase, epoch, opt, side_optimizers))
            if after_epoch is not None and after_epoch(epoch):
                break
        if graph is not None:
            graph.release()
        if self.ctx.world_size > 1:
            for module in (self.method, options.model):
                if module is not None:
                    parallel.average_batch_norm_statistics(module)

    def _epoch(self, data: Split, objective, opt, first_step: int, glances: int, after_backward, after_step,
               graph: "StepGraph | None" = None):
        """One epoch's steps; the summed loss, the first step with a non-finite loss (-1: none) and the steps
        skipped, all on the device (no host sync per step)."""
        total, first_bad = self.sums() if graph is None else graph.sums()
        skipped = 0
        for step, (raw, y, t) in enumerate(self.phase_batches(data.batches(self.cfg.batch_size, self.ctx.generator))):
            with in_step():
                batch = self._training_batch(raw, y, t, first_step + step)
                if graph is not None:
                    graph.step(batch, step)
                else:
                    skipped += self._glances(batch, objective, opt, glances, after_backward, total, first_bad, step)
                if after_step is not None:
                    after_step(batch)
                self.ctx.recorder.step()
        return total, first_bad, skipped

    def _glances(self, batch: Batch, objective, opt, glances: int, after_backward, total, first_bad, step) -> int:
        """The batch's optimiser steps, each on loss_fn called afresh; returns how many were skipped."""
        skipped = 0
        for _ in range(glances):
            with self.ctx.autocast():
                loss = objective(batch)
            # skip_nonfinite (off by default) reads the loss on the host: a sync each step, by request
            if self.cfg.skip_nonfinite and not torch.isfinite(loss):
                skipped += 1
                continue
            update(loss, opt, after_backward, total, first_bad, step)
        return skipped

    def sums(self) -> tuple[torch.Tensor, torch.Tensor]:
        """An epoch's summed loss and first non-finite step, as _epoch keeps them on the device."""
        return torch.zeros((), device=self.ctx.device), torch.full((), -1, device=self.ctx.device)

    def step_graph(self, objective, opt, glances: int, after_backward) -> "StepGraph | None":
        """The phase's StepGraph where hardware.cuda_graphs was granted (hardware.graph_mode), the method's steps,
        or this phase's (Traits.graph_phases), are capture-safe, and they are one update each with no host read (not
        glances, not skip_nonfinite) and of full size (not debug=shape's single batches); None: its steps run as they
        are."""
        if not self.ctx.cuda_graphs or glances != 1 or self.cfg.skip_nonfinite or self.ctx.shape is not None:
            return None
        if not self.method.traits.captures(self.phase_name):
            return None
        return StepGraph(self, objective, opt, after_backward)

    def _epoch_done(self, task: Task, epoch: int, mean: torch.Tensor, first_bad: torch.Tensor, skipped: int) -> None:
        """The epoch's one host read: its mean loss to the recorder, or the run stopped at a non-finite one."""
        mean_loss, bad = torch.stack([mean, first_bad.float()]).tolist()
        if bad >= 0:
            raise NonFiniteLoss(f"the loss became {mean_loss} at task {task.id}, epoch {epoch}, step {int(bad)}: "
                                "lower method.lr, or pass method.skip_nonfinite=true to skip such steps; "
                                "earlier checkpoints are intact")
        if skipped:
            self.ctx.recorder.warning(f"task {task.id}, epoch {epoch}: skipped {skipped} non-finite steps")
        self.ctx.recorder.epoch_end(task.id, epoch, mean_loss)

    # --- phases: under debug=shape (ctx.shape) each runs one epoch of one batch -------------------------------
    def phase_epochs(self, epochs: int) -> int:
        """The epochs a phase of `epochs` runs."""
        return epochs if self.ctx.shape is None else self.ctx.shape.cap_epochs(epochs)

    def steps_per_epoch(self, data: Split, batch_size: int | None = None) -> int:
        """The batches an epoch over data runs (schedules counted in steps read this, so they fit the cap)."""
        steps = -(-len(data) // (batch_size or self.cfg.batch_size))
        return steps if self.ctx.shape is None else self.ctx.shape.cap_steps(steps)

    def phase_batches(self, batches):
        """An epoch's batches, as a phase runs them: a loop a method runs outside fit() reads its batches so."""
        return batches if self.ctx.shape is None else self.ctx.shape.cap_batches(batches)

    @property
    def every_phase(self) -> bool:
        """debug=shape: a rule that ends a sequence of phases early on a measured accuracy (CPG's compacting stop)
        is passed over, so that every phase the setting can run does run (one batch measures no accuracy)."""
        return self.ctx.shape is not None

    @contextlib.contextmanager
    def phase_named(self, name: str):
        """Within it, fit()'s phases carry this name in debug=shape's record ("train" elsewhere)."""
        outer, self.phase_name = self.phase_name, name
        try:
            yield
        finally:
            self.phase_name = outer

    def phase(self, name: str):
        """Around a phase a method runs outside fit(): timed under debug=shape."""
        return contextlib.nullcontext() if self.ctx.shape is None else self.ctx.shape.phase(name)

    # --- data-parallel training (hardware=ddp; methods/parallel.py) ------------------------------------------
    def _training_batch(self, raw, y, t, step: int) -> Batch:
        """One augmented training batch: data-parallel, this rank's shard of the global batch, augmented alone."""
        if self.ctx.world_size == 1:
            return Batch(raw, self.method.info.view.train(raw, self.ctx.generator, t), y, t, step)
        whole = Batch(raw, None, y, t, step)
        raw, y, t = self.shard(raw, y, t)
        return Batch(raw, self.augment(raw, t), y, t, step, whole)

    def shard(self, *rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Data-parallel: this rank's rows of tensors every rank holds alike (parallel.shard)."""
        return parallel.shard(self.ctx, *rows)

    def unshard(self, x: torch.Tensor, rows: int) -> torch.Tensor:
        """Data-parallel: the global batch's rows from each rank's shard, on every rank (parallel.unshard)."""
        return parallel.unshard(self.ctx, x, rows)

    def augment(self, raw: torch.Tensor, t: torch.Tensor | None = None) -> torch.Tensor:
        """Training view of stored pixels (a replay draw) of tasks t, from this rank's augmentation stream."""
        return self.method.info.view.train(raw, self.ctx.augment_generator, t)

    def resume_within(self, point: "ResumePoint") -> None:
        """Continue the next task from a checkpoint written within it: fit() phases before point.phase are
        skipped (their result is in point.state), and point.phase continues after point.epoch."""
        self.resume_at = point


def update(loss: torch.Tensor, opt, after_backward, total: torch.Tensor, first_bad: torch.Tensor, step) -> None:
    """One optimiser step on loss; the epoch's sums updated in place on the device: total, and first_bad (the first
    step whose loss was not finite, -1 while none was)."""
    first_bad.copy_(torch.where((first_bad < 0) & ~torch.isfinite(loss.detach()), step, first_bad))
    opt.zero_grad(set_to_none=True)
    loss.backward()  # data-parallel: DistributedDataParallel averages the gradients meanwhile
    if after_backward is not None:
        after_backward()
    opt.step()
    total += loss.detach()


class StepGraph:
    """hardware.cuda_graphs: a phase's full-size training steps (forward, loss, backward, after_backward and the
    optimiser's step, update()) captured once as a CUDA graph and replayed, a launch a step where an eager step
    launches hundreds of kernels. The graph reads its batch from static buffers that each step copies into, and
    adds to the epoch's sums in place. WARMUP eager steps come first, so that the optimiser's state exists before
    capture. A batch of another size (an epoch's last) runs eagerly; a new learning rate, which the optimiser's step
    holds as a number, is captured afresh. The run's generators (ctx.generator, ctx.augment_generator: a replay
    memory's draws and their augmentation) are registered with each graph, as torch's global one is, so that every
    replay draws from, and advances, them as an eager step would. Without a CUDA device the same buffers and steps
    run eagerly: the path tests/test_cuda_graphs.py compares with training without graphs."""

    WARMUP = 3

    def __init__(self, loop: Loop, objective, opt, after_backward):
        self.ctx, self.objective, self.opt, self.after_backward = loop.ctx, objective, opt, after_backward
        self.trained = list({id(p): p for p in (*params_of(opt), *loop.method.parameters())}.values())
        self.capture = self.ctx.device.type == "cuda"
        # the generators a captured step may draw from (torch's global one is registered by torch itself)
        self.generators = list({id(g): g for g in (self.ctx.generator, self.ctx.augment_generator)}.values())
        self.total, self.first_bad = loop.sums()
        self.step_index = torch.zeros((), dtype=torch.long, device=self.ctx.device)
        self.static: Batch | None = None  # the buffers the graph reads its batch from
        self.graph = None  # the captured step: a CUDAGraph, or True where steps run eagerly; None: not yet
        self.lrs: list | None = None  # the learning rates it holds, with its key's value
        self.key: Callable[[int], object] | None = None  # LoopOptions.graph_key
        self.grads: list | None = None  # (parameter, the gradient tensor the graph writes for it)
        self.warm = 0  # eager steps taken on full batches before the first capture
        self.captures = 0  # graphs captured (or, without CUDA, that would have been)

    def step(self, batch: Batch, step: int) -> None:
        if self.static is not None and any(a.shape != b.shape for a, b in zip(tensors(self.static), tensors(batch))):
            self._body(batch, step)  # an epoch's last, smaller batch
            return
        self._load(batch, step)
        lrs = [group["lr"] for group in self.opt.param_groups]
        if self.key is not None:
            lrs.append(self.key(batch.step))
        if lrs != self.lrs:
            self.graph, self.lrs = None, lrs
        if self.graph is None and self.warm < self.WARMUP:
            self.warm += 1
            return self._warm_up()
        if self.graph is None:
            self._capture()
        self._replay()

    def sums(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The epoch's sums (Loop.sums), zeroed for a new epoch: the graph adds to these very tensors."""
        self.total.zero_()
        self.first_bad.fill_(-1)
        return self.total, self.first_bad

    def release(self) -> None:
        """The phase is over: its gradients leave the graph's memory (as an eager loop leaves them), the graph
        goes."""
        if self.capture and self.graph is not None:
            for p in self.trained:
                if p.grad is not None:
                    p.grad = p.grad.clone()
        self.graph = self.grads = None

    def _load(self, batch: Batch, step: int) -> None:
        if self.static is None:
            self.static = Batch(*(x.clone() for x in tensors(batch)))
        else:
            for buffer, x in zip(tensors(self.static), tensors(batch)):
                buffer.copy_(x)
        self.step_index.fill_(step)
        # A captured step holds the batch.step its capture read; the eager path (no CUDA) reads each step's, so that
        # a step that branches on it calls otherwise from replay to replay, which tests/test_cuda_graphs.py's audit
        # finds
        self.static.step = batch.step

    def _body(self, batch: Batch, step) -> None:
        with self.ctx.autocast():
            loss = self.objective(batch)
        update(loss, self.opt, self.after_backward, self.total, self.first_bad, step)

    def _warm_up(self) -> None:
        if not self.capture:
            return self._body(self.static, self.step_index)
        side = torch.cuda.Stream(self.ctx.device)  # as torch's recipe: warm-up off the stream the graph captures
        side.wait_stream(torch.cuda.current_stream(self.ctx.device))
        with torch.cuda.stream(side):
            self._body(self.static, self.step_index)
        torch.cuda.current_stream(self.ctx.device).wait_stream(side)

    def _capture(self) -> None:
        self.captures += 1
        if not self.capture:
            self.graph = True
            return
        for p in self.trained:  # the graph's backward allocates the gradients it then rewrites (an existing one
            p.grad = None  # would be accumulated into, on every replay)
        graph = torch.cuda.CUDAGraph()
        for generator in self.generators:
            if generator.device.type == "cuda":
                graph.register_generator_state(generator)
        with torch.cuda.graph(graph):
            self._body(self.static, self.step_index)
        self.graph, self.grads = graph, [(p, p.grad) for p in self.trained if p.grad is not None]

    def _replay(self) -> None:
        if not self.capture:
            return self._body(self.static, self.step_index)
        self.graph.replay()
        # The replay wrote its gradients where the capture put them; what ran since (an eager step, a hook that
        # set a gradient to None) may have pointed .grad elsewhere, and after_step reads .grad
        for p, grad in self.grads:
            p.grad = grad


def tensors(batch: Batch) -> tuple[torch.Tensor, ...]:
    """What a step reads of its batch (a captured step reads these buffers)."""
    return batch.raw, batch.x, batch.y, batch.t


def params_of(opt) -> list[torch.Tensor]:
    return [p for group in opt.param_groups for p in group["params"]]


@dataclass
class ResumePoint:
    """Where a within-task checkpoint was written: after `epoch` of the task's fit() call number `phase`,
    with the method's state, the optimisers' states and the random-number states as they were then."""

    phase: int
    epoch: int
    state: dict
    optimizer: dict
    rng: dict
    set_rng: Callable
    side_optimizers: list = field(default_factory=list)

    def restore(self, method, opt, sched, side_optimizers=()) -> int:
        """Put everything back as it was after `epoch`; returns the epoch to continue with."""
        if len(side_optimizers) != len(self.side_optimizers):
            raise RuntimeError(f"the within-task checkpoint holds {len(self.side_optimizers)} side optimisers, "
                               f"the phase it resumes has {len(side_optimizers)}")
        seen = method.heads.seen
        method.load_state_dict(self.state)
        method.heads.seen = seen  # load_state_dict sets the outputs of the tasks learned; this one's are in use too
        opt.load_state_dict(self.optimizer)
        for side, saved in zip(side_optimizers, self.side_optimizers, strict=True):
            side.load_state_dict(saved)
        sched.last_epoch = self.epoch + 1  # the schedule stepped once per finished epoch
        sched._last_lr = [group["lr"] for group in opt.param_groups]
        self.set_rng(self.rng)
        return self.epoch + 1


class NonFiniteLoss(UserError):
    """Training diverged: the run stops before anything is checkpointed from the diverged weights."""


OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def optimizer(kind: str, params, fused: bool, **settings) -> torch.optim.Optimizer:
    """torch's SGD, Adam or AdamW (kind) over params (tensors or groups), with settings: its fused kernels where
    fused (hardware.fused_optimizer) and every parameter is floating, one call a step for them all; else its foreach
    ops, one call for all the parameters where torch's CPU default loops over them in Python (its CUDA default is
    foreach), the same arithmetic bit for bit (tests/test_launches.py)."""
    params = list(params)
    tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    fused = fused and all(torch.is_floating_point(p) for p in tensors)
    opt = OPTIMIZERS[kind](params, fused=fused, foreach=not fused, **settings)
    if fused and kind == "sgd" and any(group["momentum"] for group in opt.param_groups):
        opt.register_step_pre_hook(start_momentum)
    return opt


def start_momentum(opt: torch.optim.SGD, args, kwargs) -> None:
    """Fused SGD allocates momentum buffers only on a step where no parameter has one: a parameter whose first
    gradient comes after the others' first step would reach the kernel without one (torch raises). It starts from a
    zero buffer, which the step's momentum·0 + g makes its gradient, as a first step's copy of it does."""
    for group in opt.param_groups:
        if not group["momentum"]:
            continue
        stepped = [p for p in group["params"] if p.grad is not None]
        started = [p for p in stepped if "momentum_buffer" in opt.state.get(p, {})]
        if started and len(started) < len(stepped):
            for p in stepped:
                if "momentum_buffer" not in opt.state.get(p, {}):
                    opt.state[p]["momentum_buffer"] = torch.zeros_like(p.grad)


def weights_decayed(params, wd: float) -> list[dict]:
    """Parameter groups that decay the conv and linear weights (the tensors of two or more dimensions) by wd and
    nothing else; groups given already keep theirs."""
    params = list(params)
    if params and isinstance(params[0], dict):
        return params
    return [{"params": [p for p in params if p.dim() > 1], "weight_decay": wd},
            {"params": [p for p in params if p.dim() <= 1], "weight_decay": 0.0}]
