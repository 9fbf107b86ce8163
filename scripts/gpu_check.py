"""The GPU check (scripts/gpu_check.sh runs it): what one GPU does with cl-bench's paper settings, in minutes.

On data it writes (CIFAR-10 and CIFAR-100 in their canonical python format, random pixels: a step's cost does not
depend on them), for each paper setting in SETTINGS, in one process:
  - the setting's own steps (its backbone, batch, phases and precision: hardware=gpu is bf16 and channels_last),
    WARMUP steps untimed, then STEPS timed between two device synchronisations;
  - the host-device syncs inside those steps, counted by torch.cuda.set_sync_debug_mode("warn") (on the CPU
    rehearsal, where it does not apply: none counted, said so);
  - the GPU-busy fraction of PROFILED further steps: the union of the device's kernel intervals over the wall time
    (torch.profiler; the profiler's own host cost makes it a lower bound);
  - peak device memory over the timed steps;
  - a plain PyTorch loop (the setting's backbone as built, a linear head, cross-entropy, SGD, the same batch shape,
    precision and memory format) timed the same way: the method's step over it is its overhead (a method with
    glances or phases does more work a step; the table says how many samples each step saw).
Then CUDA graphs (hardware.cuda_graphs, methods/loop.py StepGraph): each GRAPHS setting's steps measured as above
eagerly and captured, and the AGREEMENT jobs (seed 0, fp32) trained captured against two eager runs, their weights'
largest difference flagged where it exceeds ten times the eager runs' own. Then the jobs a GPU holds side by side: 1, 4
and 8 processes of one setting (JOBS_SETTING), each timing its steps once every process is warm (a file barrier), and
their summed samples/s. Then precision against the CPU on the
embedded digits: the default job (method=finetune dataset=split_digits, whole) for DIGITS_SEEDS on the device in
fp32 and bf16 and on the CPU in fp32, final average accuracy each. Two comparisons, each with the parity instrument's
verdict at AGREE points (cl_bench.stats), flagged only when "different":
  - bf16 against fp32 on the device, paired by seed: the same seed draws the same random stream on one device, so
    the difference is the precision's;
  - the device's fp32 against the CPU's, unpaired (Welch): a seed draws another stream on a GPU than on the CPU
    (the run's generators live on its device), so one seed's two runs differ by the draw as much as by the device.
    The first lease's single seed 0 read 97.21 on the GPU against 91.38 on the CPU, while seeds 0-4 on the CPU
    alone spread from 91.38 to 99.16.

    python scripts/gpu_check.py --out DIR [--cpu]

writes DIR/gpu_check.json and DIR/gpu_check.md and exits non-zero naming what is flagged (a failed or non-finite
row, a device row that disagrees). --cpu runs the same path on the CPU at tiny sizes (the suite's rehearsal).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# label: (data, overrides). The issue's paper settings, each by the name a user runs it with.
SETTINGS = {
    "cpg cifar100_20": ("cifar100", ["method=cpg", "dataset=cifar100_20"]),
    "pae cifar100_20": ("cifar100", ["method=cpg", "dataset=cifar100_20", "setting=pae_cifar100_20"]),
    "gated split_cifar10 task": ("cifar10", ["method=gated", "dataset=split_cifar10", "scenario=task"]),
    "gated split_cifar10 class": ("cifar10", ["method=gated", "dataset=split_cifar10", "scenario=class"]),
    "lamaml split_cifar100": ("cifar100", ["method=lamaml", "dataset=split_cifar100"]),
    "nccl split_cifar100": ("cifar100", ["method=nccl", "dataset=split_cifar100"]),
    "derpp split_cifar10": ("cifar10", ["method=derpp", "dataset=split_cifar10"]),
}
# hardware.cuda_graphs (methods/loop.py StepGraph): settings whose first steps are capture-safe, timed eagerly and
# captured: finetune (batches of 32, as derpp's, so that a task's epoch holds the window's steps), DER++ (its replay
# draws from the run's generator, which each graph registers), and PAE's paper setting, whose first steps are task
# 0's goal model (CPG captures its goal phases only).
GRAPHS = {
    "finetune split_cifar10": ("cifar10", ["method=finetune", "dataset=split_cifar10", "method.batch_size=32"]),
    "derpp split_cifar10": SETTINGS["derpp split_cifar10"],
    "pae cifar100_20 goal": SETTINGS["pae cifar100_20"],
}
GRAPHED = ["hardware.cuda_graphs=true"]
# The jobs trained captured against eagerly (graph_agreement): the default one, and DER++ on the same data, whose
# replay draws inside the captured step from a registered generator.
AGREEMENT = {"default job": [], "derpp job": ["method=derpp"]}
JOBS_SETTING = "derpp split_cifar10"
BARRIER_S = 300  # how long a job side by side waits for the others to be warm
# Each setting's phases in the order they run, by task and Loop.phase_name: its first TASKS tasks run, each phase
# cut to one epoch of the window's steps (phase_cut, CUT). CPG: picking and training, growth rounds up to
# max_multiplier, compaction on its cubic ramp and, from the second task, the picking refit; PAE the same without
# picking, growing to 2.0x. gated's second task in the class scenario: the joint step with the task classifier on
# replay. La-MAML's and NCCL's second task: the meta step on replay, NCCL's outer step. DER++'s: the replay step on a
# memory the first task filled. A phase missing from a run is flagged.
TASKS = 2
PHASES = {"cpg cifar100_20": ("task0 train", "task0 grow_1.5x", "task0 prune_0.5", "task1 train", "task1 prune_0.5",
                              "task1 refit"),
          "pae cifar100_20": ("task0 train", "task0 grow_1.5x", "task0 grow_2.0x", "task0 prune_0.5", "task1 train",
                              "task1 prune_0.5"),
          **{label: ("task0 train", "task1 train") for label in SETTINGS if not label.startswith(("cpg", "pae"))}}
CUT_COMMON = ["method.epochs=1"]
# CPG's and PAE's task 1 prunes and refits only weights of its own: the weights task 0 released. On random labels
# the official rules release none: every phase's training accuracy stays under train_acc_bar 0.95, so task 0 grows
# to max_multiplier and its compaction stops at the first target and restores the unpruned model, leaving task 1
# nothing to claim. A goal above 1 makes every task grow (no accuracy meets it) and a bar of 0 lets compaction keep
# its target, so both tasks run every phase. Goal models are not trained then: their steps (a plain network) are
# timed in the graphs section (GRAPHS' "pae cifar100_20 goal").
CUT = {"cpg": [*CUT_COMMON, "method.prune_epochs=1", "method.prune_ramp_epochs=1", "method.prune_targets=[0.5]",
               "method.retrain_epochs=1", "method.goal_source=fixed", "method.goal=1.01", "method.train_acc_bar=0"]}
# Sizes: images a class written (train, test), steps warm-up / timed / profiled, jobs side by side.
# Each run of timed or profiled steps lies within one epoch, so a task's training images a batch must exceed them:
# CIFAR-10's 2-class tasks hold 2 x 2000 (less validation), CIFAR-100's 5-class tasks 5 x 500 (its real count).
# The rehearsal's CPG ramp updates its masks every step (a window of 5 steps has no tenth).
SIZES = {
    "gpu": {"per_class": {10: (2000, 20), 100: (500, 20)}, "warmup": 10, "steps": 30, "profiled": 5,
            "jobs": (1, 4, 8), "overrides": []},
    "cpu": {"per_class": {10: (40, 2), 100: (12, 2)}, "warmup": 1, "steps": 2, "profiled": 1, "jobs": (1, 2),
            "overrides": ["method.batch_size=8"], "cut": {"cpg": ["method.prune_frequency=1"]}},
}
DIGITS = ["method=finetune", "dataset=split_digits", "logger=none", "checkpoint.enabled=false"]
DIGITS_CPU = ["dataset.samples_per_task=60"]  # the rehearsal's cut
DIGITS_SEEDS = {"gpu": (0, 1, 2), "cpu": (0, 1)}  # fixed before any run; the rehearsal's two reach the verdicts
AGREE = 2.0  # points of final average accuracy: the equivalence margin of both comparisons
SECTIONS = ("settings", "graphs", "jobs", "digits")  # the default order; --sections chooses and orders them
# The whole check in two calls (--sections A, then B), each within 4 minutes on one H100: (sections, the settings
# section's labels, the graphs section's labels). DER++'s captured row sits in A, its eager row and its jobs in B.
CALLS = {"A": (("settings", "graphs"),
               ("cpg cifar100_20", "pae cifar100_20", "gated split_cifar10 task", "gated split_cifar10 class"),
               ("finetune split_cifar10", "derpp split_cifar10", "pae cifar100_20 goal")),
         "B": (("settings", "jobs", "digits"), ("lamaml split_cifar100", "nccl split_cifar100", "derpp split_cifar10"),
               ())}


# --- data ------------------------------------------------------------------------------------------------------
def write_cifar(root: Path, classes: int, per_class: tuple[int, int]) -> None:
    """cifar-10-batches-py/ or cifar-100-python/ in the canonical pickled format, random pixels."""
    rng = np.random.default_rng(0)

    def batch(n: int, key: str) -> dict:
        labels = np.repeat(np.arange(classes), n)
        out = {"data": rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8), key: labels.tolist()}
        if classes == 100:
            out["coarse_labels"] = (labels // 5).tolist()  # any grouping of 5: the cost is the same
        return out
    if classes == 10:
        folder, key = root / "cifar-10-batches-py", "labels"
        train = batch(per_class[0], key)
        parts = np.array_split(np.arange(len(train[key])), 5)
        files = {f"data_batch_{i + 1}": {"data": train["data"][part], key: [train[key][j] for j in part]}
                 for i, part in enumerate(parts)}
        files["test_batch"] = batch(per_class[1], key)
    else:
        folder, key = root / "cifar-100-python", "fine_labels"
        files = {"train": batch(per_class[0], key), "test": batch(per_class[1], key)}
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_bytes(pickle.dumps(content, protocol=3))


# --- the steps of one setting ------------------------------------------------------------------------------------
class Enough(Exception):
    """The probe has what it needs: the run stops there."""


class Window:
    """The run's recorder, phase by phase. A phase is a fit() call, or an online method's pass over its stream, named
    by its task and Loop.phase_name ("task1 prune_0.5"); its steps run from one recorder.step() to the next. In each
    phase WARMUP steps are left untimed, then STEPS are timed (syncs counted, peak memory taken) and PROFILED
    profiled, each run of them within one epoch: an epoch's or a task's end (its evaluation is no step) starts the
    run in progress again. A phase whose counts are met keeps its row in `rows` and runs its remaining steps untimed;
    with first_only the run stops there (Enough)."""

    def __init__(self, device, sizes: dict, barrier: tuple[Path, int] | None = None, method=None,
                 first_only: bool = False):
        self.device, self.sizes, self.barrier, self.method, self.first_only = device, sizes, barrier, method, first_only
        self.phase, self.count, self.whole = "warmup", 0, False
        self.caught = self.prof = None
        self.label, self.task = "", 0
        self.result: dict = {}
        self.rows: dict[str, dict] = {}  # by phase, in the order the phases ran
        # seconds from the run's start at each task's or epoch's start, with the phase then: where a row's wall
        # time went (the GPU check's first run spent minutes a setting outside its timed steps)
        self.t_start, self.timeline = time.perf_counter(), []

    def __getattr__(self, event):  # events the window has no use for
        return lambda *args, **kwargs: None

    def task_start(self, task) -> None:
        self.task = task.id
        self.boundary()

    def epoch_start(self, *args) -> None:
        self.boundary()
        loop = getattr(self.method, "loop", None)
        label = f"task{self.task} {loop.phase_name if loop is not None else 'train'}"
        if label != self.label:  # a new phase: its own counts (one whose row is kept runs untimed)
            self.label, self.result, self.count = label, {}, 0
            self.phase = "done" if label in self.rows else "warmup"

    def boundary(self) -> None:
        self.timeline.append([round(time.perf_counter() - self.t_start, 2), self.label, self.phase])
        self.whole = False  # the step in progress spans the boundary
        if self.phase == "timing" and self.caught is not None:
            self.end_timing(record=False)
        elif self.phase == "profiling" and self.prof is not None:
            self.prof.stop()
            self.prof = None

    def step(self) -> None:
        if self.phase == "done":
            return
        if not self.whole:  # the first step of an epoch ended: from here steps are whole
            self.whole, self.count = True, 0
            self.begin()
            return
        self.count += 1
        if self.phase == "warmup" and self.count >= self.sizes["warmup"]:
            self.phase, self.count = "timing", 0
            self.begin()
        elif self.phase == "timing" and self.count == self.sizes["steps"]:
            self.end_timing(record=True)
            self.phase, self.count = "profiling", 0
            self.begin()
        elif self.phase == "profiling" and self.count == self.sizes["profiled"]:
            self.end_profile()
            self.rows[self.label], self.phase = self.result, "done"
            print(f"gpu_check:   {self.label}: {self.result['step_ms']:.1f} ms a step, "
                  f"{time.perf_counter() - self.t_start:.0f} s in", file=sys.stderr)
            if self.first_only:
                raise Enough

    def begin(self) -> None:
        if self.phase == "timing":
            self.begin_timing()
        elif self.phase == "profiling":
            self.begin_profile()

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            import torch
            torch.cuda.synchronize(self.device)

    def begin_timing(self) -> None:
        import torch
        if self.barrier is not None:  # jobs side by side: each starts timing once every one is warm
            folder, jobs = self.barrier
            (folder / str(os.getpid())).touch()
            deadline = time.monotonic() + BARRIER_S
            while len(list(folder.iterdir())) < jobs:
                if time.monotonic() > deadline:  # a job that failed before warming up never arrives
                    raise RuntimeError(f"the other jobs were not warm after {BARRIER_S} s")
                time.sleep(0.05)
            self.barrier = None
        self.synchronize()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            torch.cuda.set_sync_debug_mode("warn")
        self.caught = warnings.catch_warnings(record=True)
        self.syncs = self.caught.__enter__()
        warnings.simplefilter("always")
        self.t0 = time.perf_counter()

    def end_timing(self, record: bool) -> None:
        import torch
        if self.device.type == "cuda":
            torch.cuda.set_sync_debug_mode("default")
        self.caught.__exit__(None, None, None)
        self.caught = None
        self.synchronize()
        if not record:
            return
        seconds = time.perf_counter() - self.t0
        syncs = [w for w in self.syncs if "synchroniz" in str(w.message)]
        self.result.update(
            step_ms=1e3 * seconds / self.sizes["steps"],
            syncs=len(syncs) if self.device.type == "cuda" else None,
            sync_sites=sorted({f"{Path(w.filename).name}:{w.lineno}" for w in syncs})[:5],
            peak_mem_mb=torch.cuda.max_memory_allocated(self.device) / 2**20 if self.device.type == "cuda" else None)

    def begin_profile(self) -> None:
        """The device's kernels (on the CPU rehearsal the steps run unprofiled: there is no device to be busy)."""
        import torch
        self.synchronize()
        if self.device.type == "cuda":
            activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            self.prof = torch.profiler.profile(activities=activities)
            self.prof.start()
        self.p0 = time.perf_counter()

    def end_profile(self) -> None:
        self.synchronize()
        wall_us = 1e6 * (time.perf_counter() - self.p0)
        self.result["gpu_busy"] = None
        if self.prof is not None:
            self.prof.stop()
            t0 = time.perf_counter()
            self.result["gpu_busy"] = busy_fraction(self.prof, wall_us)
            self.result["busy_count_s"] = round(time.perf_counter() - t0, 2)  # the profiler's events, read back


def busy_fraction(prof, wall_us: float) -> float:
    """The union of the device kernels' intervals over the wall time."""
    import torch
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    busy, reach = 0.0, float("-inf")
    for start, end in spans:
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return min(1.0, busy / wall_us)


def setting_steps(label: str, data_root: Path, hardware: str, sizes: dict, barrier=None, extra=(),
                  phased: bool = True) -> dict:
    """The setting's phases (PHASES, its first TASKS tasks, each phase one epoch of WARMUP + STEPS + PROFILED
    steps and one more), each phase's row beside a plain loop's on the same network and batch; with phased=False
    its first phase only, at the setting's own schedule (the graphs and jobs sections)."""
    from cl_bench.recorders import Recorders
    t0 = time.perf_counter()
    cut = phase_cut(label, sizes) if phased else []
    cfg, scenario, method, ctx = build_setting(label, data_root, hardware, sizes, [*cut, *extra])
    build_s = time.perf_counter() - t0
    window = Window(ctx.device, sizes, barrier, method, first_only=not phased)
    ctx.recorder = Recorders([window])
    try:
        for task in scenario.tasks[:TASKS if phased else None]:
            window.task_start(task)
            method.learn(task)
    except Enough:
        pass
    if not window.rows:
        return {"failed": f"the run ended in its {window.phase} steps: too few images a task for them in one epoch"}
    learn_s = time.perf_counter() - t0 - build_s
    batch = cfg.method.batch_size
    plain = plain_step_ms(cfg, scenario.info, ctx, batch, sizes)
    seconds = {"build": build_s, "learn": learn_s, "plain": time.perf_counter() - t0 - build_s - learn_s}
    phases = {name: {**row, "batch": batch, "samples_per_s": 1e3 * batch / row["step_ms"], "plain_step_ms": plain,
                     "overhead": row["step_ms"] / plain} for name, row in window.rows.items()}
    first = next(iter(phases.values()))
    missing = [p for p in PHASES.get(label, ()) if p not in phases] if phased else []
    return {**first, "phases": phases, **({"missing": missing} if missing else {}),
            "seconds": {k: round(v, 2) for k, v in seconds.items()}, "timeline": window.timeline}


def phase_cut(label: str, sizes: dict) -> list[str]:
    """The overrides that run each of the setting's phases as one epoch of the window's steps and one more: every
    schedule one epoch long, and each task's training images as many as those batches take, before the validation
    split (data.val_fraction) is held out of them."""
    from cl_bench import api
    cfg = api.compose(*{**SETTINGS, **GRAPHS}[label][1], *sizes["overrides"], "logger=none")
    batches = 1 + sizes["warmup"] + sizes["steps"] + sizes["profiled"]
    samples = math.ceil(batches * cfg.method.batch_size / (1 - cfg.data.val_fraction))
    return [*CUT.get(cfg.method.name, CUT_COMMON), *sizes.get("cut", {}).get(cfg.method.name, []),
            f"dataset.samples_per_task={samples}"]


def build_setting(label: str, data_root: Path, hardware: str, sizes: dict, extra=()):
    """The setting (of SETTINGS or GRAPHS) as `cl-bench train` builds it, at the check's sizes: (cfg, scenario,
    method, ctx)."""
    from cl_bench import api, train
    from cl_bench.recorders import Recorders
    cfg = api.compose(*{**SETTINGS, **GRAPHS}[label][1], *sizes["overrides"], f"data.root={data_root}",
                      f"hardware={hardware}", "logger=none", "checkpoint.enabled=false", "seed=0", *extra)
    return (cfg, *train.build(cfg, Recorders([])))


def warm_process(label: str, data_root: Path, hardware: str, sizes: dict) -> None:
    """The process's one-time costs (the device's context, its libraries' handles, the first kernels' loading)
    paid before the first row, untimed: a plain loop on the first setting's network."""
    cfg, scenario, _, ctx = build_setting(label, data_root, hardware, sizes)
    plain_step_ms(cfg, scenario.info, ctx, cfg.method.batch_size, sizes)


def plain_step_ms(cfg, info, ctx, batch: int, sizes: dict) -> float:
    """A plain PyTorch loop: the setting's backbone as built and a linear head, cross-entropy, SGD with momentum,
    in the run's precision and memory format, on one random batch of the setting's shape."""
    import torch

    from cl_bench import backbones
    torch.manual_seed(0)
    memory_format = info.view.memory_format
    net = torch.nn.Sequential(backbones.build(cfg.backbone, info.input_shape))
    net.append(torch.nn.Linear(net[0].feature_dim, info.num_outputs))
    net = net.to(ctx.device, memory_format=memory_format)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, *info.input_shape, device=ctx.device).contiguous(memory_format=memory_format)
    y = torch.randint(0, info.num_outputs, (batch,), device=ctx.device)

    def step():
        with ctx.autocast():
            loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    for _ in range(sizes["warmup"]):
        step()
    sync = torch.cuda.synchronize if ctx.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(sizes["steps"]):
        step()
    sync()
    return 1e3 * (time.perf_counter() - t0) / sizes["steps"]


# --- sections ----------------------------------------------------------------------------------------------------
def settings_section(data_root: Path, hardware: str, sizes: dict, labels: list[str], keep=lambda rows: None) -> dict:
    """Each setting's row, handed to keep() as it comes (a run cut short by its lease keeps the rows it has)."""
    out = {}
    warm_process(labels[0], data_root, hardware, sizes)
    for label in labels:
        try:
            out[label] = setting_steps(label, data_root, hardware, sizes)
        except Exception as e:  # noqa: BLE001  one setting's failure is its row's
            out[label] = {"failed": f"{type(e).__name__}: {e}".splitlines()[0]}
        print(f"gpu_check: {label}: {json.dumps(out[label])}", file=sys.stderr)
        keep(out)
    return out


def graphs_section(data_root: Path, hardware: str, sizes: dict, labels: list[str], cpu: bool) -> dict:
    """hardware.cuda_graphs: the GRAPHS settings' steps (those --only names) eager and captured, measured as the
    settings are, and the default job's weights trained with capture against eager training's own spread
    (graph_agreement)."""
    out = {}
    for label in labels:
        row = {}
        for mode, extra in (("eager", []), ("graphed", GRAPHED)):
            try:
                row[mode] = setting_steps(label, data_root, hardware, sizes, extra=extra, phased=False)
            except Exception as e:  # noqa: BLE001  one row's failure is its own
                row[mode] = {"failed": f"{type(e).__name__}: {e}".splitlines()[0]}
        failed = [row[mode]["failed"] for mode in row if "failed" in row[mode]]
        out[label] = {"failed": failed[0]} if failed else {**row, "speedup": row["eager"]["step_ms"] /
                                                            row["graphed"]["step_ms"]}
        print(f"gpu_check: graphs {label}: {json.dumps(out[label].get('speedup', out[label]))}", file=sys.stderr)
    for label, extra in AGREEMENT.items():
        out[label] = graph_agreement(hardware, cpu, extra)
    return out


def graph_agreement(hardware: str, cpu: bool, extra_overrides: list[str] = ()) -> dict:
    """The default job (seed 0, fp32, DIGITS_CPU's cut on the rehearsal) trained twice eagerly and once captured:
    the largest difference of any weight between the captured run and the first eager run, against the two eager
    runs' own (a device's atomics may differ run to run). Flagged where the captured run is further off than ten
    times that spread, plus 1e-6."""
    from cl_bench import api

    def weights(*extra: str) -> dict:
        exp = api.build(api.compose(*DIGITS, *(DIGITS_CPU if cpu else []), f"hardware={hardware}",
                                    "hardware.precision=fp32", "seed=0", *extra_overrides, *extra))
        for task in exp.tasks:
            exp.method.learn(task)
        record = exp.ctx.ran_on["cuda_graphs"]
        return record, {k: v.double() for k, v in exp.method.state_dict().items() if v.is_floating_point()}

    try:
        _, first = weights()
        _, second = weights()
        record, graphed = weights(*GRAPHED)
    except Exception as e:  # noqa: BLE001
        return {"failed": f"{type(e).__name__}: {e}".splitlines()[0]}

    def largest(a: dict, b: dict) -> float:
        return max(float((a[k] - b[k]).abs().max()) for k in a)
    row = {"cuda_graphs": record, "eager_spread": largest(first, second), "graphed_diff": largest(first, graphed)}
    if row["graphed_diff"] > 10 * row["eager_spread"] + 1e-6:
        row["disagrees"] = (f"captured weights differ from eager ones by {row['graphed_diff']:.2e}, eager runs "
                            f"among themselves by {row['eager_spread']:.2e}")
    return row


def jobs_section(data_root: Path, hardware: str, sizes: dict, work: Path, label: str) -> dict:
    """One setting in 1, 4, 8 processes at once (each a worker of this script), timed together."""
    out = {}
    for jobs in sizes["jobs"]:
        barrier = work / f"barrier{jobs}"
        barrier.mkdir()
        args = [sys.executable, __file__, "--worker", json.dumps([label, str(data_root), hardware, sizes,
                                                                   str(barrier), jobs])]
        # each job the cores' share, as a parallel sweep gives its jobs (hardware.default_threads)
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // jobs))}
        procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(jobs)]
        rows = []
        for proc in procs:
            stdout, stderr = proc.communicate()
            lines = stdout.strip().splitlines()
            rows.append(json.loads(lines[-1]) if proc.returncode == 0 and lines else
                        {"failed": (stderr.strip().splitlines() or ["?"])[-1]})
        failed = [r["failed"] for r in rows if "failed" in r]
        out[str(jobs)] = {"failed": failed[0]} if failed else {
            "samples_per_s": sum(r["samples_per_s"] for r in rows),
            "step_ms": statistics.mean(r["step_ms"] for r in rows),
            "peak_mem_mb": max(r["peak_mem_mb"] or 0 for r in rows) or None}
        print(f"gpu_check: {jobs} jobs: {json.dumps(out[str(jobs)])}", file=sys.stderr)
    return out


def digits_runs(overrides: list[str], seeds: tuple[int, ...], folder: Path) -> dict:
    """The seeds' runs as one multirun (one process: the interpreter and torch start once for all of them)."""
    proc = subprocess.run([sys.executable, "-m", "cl_bench", "train", "-m", *overrides,
                           f"seed={','.join(map(str, seeds))}", f"hydra.sweep.dir={folder}",
                           "hydra.sweep.subdir=seed${seed}"], capture_output=True, text=True)
    if proc.returncode != 0:
        return {seeds[0]: {"failed": (proc.stderr.strip().splitlines() or ["?"])[-1]}}
    runs = {}
    for seed in seeds:
        m = json.loads((folder / f"seed{seed}" / "metrics.json").read_text())
        runs[seed] = {"avg_acc": m["avg_acc"], "precision": m["precision"], "time_s": m["time_s"]}
    return runs


def digits_row(extra: list[str], seeds: tuple[int, ...], cut: list[str], folder: Path) -> dict:
    """One device and precision over the seeds: accuracy by seed (in points), the mean and the runs' mean time."""
    runs = digits_runs([*DIGITS, *cut, *extra], seeds, folder)
    failed = [run["failed"] for run in runs.values() if "failed" in run]
    if failed:
        return {"failed": failed[0]}
    by_seed = {seed: 100 * run["avg_acc"] for seed, run in runs.items()}
    return {"precision": runs[seeds[0]]["precision"], "by_seed": by_seed, "avg_acc": statistics.mean(by_seed.values()),
            "time_s": statistics.mean(run["time_s"] for run in runs.values())}


def digits_section(cpu: bool, work: Path) -> dict:
    """The default job whole, over the seeds, on the device in fp32 and bf16 and on the CPU in fp32, with the two
    comparisons (module docstring)."""
    from cl_bench import stats
    device = "cpu" if cpu else "gpu"
    seeds, cut = DIGITS_SEEDS[device], DIGITS_CPU if cpu else []
    rows = {"cpu fp32": ["hardware=cpu"], f"{device} fp32": [f"hardware={device}", "hardware.precision=fp32"],
            f"{device} bf16": [f"hardware={device}", "hardware.precision=bf16"]}
    out = {label: digits_row(extra, seeds, cut, work / label.replace(" ", "_")) for label, extra in rows.items()}
    versus = {f"{device} bf16": (f"{device} fp32", "paired")}
    if not cpu:  # on the rehearsal the device's fp32 row is the CPU's
        versus["gpu fp32"] = ("cpu fp32", "welch")
    for label, (reference, test) in versus.items():
        row, ref = out[label], out[reference]
        if "failed" in row or "failed" in ref:
            continue
        diff = (stats.paired(row["by_seed"], ref["by_seed"]) if test == "paired" else
                stats.welch(list(row["by_seed"].values()), list(ref["by_seed"].values())))
        row["versus"] = {"row": reference, "test": test, "points": diff.mean, "ci95": list(diff.ci95),
                         "verdict": diff.verdict(AGREE)}
        if row["versus"]["verdict"] == stats.DIFFERENT:
            row["disagrees"] = f"different from {reference} at +-{AGREE} points ({test})"
    return out


def flagged(result: dict) -> list[str]:
    out = [f"{label}: {row['failed']}" for section in SECTIONS
           for label, row in result.get(section, {}).items() if "failed" in row]
    out += [f"{label}: {row['disagrees']}" for section in ("digits", "graphs")
            for label, row in result.get(section, {}).items() if "disagrees" in row]
    out += [f"{label} {phase}: non-finite step time" for label, row in result.get("settings", {}).items()
            for phase, p in row.get("phases", {}).items() if not np.isfinite(p["step_ms"])]
    out += [f"{label}: phases not run: {', '.join(row['missing'])}" for label, row in result.get("settings", {}).items()
            if row.get("missing")]
    return out


# --- the table ---------------------------------------------------------------------------------------------------
def fmt(value, spec: str = ".1f", none: str = "n/a") -> str:
    return none if value is None else format(value, spec)


def render(r: dict) -> str:
    lines = [f"# GPU check: {r['device']}", "",
             f"{r['date']}, commit {r['commit']}, torch {r['torch']}, {r['sizes']['warmup']} warm-up, "
             f"{r['sizes']['steps']} timed and {r['sizes']['profiled']} profiled steps a setting, on random data "
             f"(`bash scripts/gpu_check.sh{' --cpu' if r['cpu'] else ''}`, {r['seconds']:.0f} s in all)."]
    lines += [f"- {note}" for note in r.get("notes", [])]  # a record's provenance, where it needs more words
    if "settings" in r:
        lines += settings_lines(r)
    if "graphs" in r:
        lines += graphs_lines(r)
    if "jobs" in r:
        lines += jobs_lines(r)
    if "digits" in r:
        lines += digits_lines(r)
    lines += ["", "Flagged: " + ("; ".join(r["flagged"]) if r["flagged"] else "nothing"), ""]
    return "\n".join(lines)


def settings_lines(r: dict) -> list[str]:
    lines = ["", "| setting | phase | batch | step ms | samples/s | plain loop ms | overhead | syncs in timed steps | "
             "GPU busy | peak MiB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for label, row in r.get("settings", {}).items():
        if "failed" in row:
            lines.append(f"| {label} | failed: {row['failed']} |||||||||")
            continue
        for phase, p in row.get("phases", {"(first)": row}).items():
            lines.append(f"| {label} | {phase} | {p['batch']} | {p['step_ms']:.1f} | {p['samples_per_s']:.0f} | "
                         f"{p['plain_step_ms']:.1f} | {p['overhead']:.2f}x | {fmt(p['syncs'], 'd')} | "
                         f"{fmt(p['gpu_busy'], '.0%')} | {fmt(p['peak_mem_mb'], '.0f')} |")
    seconds = [f"{label} {row_seconds(row)}" for label, row in r.get("settings", {}).items() if "failed" not in row]
    return [*lines, "", "Seconds a setting (build / learn / plain): " + "; ".join(seconds)] if seconds else lines


def row_seconds(row: dict) -> str:
    """Where the row's wall time went (recorded from the first lease's second call on)."""
    seconds = row.get("seconds")
    return "n/a" if seconds is None else " / ".join(f"{seconds[k]:.0f}" for k in ("build", "learn", "plain"))


def graphs_lines(r: dict) -> list[str]:
    lines = ["", "CUDA graphs (`hardware.cuda_graphs=true`: each phase's full-size steps captured once and replayed):",
             "", "| setting | eager step ms | captured step ms | speedup | syncs eager / captured | GPU busy eager / "
             "captured | peak MiB eager / captured |", "|---|---|---|---|---|---|---|"]
    for label, row in r["graphs"].items():
        if label in AGREEMENT:
            continue
        if "failed" in row:
            lines.append(f"| {label} | failed: {row['failed']} ||||||")
            continue
        e, g = row["eager"], row["graphed"]
        lines.append(f"| {label} | {e['step_ms']:.1f} | {g['step_ms']:.1f} | {row['speedup']:.2f}x | "
                     f"{fmt(e['syncs'], 'd')} / {fmt(g['syncs'], 'd')} | {fmt(e['gpu_busy'], '.0%')} / "
                     f"{fmt(g['gpu_busy'], '.0%')} | {fmt(e['peak_mem_mb'], '.0f')} / {fmt(g['peak_mem_mb'], '.0f')} |")
    lines.append("")
    for label in AGREEMENT:
        job = r["graphs"].get(label)
        if job is None:  # a record from before the job was added
            continue
        lines += [f"The {label} ({' '.join(AGREEMENT[label]) or 'method=finetune'}, fp32, seed 0) trained captured "
                  "against eagerly: " + (
                      f"failed: {job['failed']}" if "failed" in job else
                      f"largest weight difference {job['graphed_diff']:.2e}, two eager runs' {job['eager_spread']:.2e} "
                      f"(ran_on.cuda_graphs: {job['cuda_graphs']})")]
    return lines


def jobs_lines(r: dict) -> list[str]:
    lines = ["", f"Jobs side by side ({r['jobs_setting']}, each timing its steps once all are warm):", "",
              "| jobs | samples/s, all together | step ms, mean | peak MiB, largest |", "|---|---|---|---|"]
    for jobs, row in r.get("jobs", {}).items():
        lines.append(f"| {jobs} | failed: {row['failed']} |||" if "failed" in row else
                     f"| {jobs} | {row['samples_per_s']:.0f} | {row['step_ms']:.1f} | "
                     f"{fmt(row['peak_mem_mb'], '.0f')} |")
    return lines


def digits_lines(r: dict) -> list[str]:
    seeds = ", ".join(str(seed) for seed in next((row["by_seed"] for row in r["digits"].values() if "by_seed" in row),
                                                 {}))
    lines = ["", f"Precision against the CPU (the default job, method=finetune dataset=split_digits, seeds {seeds}; "
             f"verdicts at +-{AGREE} points: bf16 paired by seed with the device's fp32, the device's fp32 unpaired "
             "with the CPU's, whose seeds draw other random streams):", "",
             "| run | precision | avg_acc % by seed | mean | against | difference [95% CI] | verdict | time s |",
             "|---|---|---|---|---|---|---|---|"]
    for label, row in r["digits"].items():
        if "failed" in row:
            lines.append(f"| {label} | failed: {row['failed']} |||||||")
            continue
        v = row.get("versus")
        ci = "" if v is None or math.isnan(v["ci95"][0]) else f" [{v['ci95'][0]:+.2f}, {v['ci95'][1]:+.2f}]"
        against = f"{v['row']} ({v['test']}) | {v['points']:+.2f}{ci} | {v['verdict']}" if v else "– | – | –"
        lines.append(f"| {label} | {row['precision']} | {' / '.join(f'{a:.2f}' for a in row['by_seed'].values())} | "
                     f"{row['avg_acc']:.2f} | {against} | {row['time_s']:.1f} |")
    return lines


def commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or "?"


def device_name(cpu: bool) -> str:
    import torch
    return platform.processor() or platform.machine() if cpu else torch.cuda.get_device_name(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the folder the JSON and the table are written to")
    parser.add_argument("--cpu", action="store_true", help="the rehearsal: the CPU, tiny sizes")
    parser.add_argument("--only", help="the settings whose labels start with these comma-separated words (the suite's "
                        "rehearsal runs two, and one of the graphs section's); the jobs side by side run the first of "
                        f"them unless it is {JOBS_SETTING}")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help="the sections to run, in this order (comma-separated; default %(default)s), or one of "
                        f"the whole check's two calls ({', '.join(CALLS)}: CALLS)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:  # one of the jobs side by side
        label, data_root, hardware, sizes, barrier, jobs = json.loads(opts.worker)
        print(json.dumps(setting_steps(label, Path(data_root), hardware, sizes, (Path(barrier), jobs), phased=False)))
        return 0
    import torch
    start = time.monotonic()
    sizes = SIZES["cpu" if opts.cpu else "gpu"]
    hardware = "cpu" if opts.cpu else "gpu"
    labels, graph_labels = ([k for k in table if not opts.only or k.startswith(tuple(opts.only.split(",")))]
                            for table in (SETTINGS, GRAPHS))
    if not labels:
        parser.error(f"--only {opts.only} names no setting: choose from {', '.join(SETTINGS)} (and, for the graphs "
                     f"section, {', '.join(GRAPHS)})")
    sections = opts.sections.split(",")
    if opts.sections in CALLS:  # one of the two calls: its sections, its settings
        sections, chosen, graphs_chosen = CALLS[opts.sections]
        labels, graph_labels = [k for k in labels if k in chosen], [k for k in graph_labels if k in graphs_chosen]
    if not sections or set(sections) - set(SECTIONS):
        parser.error(f"--sections {opts.sections}: choose from {', '.join(SECTIONS)}, or one call: "
                     f"{' or '.join(CALLS)}")
    jobs_label = JOBS_SETTING if JOBS_SETTING in labels else labels[0]
    result = {"device": device_name(opts.cpu), "cpu": opts.cpu, "torch": torch.__version__, "commit": commit(),
              "date": time.strftime("%Y-%m-%d"), "sizes": sizes, "jobs_setting": jobs_label}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for classes, per_class in sizes["per_class"].items():
            write_cifar(work / "data", classes, per_class)
        def keep(section: str, rows: dict) -> None:
            result[section] = rows
            write(result, opts.out, time.monotonic() - start)
        run = {"settings": lambda: settings_section(work / "data", hardware, sizes, labels,
                                                    lambda rows: keep("settings", rows)),
               "graphs": lambda: graphs_section(work / "data", hardware, sizes, graph_labels, opts.cpu),
               "jobs": lambda: jobs_section(work / "data", hardware, sizes, work, jobs_label),
               "digits": lambda: digits_section(opts.cpu, work)}
        for section in sections:
            keep(section, run[section]())  # what a lease's time limit cuts short is kept
    print(f"gpu_check: wrote {opts.out}/gpu_check.json and gpu_check.md in {result['seconds']:.0f} s", file=sys.stderr)
    if result["flagged"]:
        print("gpu_check: flagged: " + "; ".join(result["flagged"]), file=sys.stderr)
        return 1
    return 0


def write(result: dict, out: Path, seconds: float) -> None:
    result["seconds"], result["flagged"] = seconds, flagged(result)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "gpu_check.md").write_text(render(result))


if __name__ == "__main__":
    sys.exit(main())
