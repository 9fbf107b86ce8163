"""Every backbone builds and runs on its inputs; every config in conf/ composes and validates."""
import pytest
import torch

from cl_bench import backbones, config, methods


@pytest.mark.parametrize(("name", "shape", "dim"), [
    ("mlp", (1, 28, 28), 256), ("convnet", (1, 8, 8), 64), ("convnet", (1, 28, 28), 64),
    ("resnet18_reduced", (3, 32, 32), 160), ("resnet18", (3, 32, 32), 512), ("vgg16_bn", (3, 32, 32), 4096),
])
def test_backbone_gives_feature_dim_features(name, shape, dim):
    cfg = {"name": name, **({"hidden_sizes": [256, 256]} if name == "mlp" else {})}
    net = backbones.build(cfg, shape)
    assert net.feature_dim == dim
    assert net(torch.randn(2, *shape)).shape == (2, dim)


def test_reduced_resnet18_has_gems_size():
    net = backbones.build({"name": "resnet18_reduced"}, (3, 32, 32))
    assert 1.0e6 < sum(p.numel() for p in net.parameters()) < 1.2e6  # about 1.1 M parameters with nf=20


def compose_config(*overrides):
    config.register()
    return config.compose(list(overrides))


GROUPS = {g: sorted(p.stem for p in (config.CONF / g).glob("*.yaml"))
          for g in ("method", "dataset", "backbone", "hardware", "logger")}


@pytest.mark.parametrize(("group", "option"), [(g, o) for g, opts in GROUPS.items() for o in opts])
def test_every_config_composes_and_validates(group, option):
    scenario = "task" if group != "method" else sorted(methods.METHODS[option].scenarios)[-1]
    cfg = compose_config(f"{group}={option}", f"scenario={scenario}")
    config.validate(cfg)
    if group == "method":
        assert cfg.method.name == option
    if group in ("dataset", "backbone"):
        assert cfg[group].name == option


@pytest.mark.parametrize("preset", sorted(p.stem for p in (config.CONF / "experiment").glob("*.yaml")))
def test_every_experiment_preset_composes_and_validates(preset):
    cfg = compose_config(f"experiment={preset}")
    config.validate(cfg)
    assert cfg.dataset.name in preset  # every preset is named after its dataset


def test_every_registered_method_has_a_config():
    assert set(GROUPS["method"]) == set(methods.METHODS)
