"""`cl-bench {train,list}`: dispatch. `train` hands its arguments to Hydra after checking them, so that a
bad override or an unsupported combination fails in one line before a run directory exists."""
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .errors import UserError

CONF = Path(__file__).resolve().parent.parent / "conf"
USAGE = """usage: cl-bench train [KEY=VALUE ...] [-m]   run (or with -m sweep) an experiment; see conf/
       cl-bench train resume=RUN_DIR          continue an interrupted run from its last checkpoint
       cl-bench eval RUN_DIR [--checkpoint task_003]   re-evaluate a checkpoint, write eval.json
       cl-bench report PATH... [--out DIR]    mean ± std [95% CI] over seeds (report.md, report.csv), plots
       cl-bench list                          methods, datasets and backbones"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if command == "train":
            return train(args)
        if command == "list":
            return list_all()
        if command == "eval":
            return evaluate(args)
        if command == "report":
            return report(args)
        if command in ("-h", "--help", "help"):
            print(USAGE)
            return 0
        raise UserError(f"unknown command {command!r}\n{USAGE}" if command else USAGE)
    except UserError as e:
        print(f"cl-bench: error: {e}", file=sys.stderr)
        return 2


def train(args: list[str]) -> int:
    from . import config, hardware
    config.register()
    resume = next((a.split("=", 1)[1] for a in args if a.startswith("resume=")), None)
    if resume:
        args = resume_overrides(resume, args)
    elif hardware.rank() > 0:
        args = args + follower_overrides(args)
    else:
        refuse_finished_run_dir(args)
    if any(a.startswith("-") for a in args):  # Hydra flags (-m, --cfg, ...): checked by Hydra and by run()
        return run_hydra(args)
    return run_single(args)


def run_single(args: list[str]) -> int:
    """A plain single run, composed once: checked before Hydra makes a directory, then handed to Hydra's
    own job runner (which writes .hydra/, sets up logging and the working directory as @hydra.main does)."""
    from hydra import initialize_config_dir
    from hydra._internal.callbacks import Callbacks
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import run_job
    from hydra.types import HydraContext, RunMode
    from omegaconf import open_dict

    from . import config, hardware
    args = [*args, "hydra.mode=RUN"]  # as @hydra.main records it
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        cfg = compose(args, lambda: hydra.compose_config("config", args, run_mode=RunMode.RUN,
                                                         with_log_configuration=True))
        config.validate(cfg)
        if not any(a.startswith("hydra.run.dir=") for a in args):
            run_dir = str(claim_run_dir(cfg))
            with open_dict(cfg):
                cfg.hydra.run.dir = run_dir
                cfg.hydra.overrides.hydra.insert(0, f"hydra.run.dir={run_dir}")
        if not cfg.resume and hardware.rank() == 0:  # before Hydra writes .hydra/: see write_run_record
            write_run_record(Path(cfg.hydra.run.dir), args)
        callbacks = Callbacks(cfg)
        callbacks.on_run_start(config=cfg, config_name="config")
        result = run_job(hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks),
                         task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None)
        callbacks.on_run_end(config=cfg, config_name="config", job_return=result)
        result.return_value  # re-raises what the run raised  # noqa: B018
    return 0


def claim_run_dir(cfg) -> Path:
    """outputs/runs/<time>_<method>_<dataset>, made here with an atomic mkdir so that runs started in the same
    second get distinct directories (a -2, -3 ... suffix for the later ones)."""
    base = Path("outputs/runs") / f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{cfg.method.name}_{cfg.dataset.name}"
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        candidate = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue


def compose(overrides: list[str], composer=None):
    """The composed config (by default through Hydra's compose API), with Hydra's errors as one line."""
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException
    try:
        return composer() if composer else hydra_compose(overrides)
    except MissingConfigException as e:
        group = Path(e.missing_cfg_file or "").parent.name
        if group and e.options is not None:
            options = ", ".join(o for o in e.options if not o.startswith("schema"))
            raise UserError(f"unknown {group} {Path(e.missing_cfg_file).name!r}: choose one of {options}") from None
        raise UserError(describe(e)) from None
    except (HydraException, OmegaConfBaseException) as e:
        raise UserError(describe(e, overrides)) from None


def hydra_compose(overrides: list[str]):
    from hydra import compose as compose_config
    from hydra import initialize_config_dir
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose_config("config", overrides=overrides)


def describe(e: Exception, overrides: list[str] = ()) -> str:
    """Hydra's and OmegaConf's messages as one line: what is wrong, and what would be right."""
    text = str(e)
    if text.startswith("Could not override '"):  # an unknown key: name the keys that exist there
        key = text.split("'")[1]
        parent, _, _ = key.rpartition(".")
        groups = [o for o in overrides if (CONF / o.split("=")[0]).is_dir()]  # the group choices alone
        try:
            node = hydra_compose(groups)
        except Exception:  # the choices themselves are broken: name the key alone
            node = None
        for part in filter(None, parent.split(".")):
            node = node.get(part) if hasattr(node, "get") else None
        known = ", ".join(k for k in node) if hasattr(node, "keys") else ""
        return f"unknown key {key!r}" + (f": {parent or 'the top level'} has {known}" if known else "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if e.__cause__ is not None:
        lines += [line.strip() for line in str(e.__cause__).splitlines()[:1] if line.strip()]
    lines = [line for line in lines if not line.startswith(("full_key:", "object_type=", "reference_type="))]
    return "; ".join(dict.fromkeys(lines))


def follower_overrides(args: list[str]) -> list[str]:
    """Ranks after 0 under torchrun write nothing: no .hydra record, and a private scratch run directory
    unless one was named (rank 0 owns the real one)."""
    extra = ["hydra.output_subdir=null"]
    if not any(a.startswith("hydra.run.dir=") for a in args):
        extra.append(f"hydra.run.dir={tempfile.gettempdir()}/cl-bench-rank{os.environ['RANK']}-{os.getpid()}")
    return extra


def refuse_finished_run_dir(args: list[str]) -> None:
    """A new run never writes into a directory that already holds a run's results."""
    run_dir = next((a.split("=", 1)[1] for a in args if a.startswith("hydra.run.dir=")), None)
    if run_dir and (Path(run_dir) / "metrics.json").exists():
        raise UserError(f"{run_dir} already holds a run: continue it with resume={run_dir}, "
                        "or choose another hydra.run.dir")


RUN_RECORD = "run.json"


def write_run_record(run_dir: Path, overrides) -> None:
    """run.json: the run's own overrides, which `resume=` and `cl-bench eval` compose again. Written atomically,
    before Hydra writes .hydra/ and never rewritten by a resume: Hydra writes .hydra/ in place (truncate, then
    write) and again on every resume, so a kill there left an overrides.yaml that was missing, empty or cut
    short, and a resume from it failed or composed another config."""
    from .recorders import write_json_atomic
    run_dir.mkdir(parents=True, exist_ok=True)
    own = [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/", "resume="))]
    write_json_atomic(run_dir / RUN_RECORD, {"overrides": own})


def run_overrides(run_dir: Path, option: str) -> list[str]:
    """The overrides recorded in run_dir's run.json."""
    record = Path(run_dir) / RUN_RECORD
    if not record.is_file():
        raise UserError(f"{option}: {record} not found; it takes a run directory made by cl-bench train")
    return json.loads(record.read_text())["overrides"]


def resume_overrides(run_dir: str, overrides: list[str]) -> list[str]:
    """The run's own overrides, then any given now, pointed back at its directory."""
    extra = [o for o in overrides if not o.startswith("resume=")]  # e.g. hardware=cpu on another machine
    return run_overrides(Path(run_dir), f"resume={run_dir}") + extra + [f"resume={run_dir}",
                                                                          f"hydra.run.dir={run_dir}"]


def run_hydra(args: list[str]) -> int:
    """Through @hydra.main, for runs with Hydra's own flags: sweeps (-m), --cfg, --info, ..."""
    import hydra

    entry = hydra.main(config_path=str(CONF), config_name="config", version_base="1.3")(task)
    saved_argv = sys.argv
    sys.argv = ["cl-bench", *args]
    try:
        entry()
    except ValueError as e:  # Hydra's own command-line checks (errors inside a run are reported by Hydra)
        raise UserError(str(e)) from None
    finally:
        sys.argv = saved_argv
    return 0


def task(cfg) -> float:
    """One job: a run of the task loop in Hydra's output directory (for sweeps, each job's)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from . import hardware
    from . import train as train_module
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            check_objective(cfg)
            if not (run_dir / RUN_RECORD).is_file() and hardware.rank() == 0:
                write_run_record(run_dir, HydraConfig.get().overrides.task)
            done = finished_objective(run_dir, cfg.sweep.objective)  # a re-run sweep completes only what is missing
            if done is not None:
                print(f"cl-bench: {run_dir} is complete, skipped", file=sys.stderr)
                return done
            if (run_dir / "checkpoints" / "last").is_file():
                cfg.resume = str(run_dir)
        return train_module.run(cfg, run_dir)
    except UserError as e:
        print(f"cl-bench: error: {e}", file=sys.stderr)
        sys.exit(2)
    except train_module.Interrupted as stop:
        print(f"cl-bench: stopped by {stop}; the run is incomplete and its last complete checkpoint intact. "
              f"Resume it with:\n  cl-bench train resume={run_dir}", file=sys.stderr)
        sys.exit(130 if str(stop) == "SIGINT" else 143)


def check_objective(cfg) -> None:
    """A sweep optimises what each job returns: validation accuracy needs validation data."""
    if cfg.sweep.objective == "val_avg_acc" and cfg.data.val_fraction == 0:
        raise UserError("sweep.objective=val_avg_acc needs validation data: set data.val_fraction above 0, or "
                        "sweep.objective=test_avg_acc to select on test data (the report labels such runs)")


def parse(command: str, args: list[str], configure):
    import argparse
    parser = argparse.ArgumentParser(prog=f"cl-bench {command}")
    configure(parser)
    try:
        return parser.parse_args(args)
    except SystemExit as e:  # argparse has printed its one-line usage error
        raise SystemExit(2 if e.code else 0) from None


def evaluate(args: list[str]) -> int:
    opts = parse("eval", args, lambda p: (p.add_argument("run_dir", type=Path),
                                          p.add_argument("--checkpoint", help="e.g. task_003; default: the newest")))
    from . import config, train
    config.register()
    cfg = compose(run_overrides(opts.run_dir, "cl-bench eval"))
    result = train.evaluate_checkpoint(cfg, opts.run_dir, opts.checkpoint)
    from .recorders import write_json_atomic
    write_json_atomic(opts.run_dir / "eval.json", result)
    print(json.dumps(result))
    return 0


def report(args: list[str]) -> int:
    opts = parse("report", args, lambda p: (p.add_argument("paths", nargs="+", type=Path),
                                            p.add_argument("--out", type=Path, help="default: the first PATH"),
                                            p.add_argument("--no-plots", action="store_true")))
    missing = [str(p) for p in opts.paths if not p.exists()]
    if missing:
        raise UserError(f"no such run or sweep directory: {', '.join(missing)}")
    from . import report as report_module
    if not report_module.report(opts.paths, opts.out, plots=not opts.no_plots):
        raise UserError(f"no complete run (metrics.json) under {', '.join(map(str, opts.paths))}")
    return 0


def finished_objective(run_dir: Path, objective: str) -> float | None:
    """The sweep objective of a complete run already in run_dir (None when there is none)."""
    from .train import OBJECTIVES
    metrics = run_dir / "metrics.json"
    if metrics.is_file():
        record = json.loads(metrics.read_text())
        if record.get("complete"):
            return record.get(OBJECTIVES[objective])
    return None


def list_all() -> int:
    from . import methods
    print("methods:")
    for name, cls in sorted(methods.METHODS.items()):
        doc = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()[0]
        print(f"  {name:<14} scenarios: {','.join(sorted(cls.scenarios)):<11} {doc}")
    for group in ("dataset", "backbone"):
        print(f"{group}s:")
        for path in sorted((CONF / group).glob("*.yaml")):
            print(f"  {path.stem:<20} {first_comment(path)}")
    return 0


def first_comment(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    return first.lstrip("# ").strip() if first.startswith("#") else ""


def entry_point() -> None:
    exit_without_teardown(main())


def exit_without_teardown(code: int) -> None:
    """Leave as the interpreter would, minus its teardown. Everything a normal exit does for the outside
    world still happens: non-daemon threads are joined, atexit handlers run (logging's flush, wandb's and
    multiprocessing's clean-up) and stdio is flushed. What is skipped is freeing every module torch loaded,
    which costs about a second per process here (0.6 to 1.3 s on 2 cores) and changes nothing on disk. Only
    a normal return gets here: exceptions and sys.exit() leave the usual way, traceback included, and so does
    a process under a profiler or tracer, which writes its report after this function would have returned."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    import atexit
    import threading
    # The interpreter's own first step of exiting: wake the thread pools that wait for it (concurrent.futures
    # registers itself there), then join every non-daemon thread. Joining them by hand would hang on an idle
    # pool's workers, which only this step tells to stop.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to deliver
            pass
    os._exit(code)
