"""run(cfg): THE task loop. The only place that orchestrates data, model, method, evaluation, recorders
and checkpoints."""
import contextlib
import itertools
import json
import logging
import os
import random
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import backbones, checkpoint, config, files, hardware, health, methods, metrics, recorders
from .data import scenarios
from .errors import UserError
from .methods.loop import ResumePoint
from .shape import Shape

SCHEMA = 1
log = logging.getLogger("cl_bench")


def build(cfg, recorder, run_dir: Path | None = None):
    """Hardware, scenario and method for cfg, a config already validated (config.validate: by app.RunChecks before
    a run's directory exists, by api.compose), seeded, before any training; the method's side state goes under
    run_dir (host memory without one)."""
    import torch._dynamo  # noqa: F401  torch.optim imports it on first use (~1 s): here, so time_s times learning
    official = cfg.method.protocol == "official"
    hw = hardware.setup(cfg.hardware, fp32=official)  # the official protocol: the official code's fp32
    log.info(f"torch threads: {hw.threads} ({hw.threads_reason})")
    if hardware.multirun_launcher() is not None:  # where the launcher placed this job (hardware.placed_gpu)
        log.info(f"multirun job {hardware.multirun_job()}: device {hw.device}")
    seed_everything(cfg.seed)
    scenario = scenarios.build(cfg.dataset, cfg.data, cfg.scenario, cfg.seed, hw.device, hw.channels_last,
                               select_on_test=official, per_task_norm=config.per_task_normalization(cfg))
    generator = torch.Generator(hw.device).manual_seed(cfg.seed)
    graphs, graphs_record = hardware.graph_mode(cfg.hardware.cuda_graphs, methods.get(cfg.method.name), hw)
    if graphs_record.startswith("not captured"):
        recorder.warning(f"hardware.cuda_graphs: {graphs_record}")
    ctx = methods.Context(hw.device, hw.amp_dtype, generator, recorder, hw.rank, hw.world_size, cfg.seed,
                          cfg.data.eval_batch_size, precision=hw.precision,
                          shape=Shape(hw.device) if cfg.shape else None, store=checkpoint.SideStore(run_dir),
                          ran_on={**hardware.ran_on(hw), "residency": scenario.residency,
                                  "cuda_graphs": graphs_record}, cuda_graphs=graphs,
                          fused_optimizer=cfg.hardware.fused_optimizer)
    method = methods.build(cfg.method, backbones.build(cfg.backbone, scenario.info.input_shape), scenario.info, ctx)
    if hw.channels_last:
        method.to(memory_format=torch.channels_last)
    if cfg.hardware.compile:
        method.compile_backbone()
    return scenario, method, ctx


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived: the run stops, its last complete checkpoint intact."""


@contextlib.contextmanager
def graceful_stop():
    """Turn SIGINT and SIGTERM into Interrupted at once (the step in flight is discarded), except while a
    checkpoint is being written: that is finished first. Yields the guard to wrap writes in."""
    state = {"writing": False, "pending": None}

    def handler(signum, frame):
        if state["writing"]:
            state["pending"] = signum
        else:
            raise Interrupted(signal.Signals(signum).name)

    @contextlib.contextmanager
    def guard():
        state["writing"] = True
        try:
            yield
        finally:
            state["writing"] = False
        if state["pending"] is not None:
            raise Interrupted(signal.Signals(state["pending"]).name)

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield contextlib.nullcontext
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield guard
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run(cfg, run_dir: Path, backbone_option: str | None = None) -> float:
    """Learn every task of the scenario in turn, evaluating after each; returns the sweep objective (validation
    accuracy by default, see OBJECTIVES): what Hydra's sweepers optimise. cfg: a validated config (build);
    backbone_option: the backbone group option chosen, a variant's name (gated_convnet) where it is one, which
    metrics.json records (make_record)."""
    writer = hardware.rank() == 0  # under torchrun, rank 0 alone prints and writes
    recorder = recorders.build(cfg, run_dir) if writer else recorders.Recorders([])
    with graceful_stop() as guard, hardware.watch_nondeterminism(recorder.warning) as nondeterministic:
        try:
            return _run(cfg, run_dir, recorder, writer, guard, nondeterministic, backbone_option)
        except Interrupted as stop:
            recorder.warning(f"stopped by {stop}; the last complete checkpoint is intact")
            raise
        finally:
            recorder.close()


def _run(cfg, run_dir, recorder, writer, guard, nondeterministic: list[str], backbone_option: str | None) -> float:
    """The task loop proper: build, resume, then learn, evaluate, record and checkpoint each task."""
    scenario, method, ctx = build(cfg, recorder, run_dir)
    if cfg.hardware.deterministic:  # the ops that ran without a deterministic kernel so far (hardware.watch_...)
        ctx.ran_on["nondeterministic_ops"] = nondeterministic
    tasks, batch = scenario.tasks, ctx.eval_batch_size
    results, start, elapsed = Results.empty(cfg.scenario), 0, 0.0
    random_init = accuracy_on_test(method, scenario, tasks, ctx, batch) if cfg.eval_future else None
    if cfg.init_from and not (run_dir / "checkpoints" / "last").is_file():  # a branch's first start
        branch(Path(cfg.init_from), run_dir, tasks)
    if cfg.resume or cfg.init_from:
        results, start, elapsed = resume(method, run_dir, tasks, ctx.generator, ctx.device, recorder)
    recorder.run_start(cfg, scenario.info, run_dir, start)
    t0 = time.perf_counter() - elapsed
    every = cfg.checkpoint.every_epochs if writer else 0  # within-task checkpoints: every so many epochs
    clock = Clock(ctx.shape)
    graphs = CompiledGraphs(method) if cfg.hardware.compile else None
    for task in tasks[start:]:
        if graphs is not None:
            graphs.before(task.id)
        recorder.task_start(task)
        clock.task_start(task.id)
        with profiled(run_dir if writer and cfg.profile_task == task.id else None, task.id, ctx.device):
            method.learn(task, within_task_saver(run_dir, method, results, ctx, guard, t0, every))
        clock.lap("learn_s")
        with eager_evaluation(cfg.hardware.compile):
            results.add(evaluate(method, scenario, task.id, cfg.eval_future, ctx, batch))
        clock.lap("eval_s")
        for finding in task_health(method, scenario, task, results):
            recorder.health(finding)
        record = make_record(cfg, scenario.info, results, method, time.perf_counter() - t0, ctx, random_init,
                             shape_of(ctx, method, run_dir), backbone_option)
        recorder.task_end(task.id, record)
        if cfg.checkpoint.enabled and writer:
            with guard():
                path = checkpoint.save(run_dir, task.id, method, results.to_meta(),
                                       hardware.rng_state(ctx.generator, ctx.device), record["time_s"])
                checkpoint.prune(run_dir, cfg.checkpoint.keep)
            clock.checkpoint(task.id, path)
            recorder.checkpoint_saved(task.id, path)
    if start == len(tasks):
        record = make_record(cfg, scenario.info, results, method, elapsed, ctx, random_init,
                             backbone_option=backbone_option)
    if ctx.shape is not None:  # the last task's checkpoint, written after its record
        record["shape"] = shape_of(ctx, method, run_dir)
    recorder.run_end(record)
    return objective(record, cfg.sweep.objective)


def within_task_saver(run_dir: Path, method, results, ctx, guard, t0: float, every: int):
    """What the loop calls at each epoch's end (Method.learn's at_epoch_end): a within-task checkpoint after every
    `every` epochs of a phase; None when there are none to write."""
    if not every:
        return None

    def at_epoch_end(end) -> None:
        if (end.epoch + 1) % every == 0:
            with guard():
                checkpoint.save(run_dir, end.task.id, method, results.to_meta(),
                                hardware.rng_state(ctx.generator, ctx.device), time.perf_counter() - t0,
                                within=end.state())
    return at_epoch_end


class Clock:
    """debug=shape: each task's seconds learning, evaluating and checkpointing, and its checkpoint's bytes."""

    def __init__(self, shape: Shape | None):
        self.shape, self.last = shape, 0.0

    def task_start(self, task_id: int) -> None:
        if self.shape is not None:
            self.shape.task_start(task_id)
            self.last = time.perf_counter()

    def lap(self, name: str) -> None:
        if self.shape is not None:
            now = time.perf_counter()
            self.shape.task_timed(**{name: now - self.last})
            self.last = now

    def checkpoint(self, task_id: int, path: Path) -> None:
        if self.shape is not None:
            self.lap("checkpoint_s")
            self.shape.checkpoint_written(task_id, path)


def task_health(method, scenario, task, results: "Results") -> list[health.Finding]:
    """The health checks after learning task (health.py): the shared ones, from the accuracy matrix, then the
    method's own (its traits.health_checks), from its state. Results notes the checks evaluated and the findings;
    returned: the findings."""
    info = scenario.info
    outputs = info.sizes[task.id] if info.scenario == "task" else info.seen_outputs(task.id)
    checks, found = health.evaluate_shared(health.Outcome(task.id, results.acc[-1][task.id],
                                                          len(scenario.test[task.id]), outputs))
    found += method.health(task)
    results.note_health([*checks, *type(method).traits.health_checks], found)
    return found


def shape_of(ctx, method, run_dir: Path) -> dict | None:
    return None if ctx.shape is None else ctx.shape.section(method, run_dir)


@contextlib.contextmanager
def profiled(run_dir: Path | None, task_id: int, device: torch.device):
    """Within it, a torch profiler records (CPU, and CUDA on a GPU), when run_dir is given: the trace goes to
    run_dir/profile/task_<ttt>.json and the operators that took longest to task_<ttt>.txt."""
    if run_dir is None:
        yield
        return
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profile:
        yield
    out = run_dir / "profile"
    out.mkdir(exist_ok=True)
    profile.export_chrome_trace(str(out / f"task_{task_id:03d}.json"))
    sort = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    (out / f"task_{task_id:03d}.txt").write_text(profile.key_averages().table(sort_by=sort, row_limit=30) + "\n")


def objective(record: dict, name: str) -> float:
    """What `cl-bench train` returns to Hydra's sweeper: validation accuracy unless a test objective is asked for."""
    return record[OBJECTIVES[name]]


def restore(cfg, run_dir: Path, name: str | None = None):
    """The run's scenario, method and context, the method as one of its checkpoints left it (default: the newest
    valid one), and the task that checkpoint ends."""
    scenario, method, ctx = build(cfg, recorders.Recorders([]))
    found = checkpoint.load(run_dir, name)
    if found is None:  # nothing damaged: pruned, not written, or misnamed
        raise UserError(checkpoint.absent(run_dir, name, cfg.checkpoint.keep))
    if found[0] is None:  # every one there is damaged: load() names each
        named = f"{name} " if name else ""
        raise UserError(f"no valid checkpoint {named}in {run_dir}/checkpoints ({'; '.join(found[3])})")
    state, masks, meta, _ = found
    state, _ = checkpoint.split_rng(state)
    method.load_state_dict({**state, **masks})
    method.resumed(scenario.tasks[: meta["task_id"] + 1])  # what a method keeps of its tasks (gated: the paths it runs)
    return scenario, method, ctx, meta["task_id"]


def evaluate_checkpoint(cfg, run_dir: Path, name: str | None = None) -> dict:
    """Rebuild the run's model from one of its checkpoints (default: the newest valid one) and evaluate every
    task it has learned, as the run did after that task (test, validation, and task-aware in the class scenario)."""
    scenario, method, ctx, task_id = restore(cfg, run_dir, name)
    found = evaluate(method, scenario, task_id, False, ctx, ctx.eval_batch_size)
    result = {"checkpoint": f"task_{task_id:03d}", "scenario": cfg.scenario, "acc": found.test,
              "avg_acc": sum(found.test) / len(found.test), "val_acc": found.val}
    if found.aware is not None:
        result["task_aware_acc"] = found.aware
    if found.task_confusion is not None:
        result["task_prediction_acc"] = task_prediction_row(found.task_confusion)
        result["task_confusion"] = found.task_confusion
    return result


def resume(method, run_dir, tasks, generator, device, recorder):
    """Load the newest valid checkpoint of run_dir into method; returns (results, first task to learn, elapsed).

    A checkpoint written within task t is resumed from the state at t's start (the checkpoint of task t-1,
    or the initial one): train_task then runs again, its fit() phases already done are skipped, and the
    phase in flight continues from the saved state after its saved epoch (Loop.resume_within)."""
    found = checkpoint.load(run_dir, within=True)
    if found is None:  # stopped before its first checkpoint: from the start
        return Results.empty(method.info.scenario), 0, 0.0
    state, masks, meta, problems = found
    for problem in problems:
        recorder.warning(f"skipping a damaged checkpoint: {problem}")
    if state is None:
        raise UserError(f"no valid checkpoint in {run_dir}/checkpoints: " + "; ".join(problems))
    set_rng = lambda rng: hardware.set_rng_state(rng, generator, device)  # noqa: E731
    results = Results.from_meta(meta, run_dir)
    start = meta["task_id"] + 1
    if "within" in meta:
        start = meta["task_id"]
        optimizer = checkpoint.optimizer_state(meta["within"]["optimizer"], state)
        side = [checkpoint.optimizer_state(part, state, prefix=f"_optim_side{j}.")
                for j, part in enumerate(meta["within"].get("side_optimizers", []))]
        state, rng = checkpoint.split_rng(state)
        method.loop.resume_within(ResumePoint(meta["within"]["phase"], meta["within"]["epoch"], {**state, **masks},
                                         optimizer, rng, set_rng, side))
        if start == 0:  # within the first task: from the initial state, as built
            return results, 0, meta["elapsed_s"]
        state, masks = task_start_state(run_dir, start)
    state, rng = checkpoint.split_rng(state)
    method.load_state_dict({**state, **masks})
    set_rng(rng)
    method.resumed(tasks[:start])
    return results, start, meta["elapsed_s"]


def branch(source: Path, run_dir: Path, tasks) -> None:
    """init_from: copy a finished task's checkpoint of another run (its last, or the one named), those of the tasks
    before it that the source kept (checkpoint.keep), and the side state of the tasks up to it, into this run's
    directory, so that this run continues from it as a resume would, under its own config. The source run's
    tasks must be this run's. Each process copies into its own run directory (ranks after 0 keep a scratch one);
    the copy is renamed into place, so processes sharing one directory never see half of it."""
    if source.parent.name == "checkpoints":
        source_run, name = source.parent.parent, source.name
    else:
        source_run, last = source, source / "checkpoints" / "last"
        name = last.read_text().strip() if last.is_file() else None
    if (name is not None and name.startswith("task_") and not name.endswith("_within")
            and (source_run / "checkpoints" / "last").is_file() and not (source_run / "checkpoints" / name).is_dir()):
        raise UserError(f"init_from={source}: that run did not keep {name} (checkpoint.keep keeps the newest); "
                        "branch from its run directory, or run it with checkpoint.keep=all to branch from any task")
    if name is None or not (source_run / "checkpoints" / name).is_dir() or name.endswith("_within"):
        raise UserError(f"init_from={source}: not a run directory with a finished task's checkpoint, nor one of its "
                        "checkpoints/task_<ttt> folders")
    learned = source_run / "metrics.json"
    theirs = json.loads(learned.read_text())["tasks"] if learned.is_file() else None
    if theirs != [{"id": t.id, "classes": t.classes} for t in tasks]:
        raise UserError(f"init_from={source}: that run's tasks are not this run's (dataset, num_tasks, class order "
                        "and seed must match)")
    parts = [f"task_{task_id:03d}" for task_id in range(int(name[len("task_"):]) + 1)]
    for folder in ("checkpoints", checkpoint.SIDE):
        for part in parts:  # every finished task up to it that the source kept
            if (source_run / folder / part).is_dir():
                copy_atomically(source_run / folder / part, run_dir / folder / part)
    files.write_text_atomic(run_dir / "checkpoints" / "last", name)


def copy_atomically(source: Path, target: Path) -> None:
    """Copy a folder under a temporary name and rename it into place: processes sharing one directory never see
    half of it (the first to finish wins)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.branch{os.getpid()}"
    shutil.copytree(source, tmp)
    try:
        tmp.rename(target)
    except OSError:  # another process of this run put it there first
        shutil.rmtree(tmp)


def task_start_state(run_dir, task_id: int) -> tuple[dict, dict]:
    """(state, masks) of the checkpoint of the task before task_id: where task_id's learning began."""
    name = f"task_{task_id - 1:03d}"
    found = checkpoint.load(run_dir, name)
    if found is None or found[0] is None:
        raise UserError(f"{run_dir}/checkpoints/{name} is missing or damaged: the checkpoint within task {task_id} "
                        f"cannot be resumed without it; delete checkpoints/task_{task_id:03d}_within to resume "
                        "from an earlier task")
    return found[0], found[1]


@dataclass
class Results:
    """The accuracy matrices so far; row i: after learning task i. acc is on test data (task-agnostic in the class
    scenario), val_acc on the methods' validation splits (seen tasks only; None where a task has none), and
    task_aware_acc (class scenario only) on test data with the task id given."""

    acc: list[list[float]]
    val_acc: list[list[float | None]]
    task_aware_acc: list[list[float]] | None
    # a method that infers the task (class scenario): row i, after task i, the confusion between tasks
    # (Evaluation.task_confusion); task_prediction_acc is its diagonal
    task_confusion: list[list[list[float]]] | None = None
    findings: list[health.Finding] = field(default_factory=list)  # the health checks tripped so far, task by task
    checked: list[str] = field(default_factory=list)  # the health checks evaluated so far, in the order first evaluated

    @property
    def task_prediction_acc(self) -> list[list[float]] | None:
        return None if self.task_confusion is None else [task_prediction_row(c) for c in self.task_confusion]

    @classmethod
    def empty(cls, scenario: str) -> "Results":
        return cls([], [], [] if scenario == "class" else None)

    @classmethod
    def from_meta(cls, meta: dict, run_dir) -> "Results":
        if "val_acc" not in meta:
            raise UserError(f"{run_dir} was checkpointed by an older cl-bench that recorded no validation "
                            "accuracy: it cannot be resumed; start it again")
        return cls(meta["acc"], meta["val_acc"], meta.get("task_aware_acc"), meta.get("task_confusion"),
                   health.findings_of(meta.get("health")), health.checked_of(meta.get("health")))

    def add(self, found: "Evaluation") -> None:
        self.acc.append(found.test)
        self.val_acc.append(found.val)
        if self.task_aware_acc is not None:
            self.task_aware_acc.append(found.aware)
        if found.task_confusion is not None:
            self.task_confusion = (self.task_confusion or []) + [found.task_confusion]

    def to_meta(self) -> dict:
        """What a checkpoint's meta.json keeps of them, for from_meta."""
        return {"acc": self.acc, "val_acc": self.val_acc, "task_aware_acc": self.task_aware_acc,
                "task_confusion": self.task_confusion,
                "health": {"checks": self.checked, "findings": [f.as_dict() for f in self.findings]}}

    def note_health(self, checks: list[health.Check], findings: list[health.Finding]) -> None:
        """After a task: the checks evaluated on it, and those that tripped."""
        self.checked += [c.name for c in checks if c.name not in self.checked]
        self.findings += findings


def task_prediction_row(confusion: list[list[float]]) -> list[float]:
    """Per tested task, the fraction of its samples given their own task (0 for a task not learned yet)."""
    return [row[j] if j < len(row) else 0.0 for j, row in enumerate(confusion)]


# sweep.objective -> the metrics.json key `cl-bench train` returns to Hydra's sweeper
OBJECTIVES = {"val_avg_acc": "val_avg_acc", "test_avg_acc": "avg_acc"}


# Backbones rewritten into units that compute for a named task (Traits.backbone_use): their graphs specialise on it
TASK_UNITS = ("masked", "gated", "hat")


class CompiledGraphs:
    """hardware.compile: the compiled backbone's graphs are kept from task to task while the network keeps its
    shape, and compiled afresh (torch.compiler.reset) when it changes: a growth step, or a backbone of TASK_UNITS,
    whose graphs specialise on the task (its masks, widths, routes), at every task, so that a long sequence does not
    exhaust Dynamo's recompile limit and fall back to eager (issue 46). `misses` counts the fresh compiles."""

    def __init__(self, method):
        self.method, self.key, self.misses = method, None, 0

    def signature(self, task_id: int) -> tuple:
        """The network's shape: every weight's and buffer's name and shape, and the task where graphs specialise."""
        backbone = self.method.backbone
        shapes = tuple((name, tuple(x.shape)) for name, x in itertools.chain(backbone.named_parameters(),
                                                                            backbone.named_buffers()))
        return shapes, task_id if self.method.traits.backbone_use in TASK_UNITS else None

    def before(self, task_id: int) -> None:
        key = self.signature(task_id)
        if key != self.key:
            torch.compiler.reset()
            self.key, self.misses = key, self.misses + 1


def eager_evaluation(compiled: bool):
    """Scoring every seen task runs each task's path once: compiled, each would be a graph of its own (and past
    Dynamo's recompile limit, a fallback to eager with a warning); it runs eagerly, which costs little off the
    training loop."""
    return torch.compiler.set_stance("force_eager") if compiled else contextlib.nullcontext()


def evaluate(method, scenario, task_id: int, future: bool, ctx, batch_size: int):
    """After learning task task_id: accuracy on the test split of every seen task (every task when future), on
    the validation split of every seen task, and (class scenario) on test with the task id given; counted on
    the device and read back in one transfer. Returns (test, val, task_aware or None)."""
    info, seen = scenario.info, scenario.tasks[: task_id + 1]
    tested = scenario.tasks if future else seen
    aware = info.scenario == "class"
    test_hits, aware_hits, confusion = count_correct(method, tested, scenario.test, info, ctx, batch_size, aware)
    val_hits, _, _ = count_correct(method, seen, [t.val for t in seen], info, ctx, batch_size)
    test_sizes, val_sizes = [len(s) for s in scenario.test[: len(tested)]], [len(t.val) for t in seen]
    parts = [(test_hits, test_sizes), (val_hits, val_sizes)] + ([(aware_hits, test_sizes)] if aware else [])
    if confusion is not None:  # row by row: each tested task's samples over the seen tasks they were given
        confusion = confusion[:, : len(seen)]
        parts += [(row, [size] * len(seen)) for row, size in zip(confusion, test_sizes)]
    counts = torch.cat([hits for hits, _ in parts]).cpu().tolist()  # the one host sync
    rows, start = [], 0
    for hits, sizes in parts:
        rows.append(fractions(counts[start: start + len(hits)], sizes))
        start += len(hits)
    return Evaluation(rows[0], rows[1], rows[2] if aware else None, rows[3:] if confusion is not None else None)


@dataclass
class Evaluation:
    """One evaluation after a task: test and validation accuracy per task, task-aware test accuracy (class
    scenario), and, for a method that infers the task, task_confusion[j][k]: the fraction of task j's test samples
    given task k."""

    test: list[float]
    val: list[float | None]
    aware: list[float] | None = None
    task_confusion: list[list[float]] | None = None


def accuracy_on_test(method, scenario, tasks, ctx, batch_size: int) -> list[float]:
    """Accuracy on the test split of each of tasks (the random-initialisation reference of fwt)."""
    hits, _, _ = count_correct(method, tasks, scenario.test, scenario.info, ctx, batch_size)
    return fractions(hits.cpu().tolist(), [len(s) for s in scenario.test[: len(tasks)]])


def fractions(counts: list[int], sizes: list[int]) -> list[float | None]:
    """Counts over split sizes; None for an empty split (no validation data with data.val_fraction=0)."""
    return [c / n if n else None for c, n in zip(counts, sizes)]


@torch.inference_mode()
def count_correct(method, tasks, splits, info, ctx, batch_size: int, task_aware: bool = False):
    """Correct predictions on splits[j] of each task j, as one device tensor (no host sync); task_aware (class
    scenario): also those with the task id given, through the method itself (Method.task_aware_logits), and, for
    a method that infers the task (Method.inferred_tasks), the confusion between tasks: row j counts task j's
    samples by the task they were given. Returns (hits, aware hits or None, confusion or None)."""
    method.eval()
    hits = torch.zeros(len(tasks), dtype=torch.long, device=ctx.device)
    aware_hits = torch.zeros_like(hits)
    confusion = torch.zeros(len(tasks), info.num_tasks, dtype=torch.long, device=ctx.device)
    inferred = False
    for j, (task, split) in enumerate(zip(tasks, splits)):
        task_id = task.id if info.scenario == "task" else None
        for raw, y, t in split.batches(batch_size):
            x = info.view.eval(raw, t)
            with ctx.autocast():
                logits = method.predict(x, task_id)
                given = method.inferred_tasks() if task_aware else None
                if task_aware:
                    aware_hits[j] += (method.task_aware_logits(x, task.id, logits).argmax(1) == y - task.offset).sum()
            hits[j] += (logits.argmax(1) == method.targets(y, task.id)).sum()
            if given is not None:
                inferred = True
                confusion[j].index_add_(0, given, torch.ones_like(given))
    return hits, (aware_hits if task_aware else None), (confusion if inferred else None)


def make_record(cfg, info, results: Results, method, time_s, ctx, random_init=None, shape=None,
                backbone_option: str | None = None) -> dict:
    """The metrics.json record (schema in docs/architecture.md): `backbone` the option chosen (backbone_option, a
    variant's name where it is one; else the registered backbone), `backbone_name` the registered backbone."""
    acc = results.acc
    record = {
        "schema": SCHEMA, "method": cfg.method.name, "dataset": cfg.dataset.name,
        "backbone": backbone_option or cfg.backbone.name, "backbone_name": cfg.backbone.name,
        "scenario": cfg.scenario, "seed": cfg.seed, "setting": cfg.setting, "num_tasks": info.num_tasks,
        "tasks": [{"id": t, "classes": c} for t, c in enumerate(info.task_classes)],
        "acc": acc, "val_acc": results.val_acc, **metrics.summary(acc),
        "val_avg_acc": metrics.avg_acc(results.val_acc) if None not in results.val_acc[-1] else None,
    }
    if results.task_aware_acc is not None:
        record["task_aware_acc"] = results.task_aware_acc
        record["task_aware_avg_acc"] = metrics.avg_acc(results.task_aware_acc)
    if results.task_prediction_acc is not None:
        record["task_prediction_acc"] = results.task_prediction_acc
        record["task_prediction_avg_acc"] = metrics.avg_acc(results.task_prediction_acc)
        record["task_confusion"] = results.task_confusion[-1]
    record.update({
        "variant": method.variant(), "objective": cfg.sweep.objective, "protocol": cfg.method.protocol,
        "precision": ctx.precision, "normalization": "per_task" if info.view.per_task else "global",
        "capacity": method.capacity(),
        "health": health.section(results.checked, results.findings),
        "time_s": time_s,
        "peak_mem_mb": hardware.peak_memory_mb(ctx.device), "complete": len(acc) == info.num_tasks,
        "ran_on": ctx.ran_on,
    })
    if random_init is not None:
        record["fwt"] = metrics.fwt(acc, random_init)
        record["random_init_acc"] = random_init
    if shape is not None:
        record["shape"] = shape
    return record


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
