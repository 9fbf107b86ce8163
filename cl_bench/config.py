"""Structured-config schemas, registered in Hydra's ConfigStore so that every YAML in cl_bench/conf/ is typed:
an unknown key or a value of the wrong type is an error, not a silent no-op. Also the compose API that tests,
`cl-bench eval` and the sweep checks use, with Hydra's errors as one line."""
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, OmegaConf

from . import methods
from .errors import UserError

CONF = Path(__file__).resolve().parent / "conf"  # the packaged config tree (pkg://cl_bench.conf)


@dataclass
class DataConfig:
    root: str = "data"  # where the canonical dataset files live (torchvision's layout)
    download: bool = False  # fetch missing files with torchvision's verified downloader
    cache: bool = True  # keep decoded datasets under ~/.cache/cl-bench (or $CL_BENCH_CACHE): see data/cache.py
    val_fraction: float = 0.1  # share of each task's training data held out for model selection
    eval_batch_size: int = 1000


@dataclass
class DatasetConfig:
    name: str = MISSING
    source: str = MISSING  # digits | mnist | fashion_mnist | cifar10 | cifar100 | svhn
    kind: str = "split"  # split (classes per task) | superclass | permuted | rotated
    num_tasks: int = 5
    classes_per_task: int | None = None  # split: default is all classes / num_tasks
    class_order: str = "natural"  # split: natural | random (drawn from the run's seed)
    samples_per_task: int | None = None  # cap on each task's training samples (GEM: 1000)
    augment: bool = False  # pad-crop and flip during training (32×32 colour data)


@dataclass
class MLPConfig:
    name: str = "mlp"
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])


@dataclass
class ConvNetConfig:
    name: str = "convnet"
    channels: list[int] = field(default_factory=lambda: [32, 64, 64])


@dataclass
class ResNetConfig:
    name: str = "resnet18"
    nf: int = 64  # base filters; 20 in the reduced ResNet-18 of GEM, La-MAML and NCCL


@dataclass
class VGGConfig:
    name: str = "vgg16_bn"
    hidden: int = 4096  # width of the classifier body


@dataclass
class HardwareConfig:
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: str = "auto"  # auto (bf16 on GPU, fp32 on CPU) | bf16 | fp32
    channels_last: bool | None = None  # NHWC activations for convs; null: on for GPUs
    tf32: bool = True  # TF32 matmuls for what runs in fp32 on Ampere and newer
    deterministic: bool = False  # PyTorch's deterministic algorithms (slower on GPU)
    distributed: bool = False  # data-parallel over the processes torchrun starts (hardware=ddp)
    threads: int | None = None  # CPU threads for torch ops; null keeps torch's default (one per core)
    compile: bool = False  # torch.compile the backbone (minutes of compiling first; pays off on long GPU runs)


@dataclass
class LoggerConfig:
    console: bool = True  # live progress and the final table
    wandb: bool = False
    project: str = "cl-bench"
    entity: str | None = None
    mode: str = "offline"  # offline | online
    tags: list[str] = field(default_factory=list)


@dataclass
class CheckpointConfig:
    enabled: bool = True  # write checkpoints/task_<ttt>/ after every task
    every_epochs: int = 0  # also write one within a task every N epochs (0: only after tasks); resume continues there


@dataclass
class SweepConfig:
    # What `cl-bench train` returns to Hydra's sweepers (Optuna maximises it): val_avg_acc, the average accuracy on
    # the validation splits; test_avg_acc only to mirror a paper that selected on test data (runs record it, and
    # `cl-bench report` labels them).
    objective: str = "val_avg_acc"


@dataclass
class Config:
    method: Any = MISSING
    dataset: DatasetConfig = MISSING
    backbone: Any = MISSING
    hardware: HardwareConfig = MISSING
    logger: LoggerConfig = MISSING
    data: DataConfig = field(default_factory=DataConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    seed: int = 0
    scenario: str = "task"  # task (task id at test time) | class (no task id)
    eval_future: bool = False  # also evaluate tasks not yet learned (forward transfer, fwt)
    resume: str | None = None  # a run directory to continue from its last complete checkpoint


BACKBONE_SCHEMAS = {"mlp": MLPConfig, "convnet": ConvNetConfig, "resnet18": ResNetConfig,
                    "resnet18_reduced": ResNetConfig, "vgg16_bn": VGGConfig}


def register() -> None:
    """Make the schemas and the run-directory resolver known to Hydra (the CLI calls this; nothing the task loop
    runs needs Hydra)."""
    from hydra.core.config_store import ConfigStore

    from .app import unique_dir
    OmegaConf.register_new_resolver("unique_dir", unique_dir, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="schema", node=Config)
    cs.store(group="dataset", name="schema", node=DatasetConfig)
    cs.store(group="hardware", name="schema", node=HardwareConfig)
    cs.store(group="logger", name="schema", node=LoggerConfig)
    for name, cls in BACKBONE_SCHEMAS.items():
        cs.store(group="backbone", name=f"schema_{name}", node=cls)
    for name, cls in methods.METHODS.items():
        cs.store(group="method", name=f"schema_{name}", node=cls.Config)


def validate(cfg):
    """Range checks the types cannot express, each failing with the key and the accepted values; returns cfg."""
    checks = [
        (cfg.scenario in ("task", "class"), "scenario", "task or class"),
        (cfg.method.lr > 0, "method.lr", "a positive number"),
        (cfg.method.epochs >= 1, "method.epochs", "at least 1"),
        (cfg.method.batch_size >= 1, "method.batch_size", "at least 1"),
        (cfg.method.weight_decay >= 0, "method.weight_decay", "0 or more"),
        (cfg.method.optimizer in ("sgd", "adam", "adamw"), "method.optimizer", "sgd, adam or adamw"),
        (0 <= cfg.data.val_fraction < 1, "data.val_fraction", "a fraction in [0, 1)"),
        (cfg.dataset.num_tasks >= 1, "dataset.num_tasks", "at least 1"),
        (cfg.dataset.samples_per_task is None or cfg.dataset.samples_per_task >= 1,
         "dataset.samples_per_task", "null or at least 1"),
        (cfg.hardware.precision in ("auto", "bf16", "fp32"), "hardware.precision", "auto, bf16 or fp32"),
        (cfg.hardware.threads is None or cfg.hardware.threads >= 1, "hardware.threads", "null or at least 1"),
        (cfg.logger.mode in ("offline", "online"), "logger.mode", "offline or online"),
        (cfg.sweep.objective in ("val_avg_acc", "test_avg_acc"), "sweep.objective", "val_avg_acc or test_avg_acc"),
    ]
    _reject_added_keys(cfg)
    if cfg.eval_future and cfg.scenario == "class" and cfg.dataset.kind not in ("permuted", "rotated"):
        raise UserError("eval_future=true in the class scenario needs tasks that share labels (permuted_mnist, "
                        "rotated_mnist): a future task's classes have no outputs yet; use scenario=task")
    for ok, key, accepted in checks:
        if not ok:
            raise UserError(f"{key}={_get(cfg, key)!r} is out of range: use {accepted}")
    methods.check_scenario(cfg.method.name, cfg.scenario)
    if cfg.hardware.distributed:
        methods.check_distributed(cfg.method.name, cfg.scenario)
    method = methods.get(cfg.method.name)
    method.check_config(cfg.method)
    check_within_task_checkpoints(cfg, method)
    return cfg


def check_within_task_checkpoints(cfg, method) -> None:
    every = cfg.checkpoint.every_epochs
    if every < 0:
        raise UserError(f"checkpoint.every_epochs={every} is out of range: use 0 (after tasks only) or more")
    if every and not cfg.checkpoint.enabled:
        raise UserError("checkpoint.every_epochs needs checkpoint.enabled=true")
    if every and method.within_task_checkpoints is not True:
        able = [m for m, cls in sorted(methods.METHODS.items()) if cls.within_task_checkpoints is True]
        raise UserError(f"checkpoint.every_epochs is not supported by method={method.name}: "
                        f"{method.within_task_checkpoints}; methods that support it: {', '.join(able)}")


def _reject_added_keys(cfg, path: str = "") -> None:
    """Keys appended with Hydra's `+key=value` bypass the schemas; none of them would be read, so refuse them."""
    schema = OmegaConf.get_type(cfg)
    keys = [k for k in cfg if path or k != "hydra"]  # Hydra's own node, when composed in, is Hydra's to check
    if dataclasses.is_dataclass(schema):
        known = {f.name for f in dataclasses.fields(schema)}
        for key in keys:
            if key not in known:
                raise UserError(f"unknown key {path + key!r}: {path.rstrip('.') or 'the top level'} has "
                                f"{', '.join(sorted(known))}")
    for key in keys:
        if OmegaConf.is_dict(cfg._get_node(key)):
            _reject_added_keys(cfg[key], f"{path}{key}.")


def _get(cfg, key):
    for part in key.split("."):
        cfg = cfg[part]
    return cfg


def compose(overrides: list[str]):
    """The composed config, with Hydra's errors as one line."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    try:
        return hydra_compose(overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise UserError(describe(e, overrides)) from None


def hydra_compose(overrides: list[str]):
    """Through Hydra's compose API: inside `cl-bench train` with its Hydra, elsewhere with the packaged configs."""
    from hydra import compose as compose_config
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    if GlobalHydra.instance().is_initialized():
        return compose_config("config", overrides=overrides)
    with initialize_config_module("cl_bench.conf", version_base="1.3"):
        return compose_config("config", overrides=overrides)


def describe(e: Exception, overrides: list[str] = ()) -> str:
    """Hydra's and OmegaConf's messages as one line: what is wrong, and what would be right."""
    from hydra.errors import MissingConfigException
    if isinstance(e, MissingConfigException) and e.missing_cfg_file and e.options is not None:
        group = Path(e.missing_cfg_file).parent.name
        options = ", ".join(o for o in e.options if not o.startswith("schema"))
        return f"unknown {group} {Path(e.missing_cfg_file).name!r}: choose one of {options}"
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
