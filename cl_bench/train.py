"""run(cfg): THE task loop. The only place that orchestrates data, model, method, evaluation, recorders
and checkpoints."""
import contextlib
import random
import signal
import threading
import time
from pathlib import Path

import numpy as np
import torch

from . import backbones, checkpoint, config, hardware, methods, metrics, recorders
from .data import scenarios
from .errors import UserError
from .methods.base import ResumePoint

SCHEMA = 1


def build(cfg, recorder):
    """Hardware, scenario and method for cfg, seeded, before any training."""
    config.validate(cfg)
    import torch._dynamo  # noqa: F401  torch.optim imports it on first use (~1 s): here, so time_s times learning
    hw = hardware.setup(cfg.hardware)
    seed_everything(cfg.seed)
    scenario = scenarios.build(cfg.dataset, cfg.data, cfg.scenario, cfg.seed, hw.device, hw.channels_last)
    generator = torch.Generator(hw.device).manual_seed(cfg.seed)
    ctx = methods.Context(hw.device, hw.amp_dtype, generator, recorder, hw.rank, hw.world_size)
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


def run(cfg, run_dir: Path) -> float:
    """Learn every task of the scenario in turn, evaluating after each; returns avg_acc (what sweeps optimise)."""
    writer = hardware.rank() == 0  # under torchrun, rank 0 alone prints and writes
    recorder = recorders.build(cfg, run_dir) if writer else recorders.Recorders([])
    with graceful_stop() as guard:
        try:
            return _run(cfg, run_dir, recorder, writer, guard)
        except Interrupted as stop:
            recorder.warning(f"stopped by {stop}; the last complete checkpoint is intact")
            raise
        finally:
            recorder.close()


def _run(cfg, run_dir, recorder, writer, guard) -> float:
    """The task loop proper: build, resume, then learn, evaluate, record and checkpoint each task."""
    scenario, method, ctx = build(cfg, recorder)
    info, tasks, device = scenario.info, scenario.tasks, ctx.device
    acc, start, elapsed = [], 0, 0.0
    random_init = evaluate(method, tasks, info, ctx, cfg.data.eval_batch_size) if cfg.eval_future else None
    if cfg.resume:
        acc, start, elapsed = resume(method, run_dir, tasks, ctx.generator, device, recorder)
    recorder.run_start(cfg, info, run_dir, start)
    t0 = time.perf_counter() - elapsed
    if cfg.checkpoint.every_epochs and writer:
        ctx.epoch_done = within_task_saver(cfg.checkpoint.every_epochs, run_dir, method, acc, ctx, guard, t0)
    for task in tasks[start:]:
        recorder.task_start(task)
        method.learn(task)
        seen = tasks if cfg.eval_future else tasks[: task.id + 1]
        acc.append(evaluate(method, seen, info, ctx, cfg.data.eval_batch_size))
        record = make_record(cfg, info, acc, method, time.perf_counter() - t0, device, random_init)
        recorder.task_end(task.id, record)
        if cfg.checkpoint.enabled and writer:
            with guard():
                checkpoint.save(run_dir, task.id, method, acc, hardware.rng_state(ctx.generator, device),
                                record["time_s"])
    if start == len(tasks):
        record = make_record(cfg, info, acc, method, elapsed, device, random_init)
    recorder.run_end(record)
    return record["avg_acc"]


def within_task_saver(every: int, run_dir, method, acc: list, ctx, guard, t0: float):
    """fit()'s epoch hook for checkpoint.every_epochs: a checkpoint within the task every `every` epochs."""
    def save(task, phase: int, epoch: int, optimizer, side_optimizers=()) -> None:
        if (epoch + 1) % every:
            return
        with guard():
            checkpoint.save(run_dir, task.id, method, acc, hardware.rng_state(ctx.generator, ctx.device),
                            time.perf_counter() - t0,
                            within={"phase": phase, "epoch": epoch, "optimizer": optimizer.state_dict(),
                                    "side_optimizers": [o.state_dict() for o in side_optimizers]})
    return save


def evaluate_checkpoint(cfg, run_dir: Path, name: str | None = None) -> dict:
    """Rebuild the run's model from one of its checkpoints (default: the newest valid one) and evaluate every
    task it has learned; in the class scenario also with the task id given (task-aware accuracy)."""
    scenario, method, ctx = build(cfg, recorders.Recorders([]))
    found = checkpoint.load(run_dir, name)
    if found is None or found[0] is None:
        problems = "; ".join(found[3]) if found else "none written"
        raise UserError(f"no valid checkpoint {name or ''} in {run_dir}/checkpoints ({problems})")
    state, masks, meta, _ = found
    state, _ = checkpoint.split_rng(state)
    method.load_state_dict({**state, **masks})
    learned = scenario.tasks[: meta["task_id"] + 1]
    batch = cfg.data.eval_batch_size
    result = {"checkpoint": f"task_{meta['task_id']:03d}", "scenario": cfg.scenario,
              "acc": evaluate(method, learned, scenario.info, ctx, batch)}
    if cfg.scenario == "class":
        result["task_aware_acc"] = evaluate(method, learned, scenario.info, ctx, batch, task_aware=True)
    result["avg_acc"] = sum(result["acc"]) / len(learned)
    return result


def resume(method, run_dir, tasks, generator, device, recorder):
    """Load the newest valid checkpoint of run_dir into method; returns (acc, first task to learn, elapsed).

    A checkpoint written within task t is resumed from the state at t's start (the checkpoint of task t-1,
    or the initial one): train_task then runs again, its fit() phases already done are skipped, and the
    phase in flight continues from the saved state after its saved epoch (Method.resume_within)."""
    found = checkpoint.load(run_dir, within=True)
    if found is None:
        return [], 0, 0.0
    state, masks, meta, problems = found
    for problem in problems:
        recorder.warning(f"skipping a damaged checkpoint: {problem}")
    if state is None:
        raise UserError(f"no valid checkpoint in {run_dir}/checkpoints: " + "; ".join(problems))
    set_rng = lambda rng: hardware.set_rng_state(rng, generator, device)  # noqa: E731
    start = meta["task_id"] + 1
    if "within" in meta:
        start = meta["task_id"]
        optimizer = checkpoint.optimizer_state(meta["within"]["optimizer"], state)
        side = [checkpoint.optimizer_state(part, state, prefix=f"_optim_side{j}.")
                for j, part in enumerate(meta["within"].get("side_optimizers", []))]
        state, rng = checkpoint.split_rng(state)
        method.resume_within(ResumePoint(meta["within"]["phase"], meta["within"]["epoch"], {**state, **masks},
                                         optimizer, rng, set_rng, side))
        if start == 0:  # within the first task: from the initial state, as built
            return meta["acc"], 0, meta["elapsed_s"]
        state, masks = task_start_state(run_dir, start)
    state, rng = checkpoint.split_rng(state)
    method.load_state_dict({**state, **masks})
    set_rng(rng)
    method.resumed(tasks[:start])
    return meta["acc"], start, meta["elapsed_s"]


def task_start_state(run_dir, task_id: int) -> tuple[dict, dict]:
    """(state, masks) of the checkpoint of the task before task_id: where task_id's learning began."""
    name = f"task_{task_id - 1:03d}"
    found = checkpoint.load(run_dir, name)
    if found is None or found[0] is None:
        raise UserError(f"{run_dir}/checkpoints/{name} is missing or damaged: the checkpoint within task {task_id} "
                        f"cannot be resumed without it; delete checkpoints/task_{task_id:03d}_within to resume "
                        "from an earlier task")
    return found[0], found[1]


@torch.inference_mode()
def evaluate(method, tasks, info, ctx, batch_size: int, task_aware: bool = False) -> list[float]:
    """Accuracy on each task's test set, counted on the device and read back once. task_aware (class
    scenario): the prediction is restricted to the task's own classes, as if the task id were given."""
    method.eval()
    hits = []
    for task in tasks:
        task_id = task.id if info.scenario == "task" else None
        correct = torch.zeros((), dtype=torch.long, device=ctx.device)
        for raw, y, _ in task.test.batches(batch_size):
            with ctx.autocast():
                logits = method.predict(info.view.eval(raw), task_id)
            if task_aware:
                logits = logits[:, task.offset: task.offset + task.num_classes]
                y = y - task.offset
            correct += (logits.argmax(1) == method.targets(y, task.id)).sum()
        hits.append(correct)
    sizes = torch.tensor([len(t.test) for t in tasks], dtype=torch.float64)
    return (torch.stack(hits).cpu().double() / sizes).tolist()


def make_record(cfg, info, acc, method, time_s, device, random_init=None) -> dict:
    """The metrics.json record (schema in docs/architecture.md)."""
    record = {
        "schema": SCHEMA, "method": cfg.method.name, "dataset": cfg.dataset.name, "backbone": cfg.backbone.name,
        "scenario": cfg.scenario, "seed": cfg.seed, "num_tasks": info.num_tasks,
        "tasks": [{"id": t, "classes": c} for t, c in enumerate(info.task_classes)],
        "acc": acc, **metrics.summary(acc), "capacity": method.capacity(),
        "time_s": time_s, "peak_mem_mb": hardware.peak_memory_mb(device), "complete": len(acc) == info.num_tasks,
    }
    if random_init is not None:
        record["fwt"] = metrics.fwt(acc, random_init)
        record["random_init_acc"] = random_init
    return record


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
