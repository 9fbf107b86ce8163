"""`cl-bench train` as a Hydra application: plain runs and sweeps both go through hydra.main, Hydra's launchers
and its Callback API. RunChecks validates the composed config before Hydra makes a directory or starts a job
(every job of a sweep up front); run.json records what
`resume=` and `cl-bench eval` compose again."""
import contextlib
import itertools
import json
import logging
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from hydra.experimental.callback import Callback

from . import identity, rundirs
from .errors import UserError

log = logging.getLogger("cl_bench")
RUN_RECORD = rundirs.RUN_RECORD
LEDGER = "CL_BENCH_SWEEP_LEDGER"  # where a sweep's jobs note what each did, for the line at its end
# Hydra's flags that compose the config and print from it, never starting a job: answered from the catalog
ANSWERED_ALONE = {"--help", "-h", "-sc", "--shell-completion"}
MAX_CHECKED_JOBS = 1000  # a larger sweep is checked job by job as it runs
_jobs_started = 0  # once a job has run, a ValueError is the run's own (a bug, with its traceback), not Hydra's


def run(args: list[str]) -> int:
    """`cl-bench train ARGS`: hydra.main over the packaged configs, with Hydra's errors as one line."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from . import config, failures
    register_for(args)
    if cfg_job_request(args):
        return print_config_tree([a for a in args if a not in ("--cfg", "-c", "job")])
    resume = next((a.split("=", 1)[1] for a in args if a.startswith("resume=")), None)
    args = job_overrides(args, resume)
    if args is None:  # a complete run to resume: nothing to do, nothing touched
        return 0
    entry = hydra.main(config_path="pkg://cl_bench.conf", config_name="config", version_base="1.3")(task)
    saved_argv, full_error = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = ["cl-bench", *args]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises what went wrong, and it is reported here as one line
    try:
        entry()
    except (HydraException, OmegaConfBaseException) as e:
        GlobalHydra.instance().clear()
        raise UserError(config.describe(e, args)) from None
    except OSError as e:  # Hydra writing a run directory it cannot (read-only, full, no permission)
        raise UserError(failures.at_start(e, resume)) from None
    except ValueError as e:
        if isinstance(e.__cause__, OSError):  # Hydra's log file, in such a directory
            raise UserError(failures.at_start(e.__cause__, resume)) from None
        if _jobs_started:
            raise
        raise UserError(config.unknown_choice(args) or str(e)) from None  # Hydra's own command-line checks
    except Exception as e:
        if not type(e).__module__.startswith("submitit."):
            raise
        raise UserError(submitit_failure(str(e))) from None
    finally:
        sys.argv = saved_argv
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
    return 0


def job_overrides(args: list[str], resume: str | None) -> list[str] | None:
    """The overrides Hydra gets: a resume's recorded ones with the new (None where the run is complete), a torchrun
    follower's with its scratch directory, else the command line's."""
    from . import failures
    if resume:
        try:
            return resume_overrides(resume, args)  # notes the resume in run.json, which may not be writable
        except OSError as e:
            raise UserError(failures.at_start(e, resume)) from None
    if "RANK" in os.environ:  # under torchrun; hardware imports torch, so only then
        from . import hardware
        if hardware.rank() > 0:
            return args + follower_overrides(args)
    return args


def register_for(args: list[str]) -> None:
    """The schemas for Hydra, registered so that what needs no torch is answered without it (catalog.py says why).
    Hydra answers help and shell completion from the config alone: from the catalog's method and backbone schemas,
    where this source tree's catalog is cached. A run of plain overrides is composed over those first, so that a
    config error (an unknown key or choice, a wrong type) is the same one line without torch; a config that composes
    is registered again from the classes, and runs with every check, as without a catalog."""
    from . import catalog, config
    alone = bool(ANSWERED_ALONE & set(args))
    # torch already imported (cl_bench.api in a notebook, the tests' forked server): nothing left to save
    wanted = "torch" not in sys.modules and "RANK" not in os.environ and (alone or plain_overrides(args))
    cached = catalog.load() if wanted else None
    if cached is None:
        config.register()
        return
    config.register(catalog.options(cached))
    if not alone:
        config.compose(args)  # raises a config error as run() would (config.describe, config.unknown_choice)
        config.register()


def plain_overrides(args: list[str]) -> bool:
    """Whether args are overrides alone, none of them a sweep (`key=a,b`, which a run refuses in words of its
    own) nor resume=: what Hydra's compose API composes exactly as hydra.main does."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    if any(a.startswith("-") or a.startswith("resume=") for a in args):
        return False
    try:
        return not any(o.is_sweep_override() for o in OverridesParser.create().parse_overrides(args))
    except HydraException:  # unparsable: hydra.main says how
        return False


def submitit_failure(message: str) -> str:
    """A submitit job that ended without a result (killed, or stopped by a signal), in one line: where its logs
    are. A job's own errors never come here: task() raises them inside the job, and the caller re-raises them."""
    return f"a submitit job failed: {message.splitlines()[0]}; its logs are beside that file"


def cfg_job_request(args: list[str]) -> bool:
    """`--cfg job` (or `-c job`) of a single run: cl-bench prints the config itself, checked."""
    pairs = zip(args, args[1:])
    return any(a in ("--cfg", "-c") and b == "job" for a, b in pairs) and not ({"-m", "--multirun"} & set(args))


def print_config_tree(overrides: list[str]) -> int:
    """The composed config (what a run would use, checked): on a terminal as a rich tree, one branch per group;
    into a file or a pipe as plain YAML, as Hydra's own `--cfg job` prints it, to save and compose again."""
    from omegaconf import OmegaConf
    from rich.syntax import Syntax
    from rich.tree import Tree

    from . import config
    from .console import rich_console
    cfg = config.compose(overrides)
    config.validate(cfg)
    console = rich_console()
    if not console.is_terminal:
        print(OmegaConf.to_yaml(cfg, resolve=False), end="")
        return 0

    def block(node) -> Syntax:
        return Syntax(OmegaConf.to_yaml(node, resolve=False).rstrip(), "yaml", background_color="default")

    tree = Tree("config", guide_style="dim")
    scalars = {key: value for key, value in cfg.items() if not OmegaConf.is_config(value)}
    for key, value in cfg.items():
        if OmegaConf.is_config(value):
            tree.add(f"[bold]{key}[/bold]").add(block(value))
    tree.add("[bold]run[/bold]").add(block(OmegaConf.create(scalars)))
    console.print(tree)
    return 0


class RunChecks(Callback):
    """Hydra calls this before any work: a bad value, an unsupported combination or a finished run directory
    fails in one line before a directory is made (for a sweep, before its first job)."""

    def on_run_start(self, config, **kwargs) -> None:
        with exit_on_user_error():
            check_run(config)

    def on_multirun_start(self, config, **kwargs) -> None:
        with exit_on_user_error():
            check_sweep(config)
        start_ledger(Path(str(config.hydra.sweep.dir)))

    def on_multirun_end(self, config, **kwargs) -> None:
        """One line that says what the sweep did and how to compare its runs; none when a job failed (its own
        error is the line to read), which Hydra calls this in the midst of."""
        outcomes = end_ledger()
        if sys.exc_info()[0] is None and outcomes and "failed" not in outcomes:
            sweep_dir = config.hydra.sweep.dir
            print(f"cl-bench: {len(outcomes)} jobs in {sweep_dir} ({outcomes.count('run')} run, "
                  f"{outcomes.count('skipped')} skipped as complete); compare them with: cl-bench report {sweep_dir}",
                  file=sys.stderr)


def start_ledger(sweep_dir: Path) -> None:
    """A file in the sweep directory where each job notes whether it ran or was skipped: jobs run in processes of
    their own (joblib) or on other machines (Slurm), which inherit its name through the environment."""
    os.environ[LEDGER] = str(sweep_dir.absolute() / f".cl-bench-jobs-{os.getpid()}-{os.urandom(4).hex()}")


def note_job(outcome: str) -> None:
    """A job's line in the ledger (one short append: whole even when jobs append at once)."""
    from . import hardware
    if LEDGER in os.environ and hardware.rank() == 0:
        with open(os.environ[LEDGER], "a") as ledger:
            ledger.write(outcome + "\n")


def end_ledger() -> list[str]:
    """What the sweep's jobs noted; the ledger removed."""
    ledger = Path(os.environ.pop(LEDGER, "") or "none")
    if not ledger.is_file():
        return []
    outcomes = ledger.read_text().split()
    ledger.unlink()
    return outcomes


def check_run(config) -> None:
    from . import config as schema
    from . import hardware
    schema.validate(config)
    if config.resume or hardware.rank() > 0:
        return
    run_dir = Path(config.hydra.run.dir)
    if (run_dir / "metrics.json").exists() or (run_dir / RUN_RECORD).exists():
        raise UserError(f"{run_dir} already holds a run: continue it with resume={run_dir}, "
                        "or choose another hydra.run.dir")
    write_run_record(run_dir, config.hydra.overrides.task, config)  # before Hydra writes .hydra/ there


def check_sweep(config) -> None:
    """The base config, then every job of a grid sweep, composed as the launcher will; a launcher that starts
    each job as several tasks (submitit's tasks_per_node x nodes) needs hardware=ddp in every job, refused
    here rather than in each task after the launcher has started them."""
    from . import config as schema
    from . import hardware
    launcher = config.hydra.launcher
    tasks = launcher.get("tasks_per_node", 1) * launcher.get("nodes", 1)
    for cfg in [config, *(schema.compose(job) for job in sweep_jobs(list(config.hydra.overrides.task)))]:
        cfg = check_objective(schema.validate(cfg))
        if tasks > 1 and not cfg.hardware.distributed:
            raise UserError(hardware.several_tasks_refusal(tasks))


@contextlib.contextmanager
def exit_on_user_error():
    """In Hydra's callbacks a user error leaves as one line and exit status 2: Hydra turns an exception raised
    there into a warning and carries on, but lets SystemExit through."""
    try:
        yield
    except UserError as e:
        print(f"cl-bench: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as e:  # the run directory cannot be made or written (read-only, full, no permission)
        from .failures import describe
        print(f"cl-bench: error: {describe(e, started=False)}", file=sys.stderr)
        raise SystemExit(2) from None


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """Every job of a grid sweep (`key=a,b` and range sweeps expanded), as override lists; [] when there are
    more than MAX_CHECKED_JOBS or a sweeper draws them (Optuna's intervals)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    parsed = OverridesParser.create().parse_overrides(overrides)
    choices = []
    for o in parsed:
        if not o.is_sweep_override():
            choices.append([o.input_line])
        elif o.is_discrete_sweep():
            choices.append([f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()])
        else:
            return []
    count = 1
    for c in choices:
        count *= len(c)
    return [list(job) for job in itertools.product(*choices)] if count <= MAX_CHECKED_JOBS else []


def write_run_record(run_dir: Path, overrides, cfg=None) -> None:
    """run.json: the run's own overrides, which `resume=` and `cl-bench eval` compose again, and the learning
    settings of cfg, its composed config, with their identity (identity.py), by which a sweep finds the run again
    and a resume refuses to change it. Written atomically, before Hydra writes .hydra/ (a sweep job's: after, in
    its task) and never rewritten by a resume, which adds its own overrides beside (note_resume): Hydra wrote
    .hydra/ in place (truncate, then write), so a kill there left an overrides.yaml that was missing, empty or cut
    short, and a resume from it failed or composed another config."""
    from .files import write_json_atomic
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {"overrides": own_overrides(overrides)}
    if cfg is not None:
        settings = rundirs.config_settings(cfg)
        record.update(settings=settings, identity=identity.identity(settings))
    write_json_atomic(run_dir / RUN_RECORD, record)


def own_overrides(overrides) -> list[str]:
    """The overrides a run records as its own: Hydra's and resume= aside."""
    return [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/", "resume="))]


def note_resume(run_dir: Path, overrides: list[str]) -> None:
    """A resume's own overrides (and when it started), in run.json's "resumes" beside the run's, which stay."""
    from .files import write_json_atomic
    record = json.loads((run_dir / RUN_RECORD).read_text())
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    record.setdefault("resumes", []).append({"overrides": own_overrides(overrides), "started": started})
    write_json_atomic(run_dir / RUN_RECORD, record)


def run_overrides(run_dir: Path, option: str) -> list[str]:
    """The overrides recorded in run_dir's run.json."""
    record = Path(run_dir) / RUN_RECORD
    if not record.is_file():
        raise UserError(f"{option}: {record} not found; it takes a run directory made by cl-bench train")
    return json.loads(record.read_text())["overrides"]


def resume_overrides(run_dir: str, overrides: list[str]) -> list[str] | None:
    """The run's own overrides, then any given now, pointed back at its directory, with Hydra's record of the
    run (.hydra/) left as it was; None for a complete run, which is left untouched. Overrides given now may
    change where and how the run computes (hardware=cpu on another machine, threads, logger, paths), recorded in
    run.json as this resume's; one that changes what it learns is refused: the rest of the run would learn
    under other settings than its record says."""
    path = Path(run_dir)
    own = run_overrides(path, f"resume={run_dir}")
    if rundirs.is_complete(path):
        print(f"cl-bench: {run_dir} is complete: nothing to resume, nothing changed (a new run from its last "
              f"checkpoint: cl-bench train init_from={run_dir} ...)", file=sys.stderr)
        return None
    extra = [o for o in overrides if not o.startswith("resume=")]
    check_resume_settings(path, own, extra)
    from . import hardware
    if hardware.rank() == 0:
        note_resume(path, extra)
    return own + extra + [f"resume={run_dir}", f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]


def check_resume_settings(run_dir: Path, own: list[str], extra: list[str]) -> None:
    """Refuse overrides that change the run's learning settings (those it recorded; a run recorded before
    run.json held them: those its own overrides compose)."""
    from . import config
    given = own_overrides(extra)
    if not given:
        return
    now = rundirs.config_settings(config.validate(config.compose(own + given)))
    before = rundirs.recorded_settings(run_dir) or rundirs.config_settings(config.compose(own))
    if identity.differing(before, now):
        keys = {o.partition("=")[0] for o in given}
        branch = [o for o in own if o.partition("=")[0] not in keys] + given
        raise UserError(f"resume={run_dir} with {' '.join(given)} would change what the run learns "
                        f"({identity.changes(before, now)}): resume it without them, or start a new run from its last "
                        f"checkpoint with them: cl-bench train init_from={run_dir} {' '.join(branch)}")


def follower_overrides(args: list[str]) -> list[str]:
    """Ranks after 0 under torchrun write nothing: no .hydra record, and a private scratch run directory
    unless one was named (rank 0 owns the real one)."""
    extra = ["hydra.output_subdir=null"]
    if not any(a.startswith("hydra.run.dir=") for a in args):
        extra.append(f"hydra.run.dir={tempfile.gettempdir()}/cl-bench-rank{os.environ['RANK']}-{os.getpid()}")
    return extra


def task(cfg) -> float:
    """One job: a run of the task loop in Hydra's output directory (for sweeps, each job's). Its log,
    train.log there, gets what went wrong, tracebacks included."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from . import config, failures, hardware
    from . import train as train_module
    global _jobs_started
    _jobs_started += 1
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    hardware.enter_multirun(HydraConfig.get().launcher if multirun else None, HydraConfig.get().job.get("num") or 0)
    if multirun and not cfg.logger.group:  # the runs of one sweep form one W&B group, named after its directory
        cfg.logger.group = Path(HydraConfig.get().sweep.dir).name
    try:
        hardware.cluster_ranks(cfg.hardware.distributed)  # a Slurm / submitit job's tasks become the DDP ranks
        if hardware.rank() != 0:  # they share the job's directory: rank 0 alone logs to its train.log
            logging.getLogger().setLevel(logging.ERROR)
        if multirun:
            done = sweep_job(cfg, run_dir, list(HydraConfig.get().overrides.task), HydraConfig.get().job.num)
            if done is not None:
                return done
            config.validate(cfg)  # RunChecks validated a plain run; a sweep job may be a draw it could not check
        with failures.recorded(run_dir, hardware.rank() == 0, spared=(train_module.Interrupted,)):  # FAILED marked
            result = train_module.run(cfg, run_dir, HydraConfig.get().runtime.choices.get("backbone"))
        if multirun:
            note_job("run")
        return result
    except UserError as e:
        if multirun:
            note_job("failed")
        if not isinstance(e, NotThisJobsRun):  # the train.log there is another run's
            log.error(str(e))
        print(f"cl-bench: error: {e}", file=sys.stderr)
        if "SUBMITIT_EXECUTOR" in os.environ:  # raised, submitit hands it to the sweep's caller at once; an exit
            raise  # leaves no result, and the caller waits 15 s for one before it reads the job's error stream
        sys.exit(2)
    except train_module.Interrupted as stop:
        if multirun:
            note_job("failed")
        log.warning(f"stopped by {stop}")
        print(f"cl-bench: stopped by {stop}; the run is incomplete and its last complete checkpoint intact. "
              f"Resume it with:\n  cl-bench train resume={run_dir}", file=sys.stderr)
        sys.exit(130 if str(stop) == "SIGINT" else 143)
    except Exception:
        if multirun:
            note_job("failed")
        log.exception("the run failed")
        raise


class NotThisJobsRun(UserError):
    """A sweep job's folder holds a run of other settings."""


def sweep_job(cfg, run_dir: Path, overrides: list[str], num: int) -> float | None:
    """A sweep job in its folder (rundirs.job_folder found the run of its settings there, or claimed a new one):
    a complete run is skipped, its objective returned to the sweeper; an interrupted one resumed; a run of other
    settings (two jobs of one folder, through a hydra.sweep.subdir of the user's) refused, nothing written."""
    from . import hardware
    check_folder(rundirs.config_settings(cfg), run_dir, f"job {num} ({' '.join(overrides)})")
    if not (run_dir / RUN_RECORD).is_file():
        if hardware.rank() == 0:
            write_run_record(run_dir, overrides, cfg)
        return None
    done = finished_objective(run_dir, cfg.sweep.objective)  # a re-run sweep completes only what is missing
    if done is not None:
        print(f"cl-bench: {run_dir} is complete, skipped", file=sys.stderr)
        note_job("skipped")
        return done
    if (run_dir / "checkpoints" / "last").is_file():
        cfg.resume = str(run_dir)
    if hardware.rank() == 0:
        note_resume(run_dir, overrides)
    return None


def check_folder(own: dict, run_dir: Path, job: str) -> None:
    """Refuse a job whose folder holds a run of other settings, or of settings it does not record (a run.json of
    before they were recorded, whose Hydra record is gone): resuming or skipping it would pass it off as this
    job's. A folder Hydra has just recorded this job in holds this job's settings."""
    recorded = rundirs.recorded_settings(run_dir)
    if recorded == own or recorded is None and not (run_dir / RUN_RECORD).is_file():
        return
    what = f"other settings ({identity.changes(recorded, own)})" if recorded is not None else "unrecorded settings"
    raise NotThisJobsRun(f"{job} would run in {run_dir}, which holds a run of {what}: give each job a folder of "
                         "its own (leave hydra.sweep.subdir at its default, or name the swept keys in it), or sweep "
                         "into another hydra.sweep.dir")


def check_objective(cfg):
    """A sweep optimises what each job returns: validation accuracy needs validation data."""
    if cfg.sweep.objective == "val_avg_acc" and cfg.data.val_fraction == 0:
        raise UserError("sweep.objective=val_avg_acc needs validation data: set data.val_fraction above 0, or "
                        "sweep.objective=test_avg_acc to select on test data (the report labels such runs)")
    return cfg


def finished_objective(run_dir: Path, objective: str) -> float | None:
    """The sweep objective of a complete run already in run_dir (None when there is none)."""
    from .train import OBJECTIVES
    if rundirs.is_complete(run_dir):
        return json.loads((run_dir / "metrics.json").read_text()).get(OBJECTIVES[objective])
    return None
