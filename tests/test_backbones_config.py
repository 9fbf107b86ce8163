"""Every backbone builds and runs on its inputs; every config in conf/ composes and validates."""
import math

import pytest
import torch
from conftest import train
from omegaconf import OmegaConf
from torch import nn

from cl_bench import api, backbones, config, methods
from cl_bench.errors import UserError


@pytest.mark.parametrize(("name", "shape", "dim"), [
    ("mlp", (1, 28, 28), 256), ("convnet", (1, 8, 8), 64), ("convnet", (1, 28, 28), 64),
    ("resnet18_reduced", (3, 32, 32), 160), ("resnet18", (3, 32, 32), 512), ("vgg16_bn", (3, 32, 32), 4096),
])
def test_backbone_gives_feature_dim_features(name, shape, dim):
    cfg = {"name": name, **({"hidden_sizes": [256, 256]} if name == "mlp" else {})}
    net = backbones.build(cfg, shape)
    assert net.feature_dim == dim
    assert net(torch.randn(2, *shape)).shape == (2, dim)


def test_hat_mlp_is_mlp_hats_layers():
    """conf/backbone/hat_mlp.yaml against joansj/hat's mlp_hat forward: dropout 0.2 on the flattened input, then
    per hidden layer linear, ReLU, dropout 0.5; no dropout module at all in the default MLP."""
    cfg = compose_config("backbone=hat_mlp")
    net = backbones.build(cfg.backbone, (1, 28, 28))
    kinds = [(type(m).__name__, getattr(m, "p", None)) for m in net.body]
    assert kinds == [("Flatten", None), ("Dropout", 0.2), ("Linear", None), ("ReLU", None), ("Dropout", 0.5),
                     ("Linear", None), ("ReLU", None), ("Dropout", 0.5)]
    assert net.body[2].out_features == net.body[5].out_features == 2000
    plain = backbones.build({"name": "mlp"}, (1, 28, 28))
    assert not any(isinstance(m, nn.Dropout) for m in plain.modules())
    net.remove_final_relu()  # LUCIR's: the last ReLU goes, the dropout after it stays
    assert [type(m).__name__ for m in net.body][-2:] == ["Identity", "Dropout"]


def test_mlp_dropout_out_of_range_is_one_line():
    with pytest.raises(UserError, match=r"backbone.hidden_dropout=1.0 is out of range"):
        config.validate(compose_config("backbone=hat_mlp", "backbone.hidden_dropout=1.0"))


def test_convnet_pools_after_the_first_blocks_only_where_asked():
    """backbone.pools=N: a max-pool after the first N conv blocks (lit-leo/cgate's SimpleCNN: 2 of 3); unset, after
    every block while the map is at least 4x4, as before the option; out of range, one line."""
    def pools(shape, **kwargs):
        net = backbones.build({"name": "convnet", "channels": [4, 4, 4], **kwargs}, shape)
        return [i for i, m in enumerate(net.body) if isinstance(m, nn.MaxPool2d)]

    assert pools((3, 32, 32)) == [3, 7, 11] and pools((1, 8, 8)) == [3, 7]  # the default: unchanged
    assert pools((3, 32, 32), pools=2) == [3, 7] and pools((3, 32, 32), pools=0) == []
    net = backbones.build({"name": "convnet", "channels": [4, 4, 4], "pools": 2}, (3, 32, 32))
    assert net.body[:-2](torch.zeros(1, 3, 32, 32)).shape == (1, 4, 8, 8)
    with pytest.raises(UserError, match=r"backbone.pools=4 is out of range: use null .* or 0 to 3"):
        config.validate(compose_config("backbone=convnet", "backbone.channels=[4,4,4]", "backbone.pools=4"))
    with pytest.raises(UserError, match=r"backbone.pools=3: the map is 1×1 after conv block 3"):
        backbones.build({"name": "convnet", "channels": [4, 4, 4], "pools": 3}, (1, 4, 4))


def test_reduced_resnet18_has_gems_size():
    net = backbones.build({"name": "resnet18_reduced"}, (3, 32, 32))
    assert 1.0e6 < sum(p.numel() for p in net.parameters()) < 1.2e6  # about 1.1 M parameters with nf=20


def compose_config(*overrides):
    config.register()
    return config.compose(list(overrides))


YAML_GROUPS = ("dataset", "hardware", "logger")
OPTIONS = {"method": sorted(methods.METHODS), "backbone": sorted(backbones.BACKBONES),
           **{g: sorted(p.stem for p in (config.CONF / g).glob("*.yaml")) for g in YAML_GROUPS}}
PRESETS = sorted(p.stem for p in (config.CONF / "experiment").glob("*.yaml"))
NEEDS = {"custom": ["dataset.path=my_data.npz"]}  # an option that is only complete with the user's own value


@pytest.mark.parametrize(("group", "option"), [(g, o) for g, opts in OPTIONS.items() for o in opts])
def test_every_config_composes_and_validates(group, option):
    scenario = "task" if group != "method" else sorted(methods.METHODS[option].traits.scenarios)[-1]
    cfg = compose_config(f"{group}={option}", f"scenario={scenario}", *NEEDS.get(option, []))
    config.validate(cfg)
    if group == "method":
        assert cfg.method.name == option
    if group in ("dataset", "backbone"):
        assert cfg[group].name == option


@pytest.mark.parametrize("preset", PRESETS)
def test_every_experiment_preset_composes_and_validates(preset):
    cfg = compose_config(f"experiment={preset}")
    config.validate(cfg)
    assert cfg.dataset.name in preset  # every preset is named after its dataset


def values_set(node, prefix: str = "") -> dict:
    """The leaf values a YAML file sets, by dotted key (its defaults list and Hydra's settings aside)."""
    out = {}
    for key in node:
        if key in ("defaults", "hydra") and not prefix:
            continue
        value = node[key]
        if OmegaConf.is_dict(value):
            out.update(values_set(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = OmegaConf.to_container(value) if OmegaConf.is_list(value) else value
    return out


def defaults_without(path) -> tuple[dict, object]:
    """What a YAML file sets, and the config it would set it on: a group option's schema, or for a preset the
    composition of its group choices alone."""
    raw = OmegaConf.load(path)
    group = path.parent.name
    if group != "experiment":
        return values_set(raw, f"{group}."), OmegaConf.create({group: getattr(config, SCHEMAS[group])})
    choices = [f"experiment={item}" if isinstance(item, str) else "{}={}".format(*item.popitem())
               for item in OmegaConf.to_container(raw).get("defaults", []) if item != "_self_"]
    return values_set(raw), compose_config(*(c.replace("override /", "") for c in choices))


SCHEMAS = {"dataset": "DatasetConfig", "hardware": "HardwareConfig", "logger": "LoggerConfig"}


@pytest.mark.parametrize("path", [config.CONF / g / f"{o}.yaml" for g in YAML_GROUPS for o in OPTIONS[g]]
                         + [config.CONF / "experiment" / f"{p}.yaml" for p in PRESETS], ids=lambda p: p.stem)
def test_no_yaml_repeats_a_default(path):
    """The dataclasses hold every default; a YAML file holds only what differs from them."""
    own, base = defaults_without(path)
    repeated = [f"{key}={value}" for key, value in own.items()
                if OmegaConf.select(base, key, default="<unset>", throw_on_missing=False) == value]
    assert repeated == [], f"{path.name} repeats defaults"


def test_the_repeat_check_finds_a_repeated_default(tmp_path):
    (tmp_path / "experiment").mkdir()
    path = tmp_path / "experiment" / "x.yaml"
    path.write_text("defaults:\n  - override /method: cpg\nmethod:\n  epochs: 100\n  lr: 0.5\n")
    own, base = defaults_without(path)
    assert [k for k, v in own.items() if OmegaConf.select(base, k) == v] == ["method.epochs"]


def test_every_registered_method_and_backbone_is_a_config_option():
    assert set(OPTIONS["method"]) == set(methods.METHODS)
    completion = compose_config("backbone=resnet18_reduced").backbone
    assert completion.nf == 20


@pytest.mark.parametrize("init, bound", [("xavier_uniform", lambda fi, fo: math.sqrt(6 / (fi + fo))),
                                         ("kaiming_normal", None)])
def test_heads_are_drawn_as_the_backbone(init, bound):
    """The references' classifier is their network's last layer: Mammoth's MNIST MLP draws every linear weight from
    U(±√(6 / (fan_in + fan_out))) with zero biases (backbone/__init__.py's xavier), La-MAML's Learner every one
    kaiming-normal with zero biases; cl-bench's heads follow the backbone's init."""
    from cl_bench.data import scenarios
    torch.manual_seed(0)
    info = scenarios.Info("toy", "class", (1, 28, 28), [[0, 1], [2, 3]], [0, 2], None)
    backbone = backbones.build({"name": "mlp", "init": init}, (1, 28, 28))
    ctx = methods.Context(torch.device("cpu"), None, torch.Generator(), None)
    method = methods.build(OmegaConf.structured(methods.METHODS["er"].Config(name="er")), backbone, info, ctx)
    layers = [m for m in [*backbone.modules(), *method.heads.modules()] if isinstance(m, nn.Linear)]
    assert len(layers) == 3 and layers[-1].out_features == 4
    for layer in layers:
        assert torch.equal(layer.bias, torch.zeros_like(layer.bias))
        if bound is not None:
            limit = bound(layer.in_features, layer.out_features)
            assert 0.9 * limit < layer.weight.abs().max() <= limit
        else:  # kaiming-normal: std √(2 / fan_in)
            assert layer.weight.std().item() == pytest.approx(math.sqrt(2 / layer.in_features), rel=0.15)


def test_mammoths_mlp_for_the_der_papers_mnist_rows():
    config.register()
    for pair in (["method=er", "dataset=split_mnist"], ["method=der", "dataset=permuted_mnist"]):
        cfg = config.compose(pair)
        assert (cfg.backbone.name, cfg.backbone.init) == ("mlp", "xavier_uniform")
    assert config.compose(["method=ewc", "dataset=permuted_mnist"]).backbone.init == "pytorch"


def test_build_takes_the_backbones_dataclass_and_resnet_takes_imagenets_stem():
    from cl_bench.backbones.resnet import ResNetConfig
    net = backbones.build(ResNetConfig(nf=8, stem="imagenet"), (3, 64, 64))
    assert isinstance(net.stem[-1], torch.nn.MaxPool2d) and net.stem[0].kernel_size == (7, 7)
    assert net(torch.zeros(2, 3, 64, 64)).shape == (2, 64)
    assert backbones.build(ResNetConfig(nf=8), (3, 32, 32)).stem[0].kernel_size == (3, 3)  # CIFAR's, the default
    with pytest.raises(UserError, match="backbone.stem='vit' is unknown: use cifar or imagenet"):
        backbones.build({"name": "resnet18", "stem": "vit"}, (3, 32, 32))


@pytest.mark.slow
def test_metrics_json_records_the_backbone_variant_chosen(tmp_path):
    """backbone=gated_convnet, a YAML variant of convnet, is recorded by its own name beside the registered
    backbone it configures (it was once recorded as convnet alone), by a CLI run and by api.run alike."""
    small = ["backbone=gated_convnet", "backbone.channels=[4,4,4]", "debug=fast"]
    by_cli = train(tmp_path / "cli", *small)
    by_api = api.run(tmp_path / "api", *small)
    for metrics in (by_cli, by_api):
        assert (metrics["backbone"], metrics["backbone_name"]) == ("gated_convnet", "convnet")
