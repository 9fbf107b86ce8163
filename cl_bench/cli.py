"""`cl-bench {train,list}`: dispatch. `train` hands its arguments to Hydra after checking them, so that a
bad override or an unsupported combination fails in one line before a run directory exists."""
import sys
from pathlib import Path

import yaml

from .errors import UserError

CONF = Path(__file__).resolve().parent.parent / "conf"
USAGE = """usage: cl-bench train [KEY=VALUE ...] [-m]   run (or with -m sweep) an experiment; see conf/
       cl-bench train resume=RUN_DIR          continue an interrupted run from its last checkpoint
       cl-bench list                          methods, datasets and backbones"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if command == "train":
            return train(args)
        if command == "list":
            return list_all()
        if command in ("-h", "--help", "help"):
            print(USAGE)
            return 0
        raise UserError(f"unknown command {command!r}\n{USAGE}" if command else USAGE)
    except UserError as e:
        print(f"cl-bench: error: {e}", file=sys.stderr)
        return 2


def train(args: list[str]) -> int:
    from . import config
    config.register()
    resume = next((a.split("=", 1)[1] for a in args if a.startswith("resume=")), None)
    if resume:
        args = resume_overrides(resume, args)
    else:
        refuse_finished_run_dir(args)
    if not any(a.startswith("-") for a in args):
        # A plain single run: compose once here so that mistakes fail before Hydra makes a directory.
        # Runs with Hydra flags (-m, --cfg, ...) are checked by Hydra and by run() itself.
        config.validate(compose(args))
    return run_hydra(args)


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose("config", overrides=overrides)
    except MissingConfigException as e:
        group = Path(e.missing_cfg_file or "").parent.name
        if group and e.options is not None:
            options = ", ".join(o for o in e.options if not o.startswith("schema"))
            raise UserError(f"unknown {group} {Path(e.missing_cfg_file).name!r}: choose one of {options}") from None
        raise UserError(describe(e)) from None
    except (HydraException, OmegaConfBaseException) as e:
        raise UserError(describe(e, overrides)) from None


def describe(e: Exception, overrides: list[str] = ()) -> str:
    """Hydra's and OmegaConf's messages as one line: what is wrong, and what would be right."""
    text = str(e)
    if text.startswith("Could not override '"):  # an unknown key: name the keys that exist there
        key = text.split("'")[1]
        parent, _, _ = key.rpartition(".")
        groups = [o for o in overrides if (CONF / o.split("=")[0]).is_dir()]  # the group choices alone
        node = compose(groups)
        for part in filter(None, parent.split(".")):
            node = node.get(part) if hasattr(node, "get") else None
        known = ", ".join(k for k in node) if hasattr(node, "keys") else ""
        return f"unknown key {key!r}" + (f": {parent or 'the top level'} has {known}" if known else "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if e.__cause__ is not None:
        lines += [line.strip() for line in str(e.__cause__).splitlines()[:1] if line.strip()]
    lines = [line for line in lines if not line.startswith(("full_key:", "object_type=", "reference_type="))]
    return "; ".join(dict.fromkeys(lines))


def refuse_finished_run_dir(args: list[str]) -> None:
    """A new run never writes into a directory that already holds a run's results."""
    run_dir = next((a.split("=", 1)[1] for a in args if a.startswith("hydra.run.dir=")), None)
    if run_dir and (Path(run_dir) / "metrics.json").exists():
        raise UserError(f"{run_dir} already holds a run: continue it with resume={run_dir}, "
                        "or choose another hydra.run.dir")


def resume_overrides(run_dir: str, overrides: list[str]) -> list[str]:
    """The run's own overrides, then any given now, pointed back at its directory."""
    saved = Path(run_dir) / ".hydra" / "overrides.yaml"
    if not saved.is_file():
        raise UserError(f"resume={run_dir}: {saved} not found; resume takes a run directory made by cl-bench train")
    original = yaml.safe_load(saved.read_text()) or []
    keep = [o for o in original if not o.startswith(("resume=", "hydra.run.dir="))]
    extra = [o for o in overrides if not o.startswith("resume=")]  # e.g. hardware=cpu on another machine
    return keep + extra + [f"resume={run_dir}", f"hydra.run.dir={run_dir}"]


def run_hydra(args: list[str]) -> int:
    import hydra
    from hydra.core.hydra_config import HydraConfig

    from . import train as train_module

    @hydra.main(config_path=str(CONF), config_name="config", version_base="1.3")
    def entry(cfg):
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        try:
            return train_module.run(cfg, run_dir)
        except UserError as e:
            print(f"cl-bench: error: {e}", file=sys.stderr)
            sys.exit(2)

    saved_argv = sys.argv
    sys.argv = ["cl-bench", *args]
    try:
        entry()
    finally:
        sys.argv = saved_argv
    return 0


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
    sys.exit(main())
