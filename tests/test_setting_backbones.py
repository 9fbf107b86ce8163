"""Settings as data (cl_bench/settings.py): the files name the backbone. Each dataset YAML names its papers' one, a
setting names another in its defaults list or inherits it from the setting it includes, a setting of your own on
hydra.searchpath names one the same way, and the resolver reads what the composed files chose."""
import re

import pytest
from omegaconf import OmegaConf
from test_settings import setting_command

from cl_bench import backbones, config, settings

ENTRY = re.compile(r"^optional /paper_backbone/(setting|dataset)$")
INHERITABLE = re.compile(r"^\$\{oc\.select:paper_backbone/setting,(\w+)\}$")  # the form a setting others include


@pytest.fixture(scope="module", autouse=True)
def hydra_once():
    from hydra import initialize_config_module
    config.register()
    with initialize_config_module("cl_bench.conf", version_base="1.3"):
        yield


def defaults(path) -> list:
    return list(OmegaConf.to_container(OmegaConf.load(path)).get("defaults") or [])


def named(path) -> str | None:
    """The backbone a setting or dataset file names itself, read from its defaults list; None if it names none."""
    for entry in defaults(path):
        if isinstance(entry, dict):
            (key, value), = entry.items()
            if ENTRY.match(key):
                return INHERITABLE.sub(r"\1", value)
    return None


def base(name: str) -> str | None:
    included = [e for e in defaults(settings.SETTINGS / f"{name}.yaml") if isinstance(e, str) and e != "_self_"]
    return included[0] if included else None


def chain_names(name: str) -> str | None:
    """What a setting names, itself or through the settings it includes (the nearest wins)."""
    while name is not None:
        own = named(settings.SETTINGS / f"{name}.yaml")
        if own is not None:
            return own
        name = base(name)
    return None


def composed_backbone(overrides: list[str]) -> str:
    from hydra import compose
    return compose("config", overrides=overrides, return_hydra_config=True).hydra.runtime.choices.backbone


BACKBONES = set(backbones.BACKBONES) | {p.stem for p in (config.CONF / "backbone").glob("*.yaml")}
DATASETS = sorted(p.stem for p in (config.CONF / "dataset").glob("*.yaml"))


@pytest.mark.parametrize("name", settings.available())
def test_a_setting_composes_the_backbone_its_files_name(name):
    """A registered backbone or a conf/backbone option, the one its chain names, else its dataset's."""
    command = setting_command(name)
    dataset = next(c.split("=")[1] for c in command if c.startswith("dataset="))
    own = chain_names(name)
    assert own is None or own in BACKBONES
    expected = own or named(config.CONF / "dataset" / f"{dataset}.yaml") or settings.FALLBACK_BACKBONE
    assert composed_backbone([*command[:2], f"setting={name}"]) == expected


def test_a_setting_others_include_lets_them_name_another_backbone():
    """Hydra refuses two choices of one group, so a base names its backbone as the default of the one chosen."""
    bases = {base(n) for n in settings.available()} - {None}
    for name in sorted(bases):
        for entry in defaults(settings.SETTINGS / f"{name}.yaml"):
            if isinstance(entry, dict) and ENTRY.match(next(iter(entry))):
                assert INHERITABLE.match(next(iter(entry.values()))), name


@pytest.mark.parametrize("dataset", DATASETS)
def test_each_dataset_names_a_backbone_that_exists(dataset):
    own = named(config.CONF / "dataset" / f"{dataset}.yaml")
    assert own is None or own in BACKBONES
    assert composed_backbone([f"dataset={dataset}", "setting=none", *config_needs(dataset)]) == \
        (own or settings.FALLBACK_BACKBONE)


def config_needs(dataset: str) -> list[str]:
    return ["dataset.path=my_data.npz"] if dataset == "custom" else []


def test_a_setting_of_your_own_names_its_backbone(tmp_path):
    """As the docs say: myconf/setting/<name>.yaml on hydra.searchpath, its backbone in its defaults list; one that
    includes a packaged setting inherits its backbone or names another; backbone= on the command line wins."""
    (tmp_path / "setting").mkdir()
    (tmp_path / "setting" / "finetune_split_digits.yaml").write_text(
        "# @package _global_\ndefaults:\n  - optional /paper_backbone/setting: resnet18_reduced\n  - _self_\n"
        "setting: finetune_split_digits\nmethod:\n  epochs: 1\n")
    (tmp_path / "setting" / "my_gated.yaml").write_text(
        "# @package _global_\ndefaults:\n  - gated_split_mnist\n  - optional /paper_backbone/setting: mlp\n"
        "  - _self_\nsetting: my_gated\n")
    (tmp_path / "setting" / "my_abati.yaml").write_text(
        "# @package _global_\ndefaults:\n  - abati_split_mnist\n  - _self_\nsetting: my_abati\n")
    mine = f"hydra.searchpath=[file://{tmp_path}]"
    cfg = config.compose([mine])
    assert (cfg.setting, cfg.backbone.name, cfg.method.epochs) == ("finetune_split_digits", "resnet18_reduced", 1)
    assert config.compose(["method=gated", "dataset=split_mnist", "setting=my_gated", mine]).backbone.name == "mlp"
    cfg = config.compose(["dataset=split_mnist", "setting=my_abati", mine])
    assert (cfg.backbone.name, list(cfg.backbone.channels)) == ("convnet", [100, 100, 100])  # gated_convnet
    assert config.compose([mine, "backbone=mlp"]).backbone.name == "mlp"
    assert composed_backbone(["dataset=split_mnist", "setting=none", mine]) == "mlp"  # the dataset's
