"""Paper settings: what `method=X dataset=Y` composes when a paper ran X on Y.

A setting is a YAML file of conf/setting/ (Hydra's "specializing configuration" pattern): the defaults list picks
`setting/<method>_<dataset>.yaml` by itself when it exists, and `setting=<name>` picks another one, for the pairs
that more than one paper ran (gated's baselines on Split MNIST beside the DER paper's). A setting holds values
only, since Hydra lets no interpolated config choose a group; the backbone is chosen here instead, by the
resolver behind the defaults list's backbone entry:

- each dataset's papers ran one backbone (DATASET_BACKBONES), the default for every method on it;
- a setting whose paper ran another one on that dataset names it in SETTING_BACKBONES;
- `backbone=` on the command line (or an experiment preset's override) wins over both.

Runs record the setting they composed (`setting` in the config, metrics.json and W&B)."""
from pathlib import Path

from .errors import UserError

SETTINGS = Path(__file__).resolve().parent / "conf" / "setting"
FALLBACK_BACKBONE = "convnet"  # a dataset no paper here ran (split_digits, custom, your own)

DATASET_BACKBONES = {
    "cifar100_20": "vgg16_bn",  # CPG (Hung et al. 2019) and its PackNet/PAE rows
    "split_cifar10": "resnet18",  # gated (Abati et al. 2020) and the DER paper's Seq-CIFAR-10
    "split_svhn": "resnet18",  # gated
    "split_cifar100": "resnet18_reduced",  # GEM's Split CIFAR, NCCL
    "split_miniimagenet": "resnet18_reduced",  # NCCL
    "split_core50": "resnet18_reduced",  # NCCL
    "split_tinyimagenet": "resnet18",  # the DER paper's Seq-TinyImageNet
    "split_imagenet_subset": "resnet18_imagenet",  # ImageNet-100 in LUCIR and PODNet
    "split_mnist": "mlp",  # the DER paper's S-MNIST: MLP 2×100 (the MLP's default width)
    "split_fashion_mnist": "mlp",
    "permuted_mnist": "mlp",  # GEM, La-MAML, NCCL and the DER paper: MLP 2×100
    "permuted_mnist_many": "mlp",  # MER's and La-MAML's many permutations
    "rotated_mnist": "mlp",  # GEM, La-MAML
}

GEM_MNIST = ("rotated_mnist", "permuted_mnist", "permuted_mnist_many")
SETTING_BACKBONES = {  # settings whose paper ran another backbone than its dataset's papers
    # gated's 3 × 100-channel conv net, for gated and the baselines it compares with on Split MNIST
    **{f"{m}_split_mnist": "gated_convnet" for m in ("gated", "ewc", "lwf", "hat")},
    **{f"abati_{m}split_mnist": "gated_convnet" for m in ("", "joint_", "icarl_", "er_", "agem_")},
    # gated's class-scenario claim at a CPU's size (make repro-gated-cpu): the conv net [32, 64, 64] for all four
    **{f"abati_cpu_{m}_{d}": "convnet" for m in ("gated", "er", "icarl", "agem")
       for d in ("split_mnist", "split_cifar10")},
    # Mammoth's Xavier-initialised MLP, for the DER paper's S-MNIST and P-MNIST rows (setting/mammoth_*.yaml's pairs)
    **{f"{m}_{d}": "mammoth_mlp" for d in ("split_mnist", "permuted_mnist")
       for m in ("mammoth", "er", "agem", "der", "derpp", "er_ace", "gdumb", "finetune", "joint")},
    **{f"{m}_split_mnist": "mammoth_mlp" for m in ("icarl", "bic", "lucir")},
    # La-MAML's kaiming-initialised MLP, for the La-MAML family, NCCL and La-MAML's baselines on its MNIST benchmarks
    **{f"{s}_{d}": "lamaml_mlp" for d in GEM_MNIST
       for s in ("gem", "nccl", "lamaml", "cmaml", "sync", "la_er", "la_agem", "la_finetune")},
    **{f"{m}_{d}": "lamaml_mlp" for d in ("rotated_mnist", "permuted_mnist_many") for m in ("er", "agem", "finetune")},
    # La-MAML's BN-free conv net for its CIFAR-100 rows, single and multi pass
    **{f"{s}_split_cifar100{p}": "pc_cnn" for p in ("", "_multipass")
       for s in ("lamaml", "cmaml", "sync", "la_er", "la_agem")},
    "la_split_cifar100": "pc_cnn",
}


def paper_backbone(method: str, dataset: str, setting: str | None = None) -> str:
    """The backbone group choice for a run that names none: that of the setting chosen explicitly (setting=),
    else of the pair's own setting, else of the dataset (setting=none: the dataset's, whatever the pair)."""
    name = setting or f"{method}_{dataset}"
    return SETTING_BACKBONES.get(name, DATASET_BACKBONES.get(dataset, FALLBACK_BACKBONE))


def by_memory_size(table, *, _parent_, _root_, _node_):
    """`${by_memory_size:{200: 0.01, 500: 0.1}}` in a setting's method node: the value the paper published for the
    run's method.memory_size (Mammoth's best arguments are per buffer size), read from the method node itself,
    which a method's build resolves apart from the run's config. A size the table lacks is a user error naming
    the sizes."""
    size = _parent_.memory_size
    if size not in table:
        key, sizes = f"method.{_node_._key()}", ", ".join(str(s) for s in table)
        where = setting_label(_root_.setting) if "setting" in _root_ else "the paper setting"
        raise UserError(f"{where} publishes {key} for method.memory_size {sizes} only, not {size}: choose one of "
                        f"those, or set {key} yourself")
    return table[size]


def available() -> list[str]:
    """The packaged settings, by name (none, the choice of no setting, aside)."""
    return sorted(p.stem for p in SETTINGS.glob("*.yaml") if p.stem != "none")


def pairs(method_names, dataset_names) -> dict[str, tuple[str, str]]:
    """The settings that `method=X dataset=Y` picks by itself: name -> (method, dataset)."""
    names = set(available())
    return {f"{m}_{d}": (m, d) for m in method_names for d in dataset_names if f"{m}_{d}" in names}


def setting_label(name: str | None) -> str:
    """How a run names its setting: `cpg_cifar100_20 (paper)`, or that it composed the defaults."""
    if name is None:
        return "none (the method's and dataset's defaults)"
    return f"{name} ({'paper' if (SETTINGS / f'{name}.yaml').is_file() else 'preset'})"
