"""Parity with ivclab/CPG (Hung et al. 2019): CPG, PAE and PackNet on the reference's own VGG16-BN, cut to a CPU.

Its account: scripts/parity/README.md, section cpg.py.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity import common  # noqa: E402
from parity.common import Diagnostic, Outcome, Row  # noqa: E402

NAME = "cpg"
REPO = "ivclab/CPG"
PINNED = "f1b20eaeb79c23acd4c900578c97c733e57e72b9"
SOURCE = "authors"  # CPG and PAE are the authors' own; PackNet here is their baseline (its row says so)
WORDS = common.wording(NAME)  # wording.yaml: its torch and data lines, its rows' settings
TORCH, DATA = WORDS["torch"], WORDS["data"]

BAR_ENV = "PARITY_TRAIN_ACC_BAR"  # the train-accuracy bar the patched scripts read (theirs when unset)
DATA_LINK = Path("data") / "cifar100_org"  # where the reference's loaders read each task's image folders
RUNS = Path("checkpoints") / "parity"  # relative: the scripts format checkpoint paths as ./{save_folder}/...
RESUMABLE = RUNS  # what a resumed run keeps of its copy (common.patched_copy)

# The whole cut, once; the rows below spell it out for each side.
TASKS, CLASSES, TRAIN, TEST = 3, 2, 256, 200
EPOCHS, PRUNE_TARGETS, PRUNE_EPOCHS, RAMP, FREQUENCY, REFIT = 3, (0.3, 0.6), 2, 1, 4, 2
PACKNET_PRUNE, PACKNET_RETRAIN = 0.6, 2
BAR, GOAL = 0.0, 0.0

SPLIT = ("dataset=split_cifar10", "scenario=task", "backbone=vgg16_bn", "method.protocol=official",
         f"dataset.num_tasks={TASKS}", f"dataset.classes_per_task={CLASSES}", f"dataset.samples_per_task={TRAIN}",
         f"dataset.test_samples_per_task={TEST}")
CPG_CUT = (f"method.epochs={EPOCHS}", f"method.prune_targets=[{','.join(map(str, PRUNE_TARGETS))}]",
           f"method.prune_epochs={PRUNE_EPOCHS}", f"method.prune_ramp_epochs={RAMP}",
           f"method.prune_frequency={FREQUENCY}", f"method.retrain_epochs={REFIT}", "method.goal_source=fixed",
           f"method.goal={GOAL}", f"method.train_acc_bar={BAR}")
CPG_REF = (f"epochs={EPOCHS}", f"prune_targets={','.join(map(str, PRUNE_TARGETS))}", f"prune_epochs={PRUNE_EPOCHS}",
           f"pruning_interval={RAMP}", f"pruning_frequency={FREQUENCY}", f"retrain_epochs={REFIT}",
           f"goal={GOAL}", f"train_acc_bar={BAR}", "max_multiplier=1.5")
SETTING = WORDS["setting"].format(tasks=TASKS, classes=CLASSES, train=TRAIN, test=TEST)


@dataclass(frozen=True)
class Cut:
    """A cut with growth on and measured goals (the learning cut: scripts/parity/README.md), the same on both sides."""

    tasks: int
    train: int
    test: int
    width: float  # every conv's channels times this (backbone.width; the reference: PARITY_WIDTH)
    hidden: int  # the classifier body's width (backbone.hidden; PARITY_HIDDEN)
    epochs: int
    drops: tuple[int, ...]  # the lr x0.1 epochs of training (the scripts' 50, 80 of 100)
    mask_drop: int  # the picking masks' lr x0.2 (the scripts' 50)
    mask_stop: int  # the picking masks' lr 0 from here (the scripts' 70)
    targets: tuple[float, ...]
    prune_epochs: int
    ramp: int
    frequency: int
    refit: int  # the picking refit's epochs at most (patience 5, the scripts')
    packnet_retrain: int
    packnet_drop: int  # PackNet's retraining lr x0.1 (the scripts' 25 of 30)
    bar: float = 0.95  # CPG's and PAE's training-accuracy bar (the scripts')
    packnet_bar: float = 0.97  # PackNet's: below it the pruned model is not saved (the scripts')
    allow_acc_loss: float = 0.0  # the choosing tool's tolerance under the goal (the scripts' 0.0)

    def split(self) -> tuple[str, ...]:
        return ("dataset=split_cifar10", "scenario=task", "backbone=vgg16_bn", "method.protocol=official",
                f"dataset.num_tasks={self.tasks}", f"dataset.classes_per_task={CLASSES}",
                f"dataset.samples_per_task={self.train}", f"dataset.test_samples_per_task={self.test}",
                f"backbone.width={self.width}", f"backbone.hidden={self.hidden}", f"method.epochs={self.epochs}",
                f"method.lr_milestones=[{','.join(map(str, self.drops))}]")

    def net(self) -> tuple[str, ...]:
        """The reference's settings the runner turns into PARITY_* variables (ENV_SETTINGS)."""
        return (f"width={self.width}", f"hidden={self.hidden}", f"lr_drops={','.join(map(str, self.drops))}",
                f"epochs={self.epochs}")

    def setting(self) -> str:
        return WORDS["learn_setting"].format(**vars(self), classes=CLASSES)


LEARN = Cut(tasks=5, train=2500, test=1000, width=0.25, hidden=1024, epochs=30, drops=(15, 24), mask_drop=15,
            mask_stop=21, targets=(0.2, 0.4, 0.6, 0.8, 0.9), prune_epochs=3, ramp=1, frequency=10, refit=10,
            packnet_retrain=10, packnet_drop=8, bar=0.85, packnet_bar=0.85, allow_acc_loss=0.01)
# --smoke: every phase of the learning rows once, far below the cut (minutes, not a result).
SMOKE = Cut(tasks=2, train=64, test=32, width=0.125, hidden=64, epochs=1, drops=(2,), mask_drop=2, mask_stop=2,
            targets=(0.5,), prune_epochs=1, ramp=1, frequency=1, refit=1, packnet_retrain=1, packnet_drop=2,
            bar=0.0, packnet_bar=0.0)


def learn_rows(cut: Cut) -> dict[str, Row]:
    """The learning cut's rows: CPG, PAE (no picking, no refit) and PackNet, growth on, goals each side's own."""
    targets = ",".join(map(str, cut.targets))
    cpg_cut = (*cut.split(), f"method.prune_targets=[{targets}]", f"method.prune_epochs={cut.prune_epochs}",
               f"method.prune_ramp_epochs={cut.ramp}", f"method.prune_frequency={cut.frequency}",
               f"method.retrain_epochs={cut.refit}", "method.goal_source=independent",
               f"method.train_acc_bar={cut.bar}", f"method.mask_lr_milestones=[{cut.mask_drop}]",
               f"method.mask_lr_stop={cut.mask_stop}", f"method.allow_acc_loss={cut.allow_acc_loss}")
    cpg_ref = ("program=cpg", *cut.net(), f"prune_targets={targets}", f"prune_epochs={cut.prune_epochs}",
               f"pruning_interval={cut.ramp}", f"pruning_frequency={cut.frequency}", f"retrain_epochs={cut.refit}",
               "goals=scratch", f"train_acc_bar={cut.bar}", "max_multiplier=1.5", f"mask_drop={cut.mask_drop}",
               f"mask_stop={cut.mask_stop}", f"allow_acc_loss={cut.allow_acc_loss}")
    setting = cut.setting()
    return {
        "cpg_learn": Row("CPG", f"{setting}; compacting {list(cut.targets)} x {cut.prune_epochs}, refit {cut.refit}",
                         ("method=cpg", *cpg_cut), (*cpg_ref, "lr_mask=5e-4", "refit=true")),
        "pae_learn": Row("PAE", f"{setting}; compacting {list(cut.targets)} x {cut.prune_epochs}",
                         ("method=cpg", *cpg_cut, "method.picking=false"), (*cpg_ref, "lr_mask=0.0", "refit=false")),
        "packnet_learn": Row("PackNet", f"{setting}; 60% pruned, retrain {cut.packnet_retrain}",
                             ("method=packnet", *cut.split(), "method.prune_ratio=0.6",
                              f"method.retrain_epochs={cut.packnet_retrain}",
                              f"method.retrain_lr_milestones=[{cut.packnet_drop}]"),
                             ("program=packnet", *cut.net(), "one_shot_prune_perc=0.6",
                              f"retrain_epochs={cut.packnet_retrain}", f"retrain_drop={cut.packnet_drop}",
                              f"train_acc_bar={cut.packnet_bar}"),
                             source="baseline"),
    }

DIAGNOSTICS = {
    "prune_timing_immediate": Diagnostic("cpg", "cl-bench", (0, 1, 2, 3), ("method.prune_timing=immediate",)),
}


ROWS = {
    "cpg": Row("CPG", f"{SETTING}; {EPOCHS} epochs, compacting {PRUNE_TARGETS} x {PRUNE_EPOCHS}, refit {REFIT}",
               ("method=cpg", *SPLIT, *CPG_CUT),
               ("program=cpg", *CPG_REF, "lr_mask=5e-4", "refit=true")),
    "pae": Row("PAE", f"{SETTING}; {EPOCHS} epochs, compacting {PRUNE_TARGETS} x {PRUNE_EPOCHS}",
               ("method=cpg", *SPLIT, *CPG_CUT, "method.picking=false"),
               ("program=cpg", *CPG_REF, "lr_mask=0.0", "refit=false")),
    "packnet": Row("PackNet", f"{SETTING}; {EPOCHS} epochs, {PACKNET_PRUNE:.0%} pruned, retrain {PACKNET_RETRAIN}",
                   ("method=packnet", *SPLIT, f"method.epochs={EPOCHS}", f"method.prune_ratio={PACKNET_PRUNE}",
                    f"method.retrain_epochs={PACKNET_RETRAIN}"),
                   ("program=packnet", f"epochs={EPOCHS}", f"one_shot_prune_perc={PACKNET_PRUNE}",
                    f"retrain_epochs={PACKNET_RETRAIN}", f"train_acc_bar={BAR}"),
                   source="baseline"),
    **learn_rows(LEARN),
}
ROWS, DIAGNOSTICS = common.annotated(NAME, ROWS, DIAGNOSTICS)  # notes and causes from findings/cpg.md

# The learning cut's network and schedule, read where the scripts fix them (their values when the variables are unset,
# so the other rows run the scripts' own); ENV_SETTINGS maps a row's reference settings to these variables.
ENV_SETTINGS = {"train_acc_bar": BAR_ENV, "width": "PARITY_WIDTH", "hidden": "PARITY_HIDDEN",
                "lr_drops": "PARITY_LR_DROPS", "mask_drop": "PARITY_MASK_DROP", "mask_stop": "PARITY_MASK_STOP",
                "retrain_drop": "PARITY_RETRAIN_DROP"}
PATCHES = list(common.patches(NAME)["reference"])  # patches/cpg.yaml


# --- the data ---------------------------------------------------------------------------------------------------
def task_name(t: int) -> str:
    return f"task{t}"


def class_folder(label: int) -> str:
    # ImageFolder numbers classes in sorted folder order: zero-padded names keep that order the local label order.
    return f"c{label:03d}"


def write_tasks(scenario, row: Row, folder: Path) -> None:
    """Each task as <folder>/{train,test}/task<t>/c<label>/<index>.png (lossless, the index its place in the split,
    the label within the task), its training split's per-channel mean/std in stats.json, and the goals file."""
    from PIL import Image

    from cl_bench.data.batches import channel_stats
    stats = {}
    for t, task in enumerate(scenario.tasks):
        for part, split in (("train", task.train), ("test", scenario.test[t])):
            labels = (split.y - task.offset).tolist()
            for i, (img, label) in enumerate(zip(split.x.cpu().numpy(), labels)):
                path = folder / part / task_name(t) / class_folder(label) / f"{i:05d}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(img.transpose(1, 2, 0)).save(path)
        mean, std = channel_stats(task.train.x)
        stats[task_name(t)] = {"mean": mean, "std": std}
    (folder / "stats.json").write_text(json.dumps(stats))
    # Fixed goals for the rows that fix them; empty for measured ones, which the scratch models fill task by task.
    measured = settings(row).get("goals") == "scratch"
    goals = {} if measured else {task_name(t): GOAL for t in range(len(scenario.tasks))}
    (folder / "goals.json").write_text(json.dumps(goals))


def read_tasks(folder: Path) -> list[dict]:
    """The written tasks back, in split order: [{"train": (x uint8 NCHW, local y), "test": (...)}, ...]."""
    from PIL import Image
    tasks = []
    for t in range(len(list((folder / "train").iterdir()))):
        task = {}
        for part in ("train", "test"):
            files = sorted((folder / part / task_name(t)).glob("*/*.png"), key=lambda p: p.name)
            x = np.stack([np.asarray(Image.open(p)).transpose(2, 0, 1) for p in files])
            task[part] = (x, np.array([int(p.parent.name[1:]) for p in files]))
        tasks.append(task)
    return tasks


# --- what the reference prints ----------------------------------------------------------------------------------
ACCURACY = re.compile(r"accuracy[:=]\s*'?(\d+(?:\.\d+)?)")


def parse_accuracy(text: str) -> float:
    """The last accuracy an evaluation printed, in [0, 1]: CPG logs `In validate()-> ... accuracy: 93.50`, PackNet
    only shows it in tqdm's postfix (`accuracy=93.50`), whose last refresh is the whole split's mean."""
    found = ACCURACY.findall(text)
    if not found:
        raise ValueError("no accuracy in the reference's output")
    return float(found[-1]) / 100


CHOSEN = re.compile(r"We choose pruning_ratio (\S+)")


def parse_chosen_ratio(text: str) -> float:
    """The sparsity tools/choose_appropriate_pruning_ratio_for_next_task.py kept, from its one log line
    (`... - root - INFO - We choose pruning_ratio 0.4`; 0.0 when none met the goal: the unpruned model)."""
    found = CHOSEN.findall(text)
    if not found:
        raise ValueError("no chosen pruning ratio in the choosing tool's output")
    return float(found[-1])


def parse_record(text: str) -> dict[str, float]:
    """gradual_prune/record.txt: the selection accuracy (in [0, 1]) at each sparsity recorded, '0.0' the
    trained model's, as the main writes it (json.dump of {0.0: acc, target: acc, ...})."""
    return {str(float(k)): float(v) for k, v in json.loads(text).items()}


def parse_goal(text: str, name: str) -> float | None:
    """A task's goal in the goals file (the baseline run writes '{:.4f}' strings; the fixed rows numbers)."""
    goals = json.loads(text)
    return float(goals[name]) if name in goals else None


def refit_outcome(retrain: Path) -> dict:
    """What tools/choose_retrain_or_not.py will do with the refit's folder: copy the first checkpoint os.listdir
    names over the compacted model (kept; the refit saves one when an epoch beats the restarted mask, and its last
    epoch when above the bar), or leave the compacted model (not kept)."""
    saved = [f for f in os.listdir(retrain) if ".pth.tar" in f] if retrain.is_dir() else []
    return {"refit": "kept", "refit_checkpoint": saved[0]} if saved else {"refit": "not kept"}


def refit_scores(best: str | float, compacted: str | float, restarted: str | float) -> dict:
    """The refit's selection accuracies (in [0, 1]) beside the compacted model's: its epochs' best, kept or not,
    and the restarted mask's; refit_gain, best minus compacted. Empty where the log did not print them (cl-bench
    before the parity records kept them)."""
    if best == "" or best is None:
        return {}
    best, compacted, restarted = float(best), float(compacted), float(restarted)
    return {"refit_best": best, "compacted": compacted, "restarted": restarted,
            "refit_gain": round(best - compacted, 6)}


# The reference's per-epoch validation line (utils/manager.py's validate, accuracy in %): the refit's first is the
# restarted mask's (--finetune_again validates before its first epoch), the rest its epochs'.
VALIDATED = re.compile(r"In validate\(\)-> Val Ep\. #-?\d+ loss: [-\d.e]+, accuracy: ([\d.]+)")


def reference_refit_scores(out: str, compacted: float | None) -> dict:
    """refit_scores of the reference's refit process from its output, beside the compacted model's accuracy (its
    record.txt entry at the sparsity kept)."""
    accs = [float(a) / 100 for a in VALIDATED.findall(out)]
    if len(accs) < 2 or compacted is None:
        return {}
    return refit_scores(max(accs[1:]), compacted, accs[0])


# The per-task decisions docs/parity.md sets side by side (summary.phase_lines): field, title, and the format of
# the seeds' mean where they are averaged (the rest are tallied). A column no record holds is left out.
PHASE_COLUMNS = (("goal", "goal", "{:.3f}"), ("multiplier", "width kept", None), ("ratio", "sparsity kept", None),
                 ("refit", "refit", None), ("refit_gain", "refit's best − compacted", "{:+.3f}"))


# What cl-bench's CPG logs per task in the run's train.log (cl_bench/methods/cpg.py's log.info lines).
CLB_START = re.compile(r"task (\d+): goal (\S+); at ([\d.]+)x:")
CLB_GROWN = re.compile(r"task (\d+): grown to ([\d.]+)x:")
CLB_KEEPS = re.compile(r"task (\d+): keeps sparsity [\d.]+ \(target ([\d.]+);")
CLB_REFIT = re.compile(r"task (\d+): picking refit kept(?:, ([\d.]+)| nothing)"
                       r"(?: \(epochs' best ([\d.]+), compacted ([\d.]+), restarted mask ([\d.]+)\))?")


def parse_clbench_phases(log: str) -> list[dict]:
    """Per task, from cl-bench's train.log: its goal, the parameter multiplier it started at and ended at, the
    sparsity target compacting kept (0.0: none, or nothing to prune) and the refit's outcome."""
    phases: dict[int, dict] = {}
    for t, goal, mult in CLB_START.findall(log):
        phases[int(t)] = {"task": int(t), "goal": None if goal == "none" else float(goal),
                          "start": float(mult), "multiplier": float(mult), "ratio": 0.0, "refit": "not run"}
    for t, mult in CLB_GROWN.findall(log):
        phases[int(t)]["multiplier"] = float(mult)
    for t, kept in CLB_KEEPS.findall(log):
        phases[int(t)]["ratio"] = float(kept)
    for t, acc, *scores in CLB_REFIT.findall(log):
        phases[int(t)].update(refit="kept" if acc else "not kept", **refit_scores(*scores))
    return [{**p, "grew": round(p["multiplier"] - p["start"], 6)} for _, p in sorted(phases.items())]


def clbench_phases(run_dir: Path) -> list[dict]:
    """The cl-bench side's per-task decisions (common.run_clbench_side calls this when the module has it): the
    growth and the refit from train.log, which metrics.json does not hold per task."""
    log = run_dir / "train.log"
    return parse_clbench_phases(log.read_text()) if log.is_file() else []


# --- running the reference --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ended:
    """One process of a run as the Runner logged it: its command line, output and exit, and where its entry ends
    in the log (a resumed run that reruns a task cuts the log back to the task's start)."""

    command: str
    out: str
    code: int
    seconds: float
    end: int


ENDED = re.compile(r"\n\[exit (-?\d+); ([\d.]+) s\]\n")


def read_log(text: str) -> list[Ended]:
    """The processes a Runner's log records as ended, in order (each entry is written whole when its process
    exits, as `$ COMMAND`, its output, `[exit CODE; SECONDS s]`); anything after the last whole entry is dropped."""
    ended, at = [], 0
    while text.startswith("$ ", at):
        line_end = text.find("\n", at)
        found = ENDED.search(text, line_end) if line_end >= 0 else None
        if found is None:
            break
        ended.append(Ended(text[at + 2:line_end], text[line_end + 1:found.start()], int(found[1]), float(found[2]),
                           found.end()))
        at = found.end()
    return ended


class CutShort(Exception):
    """A resumed run's log ends inside a task: that task is rerun from its start."""


class Runner:
    """Runs the reference's processes in its copy, as its shell scripts chain them, into one log. Given the processes
    a cut-short run's log records as ended, it replays them in order (their exit and output, their checkpoints as
    that run left them) instead of running them, while the commands are the same."""

    def __init__(self, copy: Path, seed: int, python: str, log: Path, env: dict, ended: list[Ended] = ()):
        self.copy, self.seed, self.python, self.log, self.env = copy, seed, python, log, env
        self.ended, self.replaying, self.replayed = list(ended), bool(ended), 0.0
        self.replayed_to = 0  # where the last replayed entry ends in the log, before any half-written one

    def __call__(self, script: str, args: list, ok=(0,)) -> tuple[int, str]:
        command = [self.python, script, *map(str, args)]
        if script.endswith("main_normal.py"):
            command += ["--seed", str(self.seed)]
        if self.replaying:
            return self.replay(" ".join(command))
        start = time.perf_counter()
        done = subprocess.run(command, cwd=self.copy, capture_output=True, text=True, env=self.env)
        out = done.stdout + done.stderr
        with open(self.log, "a") as f:  # each process's seconds: what each phase costs at a cut
            f.write(f"$ {' '.join(command)}\n{out}\n[exit {done.returncode}; {time.perf_counter() - start:.1f} s]\n")
        if done.returncode not in ok:
            sys.exit(f"{' '.join(command)} failed (exit {done.returncode}); the end of its output:\n{out[-3000:]}")
        return done.returncode, out

    def replay(self, command: str) -> tuple[int, str]:
        if not self.ended:
            raise CutShort
        ended = self.ended.pop(0)
        if ended.command != command:
            sys.exit(f"--resume: {self.log} ran `{ended.command}` where this run runs `{command}`: the log is another "
                     "run's (another row or setting); run the seed afresh, without --resume")
        self.replayed, self.replayed_to = self.replayed + ended.seconds, ended.end
        return ended.code, ended.out

    def rerun_from(self, at: int, written: Path) -> None:
        """Live from here: the log cut back to `at` (where the task began), the task's folder, which the cut-short
        processes wrote, gone."""
        with open(self.log, "r+") as f:
            f.truncate(at)
        shutil.rmtree(written, ignore_errors=True)
        self.ended, self.replaying = [], False


def settings(row: Row) -> dict:
    return dict(item.split("=", 1) for item in row.reference)


def run_reference(copy: Path, row: Row, seed: int, data: Path, python: str, resume: bool = False) -> Outcome:
    """Train the reference on the written tasks, evaluating every task learned after each one: the printed
    accuracies as a lower-triangular matrix (row i: tasks 0..i after task i), RA the mean of its last row.
    resume: go on from the run this seed's log records (see Runner; the copy kept its checkpoints)."""
    s = settings(row)
    link = copy / DATA_LINK
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(data.resolve(), target_is_directory=True)
    log = data / "reference.log"
    ended = read_log(log.read_text()) if resume and log.is_file() else []
    if not ended:
        shutil.rmtree(copy / RUNS, ignore_errors=True)
        log.unlink(missing_ok=True)
    env = {**os.environ, **common.one_thread_env(), **{var: s[key] for key, var in ENV_SETTINGS.items() if key in s}}
    run = Runner(copy, seed, python, log, env, ended)
    names = sorted((p.name for p in (data / "train").iterdir()), key=lambda n: int(n[4:]))
    classes = [len(list((data / "train" / n).iterdir())) for n in names]
    learn, evaluate = (cpg_task, cpg_evaluate) if s["program"] == "cpg" else (packnet_task, packnet_evaluate)
    state = {"multiplier": 1.0, "goals": str((data / "goals.json").resolve()), "phases": []}
    matrix = []
    for t, name in enumerate(names):
        at, before = run.replayed_to, deepcopy(state)  # a task can be cut short only while replaying
        try:
            matrix.append(learned(run, s, state, names, classes, t, learn, evaluate))
        except CutShort:  # the cut-short run ended inside this task: it starts over, as the run before it left it
            run.rerun_from(at, copy / RUNS / name)
            state.clear()
            state.update(before)
            matrix.append(learned(run, s, state, names, classes, t, learn, evaluate))
    return Outcome(float(np.mean(matrix[-1])), matrix, state["phases"], run.replayed)


def learned(run: Runner, s: dict, state: dict, names: list, classes: list, t: int, learn, evaluate) -> list[float]:
    """Task t learned, then every task so far evaluated: that row of the accuracy matrix. A replay that has
    nothing left at a task's start was cut short in it (its first process, or between tasks)."""
    if run.replaying and not run.ended:
        raise CutShort
    learn(run, s, state, names, classes, t)
    return [evaluate(run, s, state, names[t], names[j], classes[j]) for j in range(t + 1)]


def ckpt(name: str, phase: str) -> str:
    return str(RUNS / name / phase)


def cpg_common(s: dict, state: dict, names: list, classes: list, t: int) -> list:
    return ["--arch", "custom_vgg_cifar100", "--dataset", names[t], "--num_classes", classes[t], "--batch_size", 32,
            "--weight_decay", 4e-5, "--network_width_multiplier", state["multiplier"],
            "--max_allowed_network_width_multiplier", s["max_multiplier"], "--baseline_acc_file", state["goals"],
            "--log_path", ckpt(names[t], "train.log"), "--total_num_tasks", len(names)]


def cpg_task(run: Runner, s: dict, state: dict, names: list, classes: list, t: int) -> None:
    """CPG_cifar100_scratch_mul_1.5.sh's body for one task (PAE's without the refit), after baseline_cifar100.sh's
    scratch model for its goal where the row measures goals; the task's decisions go to state["phases"]."""
    name, main = names[t], "CPG_cifar100_main_normal.py"
    if s.get("goals") == "scratch":
        scratch_goal(run, s, state, names, classes, t)
    phase = {"task": t, "goal": parse_goal(Path(state["goals"]).read_text(), name), "start": state["multiplier"]}
    cpg_finetune(run, s, state, names, classes, t)
    if state["exit"] != 5:  # 5: the task found no free weight, nothing to prune
        cpg_prune(run, s, state, names, classes, t)
    record = run.copy / ckpt(name, "gradual_prune/record.txt")
    phase["record"] = parse_record(record.read_text()) if record.is_file() else {}
    _, out = run("tools/choose_appropriate_pruning_ratio_for_next_task.py",
                 ["--pruning_ratio_to_acc_record_file", ckpt(name, "gradual_prune/record.txt"),
                  "--baseline_acc_file", state["goals"], "--allow_acc_loss", s.get("allow_acc_loss", 0.0),
                  "--dataset", name,
                  "--max_allowed_network_width_multiplier", s["max_multiplier"],
                  "--network_width_multiplier", state["multiplier"], "--log_path", ckpt(name, "train.log")])
    phase.update(multiplier=state["multiplier"], grew=state["multiplier"] - phase["start"],
                 ratio=parse_chosen_ratio(out), refit="not run")
    if t > 0 and state["exit"] != 5 and s["refit"] == "true":
        # The script ignores the refit's exit status; 5 is its no-free-weights exit after the last epoch.
        _, out = run(main, [*cpg_common(s, state, names, classes, t), "--lr", 1e-3, "--lr_mask", 1e-4,
                   "--save_folder", ckpt(name, "retrain"), "--load_folder", ckpt(name, "gradual_prune"),
                   "--epochs", s["retrain_epochs"], "--mode", "finetune", "--pruning_ratio_to_acc_record_file",
                   ckpt(name, "retrain/record.txt"), "--finetune_again"], ok=(0, 2, 5))
        phase.update(refit_outcome(run.copy / ckpt(name, "retrain")),
                     **reference_refit_scores(out, phase["record"].get(str(phase["ratio"]))))
        run("tools/choose_retrain_or_not.py", ["--save_folder", ckpt(name, "gradual_prune"),
                                               "--load_folder", ckpt(name, "retrain")])
    state["phases"].append(phase)


def scratch_goal(run: Runner, s: dict, state: dict, names: list, classes: list, t: int) -> None:
    """baseline_cifar100.sh for one task: PackNet's main trains a fresh network on the task alone with the
    row's schedule and writes its last epoch's validation accuracy into the goals file under the task's name."""
    run("packnet_cifar100_main_normal.py",
        ["--arch", "vgg16_bn_cifar100", "--dataset", names[t], "--num_classes", classes[t], "--lr", 1e-2,
         "--weight_decay", 4e-5, "--save_folder", ckpt(names[t], "baseline"), "--epochs", s["epochs"],
         "--mode", "finetune", "--logfile", state["goals"]])


def saved(run: Runner, folder: str, what: str, bar: str) -> None:
    """The next phase loads this folder's checkpoint; without one the reference would start it from a fresh
    network, silently (its main saves only above the training-accuracy bar): refused in one line."""
    if not list((run.copy / folder).glob("*.pth.tar")):
        sys.exit(f"the reference saved no checkpoint after {what} (its last epoch's training accuracy did not top "
                 f"the bar {bar}), so the next phase would start from nothing: lower the row's train_acc_bar (on both "
                 f"sides, where cl-bench has one) or train longer; its log: {run.log}")


def cpg_finetune(run: Runner, s: dict, state: dict, names: list, classes: list, t: int) -> None:
    """Pick and train; exit 2 asks for a wider network (the script adds 0.5 to the multiplier and retries)."""
    name = names[t]
    while True:
        load = ["--load_folder", ckpt(names[t - 1], "gradual_prune")] if t > 0 else []
        code, _ = run("CPG_cifar100_main_normal.py",
                      [*cpg_common(s, state, names, classes, t), "--lr", 1e-2, "--lr_mask", s["lr_mask"],
                       "--save_folder", ckpt(name, "scratch"), *load, "--epochs", s["epochs"], "--mode", "finetune",
                       "--pruning_ratio_to_acc_record_file", ckpt(name, "gradual_prune/record.txt")], ok=(0, 2, 5))
        state["exit"] = code
        if code != 2:
            saved(run, ckpt(name, "scratch"), f"training {name}", s["train_acc_bar"])
            return
        if state["multiplier"] + 0.5 > float(s["max_multiplier"]) + 1e-9:
            # The script would grow on without end: past the maximum its main never sees the maximum width again.
            sys.exit(f"the reference asks to grow {name} past max_multiplier {s['max_multiplier']} (its training "
                     f"accuracy did not top the bar {s['train_acc_bar']} at full width; cl-bench stops growing "
                     f"there): lower the row's train_acc_bar on both sides or train longer; its log: {run.log}")
        state["multiplier"] += 0.5


def cpg_prune(run: Runner, s: dict, state: dict, names: list, classes: list, t: int) -> None:
    """Gradual pruning through the targets in turn, each from the one before; exit 6 ends the sweep."""
    name, start = names[t], 0.0
    for target in map(float, s["prune_targets"].split(",")):
        load = ckpt(name, "scratch") if start == 0.0 else ckpt(name, "gradual_prune")
        code, _ = run("CPG_cifar100_main_normal.py",
                      [*cpg_common(s, state, names, classes, t), "--lr", 1e-3, "--lr_mask", 0.0,
                       "--save_folder", ckpt(name, "gradual_prune"), "--load_folder", load,
                       "--epochs", s["prune_epochs"], "--mode", "prune", f"--initial_sparsity={start}",
                       f"--target_sparsity={target}", f"--pruning_frequency={s['pruning_frequency']}",
                       f"--pruning_interval={s['pruning_interval']}",
                       "--pruning_ratio_to_acc_record_file", ckpt(name, "gradual_prune/record.txt")], ok=(0, 6))
        if code == 6:
            return
        start = target


def cpg_evaluate(run: Runner, s: dict, state: dict, last: str, name: str, num_classes: int) -> float:
    """inference_CPG_cifar100.sh for one task, from the last task's chosen checkpoint."""
    _, out = run("CPG_cifar100_main_normal.py",
                 ["--arch", "custom_vgg_cifar100", "--dataset", name, "--num_classes", num_classes,
                  "--load_folder", ckpt(last, "gradual_prune"), "--mode", "inference",
                  "--baseline_acc_file", state["goals"], "--network_width_multiplier", 1.0,
                  "--max_allowed_network_width_multiplier", s["max_multiplier"],
                  "--log_path", str(RUNS / "inference.log")])
    return parse_accuracy(out)


def packnet_task(run: Runner, s: dict, state: dict, names: list, classes: list, t: int) -> None:
    """PackNet_cifar100.sh's body for one task: train the free weights, prune one shot, retrain."""
    name, main = names[t], "packnet_cifar100_main_normal.py"
    head = ["--arch", "vgg16_bn_cifar100", "--dataset", name, "--num_classes", classes[t], "--weight_decay", 4e-5]
    load = ["--load_folder", ckpt(names[t - 1], "one_shot_prune")] if t > 0 else []
    run(main, [*head, "--lr", 1e-2, "--save_folder", ckpt(name, "scratch"), *load, "--epochs", s["epochs"],
               "--mode", "finetune"])
    run(main, [*head, "--lr", 1e-3, "--save_folder", ckpt(name, "one_shot_prune"),
               "--load_folder", ckpt(name, "scratch"), "--epochs", s["retrain_epochs"], "--mode", "prune",
               "--one_shot_prune_perc", s["one_shot_prune_perc"]])
    saved(run, ckpt(name, "one_shot_prune"), f"pruning {name}", s["train_acc_bar"])


def packnet_evaluate(run: Runner, s: dict, state: dict, last: str, name: str, num_classes: int) -> float:
    _, out = run("packnet_cifar100_main_normal.py",
                 ["--arch", "vgg16_bn_cifar100", "--dataset", name, "--num_classes", num_classes,
                  "--load_folder", ckpt(last, "one_shot_prune"), "--mode", "inference"])
    return parse_accuracy(out)


def smoke(argv: list[str]) -> list[str]:
    """--smoke: the learning rows at SMOKE's size in place of LEARN's (common.smoke)."""
    return common.smoke(argv, ROWS, lambda: learn_rows(SMOKE))


if __name__ == "__main__":
    sys.argv = smoke(sys.argv)
    common.main(sys.modules[__name__])
