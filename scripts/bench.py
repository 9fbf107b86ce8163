"""Benchmarks as whole processes, with ratios taken within one run (CPU figures are noisy: compare ratios).

    python scripts/bench.py overhead [--repeats 3]      # cl-bench finetune against a plain PyTorch script
    python scripts/bench.py peers [--repeats 3] [--avalanche-python ../avalanche-venv/bin/python]
                                    # against Avalanche 0.6.0, set up by scripts/setup_avalanche_env.sh
    python scripts/bench.py methods [--cifar]          # each method's time over finetune's
    python scripts/bench.py scaling                     # per-task cost, memory, checkpoint size at 5/10/20 tasks
    python scripts/bench.py gpu --gpu-check DIR/gpu_check.json [DIR2/gpu_check.json]  # records a GPU check (bash
                                                        # scripts/gpu_check.sh on a GPU machine writes DIR; its two
                                                        # calls A and B, two) as the section "GPU check"
    python scripts/bench.py images [--avalanche-python ...]  # split_cifar10 with augmentation: cl-bench, Avalanche
                                                        # and a DataLoader loop, on a conv net and resnet18_reduced
    python scripts/bench.py masks [--before DIR]        # packnet, piggyback and cpg over finetune, on a checkout and
                                                        # on another (DIR: a worktree of an earlier commit), with the
                                                        # top operators of one profiled task
    python scripts/bench.py launches [--before DIR]     # aten ops (torch.profiler) and CPU time per training step of
                                                        # each method on split_digits, here and on another checkout
    python scripts/bench.py costs                       # the paper settings' cost: seconds per training sample
                                                        # measured here, times each schedule's sample passes
    python scripts/bench.py ddp                         # step time on 2 CPU processes with DistributedDataParallel,
                                                        # with a per-parameter all-reduce, and on one process
    python scripts/bench.py threads                     # a sweep of one job per core side by side (batch 10, MLP):
                                                        # the default threads against every core in each job
    python scripts/bench.py evalbatch                   # scoring time by evaluation batch size (no MNIST needed;
                                                        # with --cifar-root, the image workload at both)
    python scripts/bench.py startup [--repeats 5] [--before DIR]  # the answers that need no torch (help, a config
                                                        # typo, list, shell completion) against `import torch`:
                                                        # with catalog.py's cache, without it, and on DIR
    python scripts/bench.py residency [--big-gib 4 --cap-gib 1.5]  # samples/s with the images on the device, on
                                                        # the host and streamed; a dataset --big-gib large trained
                                                        # under stream, its peak memory against --cap-gib
    python scripts/bench.py render                      # docs/benchmarks.md again from docs/benchmarks.json alone

Every other section takes --data (a data root holding MNIST/raw; default $CL_BENCH_DATA). Results are printed, merged
by section into docs/benchmarks.json and rendered into docs/benchmarks.md (plots into docs/img/).
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# The overhead workload of the performance issue: Split MNIST, class scenario, MLP 784-256-256, SGD 0.01/0.9,
# batch 128, one epoch per task, evaluation after each task; no validation hold-out, so both train on the same data.
WORKLOAD = ["method=finetune", "dataset=split_mnist", "setting=none", "backbone=mlp", "scenario=class",
            "backbone.hidden_sizes=[256,256]", "method.lr=0.01", "method.momentum=0.9", "method.batch_size=128",
            "method.epochs=1", "data.val_fraction=0", "logger=none", "checkpoint.enabled=false"]
ONLINE_SAMPLES = 200  # per task for the online methods' mlp rows: La-MAML's meta-steps make it the slowest
# The same job in Avalanche and in cl-bench: (Avalanche strategy and flags, cl-bench overrides on WORKLOAD).
# EWC's lambda is low enough that neither library diverges at lr 0.01 (at lambda 5000, Avalanche's weights turn NaN
# in the third task); Avalanche adds lambda*F*d^2 with a batched Fisher, where cl-bench with method.fisher=batched
# method.penalty=half (FACIL's arithmetic) adds lambda/2*F*d^2 with the same Fisher.
EWC_LAMBDA = 100.0
PEERS = {
    "naive": (["naive"], []),
    "ewc": (["ewc", f"--ewc-lambda={EWC_LAMBDA / 2}"], ["method=ewc", "method.fisher=batched", "method.penalty=half",
                                                         f"method.ewc_lambda={EWC_LAMBDA}"]),
    # Avalanche's Replay keeps an experience-balanced buffer, written at the end of each experience: the same
    # policy here (cl-bench's default reservoir scores 2 points lower on this job, see benchmarks.md).
    "replay": (["replay"], ["method=er", "method.memory_size=500", "method.memory_policy=balanced"]),
    # Avalanche's PackNet needs task labels: the task scenario, one training epoch, pruning half, one retraining
    # epoch at the same learning rate.
    "packnet": (["packnet", "--prune-proportion=0.5"],
                ["method=packnet", "scenario=task", "method.prune_ratio=0.5", "method.retrain_epochs=1",
                 "method.retrain_lr=0.01"]),
}
# Mammoth is not on PyPI (its PyPI namesake is an unrelated document converter), so it cannot be installed here;
# these are the figures the performance issue quotes for this kind of machine (whole process, seconds).
MAMMOTH_QUOTED = {"naive": ("sgd", 18.2), "replay": ("er", 18.6)}
# The performance issue's own whole-process figures for Avalanche 0.6.0 on this kind of machine.
AVALANCHE_QUOTED = {"naive": 17.1, "replay": 23.0, "ewc": 25.7}


class Failed(Exception):
    """A benchmarked process exited non-zero; its message is recorded in place of its figures."""


def timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failed(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}")
    return time.perf_counter() - start, proc.stdout


def cl_bench(overrides: list[str], run_dir: Path) -> tuple[float, dict]:
    wall, _ = timed([sys.executable, "-m", "cl_bench", "train", *overrides, f"hydra.run.dir={run_dir}"])
    return wall, json.loads((run_dir / "metrics.json").read_text())


def skip(reason: str) -> None:
    print(f"bench: {reason}", file=sys.stderr)


def median_rows(rows: list[dict]) -> dict:
    return {f: statistics.median(r[f] for r in rows) for f in rows[0]}


def accuracy_over_seeds(rows: list[dict]) -> dict:
    """avg_acc as the mean over runs of different seeds, with its sample std (0 for one run) and each run's."""
    accs = [r["avg_acc"] for r in rows]
    return {"avg_acc": statistics.mean(accs), "avg_acc_sd": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "avg_accs": accs}


# --- sections ---------------------------------------------------------------------------------------------
def overhead(opts) -> dict:
    rows = {"cl-bench": [], "cl-bench, data.cache=false": [], "plain": [], "import torch, torch._dynamo": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(opts.repeats):  # interleaved, so drifting machine load hits both alike
            # The first run fills the decoded-data cache if it is cold; the no-cache rows decode every time.
            for name, extra in (("cl-bench", []), ("cl-bench, data.cache=false", ["data.cache=false"])):
                wall, m = cl_bench([*WORKLOAD, f"data.root={opts.data}", *extra], Path(tmp) / f"run{i}{bool(extra)}")
                rows[name].append({"wall_s": wall, "train_eval_s": m["time_s"], "avg_acc": m["avg_acc"],
                                   "peak_mem_mb": m["peak_mem_mb"]})
            wall, out = timed([sys.executable, "scripts/plain_split_mnist.py", opts.data])
            rows["plain"].append({"wall_s": wall, "train_eval_s": float(out.split()[1])})
            # The floor every PyTorch tool pays here: torch, and torch._dynamo, which torch.optim's first
            # step imports, in an interpreter that does nothing else (and then tears them down on exit).
            wall, _ = timed([sys.executable, "-c", "import torch, torch._dynamo"])
            rows["import torch, torch._dynamo"].append({"wall_s": wall})
    med = {k: median_rows(v) for k, v in rows.items()}
    return {"repeats": opts.repeats, "median": med,
            "ratio_wall": med["cl-bench"]["wall_s"] / med["plain"]["wall_s"],
            "ratio_train_eval": med["cl-bench"]["train_eval_s"] / med["plain"]["train_eval_s"],
            "ratio_wall_no_cache": med["cl-bench, data.cache=false"]["wall_s"] / med["plain"]["wall_s"]}


def peers(opts) -> dict:
    python = Path(opts.avalanche_python)
    if not python.is_file():
        return skip(f"peers skipped: no Avalanche environment at {python}. Set one up (outside cl-bench's own "
                    f".venv) with `bash scripts/setup_avalanche_env.sh ../avalanche-venv`, or pass --avalanche-python."
                    f" Mammoth is not installable here (not on PyPI).")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (theirs, ours) in PEERS.items():
            rows = {"cl-bench": [], "avalanche": []}
            for i in range(opts.repeats):
                wall, m = cl_bench([*WORKLOAD, f"data.root={opts.data}", *ours], Path(tmp) / f"{name}{i}")
                rows["cl-bench"].append({"wall_s": wall, "train_eval_s": m["time_s"], "avg_acc": m["avg_acc"]})
                wall, text = timed([str(python), "scripts/avalanche_split_mnist.py", opts.data, *theirs])
                r = json.loads(text.strip().splitlines()[-1])
                acc = r.get("task_aware_avg_acc", r["final_avg_acc"])  # packnet: scored as cl-bench's task scenario
                rows["avalanche"].append({"wall_s": wall, "train_eval_s": r["train_eval_s"], "avg_acc": acc})
            med = {k: median_rows(v) for k, v in rows.items()}
            out[name] = {"median": med, "speedup_wall": med["avalanche"]["wall_s"] / med["cl-bench"]["wall_s"],
                         "speedup_train_eval": med["avalanche"]["train_eval_s"] / med["cl-bench"]["train_eval_s"],
                         "cl_bench_overrides": ours, "avalanche_args": theirs}
            print(name, json.dumps(out[name]["median"]), file=sys.stderr)
    return {"repeats": opts.repeats, "strategies": out}


def method_rows(opts) -> list[tuple[str, list[str]]]:
    """(label, overrides) for each workload of the methods section: each method's own defaults (no paper setting),
    on the MLP of 256 units the section was first measured with."""
    cifar = ["dataset=split_cifar10", "setting=none", "backbone=resnet18_reduced", f"data.root={opts.cifar_root}",
             "dataset.samples_per_task=500"]
    mnist = ["dataset=split_mnist", "setting=none", f"data.root={opts.data}"]
    return [("split_mnist/mlp", [*mnist, "backbone=mlp", "backbone.hidden_sizes=[256,256]"]),
            ("split_mnist/convnet", [*mnist, "backbone=convnet", "backbone.channels=[16,32]",
                                     "dataset.samples_per_task=500"]),
            ("split_cifar10/resnet18_reduced", cifar)]


def short(name: str) -> list[str]:
    """The method's extra phases (goal models, compacting, retraining) cut to one epoch each (its class's
    short_schedule), so that a comparison is of one training pass."""
    from cl_bench.methods import METHODS
    if name not in METHODS:
        return []
    cls = METHODS[name]  # a checkout from before Traits (--before) kept short_schedule on the class
    return list(cls.traits.short_schedule if hasattr(cls, "traits") else cls.short_schedule)


def is_online(name: str) -> bool:
    """Whether a method learns from a stream in one pass, in batches of its own (its class says so: an OnlineMethod;
    a name no longer registered, in stored results, is not)."""
    from cl_bench.methods import METHODS
    from cl_bench.methods.online import OnlineMethod
    return issubclass(METHODS.get(name, object), OnlineMethod)


def backbone_has(data: list[str], needs) -> bool:
    """Whether a workload's backbone (its backbone=NAME override) has every capability a method needs (methods.build
    refuses the run otherwise: gated needs conv layers, hat a chain of layers)."""
    from cl_bench.backbones import BACKBONES
    name = next(a.split("=", 1)[1] for a in data if a.startswith("backbone="))
    return needs <= BACKBONES[name][0].capabilities


def methods(opts) -> dict:
    from cl_bench.methods import METHODS
    out = {}
    workloads = method_rows(opts)
    if not opts.cifar:  # resnet18_reduced on 2 CPU cores: minutes per method (A-GEM alone 140 s)
        workloads = workloads[:2]
    elif not (Path(opts.cifar_root) / "cifar-10-batches-py").is_dir():
        return skip(f"no {opts.cifar_root}/cifar-10-batches-py: write it from the CIFAR-10 files you have with "
                    f"cl-bench data prepare cifar10 --from SRC --root {opts.cifar_root}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, data in workloads:
            for scenario in ("task", "class"):
                for name, cls in sorted(METHODS.items()):
                    if scenario not in cls.traits.scenarios or not backbone_has(data, cls.traits.needs):
                        continue
                    args = [f"method={name}", f"scenario={scenario}", *data, "logger=none",
                            "checkpoint.enabled=false", "hardware.threads=2"]
                    if is_online(name) and not any(a.startswith("dataset.samples_per_task") for a in data):
                        args.append(f"dataset.samples_per_task={ONLINE_SAMPLES}")
                    # One epoch at finetune's batch size for every method that has epochs: the mask methods
                    # default to batch 32 (CPG's scripts), which alone would double their steps.
                    args += [] if is_online(name) else ["method.epochs=1", "method.batch_size=64"]
                    args += short(name) + (["method.ewc_lambda=100"] if name == "ewc" else [])
                    try:
                        _, m = cl_bench(args, Path(tmp) / f"{label.replace('/', '_')}_{name}_{scenario}")
                    except Failed as e:
                        out[f"{label}/{name}/{scenario}"] = {"failed": str(e)}
                        continue
                    out[f"{label}/{name}/{scenario}"] = {"time_s": m["time_s"], "avg_acc": m["avg_acc"],
                                                         "peak_mem_mb": m["peak_mem_mb"]}
                    print(label, name, scenario, round(m["time_s"], 2), file=sys.stderr)
    return {"runs": out}


SCALING_TASKS = (5, 10, 20)
# Each method on permuted MNIST (1,000 samples per task, one epoch); class scenario (shared labels, as GEM)
# where supported, else the task scenario. gated runs on a small conv net in the task scenario: its
# class-scenario inference runs every task's path, linear in the tasks by design (see the note in the table).
SCALING = {
    "finetune": [], "ewc": [], "lwf": [], "er": [], "joint": [], "independent": ["scenario=task"],
    "nccl": [], "agem": [], "lamaml": [f"dataset.samples_per_task={ONLINE_SAMPLES}"],  # its meta-steps are slow
    "packnet": ["scenario=task", *short("packnet")], "piggyback": ["scenario=task"],
    "cpg": ["scenario=task", *short("cpg")],
    "gated": ["scenario=task", "backbone=convnet", "backbone.channels=[16,32]"],
}


# On 2 CPU cores, gated's conv paths take ~15 s to evaluate 5 permuted test sets; 20 tasks would take ~10 min.
CPU_SLOW = {"gated"}


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def scaling(opts) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in SCALING.items():
            for n in SCALING_TASKS if name not in CPU_SLOW or opts.all else SCALING_TASKS[:1]:
                run_dir = Path(tmp) / f"{name}{n}"
                args = [f"method={name}", "dataset=permuted_mnist", "setting=none", f"dataset.num_tasks={n}",
                        "scenario=class", "backbone=mlp", "backbone.hidden_sizes=[256,256]", "method.epochs=1",
                        f"data.root={opts.data}", "logger=none",
                        "hardware.threads=2", *extra]
                _, m = cl_bench(args, run_dir)
                learn, rest = task_times(run_dir)
                last = run_dir / "checkpoints" / f"task_{n - 1:03d}"
                out[f"{name}/{n}"] = {"time_per_task_s": m["time_s"] / n, "first_learn_s": learn[0],
                                      "last_learn_s": learn[-1], "last_rest_s": rest[-1],
                                      "peak_mem_mb": m["peak_mem_mb"], "checkpoint_mb": dir_mb(last),
                                      "avg_acc": m["avg_acc"]}
                print(name, n, json.dumps(out[f"{name}/{n}"]), file=sys.stderr)
    plot_scaling(out)
    return {"runs": out}


def task_times(run_dir: Path) -> tuple[list[float], list[float]]:
    """Per task, from the run's events: seconds learning (task_start to its last epoch_end) and seconds after
    that (the evaluation of every seen task, and post-training work such as EWC's Fisher pass)."""
    learn, rest, start, last_epoch = [], [], 0.0, 0.0
    from cl_bench.recorders import read_events
    for e in read_events(run_dir):
        if e["event"] == "task_start":
            start = last_epoch = e["time"]
        elif e["event"] == "epoch_end":
            last_epoch = e["time"]
        elif e["event"] == "task_end":
            learn.append(last_epoch - start)
            rest.append(e["time"] - last_epoch)
    return learn, rest


def plot_scaling(runs: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for name in SCALING:
        for ax, key in zip(axes, ("last_learn_s", "last_rest_s", "checkpoint_mb")):
            counts = [n for n in SCALING_TASKS if f"{name}/{n}" in runs]
            ax.plot(counts, [runs[f"{name}/{n}"][key] for n in counts], marker="o", label=name)
    for ax, title in zip(axes, ("learning the last task (s)", "evaluating after the last task (s)",
                                "last checkpoint (MB)")):
        ax.set_xlabel("tasks (permuted MNIST)")
        ax.set_title(title)
        ax.set_xticks(SCALING_TASKS)
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    (DOCS / "img").mkdir(parents=True, exist_ok=True)
    fig.savefig(DOCS / "img" / "scaling.png", dpi=110)


def gpu(opts) -> dict:
    """A GPU check's result (scripts/gpu_check.sh writes DIR/gpu_check.json), kept here with the other sections."""
    if not opts.gpu_check:
        sys.exit("bench: gpu records a GPU check: pass --gpu-check DIR/gpu_check.json (bash scripts/gpu_check.sh "
                 "writes it, on a GPU machine)")
    result: dict = {}
    for path in opts.gpu_check:  # the two calls' files (--sections A, B): their sections' rows merged, in order
        part = json.loads(Path(path).read_text())
        if part.get("cpu"):
            sys.exit(f"bench: {path} is a --cpu rehearsal, not a GPU's figures")
        for section in ("settings", "graphs", "jobs", "digits"):
            part[section] = {**result.get(section, {}), **part.get(section, {})} or None
        result.update({k: v for k, v in part.items() if v is not None})
        result["seconds"] = result.get("calls_seconds", 0) + part["seconds"]
        result["calls_seconds"] = result["seconds"]
    result.pop("calls_seconds", None)
    result["flagged"] = sorted({f for path in opts.gpu_check for f in json.loads(Path(path).read_text())["flagged"]})
    return result


# The image workload: split_cifar10 with pad-crop and flip, SGD 0.01/0.9, batch 32, one epoch a task, a random
# subset a task (the same size for every tool), evaluation of the seen tasks after each. (method, cl-bench
# overrides, the plain loop's method, Avalanche's strategy or why there is none).
IMAGE_JOB = ["dataset=split_cifar10", "setting=none", "data.val_fraction=0", "method.epochs=1", "method.batch_size=32",
             "method.lr=0.01", "method.momentum=0.9", "logger=none", "checkpoint.enabled=false"]
IMAGE_METHODS = {
    "finetune": (["method=finetune", "scenario=class"], "finetune", "naive"),
    # the memory both peers keep: written at each task's end, an equal share per task; CE over the seen classes
    "er": (["method=er", "scenario=class", "method.memory_size=500", "method.memory_policy=balanced",
            "method.ce_outputs=seen"], "er", "replay"),
    # one epoch, prune half, one epoch retraining at the same lr, plain SGD without weight decay, PyTorch's init
    "packnet": (["method=packnet", "scenario=task", "method.prune_ratio=0.5", "method.retrain_epochs=1",
                 "method.retrain_lr=0.01", "method.lr_milestones=[]", "method.retrain_lr_milestones=[]",
                 "method.nesterov=false", "method.weight_decay=0", "method.init=pytorch"], "packnet",
                "Avalanche's PackNet refuses networks with BatchNorm2d (both of these have them)"),
}
IMAGE_SIZES = {  # backbone: (cl-bench overrides, training samples a task, repeats; None: --repeats)
    "convnet": (["backbone=convnet"], 2000, None),
    "resnet18_reduced": (["backbone=resnet18_reduced"], 1000, 1),  # ~0.4 s a step here: one repeat
}
IMAGE_TEST_SAMPLES = 1000
IMAGE_WORKERS = 2  # DataLoader workers for the peers: the machine's cores


def images(opts) -> dict:
    if not (Path(opts.cifar_root) / "cifar-10-batches-py").is_dir():
        return skip(f"no {opts.cifar_root}/cifar-10-batches-py: write it with cl-bench data prepare cifar10 --from "
                    f"SRC --root {opts.cifar_root}")
    python = Path(opts.avalanche_python)
    have_avalanche = python.is_file()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backbone, (ours_backbone, samples, repeats) in IMAGE_SIZES.items():
            sizes = [f"--backbone={backbone}", f"--samples={samples}", f"--test-samples={IMAGE_TEST_SAMPLES}",
                     f"--workers={IMAGE_WORKERS}"]
            for name, (ours, plain, theirs) in IMAGE_METHODS.items():
                rows = {"cl-bench": [], "plain DataLoader loop": [], "avalanche": []}
                # Interleaved, so drifting load hits every tool alike; repeat i is seed i in every tool (its
                # subsets, initialisation and draws), so the accuracies say how far the tools are apart beyond
                # what a seed moves.
                for i in range(repeats or opts.repeats):
                    args = [*IMAGE_JOB, *ours_backbone, *ours, f"data.root={opts.cifar_root}",
                            f"dataset.samples_per_task={samples}",
                            f"dataset.test_samples_per_task={IMAGE_TEST_SAMPLES}", f"seed={i}"]
                    wall, m = cl_bench(args, Path(tmp) / f"{backbone}_{name}{i}")
                    rows["cl-bench"].append({"wall_s": wall, "train_eval_s": m["time_s"], "avg_acc": m["avg_acc"]})
                    peers = [("plain DataLoader loop", [sys.executable, "scripts/plain_split_cifar10.py", plain])]
                    if have_avalanche and " " not in theirs:
                        peers.append(("avalanche", [str(python), "scripts/avalanche_split_cifar10.py", theirs]))
                    for peer, cmd in peers:
                        wall, text = timed([*cmd[:2], opts.cifar_root, *cmd[2:], *sizes, f"--seed={i}"])
                        r = json.loads(text.strip().splitlines()[-1])
                        rows[peer].append({"wall_s": wall, "train_eval_s": r["train_eval_s"],
                                           "avg_acc": r["final_avg_acc"]})
                med = {k: {**median_rows(v), **accuracy_over_seeds(v)} for k, v in rows.items() if v}
                if name == "finetune":  # forward, backward and step alone on ready tensors: what no tool can beat
                    med["compute floor"] = {"train_s": compute_floor(backbone, samples, opts.repeats)}
                out[f"{backbone}/{name}"] = {"median": med, "repeats": repeats or opts.repeats, "samples": samples,
                                             "cl_bench_overrides": ours,
                                             **({} if " " not in theirs else {"no_avalanche": theirs})}
                print(backbone, name, json.dumps(med), file=sys.stderr)
        profile = Path(tmp) / "profile"  # where cl-bench's time goes on the conv net: one task under the profiler
        cl_bench([*IMAGE_JOB, *IMAGE_METHODS["finetune"][0], "backbone=convnet", f"data.root={opts.cifar_root}",
                  f"dataset.samples_per_task={IMAGE_SIZES['convnet'][1]}",
                  f"dataset.test_samples_per_task={IMAGE_TEST_SAMPLES}", "debug=profile"], profile)
        top = top_operators((profile / "profile" / "task_000.txt").read_text(), 8)
    return {"runs": out, "avalanche": have_avalanche, "test_samples": IMAGE_TEST_SAMPLES, "workers": IMAGE_WORKERS,
            "profile_convnet_finetune": top}


def compute_floor(backbone: str, samples: int, repeats: int) -> float:
    """Seconds of the training steps alone for finetune's job (5 tasks of `samples` at batch 32): the median
    step of scripts/ddp_step.py on ready tensors, on this machine's threads, times the number of steps."""
    cmd = [sys.executable, "scripts/ddp_step.py", "single", f"--backbone={backbone}", "--batch-size=32",
           f"--threads={os.cpu_count()}", "--steps=40"]
    step_ms = statistics.median(json.loads(timed(cmd)[1].strip().splitlines()[-1])["step_ms"] for _ in range(repeats))
    return step_ms / 1000 * 5 * -(-samples // 32)


EVAL_SIZES = (50, 100, 256, 1000)


def evalbatch(opts) -> dict:
    """Seconds to score 5,000 CIFAR-shaped images in eval mode, by batch size, on this machine's threads: what
    the choice of data.eval_batch_size rests on. Interleaved over the repeats; medians."""
    import torch
    sys.path.insert(0, str(ROOT))
    from cl_bench.backbones import build
    x = torch.randn(5000, 3, 32, 32)

    @torch.no_grad()
    def seconds(net, size: int) -> float:
        start = time.perf_counter()
        for part in x.split(size):
            net(part)
        return time.perf_counter() - start
    out = {}
    for backbone in ("convnet", "resnet18_reduced"):
        net = build({"name": backbone}, (3, 32, 32)).eval()
        seconds(net, EVAL_SIZES[0])  # warm-up: first-call allocations
        runs = {size: [] for size in EVAL_SIZES}
        for _ in range(opts.repeats):
            for size in EVAL_SIZES:
                runs[size].append(seconds(net, size))
        out[backbone] = {str(size): statistics.median(v) for size, v in runs.items()}
        print(backbone, json.dumps(out[backbone]), file=sys.stderr)
    result = {"seconds": out, "images": len(x), "threads": torch.get_num_threads(), "repeats": opts.repeats}
    if (Path(opts.cifar_root) / "cifar-10-batches-py").is_dir():  # what it does to the image workload's finetune
        job = [*IMAGE_JOB, *IMAGE_METHODS["finetune"][0], "backbone=convnet", f"data.root={opts.cifar_root}",
               f"dataset.samples_per_task={IMAGE_SIZES['convnet'][1]}",
               f"dataset.test_samples_per_task={IMAGE_TEST_SAMPLES}"]
        rows = {"1000": [], "100": []}
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(opts.repeats):
                for size in rows:
                    _, m = cl_bench([*job, f"data.eval_batch_size={size}"], Path(tmp) / f"{size}_{i}")
                    rows[size].append({"train_eval_s": m["time_s"], "avg_acc": m["avg_acc"]})
        result["workload"] = {size: median_rows(v) for size, v in rows.items()}
    return result


MASK_METHODS = ("finetune", "packnet", "piggyback", "cpg")


def cl_bench_at(src: Path, overrides: list[str], run_dir: Path) -> dict:
    """metrics.json of `cl-bench train` run from the checkout at src (its own package, this interpreter)."""
    proc = subprocess.run([sys.executable, "-m", "cl_bench", "train", *overrides, f"hydra.run.dir={run_dir}"],
                          cwd=src, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(src)})
    if proc.returncode != 0:
        raise Failed(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}")
    return json.loads((run_dir / "metrics.json").read_text())


def top_operators(table: str, n: int = 6) -> list[tuple[str, float]]:
    """The first n rows of a profiler table sorted by self CPU time: (operator, self CPU %)."""
    rows = []
    for line in table.splitlines()[3:]:
        parts = line.split()
        if len(parts) < 7 or not parts[1].endswith("%"):
            continue
        rows.append((parts[0], float(parts[1].rstrip("%"))))
    return sorted(rows, key=lambda r: -r[1])[:n]


def masks(opts) -> dict:
    """Each mask method's train+eval time over finetune's on the methods section's MLP and conv net workloads (the
    task scenario, one epoch at batch 64, the extra phases cut to one epoch), for this checkout and, with --before,
    another one, interleaved; and the top operators of task 1 of packnet and cpg under debug=profile here."""
    checkouts = {"after": ROOT, **({"before": Path(opts.before).resolve()} if opts.before else {})}
    out = {"runs": {}, "profiles": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for label, data in method_rows(opts)[:2]:
            times = {(c, n): [] for c in checkouts for n in MASK_METHODS}
            for i in range(opts.repeats):
                for (which, src), name in ((c, n) for c in checkouts.items() for n in MASK_METHODS):
                    args = [f"method={name}", "scenario=task", *data, "logger=none", "checkpoint.enabled=false",
                            "hardware.threads=2", "method.epochs=1", "method.batch_size=64", *short(name)]
                    m = cl_bench_at(src, args, Path(tmp) / f"{label.replace('/', '_')}_{which}_{name}{i}")
                    times[which, name].append(m["time_s"])
            for which in checkouts:
                base = statistics.median(times[which, "finetune"])
                out["runs"][f"{label}/{which}"] = {n: {"time_s": statistics.median(times[which, n]),
                                                       "over_finetune": statistics.median(times[which, n]) / base}
                                                   for n in MASK_METHODS}
            print(label, json.dumps(out["runs"]), file=sys.stderr)
        for name in ("packnet", "cpg"):
            run_dir = Path(tmp) / f"profile_{name}"
            cl_bench_at(ROOT, [f"method={name}", "scenario=task", *method_rows(opts)[0][1], "debug=profile",
                               "profile_task=1", "method.epochs=1", "method.batch_size=64", *short(name)],
                        run_dir)
            out["profiles"][name] = top_operators((run_dir / "profile" / "task_001.txt").read_text())
    return {"repeats": opts.repeats, "before": opts.before_label, **out}


# --- launches (issue 46): aten ops and CPU time per training step -----------------------------------------------------
# Each method, with its own defaults (the task scenario where it has one) and its default backbone on split_digits
# (no download), learns the first of two tasks in a few epochs, its extra phases cut short as in the methods section;
# in the second task LAUNCH_WARMUP steps go unmeasured, then LAUNCH_STEPS are timed and LAUNCH_STEPS more profiled,
# in one process on one thread. A step is what happens between two recorder.step() calls: one optimiser step of the
# epoch loop, or one incoming batch with all its glances for the online methods; a step across an epoch's end (the
# epoch's evaluation and schedules) is neither timed nor counted.
LAUNCH_WARMUP, LAUNCH_STEPS = 2, 10
LAUNCH_TRAIN = 259  # split_digits' training samples in a task (the rest are its validation and test samples)
LAUNCH_COMMON = ["dataset=split_digits", "setting=none", "dataset.num_tasks=2", "logger=none",
                 "checkpoint.enabled=false", "hardware.threads=1", "seed=0"]
# The online methods' option method.fused_heads (issue 46; on by default since issue 73) off: each head apart, a row
# of its own. A checkout from before issue 46 has no such key, so these rows are measured on `after` alone.
LAUNCH_PER_HEAD = ("agem", "lamaml")
PER_HEAD = ", per-head heads"


def launch_rows() -> dict[str, list[str]]:
    """label: overrides, a row a method, and CPG past its mask_lr_stop (picking scores at lr 0) as a row of its own."""
    from cl_bench.methods import METHODS
    rows = {name: [f"method={name}", f"scenario={'task' if 'task' in cls.traits.scenarios else 'class'}",
                   *short(name)] for name, cls in sorted(METHODS.items())}
    # CPG's first task frees weights here (every ramp step releases, any sparsity passes), so that the second owns
    # some: a task owning none keeps its mask lr to the end (the official rule), and mask_lr_stop would not show.
    rows["cpg"] += ["method.prune_frequency=1", "method.train_acc_bar=0", "method.allow_acc_loss=0.99"]
    rows["cpg, mask lr 0"] = [*rows["cpg"], "method.mask_lr_stop=0"]
    for name in LAUNCH_PER_HEAD:
        rows[name + PER_HEAD] = [*rows[name], "method.fused_heads=false"]
    return rows


class LaunchesDone(Exception):
    """Enough steps were measured: the worker stops the task there."""


class StepProbe:
    """The recorder of a launches worker: in task task_id, the steps after LAUNCH_WARMUP are timed (LAUNCH_STEPS),
    then profiled (as many again), a step at a time."""

    def __init__(self, task_id: int):
        self.task_id, self.on, self.start, self.prof, self.warmed = task_id, False, None, None, 0
        self.seconds, self.ops, self.calls = [], [], []

    def __getattr__(self, event):  # the events a probe has no use for (warnings)
        return lambda *args, **kwargs: None

    def task_start(self, task) -> None:
        self.on = task.id == self.task_id

    def epoch_start(self, *args) -> None:
        self.boundary(ends_step=False)

    def epoch_end(self, *args) -> None:  # the step in progress spans the epoch's end: dropped
        self.boundary(ends_step=False, opens_step=False)

    def step(self) -> None:
        self.boundary(ends_step=True)

    def boundary(self, ends_step: bool, opens_step: bool = True) -> None:
        if not self.on:
            return
        now = time.perf_counter()
        prof, self.prof = self.prof, None
        if prof is not None:
            prof.stop()
        if ends_step and self.start is not None:
            self.record(now - self.start, prof)
        if len(self.ops) == LAUNCH_STEPS:
            raise LaunchesDone
        self.start = None
        if opens_step:
            if len(self.seconds) == LAUNCH_STEPS:  # the timed steps are done: profile the next one
                import torch
                self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                self.prof.start()
            self.start = time.perf_counter()

    def record(self, seconds: float, prof) -> None:
        if prof is not None:
            aten = [e for e in prof.events() if e.name.startswith("aten::")]
            self.ops.append(len(aten))
            self.calls.append(sum(not aten_ancestor(e) for e in aten))
        elif self.warmed < LAUNCH_WARMUP:
            self.warmed += 1
        else:
            self.seconds.append(seconds)


def aten_ancestor(event) -> bool:
    """Whether an aten op ran inside another (a composite's parts, a CPU foreach op's per-tensor loop)."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def launch_worker(overrides: list[str]) -> dict:
    """In this process (its cl_bench from PYTHONPATH): the method's steps in task 1, measured by a StepProbe."""
    from cl_bench import api, train
    from cl_bench.recorders import Recorders
    args = [*LAUNCH_COMMON, *overrides]
    cfg = api.compose(*args)
    if not is_online(cfg.method.name):  # epochs enough for the steps to measure
        per_epoch = -(-LAUNCH_TRAIN // cfg.method.batch_size)
        cfg = api.compose(*args, f"method.epochs={-(-(LAUNCH_WARMUP + 2 * LAUNCH_STEPS) // per_epoch) + 1}")
    probe = StepProbe(task_id=1)
    scenario, method, _ = train.build(cfg, Recorders([probe]))
    try:
        for task in scenario.tasks:
            probe.task_start(task)
            method.learn(task)
    except LaunchesDone:
        pass
    if not probe.ops:
        return {"failed": "task 1 ran no step to profile"}
    return {"step_ms": 1e3 * statistics.median(probe.seconds), "aten_ops": statistics.mean(probe.ops),
            "aten_calls": statistics.mean(probe.calls), "epochs": cfg.method.epochs}


def launch_workers(rows: list[list[str]]) -> list[dict]:
    """launch_worker on each row in turn, in this process; a row that fails says why in one line."""
    out = []
    for overrides in rows:
        try:
            out.append(launch_worker(overrides))
        except Exception as e:  # noqa: BLE001  one method's failure is its row's, not the section's
            out.append({"failed": f"{type(e).__name__}: {e}".splitlines()[0]})
    return out


LAUNCH_GROUP = 6  # rows a worker process measures: the checkouts alternate every so many rows


def launches(opts) -> dict:
    """Per method, this checkout's step and, with --before DIR, that checkout's (alternating every LAUNCH_GROUP
    rows, one process each): aten ops and top-level aten calls per step (torch.profiler), median CPU step time."""
    checkouts = {"before": Path(opts.before).resolve()} if opts.before else {}
    checkouts["after"] = Path(opts.after).resolve() if opts.after else ROOT
    rows = {k: v for k, v in launch_rows().items()
            if not opts.only or k.startswith(tuple(opts.only.split(",")))}
    labels = list(rows)
    out = {label: {"overrides": " ".join(rows[label])} for label in labels}
    for g in range(0, len(labels), LAUNCH_GROUP):
        group = labels[g:g + LAUNCH_GROUP]
        for which, src in checkouts.items():
            mine = [k for k in group if which == "after" or not k.endswith(PER_HEAD)]
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "launches", "--worker",
                                   json.dumps([rows[k] for k in mine])], cwd=src, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"})
            if proc.returncode != 0:
                raise Failed(f"launches worker at {src}: " + (proc.stderr.strip().splitlines() or ["?"])[-1])
            for label, r in zip(mine, json.loads(proc.stdout.strip().splitlines()[-1]), strict=True):
                epochs = r.pop("epochs", None)  # the same in both checkouts: kept once, with the row's overrides
                if epochs is not None and which == "after":
                    out[label]["overrides"] += f" method.epochs={epochs}"
                out[label][which] = r
                print(label, which, json.dumps(r), file=sys.stderr)
    return {"before": opts.before_label, "after_checkout": bool(opts.after), "warmup": LAUNCH_WARMUP,
            "steps": LAUNCH_STEPS,
            "common": " ".join(LAUNCH_COMMON), "runs": out}


COST_SAMPLES = 96  # training samples a task in the measured runs (the second task's learning is timed)
ONLINE_COST = ["logger=none"]
LA_CIFAR_COST = ["method=lamaml", "dataset=split_cifar100"]  # its paper setting: make repro-nccl-cifar's La-MAML
# The paper settings: each is run here on a few samples a task (two tasks, every phase one epoch) and timed per
# training sample of its last task; the full schedule's sample passes are counted from its preset.
# (label, data, overrides, measured passes a sample, full tasks, full samples a task, full passes a sample, how)
CPG_SHORT = ["method.goal_source=none", "method.prune_targets=[0.5]", "method.prune_epochs=1",
             "method.prune_ramp_epochs=1", "method.retrain_epochs=1"]
COSTS = [
    ("cpg_cifar100_20", "cifar100", ["method=cpg", "dataset=cifar100_20", "method.epochs=1", *CPG_SHORT], 3, 20,
     2250, 430,
     "per task: goal model 100 epochs + training 100 + compacting 20 at each of 10 sparsity targets + picking refit "
     "30 (no growth round counted; each growth repeats training and compacting)"),
    # a small validation split: its evaluation through every task's path is not timed, but would take minutes here
    ("gated_split_cifar10 (class)", "cifar10", ["method=gated", "dataset=split_cifar10", "scenario=class",
                                                "method.epochs=1", "data.val_fraction=0.01"], 1, 5, 9000, 30,
     "30 epochs a task; the joint objective trains the task classifier in the same steps"),
    ("gated_split_svhn (class), at CIFAR-10's measured rate", None, None, None, 5, 13186, 30,
     "SVHN's 73,257 training images less 10 % validation over 5 tasks, the same network and schedule"),
    ("nccl, gem_split_cifar100 single pass", "cifar100", ["method=nccl", "dataset=split_cifar100",
                                                          *ONLINE_COST], 1, 20, 2250, 1, "one pass, 5 glances a batch"),
    ("nccl, gem_split_cifar100 multi pass", "cifar100", ["method=nccl", "dataset=split_cifar100",
                                                         "method.inner_steps=1", *ONLINE_COST], 1, 20, 2250, 10,
     "10 passes, 1 glance"),
    ("lamaml, gem_split_cifar100 single pass", "cifar100", LA_CIFAR_COST, 1, 20, 2250, 1,
     "one pass, 10 glances, second order, pc_cnn"),
    ("lamaml, gem_split_cifar100 multi pass", "cifar100", [*LA_CIFAR_COST, "method.inner_steps=1"], 1, 20, 2250, 10,
     "10 passes, 1 glance"),
]


def write_random_cifar100(root: Path, per_class: int) -> None:
    """cifar-100-python/ in the canonical format with random pixels: the cost of a step does not depend on them."""
    import pickle

    import numpy as np
    rng = np.random.default_rng(0)
    coarse_of = np.repeat(np.arange(20), 5)
    (root / "cifar-100-python").mkdir(parents=True)
    for split, n in (("train", per_class), ("test", 4)):
        fine = np.repeat(np.arange(100), n)
        batch = {"data": rng.integers(0, 256, (len(fine), 3072), dtype=np.uint8), "fine_labels": fine.tolist(),
                 "coarse_labels": coarse_of[fine].tolist()}
        (root / "cifar-100-python" / split).write_bytes(pickle.dumps(batch, protocol=3))


def costs(opts) -> dict:
    """Every setting, or with --only the settings whose labels start with those words (the others kept as
    docs/benchmarks.json has them)."""
    keep = {} if not opts.only else json.loads((opts.docs / "benchmarks.json").read_text())["costs"]["settings"]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"cifar100": Path(tmp) / "c100", "cifar10": Path(opts.cifar_root)}
        write_random_cifar100(roots["cifar100"], per_class=30)
        rate = None
        for label, data, overrides, passes, tasks, samples, full_passes, how in COSTS:
            if opts.only and not label.startswith(tuple(opts.only.split(","))):
                if label in keep:
                    out[label] = keep[label]
                continue
            if data is not None:
                args = [*overrides, f"data.root={roots[data]}", "dataset.num_tasks=2",
                        f"dataset.samples_per_task={COST_SAMPLES}", "dataset.test_samples_per_task=20",
                        "logger=none", "checkpoint.enabled=false"]
                run_dir = Path(tmp) / label.split()[0].replace(",", "") / str(len(out))
                cl_bench(args, run_dir)
                learn, _ = task_times(run_dir)
                rate = learn[-1] / (COST_SAMPLES * passes)  # seconds per sample pass, the second task's
            if rate is None:  # a setting at another's rate, whose measurement was not run
                continue
            full = tasks * samples * full_passes
            out[label] = {"s_per_sample": rate, "tasks": tasks, "samples": samples, "passes": full_passes,
                          "cpu_hours": rate * full / 3600, "schedule": how}
            print(label, json.dumps(out[label]), file=sys.stderr)
    return {"settings": out, "measured_samples": COST_SAMPLES}


DDP_MODES = ("single", "ddp", "per_param")


def ddp(opts) -> dict:
    """Step time of one global batch of 128 on 2 CPU processes (gloo), one thread each, and on one process;
    then cl-bench's finetune workload as one process and under torchrun with hardware=ddp."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    steps = {}
    for backbone in ("convnet", "resnet18_reduced"):
        rows = {mode: [] for mode in DDP_MODES}
        for _ in range(opts.repeats):  # interleaved, so drifting machine load hits every mode alike
            for mode in DDP_MODES:
                cmd = [*(torchrun if mode != "single" else [sys.executable]), "scripts/ddp_step.py", mode,
                       f"--backbone={backbone}"]
                rows[mode].append(json.loads(timed(cmd)[1].strip().splitlines()[-1])["step_ms"])
        steps[backbone] = {mode: statistics.median(v) for mode, v in rows.items()}
        print(backbone, json.dumps(steps[backbone]), file=sys.stderr)
    runs = {"one process": [], "hardware=ddp, 2 processes": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(opts.repeats):
            job = [*WORKLOAD, f"data.root={opts.data}"]
            runs["one process"].append(cl_bench([*job, "hardware=cpu", "hardware.threads=1"], Path(tmp) / f"one{i}")[1])
            timed([*torchrun, "-m", "cl_bench", "train", *job, "hardware=ddp", "hardware.threads=1",
                   f"hydra.run.dir={Path(tmp) / f'ddp{i}'}"])
            runs["hardware=ddp, 2 processes"].append(json.loads((Path(tmp) / f"ddp{i}" / "metrics.json").read_text()))
    workload = {k: {"train_eval_s": statistics.median(m["time_s"] for m in v),
                    "avg_acc": statistics.median(m["avg_acc"] for m in v)} for k, v in runs.items()}
    return {"repeats": opts.repeats, "step_ms": steps, "workload": workload}


# Small-batch online training, where threads beyond the cores cost the most: batch 10, one epoch, an MLP 2x100.
ONLINE_WORKLOAD = ["method=finetune", "dataset=split_mnist", "setting=none", "backbone=mlp", "scenario=class",
                   "method.batch_size=10", "method.epochs=1", "dataset.samples_per_task=1000",
                   "logger=none", "checkpoint.enabled=false"]


def threads(opts) -> dict:
    """A multirun of one job per core through the parallel launcher (joblib), each job's train+eval seconds: with
    the default threads (the cores shared by the jobs: one each) and with every job taking every core
    (hardware.threads=cores, what jobs started side by side without a shared count get)."""
    cores = len(os.sched_getaffinity(0))
    modes = {"shared (default)": [], f"every core each (hardware.threads={cores})": [f"hardware.threads={cores}"]}
    rows = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(opts.repeats):  # interleaved, so drifting machine load hits both alike
            for j, (mode, extra) in enumerate(modes.items()):
                sweep = Path(tmp) / f"{i}-{j}"
                start = time.perf_counter()
                timed([sys.executable, "-m", "cl_bench", "train", "-m", *ONLINE_WORKLOAD, f"data.root={opts.data}",
                       "hardware=cpu", *extra, "hydra/launcher=parallel", f"hydra.launcher.n_jobs={cores}",
                       f"seed={','.join(map(str, range(cores)))}", f"hydra.sweep.dir={sweep}"])
                wall = time.perf_counter() - start
                jobs = [json.loads(m.read_text())["time_s"] for m in sorted(sweep.glob("*/metrics.json"))]
                rows[mode].append({"sweep_wall_s": wall, "job_train_eval_s": statistics.median(jobs)})
    med = {mode: median_rows(r) for mode, r in rows.items()}
    shared, every = med.values()
    return {"repeats": opts.repeats, "cores": cores, "jobs": cores, "median": med,
            "ratio_job": every["job_train_eval_s"] / shared["job_train_eval_s"],
            "ratio_sweep": every["sweep_wall_s"] / shared["sweep_wall_s"]}


# label: overrides; stream's data.workers default is 0 on a CPU (cl_bench/data/residency.py stream_workers)
RESIDENCIES = {"device": ["data.residency=device"], "host": ["data.residency=host"],
               "stream": ["data.residency=stream"], "stream, 2 workers": ["data.residency=stream", "data.workers=2"]}
BIG_CLASSES, BIG_TEST = 200, 10_000  # the large dataset: Tiny ImageNet's shape (200 classes, 3×64×64)


def residency(opts) -> dict:
    """The overhead workload (Split MNIST, MLP, batch 128) under each data.residency, interleaved; then a synthetic
    Tiny-ImageNet-shaped dataset of --big-gib trained for one epoch under stream, the memory of the run's processes
    (the training process and its DataLoader workers) sampled throughout."""
    from cl_bench.data import prepared, sources
    with tempfile.TemporaryDirectory(dir=opts.scratch) as tmp:
        root = Path(tmp)
        src = sources.load("mnist", opts.data)
        prepared.prepare_source(src, root)  # every residency reads the same prepared copy
        rows = {mode: [] for mode in RESIDENCIES}
        for i in range(opts.repeats):
            for j, (mode, extra) in enumerate(RESIDENCIES.items()):
                run_dir = root / f"{j}-{i}"
                cl_bench([*WORKLOAD, f"data.root={root}", *extra, "hardware=cpu"], run_dir)
                rows[mode].append({"samples_per_s": len(src.train_y) / sum(task_times(run_dir)[0])})
        med = {mode: median_rows(r) for mode, r in rows.items()}
        big = _synthetic_tinyimagenet(root / "big", opts.big_gib)
        runs = {mode: _big_run(root / "big", extra) for mode, extra in BIG_RUNS.items()}
        small = _synthetic_tinyimagenet(root / "small", opts.big_gib / 8)  # the same runs' memory on an 8th
        small_runs = {mode: _big_run(root / "small", BIG_RUNS[mode]) for mode in ("stream", "stream, 2 workers")}
    return {"repeats": opts.repeats, "workload": "split_mnist, MLP 784-256-256, batch 128, 1 epoch", "median": med,
            "ratio_host": med["device"]["samples_per_s"] / med["host"]["samples_per_s"],
            "ratio_stream": med["device"]["samples_per_s"] / med["stream"]["samples_per_s"],
            "ratio_stream_workers": med["device"]["samples_per_s"] / med["stream, 2 workers"]["samples_per_s"],
            "big": {"images": big.meta["train"] + big.meta["test"], "gib": big.nbytes / 2**30, "cap_gib": opts.cap_gib,
                    "runs": runs, "small_gib": small.nbytes / 2**30, "small_runs": small_runs,
                    "within_cap": all(runs[m]["peak_pss_gib"] <= opts.cap_gib for m in small_runs)}}


# The large dataset's runs: stream as a CPU run defaults to (no workers), with two workers (whose memory counts),
# and the device residency, which holds the dataset.
BIG_RUNS = {"stream": ["data.residency=stream"], "stream, 2 workers": ["data.residency=stream", "data.workers=2"],
            "device": ["data.residency=device"]}


def _big_run(root: Path, extra: list[str]) -> dict:
    """One epoch of finetune (an MLP with a hidden layer of 32: the data's cost, not the model's) on the synthetic
    dataset under root, with `extra` overrides, its memory sampled throughout."""
    run_dir = root / f"run-{len(list(root.glob('run-*')))}"
    cmd = [sys.executable, "-m", "cl_bench", "train", "method=finetune", "dataset=split_tinyimagenet",
           "scenario=class", "backbone=mlp", "backbone.hidden_sizes=[32]", "method.epochs=1", "method.batch_size=256",
           "data.val_fraction=0", f"data.root={root}", *extra, "hardware=cpu", "logger=none",
           "checkpoint.enabled=false", f"hydra.run.dir={run_dir}"]
    start = time.perf_counter()
    peak = _peak_memory(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    wall = time.perf_counter() - start
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {"peak_pss_gib": peak["pss"] / 2**30, "peak_main_rss_gib": peak["main_rss"] / 2**30, "wall_s": wall,
            "train_eval_s": metrics["time_s"]}


def _synthetic_tinyimagenet(root: Path, gib: float):
    """Random 3×64×64 images in Tiny ImageNet's 200 classes, gib GiB in all, written as `cl-bench data prepare`
    writes a dataset (data/prepared.py), a chunk at a time."""
    import numpy as np

    from cl_bench.data import prepared
    per_image = 3 * 64 * 64
    train = int(gib * 2**30 / per_image) - BIG_TEST
    if train < BIG_CLASSES:
        raise Failed(f"--big-gib {gib} holds too few images: use at least 0.2")
    writer, rng, labels = prepared.Writer(root, "tinyimagenet"), np.random.default_rng(0), {}
    for split, count in (("train", train), ("test", BIG_TEST)):
        out = writer.open_images(split, count, (3, 64, 64))
        for start in range(0, count, 8192):
            stop = min(start + 8192, count)
            out[start:stop] = rng.integers(0, 256, (stop - start, 3, 64, 64), dtype=np.uint8)
        out.flush()
        del out
        labels[split] = np.arange(count) % BIG_CLASSES
    return writer.finish("tinyimagenet", [f"c{i}" for i in range(BIG_CLASSES)], labels, "random pixels (bench)")


def _peak_memory(proc: subprocess.Popen) -> dict:
    """Peak over the process's life of its tree's proportional set size (shared pages split among the processes
    that map them: the tree's real share of memory) and of the process's own resident set, sampled every 0.2 s."""
    peak = {"pss": 0, "main_rss": 0}
    while proc.poll() is None:
        tree = _tree(proc.pid)
        peak["pss"] = max(peak["pss"], sum(_proc_kib(pid, "smaps_rollup", "Pss:") for pid in tree) * 1024)
        peak["main_rss"] = max(peak["main_rss"], _proc_kib(proc.pid, "status", "VmRSS:") * 1024)
        time.sleep(0.2)
    if proc.returncode != 0:
        raise Failed(proc.stderr.read().decode().strip().splitlines()[-1])
    return peak


def _tree(pid: int) -> list[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = [pid], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        tree += frontier
    return tree


def _proc_kib(pid: int, name: str, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:  # the process ended meanwhile
        pass
    return 0


# The commands answered without torch where catalog.py's cache holds this source tree's catalog: label, arguments
# and COMP_LINE (a shell completion's query). The config errors are those of the issue: a key, a type, a choice.
STARTUP = {
    "cl-bench --help": (["--help"], None),
    "cl-bench train --help": (["train", "--help"], None),
    "typo: unknown key": (["train", "method.lr_msk=1e-3"], None),
    "typo: wrong type": (["train", "method.lr=fast"], None),
    "typo: unknown choice": (["train", "method=ewcc"], None),
    "cl-bench list": (["list"], None),
    "completion (Tab)": (["-sc", "query=bash"], "cl-bench train method.l"),
}


def startup(opts) -> dict:
    """Whole-process seconds of `python -c "import torch"` and of each STARTUP command, interleaved, median of
    --repeats: with the catalog cached (the torch-free answers), without a cache to read or write (the full path,
    which imports the classes and so torch), and, with --before DIR, at another checkout."""
    with tempfile.TemporaryDirectory() as cache:
        sides = {"with the catalog": (ROOT, cache), "without it": (ROOT, "/dev/null/no-cache")}
        if opts.before:
            sides[opts.before_label or "before"] = (Path(opts.before).resolve(), "/dev/null/no-cache")
        run_startup(ROOT, cache, ["train", "method=ewcc"], None)  # writes the catalog (a full-path command)
        runs = {"import torch": []} | {f"{label}, {side}": [] for label in STARTUP for side in sides}
        for _ in range(opts.repeats):
            runs["import torch"].append(run_startup(ROOT, cache, None, None))
            for label, (args, line) in STARTUP.items():
                for side, (src, folder) in sides.items():
                    runs[f"{label}, {side}"].append(run_startup(src, folder, args, line))
    torch_s = statistics.median(runs["import torch"])
    median = {key: statistics.median(times) for key, times in runs.items()}
    ratio = {key: s / torch_s for key, s in median.items()}
    flagged = [key for key in ratio if key.startswith("typo") and key.endswith(", with the catalog")
               and ratio[key] >= 0.5]  # the issue's bar: a typo in under half of `import torch`
    return {"repeats": opts.repeats, "sides": list(sides), "commands": list(STARTUP), "median_s": median,
            "ratio_to_import_torch": ratio, "flagged": flagged}


def run_startup(src: Path, cache: str, args: list[str] | None, comp_line: str | None) -> float:
    """One process's wall seconds: `python -m cl_bench ARGS` at checkout src, or `import torch` (args None)."""
    env = {**os.environ, "PYTHONPATH": str(src), "CL_BENCH_CACHE": cache, "COLUMNS": "120"}
    env.pop("COMP_LINE", None)
    if comp_line is not None:
        env["COMP_LINE"] = comp_line
    cmd = [sys.executable, "-c", "import torch"] if args is None else [sys.executable, "-m", "cl_bench", *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 2) or "Traceback" in proc.stderr:
        raise Failed(f"{' '.join(cmd)}: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    return wall


# --- rendering ---------------------------------------------------------------------------------------------
WIDTH = 120  # prose lines of benchmarks.md wrap here; Markdown joins them again
WORD = re.compile(r"(?:`[^`]*`|[^\s`]|`(?![^`]*`))+")  # a word, or a code span whole: no line breaks inside one


def wrap_prose(text: str) -> str:
    """Each paragraph or list item of text wrapped at WIDTH; headings, tables and code blocks as they are."""
    out, fenced = [], False
    for line in text.split("\n"):
        fenced ^= line.startswith("```")
        if fenced or line.startswith(("```", "#", "|")) or len(line) <= WIDTH:
            out.append(line)
            continue
        item = line[:2] if line.startswith("- ") else ""
        out += wrap_words(re.findall(WORD, line[len(item):]), item, " " * len(item))
    return "\n".join(out)


def wrap_words(words: list[str], first: str, indent: str) -> list[str]:
    """Greedy lines of at most WIDTH characters (a longer word stands alone); a word that would open a line as
    Markdown syntax (a list, a heading, a table, a quote) stays at the end of the line before."""
    lines, line = [], first + words[0]
    for word in words[1:]:
        opens_block = word in ("-", "+", "*", ">") or word.startswith(("#", "|")) or (
            word[-1] in ".)" and word[:-1].isdigit())
        if len(line) + 1 + len(word) <= WIDTH or opens_block:
            line += " " + word
        else:
            lines.append(line)
            line = indent + word
    return [*lines, line]


def render(results: dict) -> str:
    lines = ["# Benchmarks", "", "Written by `python scripts/bench.py SECTION` (`make bench` runs the CPU sections) "
             "on the machine named in each section. CPU figures are noisy: compare the ratios, which are taken within "
             "one run of the script, with the runs of both sides interleaved.", ""]
    floor = results.get("overhead", {}).get("median", {}).get("import torch, torch._dynamo", {}).get("wall_s")
    for section, fn in (("overhead", render_overhead), ("peers", lambda p: render_peers(p, floor)),
                        ("images", render_images), ("masks", render_masks), ("launches", render_launches),
                        ("costs", render_costs),
                        ("methods", render_methods), ("scaling", render_scaling), ("gpu", render_gpu),
                        ("ddp", render_ddp), ("threads", render_threads), ("evalbatch", render_evalbatch),
                        ("residency", render_residency), ("startup", render_startup)):
        if section in results:
            lines += fn(results[section]) + [""]
    return wrap_prose("\n".join(lines))


def render_startup(d) -> list[str]:
    sides = d["sides"]
    torch_s = d["median_s"]["import torch"]
    lines = ["## Answers without torch", "",
             f"{where(d)}; median of {d['repeats']} whole processes each, interleaved",
             "(`python scripts/bench.py startup`). These commands need no torch: catalog.py's cache of the method and "
             "backbone",
             "classes answers them (written by the first command that imports the classes, keyed by a digest of the "
             "sources).",
             "\"Without it\" is the full path, with no cache to read.", "",
             f"`python -c \"import torch\"`: {torch_s:.2f} s.", "",
             "| command | " + " | ".join(f"{side} s (x import torch)" for side in sides) + " |",
             "|---|" + "---|" * len(sides)]
    for label in d["commands"]:
        cells = [f"{d['median_s'][f'{label}, {side}']:.2f} ({d['ratio_to_import_torch'][f'{label}, {side}']:.2f})"
                 for side in sides]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "`train --help` costs more than the others without torch too: Hydra's help lists every config "
                  "group's options, and deep-copies its ConfigStore (every schema) once for each of them."]
    if d.get("flagged"):
        lines += ["", f"Over half of `import torch`: {', '.join(d['flagged'])}."]
    return lines


def render_threads(d) -> list[str]:
    lines = ["## Jobs side by side", "",
             f"{where(d)}; median of {d['repeats']}. A multirun of {d['jobs']} jobs at once through "
             "`hydra/launcher=parallel` (one per core), each a batch-10 online run of an MLP 2x100 on Split MNIST "
             "(1,000 samples a task); each job's default threads share the cores among the jobs "
             "(cl_bench/hardware.py `default_threads`, said in train.log).", "",
             "| threads | a job's train+eval s | the sweep's wall s |", "|---|---|---|"]
    for mode, r in d["median"].items():
        lines.append(f"| {mode} | {r['job_train_eval_s']:.2f} | {r['sweep_wall_s']:.1f} |")
    lines += ["", f"Every core in each job takes {d['ratio_job']:.2f}x a job's time with the shared default "
                  f"({d['ratio_sweep']:.2f}x the sweep's)."]
    return lines


def render_residency(d) -> list[str]:
    b = d["big"]
    lines = ["## Where the images live", "",
             f"{where(d)}; median of {d['repeats']} interleaved repeats, `python scripts/bench.py residency`. "
             f"Training samples per second (learning time only) of {d['workload']}, with the images on the device, "
             "on the host (each batch gathered there and copied), and streamed from the memory-mapped file of "
             "`cl-bench data prepare`, gathered in the training process (data.workers=0, the default on a CPU) and "
             "by two DataLoader workers (data/residency.py). On a CPU the device is the host: the figures show "
             "what each mode's batching costs, not a PCIe copy.", "",
             "| data.residency | samples/s |", "|---|---|"]
    lines += [f"| {mode} | {r['samples_per_s']:,.0f} |" for mode, r in d["median"].items()]
    lines += ["", f"The device mode trains {d['ratio_host']:.2f}x as fast as host, {d['ratio_stream']:.2f}x as fast "
                  f"as stream, {d['ratio_stream_workers']:.2f}x as fast as stream with 2 workers on this workload (an "
                  "MLP step is about a millisecond: the per-batch cost of each mode shows at its largest). Two workers "
                  "on two cores take the cores training needs, hence no workers by default on a CPU; on a GPU the "
                  "workers (2 by default) read while the device computes.", "",
              f"A dataset larger than the memory it may use: {b['images']:,} random 3x64x64 images in 200 classes "
              f"({b['gib']:.2f} GiB, Tiny ImageNet's shape, written as `cl-bench data prepare` writes), one epoch of "
              "finetune on an MLP with one hidden layer of 32 (the data's cost, not the model's), batch 256. Peak "
              "memory of the run's processes (the training process and its DataLoader workers; proportional set "
              "size, shared pages split among them), sampled every 0.2 s:", "",
              "| data.residency | peak PSS GiB | training process's peak RSS GiB | train+eval s |", "|---|---|---|---|"]
    for label, runs, gib in (("", b["runs"], b["gib"]), (" (an 8th of the data)", b["small_runs"], b["small_gib"])):
        lines += [f"| {mode}{label}, {gib:.2f} GiB | {r['peak_pss_gib']:.2f} | {r['peak_main_rss_gib']:.2f} | "
                  f"{r['train_eval_s']:.0f} |" for mode, r in runs.items()]
    grown = b["runs"]["stream"]["peak_pss_gib"] - b["small_runs"]["stream"]["peak_pss_gib"]
    lines += ["", f"Stated cap: {b['cap_gib']:g} GiB, the data {b['gib'] / b['cap_gib']:.1f}x that: both stream runs "
                  f"stay {'within' if b['within_cap'] else 'OVER'} it. Eight times the data adds {grown:.2f} GiB to "
                  f"the stream run's peak ({b['gib'] - b['small_gib']:.1f} GiB more images; the part that grows is "
                  "not isolated yet); the device run holds the dataset, twice at its peak (the source and the "
                  "tasks cut from it, while they are cut)."]
    return lines


def render_evalbatch(d) -> list[str]:
    lines = ["## Evaluation batch size", "",
             f"{where(d)}, `python scripts/bench.py evalbatch --cifar-root DIR`: seconds to score "
             f"{d['images']:,} CIFAR-shaped images in eval mode at each batch size, {d['threads']} threads, "
             f"median of {d['repeats']} interleaved "
             "repeats. Every scoring pass takes `data.eval_batch_size` (default 1,000, cl_bench/hardware.py).", "",
             "| backbone | " + " | ".join(f"batch {s}" for s in EVAL_SIZES) + " |",
             "|---" * (len(EVAL_SIZES) + 1) + "|"]
    for backbone, by_size in d["seconds"].items():
        lines.append(f"| {backbone} | " + " | ".join(f"{by_size[str(s)]:.2f}" for s in EVAL_SIZES) + " |")
    if "workload" in d:
        old, new = d["workload"]["1000"], d["workload"]["100"]
        lines += ["", "The image workload's finetune on the conv net (see \"Image workload\"), train+eval, median of "
                  f"{d['repeats']}: data.eval_batch_size=1000 {old['train_eval_s']:.1f} s, 100 "
                  f"{new['train_eval_s']:.1f} s ({old['train_eval_s'] / new['train_eval_s']:.2f}x); "
                  f"avg_acc {old['avg_acc']:.4f} and {new['avg_acc']:.4f}."]
    return lines


def render_overhead(o) -> list[str]:
    med = o["median"]
    row = lambda name, m: (f"| {name} | {m['wall_s']:.2f} | {m['train_eval_s']:.2f} | "  # noqa: E731
                           f"{m['avg_acc']:.4f} |" if "avg_acc" in m else f"| {name} | {m['wall_s']:.2f} | "
                           f"{m['train_eval_s']:.2f} | |")
    no_cache = med.get("cl-bench, data.cache=false")
    floor = med.get("import torch, torch._dynamo")
    return ["## Overhead against plain PyTorch", "",
            f"Median of {o['repeats']} whole-process runs each ({where(o)}): "
            f"`cl-bench train {' '.join(WORKLOAD)} data.root=DATA` against `python scripts/plain_split_mnist.py "
            f"DATA` (`python scripts/bench.py overhead`).", "",
            "| | whole process s | train+eval s | avg_acc |", "|---|---|---|---|",
            row("cl-bench", med["cl-bench"]),
            *([row("cl-bench, data.cache=false", no_cache)] if no_cache else []),
            row("plain PyTorch", med["plain"]),
            *([f"| `python -c 'import torch, torch._dynamo'` | {floor['wall_s']:.2f} | | |"]
              if floor else []),
            f"| ratio cl-bench / plain | {o['ratio_wall']:.2f}× | {o['ratio_train_eval']:.2f}× | |",
            *([f"| ratio without the cache / plain | {o['ratio_wall_no_cache']:.2f}× | | |"] if no_cache else []), "",
            "Most of both processes is fixed cost that neither can avoid: importing torch and torch._dynamo, which "
            "torch.optim imports on an optimiser's first step, and the interpreter's teardown of them on exit "
            "(together 4 to 5 s here). Where cl-bench spends less than the plain script: it keeps decoded datasets "
            "in a cache (`data.cache`, on by default: reading the uint8 tensors back replaces decompressing the IDX "
            "files and histogramming the pixels, about 0.4 s). Where it spends more: importing "
            "Hydra and OmegaConf and composing and validating the config once (about 0.5 s together), per-batch "
            "normalisation of the uint8 data kept on the device (the plain script holds a float copy), and "
            "evaluation in batches of `data.eval_batch_size`."]


def render_peers(p, floor_s: float | None = None) -> list[str]:
    lines = ["## Against Avalanche (and Mammoth)", "",
             f"The overhead workload per strategy, median of {p['repeats']} whole-process runs each, interleaved "
             f"({where(p)}); Avalanche 0.6.0 in its own environment (`bash scripts/setup_avalanche_env.sh`, "
             "then `python scripts/bench.py peers`), driven by `scripts/avalanche_split_mnist.py` with its "
             "default data loaders. avg_acc is the mean of the final row (packnet: task scenario, "
             "predictions restricted to the task's classes, as cl-bench scores it).", "",
             "| strategy | cl-bench s (whole / train+eval) | Avalanche s (whole / train+eval) | speed-up whole "
             "| speed-up train+eval | avg_acc cl-bench / Avalanche |", "|---|---|---|---|---|---|"]
    for name, r in p["strategies"].items():
        c, a = r["median"]["cl-bench"], r["median"]["avalanche"]
        lines.append(f"| {name} | {c['wall_s']:.2f} / {c['train_eval_s']:.2f} | {a['wall_s']:.2f} / "
                     f"{a['train_eval_s']:.2f} | {r['speedup_wall']:.1f}× | {r['speedup_train_eval']:.1f}× | "
                     f"{c['avg_acc']:.4f} / {a['avg_acc']:.4f} |")
    naive = p["strategies"]["naive"]["median"]
    target = naive["avalanche"]["wall_s"] / 3
    lines += ["", f"What bounds the whole-process speed-up: 3× Avalanche's Naive would be {target:.1f} s. " + (
              f"A process that only imports torch and torch._dynamo (which torch.optim's first step imports) "
              f"takes {floor_s:.1f} s here (overhead section), which leaves {target - floor_s:.1f} s for the "
              f"interpreter, the config, the data, training and evaluation, whose train+eval alone takes "
              f"{naive['cl-bench']['train_eval_s']:.1f} s. " if floor_s else "") +
              "Whole-process 3× is out of reach for any tool built on torch.optim on this machine; the train+eval "
              "column is the part a tool controls. Against the whole-process figures the performance issue quotes "
              "for Avalanche on this kind of machine (slower than measured here), the speed-ups are " + ", ".join(
                  f"{k} {q / p['strategies'][k]['median']['cl-bench']['wall_s']:.1f}× ({q} s)"
                  for k, q in AVALANCHE_QUOTED.items() if k in p["strategies"]) + " (quoted figures).",
              "", "Mammoth could not be measured here: it is not on PyPI (the PyPI package of that name is an "
              "unrelated document converter) and nothing else can be fetched. The performance issue quotes, for "
              "this kind of machine, Mammoth `sgd` 18.2 s and `er` 18.6 s whole process; against the cl-bench "
              "figures above that is " + ", ".join(
                  f"{q[0]} {q[1] / p['strategies'][k]['median']['cl-bench']['wall_s']:.1f}×"
                  for k, q in MAMMOTH_QUOTED.items() if k in p["strategies"]) + " (quoted, not measured here).", ""]
    for name, r in p["strategies"].items():
        args = " ".join(r["cl_bench_overrides"]) or "(the workload as is)"
        lines.append(f"- {name}: cl-bench `{args}`; Avalanche `{' '.join(r['avalanche_args'])}`")
    return lines


def render_methods(m) -> list[str]:
    rows = m["runs"]
    lines = ["## Method time over finetune", "",
             f"One epoch per task at batch 64 (online methods: one pass over {ONLINE_SAMPLES} samples per task in "
             f"the mlp rows, in batches of 10; cpg and packnet with their extra phases cut to one epoch each; "
             f"gated needs conv layers, so it has no mlp row), "
             f"hardware.threads=2, ewc with method.ewc_lambda=100 (as in the peers section), {where(m)} "
             "(`python scripts/bench.py methods`). CPU-sized: the convnet rows (channels 16, 32) train every "
             "method on 500 samples per task; every row evaluates on the whole test set. The split_cifar10 / "
             "resnet18_reduced rows (`--cifar`, 500 samples per task) take minutes per method on 2 cores and are "
             "not measured here; the GPU section runs that workload. "
             "× finetune above 2 is explained below the table.", "",
             "| workload / method / scenario | train+eval s | × finetune | avg_acc | peak MB |",
             "|---|---|---|---|---|"]
    for key, r in rows.items():
        label, name, scenario = key.rsplit("/", 2)
        if "failed" in r:
            lines.append(f"| {key} | failed: {r['failed']} | | | |")
            continue
        base = rows.get(f"{label}/finetune/{scenario}")
        ratio = f"{r['time_s'] / base['time_s']:.2f}" if base else "–"
        lines.append(f"| {key} | {r['time_s']:.2f} | {ratio} | {r['avg_acc']:.4f} | {r['peak_mem_mb']:.0f} |")
    online = [(k, r) for k, r in rows.items() if is_online(k.split("/")[-2]) and "failed" not in r]
    if online:
        lines += ["", "Online methods per incoming batch of 10 (train+eval time over the batches of the stream; "
                  "the evaluation after each task is included):", ""]
        lines += [f"- {k}: {1000 * r['time_s'] / (5 * online_samples(k) / 10):.1f} ms per batch" for k, r in online]
    lines += ["", "What each method does beyond finetune (the reason wherever a row exceeds 2×):"]
    lines += [f"- {k}: {v}" for k, v in WHY.items()]
    return lines


def online_samples(key: str) -> int:
    """Training samples per task of an online method's row in the methods section."""
    return ONLINE_SAMPLES if key.startswith("split_mnist/mlp") else 500


WHY = {
    "joint": "trains on the union of all tasks so far: task t costs t times a task of finetune.",
    "cpg": "per task it trains, then prunes and retrains at each sparsity target, then refits the picking "
           "masks: four training passes here with every phase cut to one epoch, each followed by a validation "
           "pass, with the mask work of piggyback in each step and, while compacting, a magnitude pruning every "
           "prune_frequency steps.",
    "packnet": "two passes per task (training, then retraining after pruning); the per-step mask work is one "
               "product with a mask kept per ownership state and one on the gradient.",
    "piggyback": "the per-step mask work of packnet plus real-valued mask scores, binarised in every forward "
                 "pass and stepped by their own Adam optimiser.",
    "gated": "a gating MLP per layer and task; in the class scenario every task's path runs at evaluation, and a "
             "task classifier is trained with rehearsal.",
    "lamaml": "a meta-update per online batch: an inner SGD step per sample on the fast weights, differentiated "
              "through, then the meta-loss on batch and memory.",
    "nccl": "per online batch, an inner step on the calibration parameters and an outer step through it.",
    "agem": "per online batch, a second backward pass on the memory and a gradient projection.",
    "er": "each step also forwards and backwards a replay batch the size of the new one (twice the samples).",
    "lwf": "a forward pass of the frozen teacher for every batch.",
    "ewc": "after each task, the Fisher pass (a forward and backward over the task's training data, about one "
           "more epoch); per step the penalty's value and its closed-form gradient, five element-wise passes "
           "over the parameters, which on the mlp's small matmuls are not negligible.",
    "independent": "nothing extra per step; a fresh network per task.",
}


def render_scaling(s) -> list[str]:
    runs = s["runs"]
    lines = ["## Scaling with the number of tasks", "",
             f"permuted_mnist (1,000 samples per task, {ONLINE_SAMPLES} for lamaml, one epoch; class scenario where "
             "supported, else task), "
             f"{where(s)} (`python scripts/bench.py scaling`). Time per task is the whole run over the number "
             "of tasks. Learning a task should cost the same at any task count; the evaluation after task t tests t "
             "tasks (the accuracy matrix), so it grows linearly by design, and so does the memory holding every "
             "task's (permuted) test set. gated (a small conv net: permuted pixels suit it badly) runs at 5 tasks only "
             "unless `--all` is given: evaluating its paths on every permuted test set takes minutes at 20 tasks on "
             "2 cores. Plot: docs/img/scaling.png.", "",
             "| method | learning the last task s (5 / 10 / 20) | evaluating after it s | s per task, whole run "
             "| peak MB | checkpoint MB |", "|---|---|---|---|---|---|"]
    for name in SCALING:
        cells = [" / ".join(f"{runs[f'{name}/{n}'][k]:.{d}f}" if f"{name}/{n}" in runs else "–"
                            for n in SCALING_TASKS)
                 for k, d in (("last_learn_s", 2), ("last_rest_s", 2), ("time_per_task_s", 2), ("peak_mem_mb", 0),
                              ("checkpoint_mb", 2))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Growth by design: joint (trains on every task so far), independent (a network per task: "
              "checkpoint and memory grow linearly), piggyback/cpg/packnet (a bit mask or a small picking mask "
              "per task in the checkpoint), gated (a gate MLP per task; in the class scenario, not shown, "
              "inference runs every task's path, so evaluation grows linearly per sample), and every method's "
              "evaluation (task t evaluates t test sets)."]
    return lines


# hardware.cuda_graphs (methods/loop.py StepGraph), under the GPU check's table: what it does and what the CPU shows
# of it; the check's graphs section times the capture itself, and until a lease has run it the note says so.
GRAPHS_NOTE = [
    "",
    "### CUDA graphs (`hardware.cuda_graphs=true`)",
    "",
    "Launches, not arithmetic, set the pace of small continual steps on a GPU (the rows above: busy 11-15% of each "
    "step). With `hardware.cuda_graphs=true`, each training phase's full-size steps (forward, loss, backward, the "
    "hooks after it and the optimiser's step) are captured once as a CUDA graph after three eager warm-up steps and"
    " replayed: one launch a step. The graph reads each batch from buffers the step copies it into; an epoch's "
    "smaller last batch runs eagerly; a new learning rate (a milestone), or a warm-up's end a step branches on "
    "(`LoopOptions.graph_key`), is captured afresh; Adam and AdamW are built `capturable`, so that their step counts "
    "stay on the device; the run's generators are registered with each graph, so that replay draws inside a "
    "captured step advance them as eager steps do. Methods whose steps read nothing that changes between steps, "
    "other than tensors updated in place, declare themselves capture-safe (`Traits.graph_safe`, the `cuda_graphs` "
    "column of `cl-bench list`): finetune, joint, independent, LwF, EWC, MAS, SI, PackNet, BiC, iCaRL, LUCIR, ER, "
    "DER, DER++, ER-ACE and gated; CPG (and PAE) in its goal models' phases only. The others say why not (GDumb's "
    "in-loss learning rate, CPG's ramp and picking, HAT's annealed scale, the online methods' own loop) and run "
    "eagerly; metrics.json's `ran_on.cuda_graphs` says which, and why, as it does for a run without a CUDA device.",
    "",
    "What the CPU shows (tests/test_cuda_graphs.py): without a device the StepGraph runs the same buffers, warm-up,"
    " capture points and recaptures eagerly, and trains every capture-safe method to the same weights, bit for bit,"
    " as the plain loop; every replay of every capture-safe method repeats its captured step (a TorchFunctionMode "
    "records the captured step's torch calls, each with its Python numbers, its tensors' shapes and the address of "
    "each parameter, buffer, optimiser state or graph buffer it reads, and compares each replay's: it finds a "
    "number that changes between steps, a branch on the step's index, a buffer replaced by a new tensor and a draw "
    "from the run's generator, the test's negative cases); and the path adds no host sync inside a step "
    "(tests/test_sync_audit.py, finetune_graphed). What the CPU cannot show is the capture itself: the GPU check's "
    "graphs section (`bash scripts/gpu_check.sh --sections graphs`) times finetune on Split CIFAR-10 and PAE's goal"
    " model on cifar100_20 eager and captured, and trains the default job captured against two eager runs, flagging"
    " weights further apart than ten times the eager runs' own spread.",
]
GRAPHS_UNTIMED = "No GPU check with the graphs section has been recorded yet."


def render_gpu(g) -> list[str]:
    sys.path.insert(0, str(Path(__file__).parent))
    import gpu_check
    table = gpu_check.render(g).splitlines()
    untimed = [] if "graphs" in g else ["", GRAPHS_UNTIMED]
    # its title line names the device, which the text below it repeats
    return ["## GPU check", *table[1:], *GRAPHS_NOTE, *untimed]


def render_images(d) -> list[str]:
    lines = ["## Image workload: Split CIFAR-10 with augmentation", "",
             f"{where(d)}, `python scripts/bench.py images --cifar-root DIR`. split_cifar10, pad-crop 4 and "
             "horizontal flip on every training batch, SGD lr 0.01 momentum 0.9, batch 32, one epoch a task, a random "
             f"subset of training images a task (column), {d['test_samples']} test images a task, the seen tasks "
             "evaluated after each; finetune and ER in the class scenario (ER: 500 samples, an equal share per task "
             "written at each task's end), PackNet in the task scenario (one epoch, half pruned, one epoch "
             "retraining). Peers: `scripts/plain_split_cifar10.py` (torchvision transforms on PIL images, a "
             f"DataLoader with {d['workers']} workers, the way most research code is written) and "
             "`scripts/avalanche_split_cifar10.py` (Avalanche 0.6.0, its DataLoaders with the same workers); all "
             "three train cl-bench's own backbone module. Repeat i runs seed i in every tool (subsets, "
             "initialisation, draws), interleaved: seconds are medians, avg_acc the mean ± sample std over the "
             "seeds.", "",
             "| backbone | method | samples a task | repeats | cl-bench train+eval | plain train+eval | Avalanche "
             "train+eval | cl-bench whole process | plain whole | Avalanche whole | avg_acc cl-bench / plain / "
             "Avalanche | speedup train+eval over plain / Avalanche |", "|---" * 12 + "|"]
    for key, r in d["runs"].items():
        backbone, name = key.split("/")
        ours, plain = r["median"]["cl-bench"], r["median"]["plain DataLoader loop"]
        theirs = r["median"].get("avalanche")
        dash = lambda x, f: f.format(x) if x is not None else "–"  # noqa: E731
        acc = lambda m: (f"{m['avg_acc']:.3f}" + (f" ± {m['avg_acc_sd']:.3f}" if m.get("avg_acc_sd") else "")  # noqa: E731
                         if m else "–")
        lines.append(
            f"| {backbone} | {name} | {r['samples']} | {r['repeats']} | {ours['train_eval_s']:.1f} | "
            f"{plain['train_eval_s']:.1f} | {dash(theirs and theirs['train_eval_s'], '{:.1f}')} | "
            f"{ours['wall_s']:.1f} | {plain['wall_s']:.1f} | {dash(theirs and theirs['wall_s'], '{:.1f}')} | "
            f"{acc(ours)} / {acc(plain)} / {acc(theirs)} | "
            f"{plain['train_eval_s'] / ours['train_eval_s']:.2f}x / "
            f"{dash(theirs and theirs['train_eval_s'] / ours['train_eval_s'], '{:.2f}x')} |")
    seeded = [r for r in d["runs"].values() if r["repeats"] > 1 and "avg_acc_sd" in r["median"]["cl-bench"]]
    if seeded:  # how far the tools' accuracies are apart, beside how far a seed moves one tool's
        tools = ("cl-bench", "plain DataLoader loop", "avalanche")
        gap = max(max(a) - min(a) for a in ([r["median"][t]["avg_acc"] for t in tools if t in r["median"]]
                                            for r in seeded))
        sd = max(r["median"][t]["avg_acc_sd"] for r in seeded for t in tools if t in r["median"])
        lines += ["", f"Accuracy over the {seeded[0]['repeats']} seeds: the tools' means differ by at most "
                  f"{100 * gap:.1f} points on any row, and one tool's seeds by up to {100 * sd:.1f} points (sample "
                  "std): the subsets, initialisation and draws move a tool's accuracy as much as the tool does."]
    notes = sorted({r["no_avalanche"] for r in d["runs"].values() if "no_avalanche" in r})
    lines += [f"\nNo Avalanche row for packnet: {n}." for n in notes]
    floors = [(k.split("/")[0], r["median"]["compute floor"]["train_s"]) for k, r in d["runs"].items()
              if "compute floor" in r["median"]]
    if floors:
        ours = {k.split("/")[0]: r["median"]["cl-bench"]["train_eval_s"] for k, r in d["runs"].items()
                if k.endswith("/finetune")}
        lines += ["", "Compute floor (finetune's training steps alone, forward, backward and SGD step on ready "
                  "tensors at batch 32, by `scripts/ddp_step.py single`, this machine's threads): " + ", ".join(
                      f"{b} {s:.1f} s, {s / ours[b]:.0%} of cl-bench's finetune train+eval" for b, s in floors)
                  + ". The rest is mostly evaluation (the seen tasks' test images after each task, through the "
                  "same network). On this CPU the job is bound by the network's arithmetic, which every tool "
                  "pays alike: a tool can be 3x faster than another only if that one spends two thirds of its "
                  "time off the network; the peers' DataLoader workers prepare batches beside the training."]
    if d.get("profile_convnet_finetune"):
        lines += ["", "Where cl-bench's time goes (finetune, conv net, task 0 under `debug=profile`, top operators by "
                  "self CPU time): " + ", ".join(f"{op} {pct:.1f} %" for op, pct in d["profile_convnet_finetune"])
                  + "."]
    return lines


def render_masks(d) -> list[str]:
    lines = ["## Mask methods over finetune", "",
             f"{where(d)}, `python scripts/bench.py masks --before DIR`, median of {d['repeats']} interleaved runs: "
             "train+eval time over finetune's, task scenario, one epoch a task at batch 64 (the extra phases cut "
             "to one epoch each, as in the methods section). `before`: " + (d.get("before") or "not run") + ".", "",
             "| workload | checkout | finetune s | packnet | piggyback | cpg |", "|---|---|---|---|---|---|"]
    for key, r in d["runs"].items():
        label, which = key.rsplit("/", 1)
        lines.append(f"| {label} | {which} | {r['finetune']['time_s']:.2f} | " + " | ".join(
            f"{r[n]['over_finetune']:.2f}x" for n in MASK_METHODS[1:]) + " |")
    for name, top in d.get("profiles", {}).items():
        lines += ["", f"Top operators by self CPU time, {name}, task 1 on the MLP (`debug=profile profile_task=1`): "
                  + ", ".join(f"{op} {pct:.1f} %" for op, pct in top) + "."]
    return lines


def render_launches(d) -> list[str]:
    checkouts = [c for c in ("before", "after") if any(c in r for r in d["runs"].values())]
    lines = ["## Launches per step", "",
             f"{where(d)}, `python scripts/bench.py launches" + (" --before DIR" if "before" in checkouts else "")
             + (" --after DIR" if d.get("after_checkout") else "") + "`. Each method with its defaults and its "
             "default backbone on split_digits (task scenario where it has one; the extra phases cut as in the "
             "methods section), one thread: the first task learnt, then in "
             f"the second {d['warmup']} steps unmeasured, {d['steps']} timed and {d['steps']} profiled "
             "(torch.profiler). A step: one optimiser step, or one incoming batch with all its glances for the online "
             "methods. aten ops: every aten op the profiler records in a step, those run inside another included (a "
             "composite's parts; a CPU foreach op runs a per-tensor loop of ops, where a GPU launches one kernel for "
             "many tensors); aten calls: the outermost ones, as called from Python. Step time: the median, "
             "before and after in alternating processes of the same run (`before`: "
             + (d.get("before") or "not run") + "). `cpg, mask lr 0`: method.mask_lr_stop=0, the picking scores "
             "at lr 0 as past their stop; `X, per-head heads`: method.fused_heads=false, the online methods' heads "
             "each apart (fused by default since issue 73: results move at float rounding), measured on `after` "
             "alone. Every "
             f"row runs `cl-bench train` overrides `{d.get('common', '')}` and its own (benchmarks.json, launches, "
             "runs, overrides).", "",
             "| method | " + " | ".join(f"aten ops {c} | aten calls {c} | step ms {c}" for c in checkouts)
             + (" | step time after/before |" if len(checkouts) == 2 else " |"), "|---" * (1 + 3 * len(checkouts))
             + ("|---|" if len(checkouts) == 2 else "|")]
    for label, r in d["runs"].items():
        cells = []
        for c in checkouts:
            m = r.get(c, {"failed": "–"})
            cells += ([m["failed"], "", ""] if "failed" in m else
                      [f"{m['aten_ops']:.0f}", f"{m['aten_calls']:.0f}", f"{m['step_ms']:.2f}"])
        if len(checkouts) == 2:
            ok = all("failed" not in r.get(c, {"failed": "–"}) for c in checkouts)
            cells.append(f"{r['after']['step_ms'] / r['before']['step_ms']:.2f}" if ok else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines + ["", "On this CPU a step's time follows its arithmetic more than its count of ops, and a CPU "
                    "foreach op still loops over its tensors; on a GPU every aten call launches at least one kernel "
                    "and a foreach op one for many tensors, which these CPU figures do not time."]


def render_costs(d) -> list[str]:
    lines = ["## What the paper settings cost", "",
             f"{where(d)}, `python scripts/bench.py costs`: each setting run here as its preset, on two tasks of "
             f"{d['measured_samples']} training samples with every phase one epoch (CIFAR-100 as random pixels in its "
             "canonical format: a step costs the same whatever the pixels), timing the second task's learning per "
             "sample pass; the full schedule is that rate times tasks × samples a task × passes a sample. This CPU's "
             "hours; a GPU's follow from `scripts/gpu_check.sh`'s samples/s on the same networks.", "",
             "| setting | s per sample pass here | tasks × samples × passes | CPU hours | schedule |",
             "|---|---|---|---|---|"]
    for label, r in d["settings"].items():
        lines.append(f"| {label} | {r['s_per_sample']:.4f} | {r['tasks']} × {r['samples']:,} × {r['passes']} = "
                     f"{r['tasks'] * r['samples'] * r['passes']:,} | {r['cpu_hours']:.1f} | {r['schedule']} |")
    return lines


def render_ddp(d) -> list[str]:
    lines = ["## Data-parallel on 2 CPU processes", "",
             f"{where(d)}, `python scripts/bench.py ddp`, median of {d['repeats']} interleaved runs. Step time of one "
             "global batch of 128 CIFAR-shaped images (forward, backward, gradient averaging, SGD step) by "
             "`scripts/ddp_step.py`, one thread per process: DistributedDataParallel (bucketed all-reduce, "
             "overlapped with the backward pass, as `hardware=ddp` trains), one blocking all-reduce per parameter "
             "after the backward pass (how `hardware=ddp` averaged gradients before), and one process with the "
             "whole batch.", "", "| backbone | one process, ms | DDP, 2 processes, ms | per-parameter all-reduce, "
             "2 processes, ms | DDP speedup over one process |", "|---|---|---|---|---|"]
    for backbone, r in d["step_ms"].items():
        lines.append(f"| {backbone} | {r['single']:.1f} | {r['ddp']:.1f} | {r['per_param']:.1f} | "
                     f"{r['single'] / r['ddp']:.2f}x |")
    lines += ["", "The overhead workload (Split MNIST, MLP 784-256-256, one epoch a task, `hardware.threads=1`) "
              "through `cl-bench train`:", "", "| run | train+eval s | avg_acc |", "|---|---|---|"]
    for name, r in d["workload"].items():
        lines.append(f"| {name} | {r['train_eval_s']:.2f} | {r['avg_acc']:.4f} |")
    return lines


SECTIONS = {"overhead": overhead, "peers": peers, "images": images, "methods": methods, "masks": masks,
            "scaling": scaling, "costs": costs, "gpu": gpu, "ddp": ddp, "threads": threads, "evalbatch": evalbatch,
            "residency": residency, "launches": launches, "startup": startup}


def commit() -> str:
    """The checkout the figures come from; "+changes" when its code differs from that commit (docs/, where
    this script writes, and prose files aside)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs", ":!*.md"],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return (head.stdout.strip() or "unknown") + ("+changes" if dirty else "")


def where(section: dict) -> str:
    """The machine, and for figures taken since this was recorded, the date and the commit."""
    return section["machine"] + (f", {section['measured']}" if "measured" in section else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("section", choices=[*SECTIONS, "render"])
    parser.add_argument("--data", default=os.environ.get("CL_BENCH_DATA"),
                        help="a data root holding MNIST/raw (default: $CL_BENCH_DATA)")
    parser.add_argument("--cifar-root", default="/tmp/cl-data", help="a data root holding cifar-10-batches-py")
    parser.add_argument("--cifar", action="store_true",
                        help="methods: also the split_cifar10 / resnet18_reduced rows (long on a CPU)")
    parser.add_argument("--avalanche-python", default=str(ROOT.parent / "avalanche-venv" / "bin" / "python"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--all", action="store_true", help="scaling: every task count for every method")
    parser.add_argument("--machine", default=f"{os.cpu_count()}-core CPU",
                        help="words for the machine, recorded with the figures")
    parser.add_argument("--gpu-check", nargs="+", help="gpu: a GPU check's gpu_check.json to record (the two calls': "
                        "both files, A's then B's)")
    parser.add_argument("--only", help="costs: the settings to measure again, comma-separated label prefixes")
    parser.add_argument("--before", help="masks, launches, startup: another checkout to time beside this one (a git "
                                         "worktree)")
    parser.add_argument("--before-label", help="masks, launches, startup: words for that checkout (say, its commit)")
    parser.add_argument("--after", help="launches: the checkout to measure as `after` (default: this one)")
    parser.add_argument("--docs", type=Path, default=DOCS, help="where benchmarks.json and benchmarks.md live")
    parser.add_argument("--big-gib", type=float, default=4.0, help="residency: the large dataset's size")
    parser.add_argument("--cap-gib", type=float, default=1.5, help="residency: the memory cap it is held to")
    parser.add_argument("--scratch", default=None, help="residency: a folder with room for the large dataset")
    parser.add_argument("--worker", help="launches: measure these overrides (JSON) in this process, print the figures")
    opts = parser.parse_args()
    if opts.section == "render":  # nothing measured: the page again from the figures recorded
        (opts.docs / "benchmarks.md").write_text(render(json.loads((opts.docs / "benchmarks.json").read_text())))
        return
    if opts.worker:  # a launches worker: its figures to stdout, nothing written
        print(json.dumps(launch_workers(json.loads(opts.worker))))
        return
    if opts.section not in ("gpu", "evalbatch", "launches", "startup"):  # a GPU check's file; launches: the digits
        if opts.data is None:
            sys.exit("bench: pass --data DIR (a data root holding MNIST/raw) or set CL_BENCH_DATA")
        if not (Path(opts.data) / "MNIST" / "raw").is_dir() and not (ROOT / opts.data / "MNIST" / "raw").is_dir():
            sys.exit(f"bench: no MNIST under {opts.data}/MNIST/raw; pass --data")
    try:
        result = SECTIONS[opts.section](opts)
    except Failed as e:
        sys.exit(f"bench: a benchmarked run failed: {e}")
    if result is None:  # skipped, with the reason printed
        return
    result["machine"] = result.get("device", opts.machine)
    result["measured"] = f"{datetime.date.today().isoformat()}, commit {commit()}"
    opts.docs.mkdir(parents=True, exist_ok=True)
    store = opts.docs / "benchmarks.json"
    results = json.loads(store.read_text()) if store.exists() else {}
    results[opts.section] = result
    store.write_text(json.dumps(results, indent=1))
    (opts.docs / "benchmarks.md").write_text(render(results))
    print(json.dumps(result, indent=1))
    if result.get("flagged"):
        sys.exit(f"bench: failed or not sane (see {opts.docs / 'benchmarks.md'}): {', '.join(result['flagged'])}")


if __name__ == "__main__":
    main()
