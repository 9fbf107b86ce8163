"""The backbone contract the converters call (backbones/base.py): every backbone says what it is made of, its residual
blocks or its chain of modules, and the converters (nn/gated.py, nn/masked.py's growth, NCCL's calibration) ask it
so, never by the backbone's class or attribute names."""
import ast
import dataclasses
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from cl_bench import backbones, cli
from cl_bench.backbones.base import Backbone, ResidualBlock
from cl_bench.backbones.resnet import BasicBlock
from cl_bench.errors import UserError
from cl_bench.nn import gated, masked

PACKAGE = Path(__file__).resolve().parents[1] / "cl_bench"
SMALL = {"mlp": {"hidden_sizes": [16]}, "convnet": {"channels": [4, 4]}, "resnet18": {"nf": 4},
         "resnet18_reduced": {"nf": 4}, "vgg16_bn": {"hidden": 8, "width": 0.0625}, "pc_cnn": {"channels": 4}}
# What a converter must not reach for: a residual block's places (ask ResidualBlock instead)
BLOCK_ATTRIBUTES = {"conv1", "bn1", "conv2", "bn2", "shortcut", "activation_before_add", "final_relu"}


def build(name: str) -> Backbone:
    torch.manual_seed(0)
    return backbones.build(OmegaConf.create({"name": name, **SMALL[name]}), (3, 32, 32))


def test_every_backbone_is_checked_here():
    assert set(SMALL) == set(backbones.BACKBONES)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_backbone_names_its_residual_blocks_or_its_chain(name):
    backbone = build(name).eval()
    blocks, chain = backbone.residual_blocks(), backbone.chain()
    assert bool(blocks) != bool(chain), "one of the two, never both"
    assert all(isinstance(block, ResidualBlock) for block in blocks)
    if chain:  # the chain, run module after module, is the backbone's forward
        x = torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            h = x
            for module in chain:
                h = module(h)
            torch.testing.assert_close(h, backbone(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["resnet18", "resnet18_reduced"])
def test_resnets_residual_blocks_are_its_basic_blocks_and_answer_for_their_places(name):
    backbone = build(name)
    blocks = backbone.residual_blocks()
    assert blocks == [m for m in backbone.modules() if isinstance(m, BasicBlock)] and len(blocks) == 8
    for block in blocks:
        assert block.inner() == (block.conv1, block.bn1, block.conv2)
        assert block.shortcut_convs() == [m for m in block.shortcut if isinstance(m, nn.Conv2d)]
        assert block.output_convs() == [block.conv2, *block.shortcut_convs()]
    assert sum(bool(block.shortcut_convs()) for block in blocks) == 3


def test_a_block_converted_in_place_still_answers_with_the_modules_now_in_its_places():
    backbone = masked.convert(build("resnet18_reduced"), 2)
    conv1, bn1, conv2 = backbone.residual_blocks()[0].inner()
    assert isinstance(conv1, masked.MaskedConv2d) and isinstance(bn1, masked.TaskBatchNorm)
    assert isinstance(conv2, masked.MaskedConv2d)
    gated_backbone = build("resnet18")
    gated.convert(gated_backbone, 2)  # each block now sits inside the gated unit of its sum
    blocks = gated_backbone.residual_blocks()
    assert len(blocks) == 8 and all(isinstance(block.inner()[0], gated.GatedUnit) for block in blocks)


def test_growth_refuses_a_backbone_that_names_neither_blocks_nor_chain():
    class Opaque(Backbone):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.feature_dim = 4

    with pytest.raises(UserError, match="names neither"):
        masked.growth_groups(masked.convert(Opaque(), 2))


def offences(path, tree: ast.AST) -> list[str]:
    """Where the source imports the resnet module, names BasicBlock or reaches for a block's attribute."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("resnet"):
            found.append(f"{path}:{node.lineno} imports {node.module}")
        elif isinstance(node, ast.Name) and node.id == "BasicBlock":
            found.append(f"{path}:{node.lineno} names BasicBlock")
        elif isinstance(node, ast.Attribute) and node.attr in BLOCK_ATTRIBUTES | {"BasicBlock"}:
            found.append(f"{path}:{node.lineno} reads .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in BLOCK_ATTRIBUTES):
            found.append(f"{path}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    return found


@pytest.mark.parametrize("part", ["nn", "methods"])
def test_converters_and_methods_name_no_backbone_class_nor_block_attribute(part):
    paths = sorted((PACKAGE / part).rglob("*.py"))
    assert paths
    assert [o for path in paths for o in offences(path.relative_to(PACKAGE), ast.parse(path.read_text()))] == []


def test_the_source_check_finds_what_it_looks_for():
    source = ("from ..backbones.resnet import BasicBlock\nisinstance(m, BasicBlock)\ngetattr(m, 'conv1', None)\n"
              "m.shortcut\n")
    assert sorted(offences("x.py", ast.parse(source))) == [
        "x.py:1 imports backbones.resnet", "x.py:2 names BasicBlock", "x.py:3 getattr(..., 'conv1')",
        "x.py:4 reads .shortcut"]


class Bare(nn.Module):
    def forward(self, x):
        return x.flatten(1)


@dataclasses.dataclass
class BareConfig:
    name: str = "bare"


def test_list_names_a_backbone_registered_without_a_docstring(monkeypatch, tmp_path, capsys):
    """A user's backbone with no docstring is listed by its name (its docstring's first line once crashed the list)."""
    monkeypatch.setitem(backbones.BACKBONES, "bare", (Bare, BareConfig))
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path))  # a catalog of its own, read from the classes
    assert cli.main(["list"]) == 0
    rows = [[cell.strip() for cell in line.split("│")] for line in capsys.readouterr().out.splitlines() if "│" in line]
    assert ["bare", "-"] in rows
