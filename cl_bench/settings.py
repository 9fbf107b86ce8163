"""Paper settings: what `method=X dataset=Y` composes when a paper ran X on Y.

A setting is a YAML file of conf/setting/ (Hydra's "specializing configuration" pattern): the defaults list picks
`setting/<method>_<dataset>.yaml` by itself when it exists, and `setting=<name>` picks another one, for the pairs
that more than one paper ran (gated's baselines on Split MNIST beside the DER paper's). Its values are merged in;
the backbone, a group choice, is named in the files' defaults lists instead, since a value cannot choose a group:

- each dataset YAML names its papers' backbone, `- optional /paper_backbone/dataset: resnet18`;
- a setting whose paper ran another one names it, `- optional /paper_backbone/setting: gated_convnet`, and a setting
  that includes it (`- abati_split_mnist`) inherits it; a setting that others include writes
  `${oc.select:paper_backbone/setting,gated_convnet}`, so that one including it may name another;
- the resolver below reads those choices: the setting's, else the dataset's, else convnet;
- `backbone=` on the command line (or an experiment preset's override) wins over all of it.

Those entries are choices of no config (`optional`, and no conf/paper_backbone/setting/ exists): Hydra records a
choice before it looks for the file, so a setting on hydra.searchpath names a backbone as a packaged one does, and
two settings of one chain naming the same backbone are no duplicate. conf/paper_backbone/papers.yaml, reached through
an interpolation of the primary defaults list, holds the backbone entry: Hydra expands a config's interpolated entries
last, later ones first, so it is expanded after the setting's and dataset's choices are known.

Runs record the setting they composed (`setting` in the config, metrics.json and W&B)."""
from pathlib import Path

from .errors import UserError

SETTINGS = Path(__file__).resolve().parent / "conf" / "setting"
SETTING_CHOICE, DATASET_CHOICE = "paper_backbone/setting", "paper_backbone/dataset"  # the groups those entries name
FALLBACK_BACKBONE = "convnet"  # a dataset that names none (split_digits, custom, your own)


def paper_backbone(*, _root_) -> str:
    """`${paper_backbone:}` in conf/paper_backbone/papers.yaml: the backbone group choice for a run that names none,
    from the choices Hydra has made so far (its interpolation context): that of the setting, else of the dataset,
    else FALLBACK_BACKBONE. A dataset's entry sits in the dataset's package (`@dataset...`), hence the split."""
    named = {str(key).partition("@")[0]: key for key in _root_ if str(key).startswith("paper_backbone/")}
    for group in (SETTING_CHOICE, DATASET_CHOICE):
        if group in named and _root_[named[group]]:
            return _root_[named[group]]
    return FALLBACK_BACKBONE


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
