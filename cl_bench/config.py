"""Structured-config schemas, registered in Hydra's ConfigStore so that every YAML in cl_bench/conf/ is typed:
an unknown key or a value of the wrong type is an error, not a silent no-op. Also the compose API that tests,
`cl-bench eval` and the sweep checks use, with Hydra's errors as one line.

Importing this module imports no torch: the methods and backbones (whose modules do) are imported where they are
used, so that a config error is answered without them from catalog.py's schemas (see register)."""
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, OmegaConf

from . import settings
from .checks import Checked, Choice, require_extra
from .data import EVAL_BATCH, Residency, SourceName
from .errors import UserError
from .suggest import did_you_mean, ranked

CONF = Path(__file__).resolve().parent / "conf"  # the packaged config tree (pkg://cl_bench.conf)
# What conf/hydra/ builds on from the plugins of the sweep extra.
PLUGIN_CONFIGS = ("hydra/sweeper/optuna", "hydra/launcher/joblib", "hydra/launcher/submitit_slurm")
RESOLVER_SAID = "UserError raised while resolving interpolation: "  # OmegaConf's wording around a resolver's error


# task: the task id is given at test time, a head per task; class: no task id, one head over every class seen.
# (The functional form, since `class` cannot be a member's name in a class body.)
Scenario = Choice("Scenario", {"task": "task", "class": "class"})


class Kind(Choice):
    split = "split"  # classes per task
    superclass = "superclass"  # one task per CIFAR-100 superclass
    permuted = "permuted"  # one pixel permutation per task, every class in each
    rotated = "rotated"  # one rotation per task, every class in each


# What each dataset.kind reads of the dataset config (cl_bench/data/scenarios.py; test_dataset_keys.py records the
# reads of each): a key outside its kind's set, set away from its default or given on the command line, would be
# silently ignored, so DatasetConfig refuses it in one line (DatasetConfig.refuse_unread).
KIND_COMMON = frozenset({"name", "source", "kind", "num_tasks", "path", "image_size", "samples_per_task",
                         "test_samples_per_task", "val_samples_per_task", "augment", "brightness_jitter", "normalize"})
KIND_READS = {
    "split": KIND_COMMON | {"classes_per_task", "class_order", "task_classes"},
    "superclass": KIND_COMMON,  # num_tasks: the first num_tasks superclasses, in the order of their labels
    "permuted": KIND_COMMON,
    "rotated": KIND_COMMON | {"rotation"},
}
SUPERCLASSES = {"cifar100": 20}  # the sources with coarse labels (dataset.kind=superclass), and how many


class Rotation(Choice):
    """How dataset.kind=rotated picks and applies each task's angle."""

    gem = "gem"  # GEM's generator: uniform in task t's slot [180t/T, 180(t+1)/T), PIL's nearest-neighbour rotate
    even = "even"  # 180t/T exactly (task 0 unrotated), bilinear


class Precision(Choice):
    auto = "auto"  # bf16 on a GPU, fp32 on the CPU
    bf16 = "bf16"
    fp32 = "fp32"


# Whose statistics normalise a task's images (dataset.normalize=true); the functional form, since `global` cannot
# be a member's name in a class body.
#   auto: per_task under method.protocol=official in the task scenario, global otherwise
#   global: the dataset's one per-channel mean and std (sources.py), for every task
#   per_task: each task's own per-channel mean and std, from its training split only, as ivclab/CPG normalises
#     each CIFAR-100 superclass task (utils/cifar100_dataset.py:8-10 and 29-31, the values in
#     utils/cifar100_config.py); task scenario only: a test image is normalised with its task's statistics
Normalization = Choice("Normalization", {"auto": "auto", "global": "global", "per_task": "per_task"})


class LoggerMode(Choice):
    offline = "offline"
    online = "online"
    disabled = "disabled"  # W&B's no-op run: nothing written, nothing sent


class Objective(Choice):
    val_avg_acc = "val_avg_acc"
    test_avg_acc = "test_avg_acc"


@dataclass
class DataConfig(Checked):
    prefix = "data."
    root: str = "data"  # where the canonical dataset files live (torchvision's layout)
    download: bool = False  # fetch missing files with torchvision's verified downloader
    cache: bool = True  # keep decoded datasets under ~/.cache/cl-bench (or $CL_BENCH_CACHE): see data/cache.py
    val_fraction: float = 0.1  # share of each task's training data held out for model selection
    eval_batch_size: int = EVAL_BATCH  # samples per forward pass wherever a model is only evaluated
    normalization: Normalization = Normalization.auto  # see Normalization above
    residency: Residency = Residency.auto  # where the images live: device, host or stream (data/residency.py)
    # residency=stream: DataLoader processes that read batches ahead from the prepared file; null: 2 for a GPU, 0
    # on a CPU, where workers take the cores training needs (0: read in the training process; measured in
    # docs/benchmarks.md "Where the images live")
    workers: int | None = None

    def checks(self):
        return [("val_fraction", 0 <= self.val_fraction < 1, "a fraction in [0, 1)"),
                ("eval_batch_size", self.eval_batch_size >= 1, "at least 1"),
                ("workers", self.workers is None or self.workers >= 0, "null (by device), 0 (read in the training "
                 "process) or more")]


@dataclass
class DatasetConfig(Checked):
    prefix = "dataset."
    name: str = MISSING
    source: SourceName = MISSING
    kind: Kind = Kind.split
    num_tasks: int = 5
    classes_per_task: int | None = None  # split: default is all classes / num_tasks
    class_order: Any = "natural"  # split: natural, random (from the seed) or a list of class ids, split in order
    task_classes: list[list[int]] | None = None  # split: the class ids of each task, given outright
    path: str | None = None  # sources tensors and image_folder: the .npz/.safetensors file or the folder
    image_size: int | None = None  # image_folder: resize every image to image_size × image_size when decoding
    samples_per_task: int | None = None  # cap on each task's training samples (GEM: 1000)
    test_samples_per_task: int | None = None  # cap on each task's test samples, a random subset (CPU-sized runs
    # of many tasks: every task's test split is evaluated after every task)
    val_samples_per_task: int | None = None  # cap on each task's validation samples, a random subset of those held
    # out (the rest unused: training keeps its size); debug=shape scores every phase on a few hundred
    augment: bool = False  # pad-crop and flip during training (32×32 colour data)
    brightness_jitter: float = 0.0  # with augment: ColorJitter(brightness=b) too (La-MAML's CIFAR: 63/255 = 0.247)
    normalize: bool = True  # per-channel mean/std normalisation; false: pixels in [0, 1] only (Mammoth's MNIST
    # datasets, whose published learning rates were tuned on such inputs; GEM's and La-MAML's)
    rotation: Rotation = Rotation.gem  # rotated: each task's angle (see Rotation)

    def checks(self):
        order = self.class_order
        custom = self.source in ("tensors", "image_folder")
        return [("num_tasks", self.num_tasks >= 1, "at least 1"),
                ("class_order", order in ("natural", "random") or (
                    isinstance(order, list) and all(isinstance(c, int) for c in order)
                    and len(set(order)) == len(order)), "natural, random or a list of distinct class ids"),
                ("task_classes", self.task_classes is None or (
                    len(self.task_classes) == self.num_tasks and all(self.task_classes)
                    and self.class_order == "natural" and self.classes_per_task is None),
                 f"null, or one non-empty list per task: set dataset.num_tasks={len(self.task_classes or [])}, "
                 "and no class_order or classes_per_task beside it"),
                ("path", custom == (self.path is not None),
                 "a file or folder with dataset.source=tensors or image_folder, and null with any other source"),
                ("image_size", self.image_size is None or (self.source == "image_folder" and self.image_size >= 1),
                 "null, or a size in pixels with dataset.source=image_folder"),
                ("classes_per_task", self.classes_per_task is None or self.classes_per_task >= 1, "null or at least 1"),
                *((key, getattr(self, key) is None or getattr(self, key) >= 1, "null or at least 1")
                  for key in ("samples_per_task", "test_samples_per_task", "val_samples_per_task")),
                ("brightness_jitter", self.brightness_jitter == 0 or (self.augment and 0 < self.brightness_jitter < 1),
                 "0, or a strength in (0, 1) with dataset.augment=true"),
                ("kind", self.kind != "superclass" or self.source in SUPERCLASSES,
                 f"split, permuted or rotated: superclass needs coarse labels, which only "
                 f"{', '.join(SUPERCLASSES)} has"),
                ("num_tasks", self.kind != "superclass" or self.num_tasks <= SUPERCLASSES.get(self.source, 0),
                 f"1 to {SUPERCLASSES.get(self.source)} with dataset.kind=superclass: one task per superclass")]

    def __post_init__(self) -> None:
        super().__post_init__()
        self.refuse_unread()

    def refuse_unread(self, given: set[str] = frozenset()) -> None:
        """A key that dataset.kind does not read (KIND_READS), set away from its default or named in `given` (the
        keys set on the command line), is refused: it would change nothing."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for key in sorted(set(defaults) - KIND_READS[str(self.kind)]):
            value = getattr(self, key)
            if key in given or value != defaults[key]:
                readers = " or ".join(k for k, keys in KIND_READS.items() if key in keys)
                shown = "null" if value is None else value.value if isinstance(value, Choice) else value
                raise UserError(f"dataset.{key}={shown} is not read by dataset.kind={self.kind}, which would ignore "
                                f"it: drop it; it is read only by dataset.kind={readers}")


@dataclass
class HardwareConfig(Checked):
    prefix = "hardware."
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: Precision = Precision.auto
    channels_last: bool | None = None  # NHWC activations for convs; null: on for GPUs
    # TF32 matmuls and convs for what runs in fp32 on Ampere and newer; null: on, except under
    # method.protocol=official, which runs in plain fp32 as the official code does
    tf32: bool | None = None
    deterministic: bool = False  # PyTorch's deterministic algorithms (slower on GPU)
    distributed: bool = False  # data-parallel over the processes torchrun starts (hardware=ddp)
    # CPU threads for torch ops; null: the cores shared evenly by the jobs run side by side (hardware.default_threads)
    threads: int | None = None
    # torch.compile the backbone (minutes of compiling first; pays off on long GPU runs); compiled once per network
    # shape (a task-specialised backbone once per task) and scoring runs eagerly (train.py CompiledGraphs)
    compile: bool = False
    # Capture each training phase's full-size steps (forward, backward, optimiser step) as one CUDA graph and replay
    # it, for methods that declare their steps capture-safe (Traits.graph_safe; `cl-bench list`): one launch a step
    # in place of hundreds, where small batches leave the GPU waiting on the host. Elsewhere the steps run eagerly,
    # and metrics.json's ran_on.cuda_graphs says why (methods/loop.py StepGraph).
    cuda_graphs: bool = False
    # The optimisers (method.optimizer: SGD, Adam, AdamW; the methods' own too) as torch's fused kernels: one call a
    # step for every parameter, where foreach Adam reads each parameter's step count on the host. Weights move from
    # foreach's at float rounding: after 225 steps, each within 16 ulps of its tensor's largest (2e-6 of it; measured
    # 4; tests/test_launches.py FUSED_ULPS). false: torch's foreach ops, bit for bit its default arithmetic.
    fused_optimizer: bool = True

    def checks(self):
        return [("threads", self.threads is None or self.threads >= 1, "null or at least 1"),
                ("cuda_graphs", not (self.cuda_graphs and self.compile),
                 "false with hardware.compile=true: one or the other (a compiled backbone is not captured here)")]


@dataclass
class LoggerConfig:
    console: bool = True  # live progress and the final table
    wandb: bool = False
    project: str = "cl-bench"
    entity: str | None = None
    mode: LoggerMode = LoggerMode.offline
    name: str | None = None  # W&B run name; null: <method>_<dataset>_<scenario>_s<seed> (docs/usage.md)
    group: str | None = None  # W&B group; null: the sweep directory's name in a multirun, none in a single run
    tags: list[str] = field(default_factory=list)  # beside the method, dataset and scenario, which every run gets
    log_checkpoints: bool = False  # log each task's checkpoint as a W&B artifact (aliases task_<ttt> and latest)


@dataclass
class CheckpointConfig(Checked):
    prefix = "checkpoint."
    enabled: bool = True  # write checkpoints/task_<ttt>/ after every task
    every_epochs: int = 0  # also write one within a task every N epochs (0: only after tasks); resume continues there
    # Complete tasks' checkpoints kept: the newest N, or all. A resume reads the newest (and, within a task, the one
    # before it, which is the newest complete one), and init_from=RUN_DIR branches from it: 1 keeps what both need
    # (a 20-task CPG cifar100_20 run: one checkpoint, not 20); all keeps every task's, for init_from=.../task_<ttt>
    # and `cl-bench eval --checkpoint` of earlier tasks, and a fallback past a damaged newest one.
    keep: Any = 1

    def refuse_unread(self, given: set[str] = frozenset()) -> None:
        """checkpoint.keep with checkpoints off (set away from 1, or on the command line) would change nothing."""
        if not self.enabled and ("keep" in given or self.keep != 1):
            raise UserError(f"checkpoint.keep={self.keep} is not read with checkpoint.enabled=false, which writes no "
                            "checkpoints to keep: drop it, or set checkpoint.enabled=true")

    def checks(self):
        keep = self.keep
        return [("every_epochs", self.every_epochs >= 0, "0 (after tasks only) or more"),
                ("keep", keep == "all" or (type(keep) is int and keep >= 1),
                 "a number of complete tasks' checkpoints to keep (1 or more: the newest), or all")]


@dataclass
class SweepConfig:
    # What `cl-bench train` returns to Hydra's sweepers (Optuna maximises it): val_avg_acc, the average accuracy on
    # the validation splits; test_avg_acc only to mirror a paper that selected on test data (runs record it, and
    # `cl-bench report` labels them).
    objective: Objective = Objective.val_avg_acc


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
    scenario: Scenario = Scenario.task
    eval_future: bool = False  # also evaluate tasks not yet learned (forward transfer, fwt)
    resume: str | None = None  # a run directory to continue from its last complete checkpoint
    init_from: str | None = None  # RUN_DIR[/checkpoints/task_<ttt>]: a new run branching from that finished task
    profile_task: int | None = None  # record a torch profiler trace of this task's training into profile/
    setting: str | None = None  # the paper setting composed (conf/setting/, set by it): see cl_bench/settings.py
    shape: bool = False  # debug=shape: every phase cut to one epoch of one batch; memory, state and checkpoint
    # sizes and each phase's seconds recorded in metrics.json's `shape` section (cl_bench/shape.py)

    def __post_init__(self) -> None:
        """What holds across groups: the method supports the scenario (and DDP, and within-task checkpoints)."""
        from . import methods
        name = self.method.name
        methods.check_scenario(name, self.scenario)
        if self.hardware.distributed:
            methods.check_distributed(name, self.scenario)
            if self.method.skip_nonfinite:  # each rank would skip on its own loss, and the ranks would part
                raise UserError("method.skip_nonfinite=true does not combine with hardware=ddp: drop it, or "
                                "lower method.lr if the loss diverges")
        if self.eval_future and self.scenario == "class" and self.dataset.kind not in ("permuted", "rotated"):
            raise UserError("eval_future=true in the class scenario needs tasks that share labels (permuted_mnist, "
                            "rotated_mnist): a future task's classes have no outputs yet; use scenario=task")
        if self.method.protocol == "official":  # the official code's arithmetic: ivclab/CPG (2019, PyTorch 1.x
            # before TF32 existed) trains and evaluates in plain fp32, without autocast
            if self.hardware.precision == "bf16" or self.hardware.tf32:
                raise UserError("method.protocol=official runs in plain fp32 as the official code: drop "
                                "hardware.precision=bf16 and hardware.tf32=true (hardware=auto does so)")
        if self.data.normalization == "per_task" and (self.scenario != "task" or not self.dataset.normalize):
            raise UserError("data.normalization=per_task normalises each task's images with its own statistics, "
                            "which needs the task id at test time and dataset.normalize=true: use scenario=task, "
                            "or data.normalization=global")
        check_within_task_checkpoints(self.checkpoint, methods.get(name))
        if self.logger.wandb:
            require_extra("wandb", "wandb", "logger=wandb")


def per_task_normalization(cfg) -> bool:
    """Whether data.normalization resolves to per_task for this run (see Normalization)."""
    if cfg.data.normalization != "auto":
        return cfg.data.normalization == "per_task"
    return cfg.method.protocol == "official" and cfg.scenario == "task" and bool(cfg.dataset.normalize)


def register(options: list[tuple[str, str, Any]] | None = None) -> None:
    """Make the schemas and the run-directory resolver known to Hydra (the CLI calls this; nothing the task loop
    runs needs Hydra). Methods and backbones are their dataclasses, one group option each; datasets, hardware
    and loggers are YAML files over the schemas in /schemas. options: the method and backbone options as
    (group, name, node); by default the classes' own (their modules import torch), which also keeps catalog.py's
    copy of them current; the CLI's torch-free answers pass catalog.options(), rebuilt from that copy."""
    from hydra.core.config_store import ConfigStore

    from .rundirs import job_folder, record_subdir, unique_dir
    OmegaConf.register_new_resolver("unique_dir", unique_dir, replace=True)
    OmegaConf.register_new_resolver("job_folder", job_folder, replace=True)  # a sweep job's folder, by its settings
    OmegaConf.register_new_resolver("record_subdir", record_subdir, replace=True)
    OmegaConf.register_new_resolver("paper_backbone", settings.paper_backbone, replace=True)
    OmegaConf.register_new_resolver("by_memory_size", settings.by_memory_size, replace=True)
    cs = ConfigStore.instance()
    cs.store(name="schema", node=Config)
    # At the top level, not in a group: `cl-bench train --help` lists groups, and these are no options to choose.
    for group, node in (("dataset", DatasetConfig), ("hardware", HardwareConfig), ("logger", LoggerConfig)):
        cs.store(name=f"{group}_schema", node=node)
    if options is None:
        from . import catalog
        options = catalog.class_options()
        catalog.save()
    for group, name, node in options:
        cs.store(group=group, name=name, node=node)


def validate(cfg):
    """Every check of every config, beside its fields (Checked), and across groups (Config): the composed
    config is built into its dataclasses once; returns cfg."""
    from omegaconf.errors import InterpolationResolutionError

    from .methods.unread import refuse_unread
    try:
        _reject_added_keys(cfg)
        built = Config(**{f.name: OmegaConf.to_object(cfg[f.name]) if OmegaConf.is_config(cfg[f.name])
                          else cfg[f.name] for f in dataclasses.fields(Config)})  # Hydra's own node, if any, aside
        built.dataset.refuse_unread(given_keys(cfg, "dataset."))
        refuse_unread(built.method, given_keys(cfg, "method."))
        built.checkpoint.refuse_unread(given_keys(cfg, "checkpoint."))
    except InterpolationResolutionError as e:  # e.g. a setting's resolver said what is wrong
        raise UserError(describe(e)) from None
    return cfg


def given_keys(cfg, prefix: str) -> set[str]:
    """The keys under prefix that the command line sets, as Hydra recorded its overrides in cfg (none where cfg
    holds no Hydra node: the compose API's configs, whose explicit keys only their values show)."""
    overrides = OmegaConf.select(cfg, "hydra.overrides.task", default=None) or []
    keys = (o.partition("=")[0].lstrip("+~") for o in overrides)
    return {k.removeprefix(prefix).split(".")[0] for k in keys if k.startswith(prefix)}


def check_within_task_checkpoints(checkpoint: CheckpointConfig, method) -> None:
    from . import methods
    every = checkpoint.every_epochs
    if every and not checkpoint.enabled:
        raise UserError("checkpoint.every_epochs needs checkpoint.enabled=true")
    if every and method.traits.within_task_checkpoints is not True:
        able = [m for m, cls in sorted(methods.METHODS.items()) if cls.traits.within_task_checkpoints is True]
        raise UserError(f"checkpoint.every_epochs is not supported by method={method.name}: "
                        f"{method.traits.within_task_checkpoints}; methods that support it: {', '.join(able)}")


def _reject_added_keys(cfg, path: str = "") -> None:
    """Keys appended with Hydra's `+key=value` bypass the schemas; none of them would be read, so refuse them."""
    schema = OmegaConf.get_type(cfg)
    keys = [k for k in cfg if path or k != "hydra"]  # Hydra's own node, when composed in, is Hydra's to check
    if dataclasses.is_dataclass(schema):
        known = {f.name for f in dataclasses.fields(schema)}
        for key in keys:
            if key not in known:
                raise UserError(f"unknown key {path + key!r}{did_you_mean(key, sorted(known), path)}: "
                                f"{path.rstrip('.') or 'the top level'} has {', '.join(ranked(key, sorted(known)))}")
    for key in keys:
        if OmegaConf.is_dict(cfg[key]):
            _reject_added_keys(cfg[key], f"{path}{key}.")


def compose(overrides: list[str]):
    """The composed config, with Hydra's errors as one line."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    try:
        return hydra_compose(overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise UserError(describe(e, overrides)) from None
    except ValueError as e:  # Hydra's own parse of a group choice that reads as another type (method=true)
        raise UserError(unknown_choice(overrides) or str(e)) from None


def group_options(group: str) -> list[str]:
    """The choices of a config group: the registries' for methods and backbones (the options register() stored,
    from the classes or from catalog.py's copy of them), the YAML files for the rest."""
    if group in ("method", "backbone"):
        from hydra.core.config_store import ConfigStore
        return sorted(name.removesuffix(".yaml") for name in ConfigStore.instance().list(group))
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def unknown_choice(overrides: list[str]) -> str | None:
    """The first `group=value` whose value names none of the group's choices, as one line; None if all do.
    Hydra reports a choice that YAML reads as a boolean, a number or null (method=true) as a bare ValueError."""
    for override in overrides:
        key, sep, value = override.partition("=")
        group = key.lstrip("+~")
        if sep and is_group(group) and "." not in group and "," not in value:
            options = group_options(group)
            if value not in options:
                return f"unknown {group} {value!r}{did_you_mean(value, options)}: choose one of " \
                       f"{', '.join(ranked(value, options))}"
    return None


def is_group(key: str) -> bool:
    """Whether key names a config group: the registries' (method, backbone, stored without YAML dirs) or a dir of
    conf/."""
    key = key.lstrip("+~")
    return key in ("method", "backbone") or ("." not in key and (CONF / key).is_dir())


def chosen(parent: str, groups: list[str]) -> str:
    """How a refusal names the config node `parent`: with the choice given for it (`method=cpg`), if any."""
    choice = next((o for o in groups if o.lstrip("+~").split("=")[0] == parent), None)
    return choice.lstrip("+~") if choice else parent


def hydra_compose(overrides: list[str], return_hydra_config: bool = False):
    """Through Hydra's compose API: inside `cl-bench train` with its Hydra, elsewhere with the packaged configs."""
    from hydra import compose as compose_config
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    if GlobalHydra.instance().is_initialized():
        return compose_config("config", overrides=overrides, return_hydra_config=return_hydra_config)
    with initialize_config_module("cl_bench.conf", version_base="1.3"):
        return compose_config("config", overrides=overrides, return_hydra_config=return_hydra_config)


def chosen_option(overrides: list[str], group: str) -> str | None:
    """The option of `group` that composing overrides chooses, as Hydra records it (a variant's own name:
    backbone=gated_convnet, whose node's backbone.name is the registered convnet); for a composed config of the
    compose API, which holds no Hydra node (a run's Hydra job reads HydraConfig instead)."""
    return hydra_compose(overrides, return_hydra_config=True).hydra.runtime.choices.get(group)


def describe(e: Exception, overrides: list[str] = ()) -> str:
    """Hydra's and OmegaConf's messages as one line: what is wrong, and what would be right."""
    from hydra.errors import MissingConfigException
    text = str(e)
    if text.startswith(RESOLVER_SAID):  # a resolver's own one-line message (settings.by_memory_size)
        return text.removeprefix(RESOLVER_SAID).splitlines()[0]
    if isinstance(e, MissingConfigException) and e.missing_cfg_file in PLUGIN_CONFIGS:
        return f"{e.missing_cfg_file}: install the sweep extra (pip install 'cl-bench[sweep]'), which brings " \
               "Hydra's launcher and sweeper plugins"
    if isinstance(e, MissingConfigException) and e.missing_cfg_file and e.options is not None:
        group = Path(e.missing_cfg_file).parent.name
        name, options = Path(e.missing_cfg_file).name, [o for o in e.options if not o.startswith("schema")]
        return (f"unknown {group} {name!r}{did_you_mean(name, options)}: choose one of "
                f"{', '.join(ranked(name, options))}")
    if text.startswith("Could not override '"):  # an unknown key: name the keys that exist there
        key = text.split("'")[1]
        parent, _, _ = key.rpartition(".")
        groups = [o for o in overrides if is_group(o.split("=")[0])]  # the group choices alone
        try:
            node = hydra_compose(groups)
        except Exception:  # the choices themselves are broken: name the key alone
            node = None
        for part in filter(None, parent.split(".")):
            node = node.get(part) if hasattr(node, "get") else None
        leaf, where = key.rpartition(".")[2], chosen(parent, groups)
        known = ", ".join(ranked(leaf, list(node))) if hasattr(node, "keys") else ""
        swept = [o for o in overrides if o.partition("=")[0] == key.split(".")[0] and "," in o.partition("=")[2]]
        if swept:  # Hydra composes a multirun's base config with the group's default before sweeping it
            return (f"unknown key {key!r} for the default {key.split('.')[0]}: a multirun over {swept[0]} applies "
                    f"{key} to the default first, so sweep each choice in a command of its own")
        near = did_you_mean(leaf, list(node), f"{parent}." if parent else "") if known else ""
        return f"unknown key {key!r}{near}" + (f": {where or 'the top level'} has {known}" if known else "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if e.__cause__ is not None:
        lines += [line.strip() for line in str(e.__cause__).splitlines()[:1] if line.strip()]
    lines = [line for line in lines if not line.startswith(("full_key:", "object_type=", "reference_type="))]
    return "; ".join(dict.fromkeys(lines))
