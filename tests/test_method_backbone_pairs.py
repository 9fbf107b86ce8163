"""Every method on every registered backbone: it builds, or it is refused in one line that names the capability
the backbone lacks (backbones/base.py). Built on 3x32x32 inputs (every backbone takes them), in a scenario the
method supports; training each pair is the per-method tests' work (debug=fast runs of each method in test_cli.py)."""
from dataclasses import replace

import pytest
import torch
from omegaconf import OmegaConf

from cl_bench import backbones, methods
from cl_bench.backbones.base import Capability
from cl_bench.config import DataConfig, DatasetConfig
from cl_bench.data import scenarios
from cl_bench.errors import UserError
from cl_bench.recorders import Recorders

pytestmark = pytest.mark.usefixtures("one_thread")
SHAPE = (3, 32, 32)
SMALL = {"mlp": {"hidden_sizes": [16]}, "convnet": {"channels": [4, 4]}, "resnet18": {"nf": 4},
         "resnet18_reduced": {"nf": 4}, "vgg16_bn": {"hidden": 8}, "pc_cnn": {"channels": 4}}


@pytest.fixture(scope="module")
def info():
    dataset = OmegaConf.structured(DatasetConfig(name="split_digits", source="digits", num_tasks=5))
    return scenarios.build(dataset, OmegaConf.structured(DataConfig()), "task", 0, torch.device("cpu")).info


def test_every_backbone_is_small_here():
    assert set(SMALL) == set(backbones.BACKBONES)


@pytest.mark.parametrize("backbone", sorted(backbones.BACKBONES))
@pytest.mark.parametrize("method", sorted(methods.METHODS))
def test_each_pair_builds_or_names_the_missing_capability(method, backbone, info):
    cls = methods.get(method)
    scenario = "task" if "task" in cls.scenarios else "class"
    net = backbones.build({"name": backbone, **SMALL[backbone]}, SHAPE)
    cfg = OmegaConf.merge(OmegaConf.structured(cls.Config), {"name": method})
    ctx = methods.Context(torch.device("cpu"), None, torch.Generator().manual_seed(0), Recorders([]))
    needs = set(cls.needs) | ({Capability.final_relu_switch} if getattr(cfg, "remove_final_relu", False) else set())
    missing = sorted(needs - set(type(net).capabilities))
    if missing:
        with pytest.raises(UserError, match=rf"method={method}.* \(capability {missing[0]}\); .* use backbone="):
            methods.build(cfg, net, replace(info, scenario=scenario, input_shape=SHAPE), ctx)
    else:
        built = methods.build(cfg, net, replace(info, scenario=scenario, input_shape=SHAPE), ctx)
        assert isinstance(built, methods.Method)
        if method != "independent":  # its networks are made task by task: none exists before the first
            assert built(torch.zeros(2, *SHAPE), 0 if scenario == "task" else None).shape[0] == 2
