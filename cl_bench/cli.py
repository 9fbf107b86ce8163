"""`cl-bench {train,eval,report,list}`: dispatch. `train` is the Hydra application of app.py; the other commands
read run directories."""
import json
import os
import re
import sys
from pathlib import Path

from .errors import UserError

USAGE = """usage: cl-bench train [KEY=VALUE ...] [-m]   run (or with -m sweep) an experiment; see cl_bench/conf/
       cl-bench train resume=RUN_DIR          continue an interrupted run from its last checkpoint
       cl-bench train -sc install=bash        shell completion (eval "$(cl-bench train -sc install=bash)")
       cl-bench eval RUN_DIR [--checkpoint task_003]   re-evaluate a checkpoint, write eval.json
       cl-bench report PATH... [--out DIR] [--rank [--margin 1]] [--by KEY] [--ignore KEY]  a row per setting,
                                                 mean ± std [95% CI] over seeds (report.md, report.csv), plots;
                                                 --rank orders each setting's methods by RA and says A > B, A ≈ B
                                                 within the margin or undetermined, paired by seed
       cl-bench list                          methods, datasets, backbones and paper settings
       cl-bench data prepare cifar10 --from SRC --root DIR   CIFAR-10's canonical files from an archive,
                                              an image folder or an .npz of encoded images
       cl-bench data prepare tinyimagenet --from DIR --root DIR   Tiny ImageNet's folder decoded once
       cl-bench data prepare imagenet_subset --from DIR --classes FILE --root DIR [--size 224]
       cl-bench data prepare SOURCE --root DIR [--download]   any source's files as one memory-mapped file
                                              (data.residency=stream reads it)"""
COMPLETION = ("-sc", "--shell-completion")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if command == "train":
            from . import app
            return app.run(args)
        if command in COMPLETION:  # Hydra's completion script asks the program itself, without `train`
            return complete(argv)
        if command == "list":
            return list_all()
        if command == "eval":
            return evaluate(args)
        if command == "report":
            return report(args)
        if command == "data":
            return data(args)
        if command in ("-h", "--help", "help"):
            print(USAGE)
            return 0
        raise UserError(f"unknown command {command!r}\n{USAGE}" if command else USAGE)
    except UserError as e:
        print(f"cl-bench: error: {e}", file=sys.stderr)
        return 2


def complete(argv: list[str]) -> int:
    """Answer a completion query for `cl-bench train ...`: Hydra completes the overrides after the command."""
    from . import app
    line = os.environ.get("COMP_LINE")
    if line is not None:
        words = line.split(" ")
        os.environ["COMP_LINE"] = " ".join(words[:1] + words[2:] if words[1:2] == ["train"] else words)
    return app.run(argv)


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
    from . import app, config, train
    config.register()
    cfg = config.compose(app.run_overrides(opts.run_dir, "cl-bench eval"))
    result = train.evaluate_checkpoint(cfg, opts.run_dir, opts.checkpoint)
    from .files import write_json_atomic
    write_json_atomic(opts.run_dir / "eval.json", result)
    print(json.dumps(result))
    return 0


def report(args: list[str]) -> int:
    opts = parse("report", args, lambda p: (p.add_argument("paths", nargs="+", type=Path),
                                            p.add_argument("--out", type=Path, help="default: the first PATH"),
                                            p.add_argument("--no-plots", action="store_true"),
                                            p.add_argument("--rank", action="store_true",
                                                           help="order the methods of each setting by RA, with "
                                                                "paired verdicts over the seeds both ran"),
                                            p.add_argument("--margin", type=float, default=1.0,
                                                           help="--rank's equivalence margin in points of RA "
                                                                "(default 1)"),
                                            p.add_argument("--wide", action="store_true",
                                                           help="every column in the printed table, not only "
                                                                "those that differ between rows"),
                                            p.add_argument("--by", action="append", default=[], metavar="KEY",
                                                           help="a setting (method.lr) to group by even where it "
                                                                "does not differ; repeatable"),
                                            p.add_argument("--ignore", action="append", default=[], metavar="KEY",
                                                           help="a setting to pool over, its values averaged as "
                                                                "one; repeatable")))
    missing = [str(p) for p in opts.paths if not p.exists()]
    if missing:
        raise UserError(f"no such run or sweep directory: {', '.join(missing)}")
    from . import report as report_module
    if not report_module.report(opts.paths, opts.out, plots=not opts.no_plots, rank=opts.rank, wide=opts.wide,
                                margin=opts.margin, by=opts.by, ignore=opts.ignore):
        raise UserError(f"no complete run (metrics.json) under {', '.join(map(str, opts.paths))}")
    return 0


def data(args: list[str]) -> int:
    from .data import prepare
    from .data.sources import SourceName

    def configure(p):
        p.add_argument("action", choices=["prepare"])
        p.add_argument("dataset", choices=[s.value for s in SourceName if s.value not in ("tensors", "image_folder")])
        p.add_argument("--from", dest="source", type=Path,
                       help="cifar10: cifar-10-python.tar.gz, an image folder or an .npz; tinyimagenet: the "
                            "tiny-imagenet-200 folder; imagenet_subset: an ImageNet folder with train/ and val/")
        p.add_argument("--root", type=Path, required=True, help="the data.root runs read")
        p.add_argument("--classes", type=Path, help="imagenet_subset: a file of wnids, one per line")
        p.add_argument("--size", type=int, default=prepare.IMAGENET_SIZE, help="imagenet_subset: image side")
        p.add_argument("--workers", type=int, default=None, help="decoding processes (default: every core)")
        p.add_argument("--download", action="store_true", help="fetch missing files with torchvision's downloader")
    opts = parse("data", args, configure)
    if opts.source is not None and not opts.source.exists():
        raise UserError(f"no such file or folder: {opts.source}")
    if opts.dataset == "cifar10" and opts.source is not None:
        print(f"{prepare.prepare_cifar10(opts.source, opts.root)} is ready: cl-bench train dataset=split_cifar10 "
              f"data.root={opts.root}")
        return 0
    done = prepare.prepare_stream(opts.dataset, opts.root, opts.source, opts.classes, opts.size, opts.workers,
                                  opts.download)
    print(f"{done.path} is ready ({done.meta['train']} train and {done.meta['test']} test images of "
          f"{'x'.join(map(str, done.meta['shape']))}): data.root={opts.root} reads it under data.residency=stream")
    return 0


def list_all() -> int:
    from rich.table import Table

    from . import catalog, config
    found = catalog.current()  # the classes' traits, from the cache without torch (catalog.py)
    tables = []
    for title, rows in (
            ("methods", [(name, *trait_cells(m["traits"]), m["summary"])
                         for name, m in sorted(found["methods"].items())]),
            (GRAPHS_WHY_NOT, graph_reasons(found["methods"])),
            ("datasets", [(p.stem, yaml_comment(p)) for p in sorted((config.CONF / "dataset").glob("*.yaml"))]),
            ("backbones", [(name, b["summary"] or "-") for name, b in sorted(found["backbones"].items())]),
            ("paper settings", setting_rows(found["methods"]))):
        table = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
        columns = {"methods": ("name", *TRAIT_COLUMNS, "what it is"),
                   "paper settings": ("name", "chosen by", "what it is"), GRAPHS_WHY_NOT: ("name", "why not")}
        for column in columns.get(title, ("name", "what it is")):
            table.add_column(column, no_wrap=column not in ("what it is", "why not"))
        for row in rows:
            table.add_row(*row)
        tables.append(table)
    from .console import rich_console
    console = rich_console()
    for table in tables:
        console.print(table)
    return 0


# `cl-bench list`'s columns of a method's traits (methods/base.py Traits says what each decides)
TRAIT_COLUMNS = ("scenarios", "hardware=ddp", "cuda_graphs", "backbone use (needs)", "every_epochs", "checks")


def trait_cells(traits: dict) -> tuple[str, ...]:
    """A method's traits as catalog.py cached them, one cell per TRAIT_COLUMNS entry ("-" for none)."""
    graphs = "yes" if traits["graph_safe"] is True else ",".join(traits["graph_phases"])
    needs = f" ({','.join(traits['needs'])})" if traits["needs"] else ""
    return (",".join(traits["scenarios"]), ",".join(traits["distributed_scenarios"]) or "-", graphs or "-",
            (traits["backbone_use"] or "plain") + needs, "yes" if traits["within_task_checkpoints"] is True else "-",
            str(len(traits["health_checks"])))


# The table under the methods: why hardware.cuda_graphs does not capture a method's steps (its Traits.graph_safe),
# for each method whose cuda_graphs column is "-" or names only the phases it captures
GRAPHS_WHY_NOT = "cuda_graphs: why not"


def graph_reasons(methods: dict) -> list[tuple[str, str]]:
    return [(name, m["traits"]["graph_safe"]) for name, m in sorted(methods.items())
            if m["traits"]["graph_safe"] is not True]


def setting_rows(method_names) -> list[tuple[str, str, str]]:
    """conf/setting/: each setting, the command line that picks it (a pair picks its own by itself) and what it is."""
    from . import config, settings
    datasets = [p.stem for p in (config.CONF / "dataset").glob("*.yaml")]
    pairs = settings.pairs(method_names, datasets)
    rows = []
    for name in settings.available():
        method, dataset = pairs.get(name, (None, None))
        chosen = f"method={method} dataset={dataset}" if method else f"setting={name}"
        rows.append((name, chosen, first_sentence(settings.SETTINGS / f"{name}.yaml")))
    return rows


def first_sentence(path: Path) -> str:
    """The first sentence of a config file's leading comment (its `# @package` line and examples aside)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if "@package" not in line and not line.startswith("#  "):
            lines.append(line.lstrip("# ").strip())
    return re.split(r"(?<! al)\.\s", " ".join(lines))[0].rstrip(".:") + "."  # "et al." ends no sentence


def yaml_comment(path: Path) -> str:
    """The first comment line of a config file (after a `# @package` line)."""
    comments = [line for line in path.read_text().splitlines()[:2] if line.startswith("#") and "@package" not in line]
    return comments[0].lstrip("# ").strip() if comments else ""


def entry_point() -> None:
    sys.exit(main())
