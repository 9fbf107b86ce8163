"""The parity harness's shared parts: the split both sides train on, the reference's patched copy, the records.

A parity row trains one method twice on the same samples: through the authors' code (the reference, a checkout the
user cloned at its pinned commit) and through cl-bench. cl-bench builds the scenario (its own split, from its seed);
the reference's runner writes that split in the reference's own input format, so both sides train and test on
exactly the same images. The reference runs from a copy of its checkout with the runner's listed patches applied
(each the smallest change that makes it run on a CPU or read the written files; never its learning code). Every
run leaves one JSON record; scripts/parity/summary.py turns the records into docs/parity.md.

A reference module (scripts/parity/<reference>.py) defines:
  NAME, REPO, PINNED: its name, GitHub repository and the commit the patches were written against
  PATCHES: list[Patch]
  ROWS: dict of row name -> Row
  write_tasks(scenario, row, folder) -> None: the split in the reference's input format
  run_reference(copy, row, seed, data, python) -> Outcome: train the reference once, parse what it prints
  FINDINGS (optional): list[str], the differences its runs found and what became of each (docs/parity.md)
and calls common.main(sys.modules[__name__]).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "outputs" / "parity"


@dataclass(frozen=True)
class Patch:
    """One exact replacement in the reference's copy: `old` must occur in `file` exactly once."""

    file: str
    old: str
    new: str
    why: str


@dataclass(frozen=True)
class Row:
    """One line of docs/parity.md: a method in one setting, the same on both sides."""

    method: str  # as docs/parity.md names it
    setting: str  # what both sides run, in words
    clbench: tuple[str, ...]  # cl-bench overrides (the seed is added per run)
    reference: tuple[str, ...] = ()  # the reference's own arguments for this row (its runner adds data and seed)
    note: str = ""


@dataclass
class Outcome:
    """What one run measured: RA (the mean of the final accuracy row, in [0, 1]) and the matrix it came from."""

    ra: float
    matrix: list[list[float]] = field(default_factory=list)  # acc[i][j]: task j after task i, where printed


@dataclass
class Record:
    reference: str  # the reference module's NAME
    row: str
    side: str  # "reference" or "cl-bench"
    seed: int
    ra: float
    matrix: list[list[float]]
    seconds: float
    commit: str  # the reference's commit or cl-bench's
    command: str


def clbench_overrides(row: Row, seed: int, data_root: str | None = None) -> list[str]:
    return [*row.clbench, f"seed={seed}", *([f"data.root={data_root}"] if data_root else [])]


def scenario(overrides: list[str]):
    """The scenario `cl-bench train` would build for these overrides, on the CPU: the same split, same seed."""
    import torch

    from cl_bench import config
    from cl_bench.data import scenarios
    config.register()
    cfg = config.compose(overrides)
    return scenarios.build(cfg.dataset, cfg.data, cfg.scenario, cfg.seed, torch.device("cpu"),
                           select_on_test=cfg.method.protocol == "official",
                           per_task_norm=config.per_task_normalization(cfg))


def git_commit(folder: Path) -> str:
    out = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def patched_copy(ref: Path, pinned: str, patches: list[Patch], work: Path, allow_other_commit: bool = False) -> Path:
    """The reference's committed tree at its checkout's HEAD, copied to work/ref and patched. The user's checkout
    is never changed. A checkout at another commit than the pinned one is refused unless allowed, since the patches
    (and the comparison) were made against that commit."""
    commit = git_commit(ref)
    if commit == "unknown":
        sys.exit(f"{ref} is not a git checkout: clone the reference and pass its folder with --ref")
    if commit != pinned and not allow_other_commit:
        sys.exit(f"{ref} is at {commit[:12]}, the harness pins {pinned[:12]}: `git -C {ref} checkout {pinned[:12]}` "
                 "(or --any-commit to try another)")
    copy = work / "ref"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir(parents=True)
    archive = work / "ref.tar"
    subprocess.run(["git", "-C", str(ref), "archive", "-o", str(archive), "HEAD"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(copy, filter="data")
    archive.unlink()
    for patch in patches:
        apply(copy, patch)
    return copy


def apply(copy: Path, patch: Patch) -> None:
    path = copy / patch.file
    text = path.read_text()
    found = text.count(patch.old)
    if found != 1:
        sys.exit(f"patch for {patch.file} ({patch.why}) matches {found} places, not one: the reference changed")
    path.write_text(text.replace(patch.old, patch.new))


def run_logged(command: list[str], cwd: Path, log: Path, env: dict | None = None) -> str:
    """Run a command, its output into log; the output, or exit with the log's tail when it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(env or {})}
    with open(log, "w") as f:
        done = subprocess.run(command, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=full_env)
    text = log.read_text()
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {done.returncode}); the end of {log}:\n{text[-3000:]}")
    return text


def one_thread_env() -> dict:
    """Each side trains on one thread, as cl-bench runs with hardware.threads=1: the seconds compare like for like."""
    return {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def run_clbench(row: Row, seed: int, run_dir: Path, data_root: str | None = None) -> Outcome:
    overrides = [*clbench_overrides(row, seed, data_root), "hardware=cpu", "hardware.threads=1", "logger=none",
                 "checkpoint.enabled=false", f"hydra.run.dir={run_dir}"]
    shutil.rmtree(run_dir, ignore_errors=True)
    run_logged([sys.executable, "-m", "cl_bench", "train", *overrides], ROOT, run_dir.with_suffix(".log"),
               one_thread_env())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return Outcome(metrics["avg_acc"], metrics["acc"])


def save(record: Record, out: Path) -> Path:
    path = out / record.reference / record.row / f"{record.side}-seed{record.seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(record), indent=1))
    tmp.replace(path)
    return path


def timed(fn, *args) -> tuple[Outcome, float]:
    start = time.perf_counter()
    outcome = fn(*args)
    return outcome, time.perf_counter() - start


def main(reference) -> None:
    """`python scripts/parity/<reference>.py --ref DIR [--rows R ...] [--seeds 0 1 2]`: both sides, every seed."""
    args = arguments(reference).parse_args()
    work = args.work / reference.NAME
    lock = hold(work, reference.NAME)  # noqa: F841  held until the runner exits
    copy = None
    if args.side != "cl-bench":
        copy = patched_copy(args.ref.resolve(), reference.PINNED, reference.PATCHES, work, args.any_commit)
    commits = {"reference": git_commit(args.ref), "cl-bench": git_commit(ROOT)}
    for name in args.rows:
        for seed in args.seeds:
            if args.side != "cl-bench":
                outcome, seconds, command = reference_side(reference, copy, name, seed, work, args)
                report(save(Record(reference.NAME, name, "reference", seed, outcome.ra, outcome.matrix, seconds,
                                   commits["reference"], command), args.out), outcome, seconds)
            if args.side != "reference":
                row = reference.ROWS[name]
                outcome, seconds = timed(run_clbench, row, seed, work / "runs" / name / f"seed{seed}", args.data_root)
                command = "cl-bench train " + " ".join(clbench_overrides(row, seed))
                report(save(Record(reference.NAME, name, "cl-bench", seed, outcome.ra, outcome.matrix, seconds,
                                   commits["cl-bench"], command), args.out), outcome, seconds)


def hold(work: Path, name: str):
    """One runner at a time in a reference's work folder: a second one would copy the reference afresh and rewrite
    the tasks under the first one's running reference. The lock goes when the returned file is closed or the
    process ends, however it ends."""
    work.mkdir(parents=True, exist_ok=True)
    handle = open(work / ".lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        sys.exit(f"another parity run of {name} is using {work}: wait for it to end, or give this one its own "
                 "--work DIR")
    return handle


def reference_arguments(reference, description: str) -> argparse.ArgumentParser:
    """What running the reference needs: its checkout, the seeds, the work folder, the data and the interpreter."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--ref", type=Path, required=True, help=f"a checkout of {reference.REPO}")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--work", type=Path, default=ROOT / "outputs" / "parity-work")
    parser.add_argument("--data-root", help="cl-bench's data.root: where the datasets' canonical files are")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the reference")
    parser.add_argument("--any-commit", action="store_true", help="run a checkout at another commit than pinned")
    return parser


def arguments(reference) -> argparse.ArgumentParser:
    parser = reference_arguments(reference, f"parity of cl-bench with {reference.REPO}")
    parser.add_argument("--rows", nargs="+", choices=sorted(reference.ROWS), default=list(reference.ROWS))
    parser.add_argument("--side", choices=("both", "reference", "cl-bench"), default="both")
    parser.add_argument("--out", type=Path, default=RECORDS, help="where the records go")
    return parser


def reference_side(reference, copy: Path, name: str, seed: int, work: Path, args) -> tuple[Outcome, float, str]:
    """The split of this seed written in the reference's format, then the reference trained on it."""
    row = reference.ROWS[name]
    data = work / "data" / name / f"seed{seed}"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    reference.write_tasks(scenario(clbench_overrides(row, seed, args.data_root)), row, data)
    outcome, seconds = timed(reference.run_reference, copy, row, seed, data, args.python)
    return outcome, seconds, " ".join(row.reference)


def report(path: Path, outcome: Outcome, seconds: float) -> None:
    print(f"{path}: RA {100 * outcome.ra:.2f} in {seconds:.0f} s", flush=True)
