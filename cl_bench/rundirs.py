"""Run directories of their own: the resolvers behind hydra.run.dir's default, a sweep job's folder and whether
Hydra records a job there (conf/config.yaml), and the learning settings a run directory records."""
import itertools
import json
import os
import time
from pathlib import Path

from . import identity
from .errors import UserError

RUN_RECORD = "run.json"
FOLLOWER_WAIT_S = 600  # how long a job's later task waits for its first task to claim the job's folder
_claimed: dict[str, str] = {}
_folders: dict[tuple, str] = {}
_records: dict[str, str | None] = {}
_identities: dict[str, str] = {}


def unique_dir(path: str) -> str:
    """`path`, or path-2, path-3 ... when runs started in the same second took it; claimed with an atomic mkdir and
    kept for the process (Hydra resolves the key more than once)."""
    if path not in _claimed:
        for n in itertools.count(1):
            candidate = Path(path if n == 1 else f"{path}-{n}")
            candidate.parent.mkdir(parents=True, exist_ok=True)
            try:
                candidate.mkdir()
                break
            except FileExistsError:
                continue
        _claimed[path] = str(candidate)
    return _claimed[path]


def config_settings(cfg) -> dict:
    """identity.settings of a composed config; Hydra's own node, when there, is left unresolved (it names the
    job's folder from these settings)."""
    from omegaconf import OmegaConf
    node = {key: OmegaConf.to_container(value, resolve=True, enum_to_str=True) if OmegaConf.is_config(value)
            else value for key, value in cfg.items() if key != "hydra"}
    return identity.settings(node)


def recorded_settings(run_dir) -> dict | None:
    """The learning settings of the run in run_dir: its run.json's, or, for a run recorded before run.json held
    them, those of the config Hydra saved (.hydra/config.yaml); None where neither is there or readable."""
    run_dir = Path(run_dir)
    try:
        record = json.loads((run_dir / RUN_RECORD).read_text())
    except (OSError, ValueError):
        record = {}
    if isinstance(record, dict) and isinstance(record.get("settings"), dict):
        return record["settings"]
    return saved_settings(run_dir / ".hydra" / "config.yaml")


def saved_settings(path: Path) -> dict | None:
    """identity.settings of a config Hydra saved, None if it is missing, empty or unreadable (cut short by a kill:
    Hydra writes it in place)."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from . import settings
    if not OmegaConf.has_resolver("by_memory_size"):  # a paper setting's values, saved unresolved
        OmegaConf.register_new_resolver("by_memory_size", settings.by_memory_size)
    try:
        saved = OmegaConf.load(path) if path.is_file() else None
    except (OSError, ValueError, OmegaConfBaseException, yaml.YAMLError):  # YAMLError: a file cut short mid-line
        return None
    if not saved:
        return None
    try:
        return identity.settings(saved)
    except (OmegaConfBaseException, UserError):  # a value its resolver refuses: as written, which tells apart as well
        return identity.settings(OmegaConf.to_container(saved, resolve=False))


def holds_run(run_dir: Path) -> bool:
    """Whether run_dir holds a run (or what a killed one left of its records)."""
    return any((run_dir / name).exists() for name in (RUN_RECORD, "metrics.json", ".hydra/config.yaml"))


def job_folder(*, _root_) -> str:
    """`${job_folder:}`, hydra.sweep.subdir: the folder in the sweep directory that holds a run of this job's
    settings, so that a sweep re-run (or grown) into its directory finds each job's earlier run whatever its number
    was; else a new numbered folder, claimed with an atomic mkdir (parallel jobs, and Slurm jobs on a shared
    filesystem, claim at once): hydra.job.num if free, else the next number above every existing one. Kept for the
    process, as Hydra may resolve the key more than once."""
    if not multirun(_root_):  # e.g. `--cfg all --resolve` of a single run: no job (hydra.job.num unset), no folder
        from omegaconf import OmegaConf
        return str(OmegaConf.select(_root_, "hydra.job.num", default=0))
    sweep_dir = Path(str(_root_.hydra.sweep.dir))
    own = identity.identity(config_settings(_root_))
    key = (str(sweep_dir.absolute()), int(_root_.hydra.job.num), own)
    if key not in _folders:
        if task_rank() > 0:  # a later task of a job of several (DDP): the first task claims, this one follows
            _folders[key] = follow(sweep_dir, own)
        else:
            _folders[key] = same_run(sweep_dir, own) or claim(sweep_dir, key[1])
    return _folders[key]


def task_rank() -> int:
    """This process's task in a job that Slurm, submitit or torchrun started as several (0 alone)."""
    for name in ("SUBMITIT_LOCAL_GLOBALID", "SLURM_PROCID", "RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return 0


def numbered(sweep_dir: Path) -> list[Path]:
    """The sweep's job folders, by number."""
    found = [p for p in sweep_dir.iterdir() if p.name.isdigit() and p.is_dir()] if sweep_dir.is_dir() else []
    return sorted(found, key=lambda p: int(p.name))


def same_run(sweep_dir: Path, own: str) -> str | None:
    """The folder of a run of identity `own` in the sweep (a complete one first), or None."""
    matches = [p for p in numbered(sweep_dir) if identity_of(p) == own]
    complete = [p for p in matches if is_complete(p)]
    best = complete or matches
    return best[0].name if best else None


def identity_of(run_dir: Path) -> str | None:
    """The identity of the run in run_dir, kept once known (a run's settings never change): the jobs of a sweep
    in one process look through the same folders."""
    key = str(run_dir.absolute())
    if key not in _identities:
        recorded = recorded_settings(run_dir)
        if recorded is None:
            return None
        _identities[key] = identity.identity(recorded)
    return _identities[key]


def is_complete(run_dir: Path) -> bool:
    """A run that finished its last task and did not fail after it (a FAILED mark, failures.MARK: a checkpoint or
    record it could not write), so that a sweep skips it rather than resuming it."""
    if (run_dir / "FAILED").is_file():
        return False
    try:
        return bool(json.loads((run_dir / "metrics.json").read_text()).get("complete"))
    except (OSError, ValueError, AttributeError):
        return False


def claim(sweep_dir: Path, num: int) -> str:
    """A new job folder: `num`, or the next number above every folder there when it is taken."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            (sweep_dir / str(num)).mkdir()
            return str(num)
        except FileExistsError:
            num = max(num, *(int(p.name) for p in numbered(sweep_dir))) + 1


def follow(sweep_dir: Path, own: str) -> str:
    """The folder the job's first task found or claimed, once its record shows there."""
    deadline = time.monotonic() + FOLLOWER_WAIT_S
    while (found := same_run(sweep_dir, own)) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if found is None:
        raise TimeoutError(f"the first task of this job claimed no folder in {sweep_dir} within {FOLLOWER_WAIT_S} s")
    return found


def record_subdir(*, _root_) -> str | None:
    """`${record_subdir:}`, hydra.output_subdir: Hydra's record of a job, .hydra/, except in a sweep job's folder
    that holds a run already (a re-run sweep finds it there to skip or resume): Hydra would rewrite that run's
    record in place with this job's, before the job could tell whether the run is its own."""
    if not multirun(_root_):
        return ".hydra"
    folder = str(_root_.hydra.runtime.output_dir)
    if folder not in _records:
        _records[folder] = None if holds_run(Path(folder)) else ".hydra"
    return _records[folder]


def multirun(root) -> bool:
    return root.hydra.mode is not None and root.hydra.mode.name == "MULTIRUN"
