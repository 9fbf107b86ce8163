"""The parity harness's shared parts: the split both sides train on, the reference's patched copy, the records.

Its account: scripts/parity/README.md, section common.py.
"""
from __future__ import annotations

import argparse
import fcntl
import itertools
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from parity import plans

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "outputs" / "parity"


# What a patch to the reference's copy touches, from the least to the most consequential. docs/parity.md lists each
# patch under its class, so a reader sees at once which patches change what the reference learns.
ENVIRONMENT = "environment"  # runs on this CPU and this torch: devices, threads, removed APIs, loader workers
DATA_IO = "data I/O"  # reads the split the harness wrote, writes what the harness parses; no change to training
ARCHITECTURE = "architecture"  # the network made the same on both sides (a cut or a diagnostic's variant)
LEARNING = "control flow/learning"  # changes which phases run, what is saved or kept, or the loss
PATCH_KINDS = (ENVIRONMENT, DATA_IO, ARCHITECTURE, LEARNING)


@dataclass(frozen=True)
class Patch:
    """One exact replacement in the reference's copy: `old` must occur in `file` exactly once."""

    file: str
    old: str
    new: str
    why: str
    kind: str  # one of PATCH_KINDS

    def __post_init__(self):
        if self.kind not in PATCH_KINDS:
            raise ValueError(f"patch of {self.file}: kind {self.kind!r} is not one of {PATCH_KINDS}")


@dataclass(frozen=True)
class Row:
    """One line of docs/parity.md: a method in one setting, the same on both sides."""

    method: str  # as docs/parity.md names it
    setting: str  # what both sides run, in words
    clbench: tuple[str, ...]  # cl-bench overrides (the seed is added per run)
    reference: tuple[str, ...] = ()  # the reference's own arguments for this row (its runner adds data and seed)
    # Both from the row's `## note:` and `## differs:` sections in findings/<reference>.md (annotated()).
    note: str = ""
    differs: str = ""  # set when the two sides run different algorithms by design: what differs (not parity)
    source: str = ""  # where the reference's code for this row comes from, when not the module's SOURCE
    # Patches of the reference's copy for this row only, after the module's PATCHES: an architecture-matched row's
    # network (docs/parity.md lists them under the row's name); its diagnostics' runs carry them too.
    patches: tuple[Patch, ...] = ()


@dataclass
class Outcome:
    """What one run measured: RA (the mean of the final accuracy row, in [0, 1]) and the matrix it came from."""

    ra: float
    matrix: list[list[float]] = field(default_factory=list)  # acc[i][j]: task j after task i, where printed
    phases: list[dict] = field(default_factory=list)  # per task, the method's decisions, where the runner reads them
    replayed: float = 0.0  # a resumed run: the seconds its cut-short run spent in what it replayed (or checkpointed)


@dataclass(frozen=True)
class Diagnostic:
    """A run that tests a cause beside a row: one side changed (cl-bench overrides, or extra patches to the
    reference), the other side's records of the same seeds the comparison. Its records go to the diagnostics
    section of docs/parity.json and render under the row."""

    row: str
    side: str  # the side that changes: "cl-bench" or "reference"
    seeds: tuple[int, ...]
    clbench: tuple[str, ...] = ()  # overrides added to the row's (side cl-bench)
    patches: tuple[Patch, ...] = ()  # patches added to the row's (side reference)
    what: str = ""  # the cause it tests, in words: its `## diagnostic:` section in findings/<reference>.md
    # Set where the diagnostic is a variant the table shows beside its row (the row's label, then this): a setting a
    # user can choose, run over the row's plan seeds; empty for a diagnostic that only tests a cause.
    shown_as: str = ""


@dataclass
class Record:
    reference: str  # the reference module's NAME
    row: str
    side: str  # "reference" or "cl-bench"
    seed: int
    ra: float
    matrix: list[list[float]]
    seconds: float  # wall time of the run
    commit: str  # the reference's commit or cl-bench's
    command: str
    provenance: dict = field(default_factory=dict)  # see provenance(); empty in records made before it existed
    diagnostic: str = ""  # the Diagnostic's name, for a diagnostic run
    phases: list[dict] = field(default_factory=list)  # Outcome.phases; empty in records made before it existed


FINDINGS = Path(__file__).resolve().parent / "findings"  # <reference>.md: findings, notes, what diagnostics test
TEXT_KINDS = ("findings", "note", "differs", "diagnostic")


PATCH_FILES = Path(__file__).resolve().parent / "patches"  # <reference>.yaml: its copy's patches, by group
WORDING = Path(__file__).resolve().parent / "wording.yaml"  # settings in words, the pages' sentences, option help


def wording(section: str) -> dict:
    """wording.yaml's section: a reference's NAME, "summary" or "common"."""
    import yaml
    return yaml.safe_load(WORDING.read_text())[section]


def patches(name: str) -> dict[str, tuple[Patch, ...]]:
    """patches/<name>.yaml: each group's patches ("reference": every row's; the others a row's or a diagnostic's)."""
    import yaml
    groups = yaml.safe_load((PATCH_FILES / f"{name}.yaml").read_text())
    return {group: tuple(Patch(**fields) for fields in items) for group, items in groups.items()}


def texts(name: str, folder: Path = FINDINGS) -> dict[tuple[str, str], list[str]]:
    """findings/<name>.md by its `## KIND: NAMES` sections: (kind, row, diagnostic or "all") -> its bullets (findings,
    of every section that names it) or its one paragraph (the others), each joined into one line."""
    found: dict[tuple[str, str], list[str]] = {}
    section: list[str] | None = None
    for line in (folder / f"{name}.md").read_text().splitlines():
        if line.startswith("## "):
            kind, _, names = line[3:].partition(":")
            if kind not in TEXT_KINDS or not names.split():
                raise ValueError(f"{folder / name}.md: {line!r} is not `## KIND: NAMES`, KIND one of {TEXT_KINDS}")
            section = []
            for key in names.split():
                found.setdefault((kind, key), []).append(section)
        elif section is not None and line.strip():
            if line.startswith("- ") or not section:
                section.append(line.removeprefix("- ") if kind == "findings" else line)
            else:
                section[-1] += " " + line.strip()
    return {key: [item for part in parts for item in part] for key, parts in found.items()}


def annotated(name: str, rows: dict, diagnostics: dict, folder: Path = FINDINGS) -> tuple[dict, dict]:
    """The rows with their notes and differences, the diagnostics with what they test, from findings/<name>.md."""
    text = texts(name, folder)
    named = {"diagnostic": diagnostics}
    unknown = [f"{kind}: {key}" for kind, key in text if key != "all" and key not in named.get(kind, rows)]
    if unknown:
        raise ValueError(f"findings/{name}.md names what {name} does not define: {', '.join(unknown)}")
    one = lambda kind, key: " ".join(text.get((kind, key), []))  # noqa: E731
    return ({key: replace(row, note=one("note", key), differs=one("differs", key)) for key, row in rows.items()},
            {key: replace(d, what=one("diagnostic", key)) for key, d in diagnostics.items()})


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


# MNIST's four files as torchvision names them (its MNIST reads them, uncompressed, from <root>/MNIST/raw).
IDX = {"train_x": "train-images-idx3-ubyte", "train_y": "train-labels-idx1-ubyte",
       "test_x": "t10k-images-idx3-ubyte", "test_y": "t10k-labels-idx1-ubyte"}


def write_idx(path: Path, array) -> None:
    """An IDX file of unsigned bytes: 00 00 08 ndim, the sizes as big-endian int32, then the bytes."""
    import numpy as np
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.tobytes())


def read_idx(path: Path):
    """write_idx's file back as a uint8 array."""
    import numpy as np
    raw = Path(path).read_bytes()
    ndim = raw[3]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim]))


def git_commit(folder: Path) -> str:
    out = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def git_dirty(folder: Path) -> bool:
    """Whether the checkout has changes to tracked files (untracked files, such as outputs, do not count)."""
    out = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                         capture_output=True, text=True)
    return out.returncode != 0 or bool(out.stdout.strip())


VERSIONS = ("import sys, numpy, torch; print(sys.version.split()[0], numpy.__version__, torch.__version__)")


def versions(python: str) -> dict:
    """Python, numpy and torch as the given interpreter has them (each side's own: the reference may run on
    another environment than cl-bench)."""
    out = subprocess.run([python, "-c", VERSIONS], capture_output=True, text=True, env=one_thread_env())
    if out.returncode != 0:
        return {"python": "unknown", "numpy": "unknown", "torch": "unknown"}
    py, np_version, torch_version = out.stdout.split()
    return {"python": py, "numpy": np_version, "torch": torch_version}


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    names = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")]
    return names[0] if names else platform.processor() or "unknown"


def provenance(ref: Path | None, python: str) -> dict:
    """What one run was made with, read as it starts (not once per runner: the tree may change between runs):
    cl-bench's commit and whether its tree had uncommitted changes, the reference checkout's commit, the side's
    interpreter's versions, the machine's CPU and the threads each side trains on, the date."""
    return {"clbench_commit": git_commit(ROOT), "clbench_dirty": git_dirty(ROOT),
            "reference_commit": git_commit(ref) if ref else "", **versions(python), "cpu": cpu_model(),
            "threads": int(one_thread_env()["OMP_NUM_THREADS"]), "host_cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


# What a record must carry for its row to be unflagged in docs/parity.md.
PROVENANCE_KEYS = ("clbench_commit", "clbench_dirty", "reference_commit", "python", "numpy", "torch", "cpu",
                   "threads", "date")


def patched_copy(ref: Path, pinned: str, patches: list[Patch], work: Path, allow_other_commit: bool = False,
                 keep: Path | None = None) -> Path:
    """The reference's committed tree at its checkout's HEAD, copied to work/ref and patched. The user's checkout
    is never changed. A checkout at another commit than the pinned one is refused unless allowed, since the patches
    (and the comparison) were made against that commit. `keep` (relative to the copy) survives from the copy
    before: a resumed run's checkpoints."""
    commit = git_commit(ref)
    if commit == "unknown":
        sys.exit(f"{ref} is not a git checkout: clone the reference and pass its folder with --ref")
    if commit != pinned and not allow_other_commit:
        sys.exit(f"{ref} is at {commit[:12]}, the harness pins {pinned[:12]}: `git -C {ref} checkout {pinned[:12]}` "
                 "(or --any-commit to try another)")
    copy, kept = work / "ref", work / "kept"
    shutil.rmtree(kept, ignore_errors=True)
    if keep is not None and (copy / keep).exists():
        shutil.move(copy / keep, kept)
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir(parents=True)
    archive = work / "ref.tar"
    subprocess.run(["git", "-C", str(ref), "archive", "-o", str(archive), "HEAD"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(copy, filter="data")
    archive.unlink()
    for patch in patches:
        apply(copy, patch)
    if kept.exists():
        (copy / keep).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(kept, copy / keep)
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


def run_clbench(row: Row, seed: int, run_dir: Path, data_root: str | None = None, resume: bool = False) -> Outcome:
    """The row's cl-bench run, checkpointed at each task's end (the last checkpoint kept) so that --resume can go
    on with one cut short: `cl-bench train resume=DIR` from its last checkpoint, or from its start where it wrote
    none. A fresh run starts from an empty folder. Outcome.replayed: the seconds the resumed run had spent."""
    from cl_bench import checkpoint
    command = [sys.executable, "-m", "cl_bench", "train"]
    replayed = 0.0
    if resume and (run_dir / "run.json").is_file():
        found = checkpoint.load(run_dir)  # the checkpoint the resume will start from
        if found is not None and found[2] is not None:
            replayed = found[2]["elapsed_s"]
        command.append(f"resume={run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
        command += [*clbench_overrides(row, seed, data_root), "hardware=cpu", "hardware.threads=1", "logger=none",
                    f"hydra.run.dir={run_dir}"]
    run_logged(command, ROOT, run_dir.with_suffix(".log"), one_thread_env())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return Outcome(metrics["avg_acc"], metrics["acc"], replayed=replayed)


def save(record: Record, out: Path) -> Path:
    stem = f"{record.diagnostic}-" if record.diagnostic else ""
    path = out / record.reference / record.row / f"{stem}{record.side}-seed{record.seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(record), indent=1))
    tmp.replace(path)
    return path


def timed(fn, *args, **kwargs) -> tuple[Outcome, float]:
    start = time.perf_counter()
    outcome = fn(*args, **kwargs)
    return outcome, time.perf_counter() - start


def main(reference) -> None:
    """`python scripts/parity/<reference>.py --ref DIR [--rows R ...]`: both sides over each row's seed plan
    (scripts/parity/plans.py); `--pilot` reruns the pilot's seeds instead, `--diagnostic NAME` one of the
    reference's DIAGNOSTICS over its own seeds."""
    args = arguments(reference).parse_args()
    refuse_resume(reference, args)
    work = args.work / reference.NAME
    lock = hold(work, reference.NAME)  # noqa: F841  held until the runner exits
    if args.diagnostic:
        return run_diagnostic(reference, args, work)
    planned = {name: only(plans.seeds(reference.NAME, name, pilot=args.pilot), args.seeds, name)
               for name in args.rows}  # refused up front
    keep = reference.RESUMABLE if args.resume else None
    copy, copied = None, None
    for name, seeds in planned.items():
        patches = [*reference.PATCHES, *reference.ROWS[name].patches]
        if args.side != "cl-bench" and patches != copied:  # a fresh copy where a row patches it otherwise
            copy = patched_copy(args.ref.resolve(), reference.PINNED, patches, work, args.any_commit, keep)
            copied = patches
        for seed in seeds:
            if args.side != "cl-bench":
                run_reference_side(reference, copy, name, seed, work, args)
            if args.side != "reference":
                run_clbench_side(reference, reference.ROWS[name], name, seed, work, args)


def refuse_resume(reference, args) -> None:
    """--resume where it cannot work, in one line: with a diagnostic (whose copy is made afresh), or on the
    reference side of a reference whose runner does not chain processes it can replay."""
    if args.resume and args.diagnostic:
        sys.exit("--resume goes on with a row's sides, not a diagnostic's (whose copy is made afresh): drop "
                 "--diagnostic or --resume")
    if args.resume and args.side != "cl-bench" and not hasattr(reference, "RESUMABLE"):
        sys.exit(f"--resume: the {reference.NAME} runner cannot resume a reference run (only runners whose "
                 "reference runs as a chain of processes can): rerun the seed without --resume, or resume "
                 "cl-bench's side alone (--side cl-bench)")


def only(planned: tuple[int, ...], chosen: list[int] | None, row: str) -> tuple[int, ...]:
    """--seeds: part of the planned seeds (a run cut short resumes at its next seed); a seed outside the plan is
    refused, since rows are judged over the seeds fixed before they ran."""
    if chosen is None:
        return planned
    outside = sorted(set(chosen) - set(planned))
    if outside:
        raise SystemExit(f"--seeds {' '.join(map(str, outside))} is not among row {row}'s planned seeds "
                         f"{' '.join(map(str, planned))}: choose from those (the plans: scripts/parity/plans.py)")
    return tuple(seed for seed in planned if seed in chosen)


def run_reference_side(reference, copy: Path, name: str, seed: int, work: Path, args, diagnostic: str = "") -> None:
    origin = provenance(args.ref.resolve(), args.python)
    outcome, seconds, command = reference_side(reference, copy, name, seed, work, args)
    if outcome.replayed:  # a resumed run: its time is the cut-short run's replayed part and this run's
        seconds += outcome.replayed
        origin["replayed_seconds"] = round(outcome.replayed, 1)
    report(save(Record(reference.NAME, name, "reference", seed, outcome.ra, outcome.matrix, seconds,
                       origin["reference_commit"], command, origin, diagnostic, outcome.phases), args.out),
           outcome, seconds)


def run_clbench_side(reference, row: Row, name: str, seed: int, work: Path, args, diagnostic: str = "") -> None:
    origin = provenance(args.ref.resolve() if args.ref else None, sys.executable)
    folder = work / "runs" / name / (f"{diagnostic}-seed{seed}" if diagnostic else f"seed{seed}")
    outcome, seconds = timed(run_clbench, row, seed, folder, args.data_root, resume=args.resume)
    if hasattr(reference, "clbench_phases"):  # the per-task decisions, where the reference module reads them
        outcome.phases = reference.clbench_phases(folder)
    if outcome.replayed:  # a resumed run: the seconds to its last checkpoint, then this process's
        seconds += outcome.replayed
        origin["replayed_seconds"] = round(outcome.replayed, 1)
    command = "cl-bench train " + " ".join(clbench_overrides(row, seed))
    report(save(Record(reference.NAME, name, "cl-bench", seed, outcome.ra, outcome.matrix, seconds,
                       origin["clbench_commit"], command, origin, diagnostic, outcome.phases), args.out),
           outcome, seconds)


def run_diagnostic(reference, args, work: Path) -> None:
    """One diagnostic's changed side over its seeds; the other side's records of those seeds are the row's."""
    diagnostic = reference.DIAGNOSTICS[args.diagnostic]
    row = reference.ROWS[diagnostic.row]
    seeds = only(diagnostic.seeds, args.seeds, args.diagnostic)  # --seeds: part of them, as for a row
    if diagnostic.side == "cl-bench":
        changed = replace(row, clbench=(*row.clbench, *diagnostic.clbench))
        for seed in seeds:
            run_clbench_side(reference, changed, diagnostic.row, seed, work, args, args.diagnostic)
        return
    copy = patched_copy(args.ref.resolve(), reference.PINNED, [*reference.PATCHES, *row.patches, *diagnostic.patches],
                        work, args.any_commit)
    for seed in seeds:
        run_reference_side(reference, copy, diagnostic.row, seed, work, args, args.diagnostic)


def smoke(argv: list[str], rows: dict, small) -> list[str]:
    """--smoke: a reference's learning rows at a size far below their cut (small(): name -> Row, put in rows), one
    seed, to check that every phase of both sides runs and parses (seconds of training, no result); its records
    would pass for the rows', so --out must lead elsewhere. Only those rows run (all of them unless --rows names
    some), and only seed 0 of their pilot (unless --seeds says otherwise): without it a plan's seeds, or another row
    at its full cut, would run."""
    if "--smoke" not in argv:
        return argv
    if "--out" not in argv:
        sys.exit("--smoke needs --out DIR away from the rows' records (outputs/parity): its runs are no result")
    shrunk = small()
    rows.update(shrunk)
    argv = [a for a in argv if a != "--smoke"]
    if "--rows" in argv:
        named = list(itertools.takewhile(lambda a: not a.startswith("--"), argv[argv.index("--rows") + 1:]))
        others = [name for name in named if name not in shrunk]
        if others:
            sys.exit(f"--smoke runs only the learning rows ({' '.join(shrunk)}), not {' '.join(others)}: drop "
                     "--smoke to run those at their cut")
    else:
        argv += ["--rows", *shrunk]
    return [*argv, *([] if "--pilot" in argv else ["--pilot"]), *([] if "--seeds" in argv else ["--seeds", "0"])]


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
    parser, words = argparse.ArgumentParser(description=description), wording("common")["help"]
    parser.add_argument("--ref", type=Path, help=words["ref"].format(repo=reference.REPO))
    parser.add_argument("--work", type=Path, default=ROOT / "outputs" / "parity-work")
    parser.add_argument("--data-root", help=words["data_root"])
    parser.add_argument("--python", default=sys.executable, help=words["python"])
    parser.add_argument("--any-commit", action="store_true", help=words["any_commit"])
    return parser


def arguments(reference) -> argparse.ArgumentParser:
    parser = reference_arguments(reference, f"parity of cl-bench with {reference.REPO}")
    words = wording("common")["help"]
    parser.add_argument("--rows", nargs="+", choices=sorted(reference.ROWS), default=list(reference.ROWS))
    parser.add_argument("--side", choices=("both", "reference", "cl-bench"), default="both")
    parser.add_argument("--pilot", action="store_true", help=words["pilot"])
    parser.add_argument("--seeds", type=int, nargs="+", help=words["seeds"])
    parser.add_argument("--diagnostic", choices=sorted(getattr(reference, "DIAGNOSTICS", {})),
                        help=words["diagnostic"])
    parser.add_argument("--out", type=Path, default=RECORDS, help=words["out"])
    parser.add_argument("--resume", action="store_true", help=words["resume"])
    return parser


def reference_side(reference, copy: Path, name: str, seed: int, work: Path, args) -> tuple[Outcome, float, str]:
    """The split of this seed written in the reference's format, then the reference trained on it (a resumed run
    keeps the split its cut-short run wrote)."""
    row = reference.ROWS[name]
    data = work / "data" / name / f"seed{seed}"
    resume = {"resume": True} if args.resume else {}
    if not (resume and (data / "goals.json").is_file()):  # written last: the cut-short run's tasks are all there
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        reference.write_tasks(scenario(clbench_overrides(row, seed, args.data_root)), row, data)
    outcome, seconds = timed(reference.run_reference, copy, row, seed, data, args.python, **resume)
    return outcome, seconds, " ".join(row.reference)


def report(path: Path, outcome: Outcome, seconds: float) -> None:
    print(f"{path}: RA {100 * outcome.ra:.2f} in {seconds:.0f} s", flush=True)
