"""Every dataset key is read by the dataset.kind chosen, or refused in one line (config.KIND_READS): no key is
silently ignored. The table is checked against what scenarios.build really reads, kind by kind."""
import dataclasses
import json

import numpy as np
import pytest
import torch
from conftest import cl_bench
from omegaconf import OmegaConf
from test_scenarios import write_cifar100

from cl_bench import config
from cl_bench.config import KIND_READS, DataConfig, DatasetConfig
from cl_bench.data import scenarios
from cl_bench.errors import UserError

KINDS = sorted(KIND_READS)
SOURCE = {"split": "digits", "superclass": "cifar100", "permuted": "digits", "rotated": "digits"}
# A value away from the default for each key some kind does not read, valid for the rest of DatasetConfig's checks.
AWAY = {"classes_per_task": {"classes_per_task": 2}, "class_order": {"class_order": "random"},
        "task_classes": {"task_classes": [[0, 1]], "num_tasks": 1}, "rotation": {"rotation": "even"}}


class Reads:
    """A dataset config that records which of its keys are read."""

    def __init__(self, cfg):
        object.__setattr__(self, "cfg", cfg)
        object.__setattr__(self, "read", set())

    def __getattr__(self, key):
        self.read.add(key)
        return getattr(self.cfg, key)


def test_every_dataset_key_is_read_by_some_kind_and_kinds_are_the_schemas():
    assert set().union(*KIND_READS.values()) == {f.name for f in dataclasses.fields(DatasetConfig)}
    assert set(KIND_READS) == {k.value for k in config.Kind}
    assert set(AWAY) == {f.name for f in dataclasses.fields(DatasetConfig)} - set.intersection(
        *(set(keys) for keys in KIND_READS.values()))


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_reads_exactly_the_keys_it_declares(kind, tmp_path):
    """scenarios.build on a small source of the kind, its dataset config watched: what it reads is the table's row."""
    if kind == "superclass":
        write_cifar100(tmp_path, per_class=1)
    cfg = Reads(OmegaConf.structured(DatasetConfig(name=kind, source=SOURCE[kind], kind=kind, num_tasks=2)))
    data = OmegaConf.structured(DataConfig(root=str(tmp_path), val_fraction=0.25, cache=False))
    scenario = scenarios.build(cfg, data, "task", 0, torch.device("cpu"))
    assert len(scenario.tasks) == 2
    assert cfg.read == KIND_READS[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_the_kind_does_not_read_is_refused_naming_key_and_kind(kind):
    base = dict(name=kind, source=SOURCE[kind].replace("digits", "mnist"), kind=kind)
    for key, values in AWAY.items():
        if key in KIND_READS[kind]:
            DatasetConfig(**base, **values)  # read: accepted
            continue
        with pytest.raises(UserError, match=rf"^dataset\.{key}=.+ is not read by dataset\.kind={kind}\b"):
            DatasetConfig(**base, **values)
        with pytest.raises(UserError, match=rf"^dataset\.{key}=.+ is not read by dataset\.kind={kind}\b"):
            DatasetConfig(**base).refuse_unread({key})  # at its default, but given on the command line


def test_superclass_runs_the_first_num_tasks_superclasses(tmp_path):
    coarse_of = write_cifar100(tmp_path, per_class=1)
    cfg = OmegaConf.structured(DatasetConfig(name="cifar100_20", source="cifar100", kind="superclass", num_tasks=6))
    data = OmegaConf.structured(DataConfig(root=str(tmp_path), val_fraction=0.0, cache=False))
    scenario = scenarios.build(cfg, data, "task", 0, torch.device("cpu"))
    assert scenario.info.task_classes == [sorted(np.flatnonzero(coarse_of == t).tolist()) for t in range(6)]


def one_line_refusal(proc, *words):
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(w in proc.stderr for w in words), proc.stderr


def test_cifar100_20_refusals_come_at_validation_without_data(tmp_path):
    """No CIFAR-100 under data.root: the refusals come before any data is read, and before a run directory."""
    common = ["train", "dataset=cifar100_20", f"data.root={tmp_path / 'none'}", f"hydra.run.dir={tmp_path / 'run'}",
              "logger=none"]
    one_line_refusal(cl_bench(*common, "dataset.num_tasks=21"), "dataset.num_tasks=21", "superclass", "1 to 20")
    one_line_refusal(cl_bench(*common, "dataset.class_order=natural"), "dataset.class_order=natural",
                     "dataset.kind=superclass")
    assert not (tmp_path / "run").exists()


def test_a_default_given_on_the_command_line_is_refused_where_unread(tmp_path):
    one_line_refusal(cl_bench("train", "dataset=split_digits", "dataset.rotation=gem", "logger=none",
                              f"hydra.run.dir={tmp_path / 'run'}"), "dataset.rotation=gem", "dataset.kind=split")


@pytest.mark.slow
def test_cifar100_20_with_num_tasks_6_runs_six_superclass_tasks(tmp_path):
    coarse_of = write_cifar100(tmp_path / "data", per_class=2)
    proc = cl_bench("train", "dataset=cifar100_20", "dataset.num_tasks=6", f"data.root={tmp_path / 'data'}",
                    "method=finetune", "setting=none", "backbone=mlp", "backbone.hidden_sizes=[16]", "method.epochs=1",
                    "checkpoint.enabled=false", "logger=none", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["num_tasks"] == 6 and len(metrics["acc"]) == 6
    assert [t["classes"] for t in metrics["tasks"]] == [sorted(np.flatnonzero(coarse_of == t).tolist())
                                                        for t in range(6)]
