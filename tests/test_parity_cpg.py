"""The ivclab/CPG parity runner (scripts/parity/cpg.py) without the reference or real data: the tasks it writes
read back as exactly cl-bench's split, what it parses from the reference's output, and that both sides run the
same cut."""
import json
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from parity import common, cpg  # noqa: E402


def write_cifar10(root: Path, per_class: int = 6, test_per_class: int = 4) -> None:
    """Small canonical cifar-10-batches-py files: random pixels, every class in every batch."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        count = 10 * (test_per_class if name == "test_batch" else per_class)
        x = rng.integers(0, 256, (count, 3 * 32 * 32), dtype=np.uint8)
        batch = {b"batch_label": name.encode(), b"data": x, b"labels": [i % 10 for i in range(count)],
                 b"filenames": [f"{i}.png".encode() for i in range(count)]}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=3))


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_cifar10(root)
    return common.scenario(common.clbench_overrides(cpg.ROWS["cpg"], 0, str(root)))


def test_written_tasks_read_back_as_the_split(split, tmp_path):
    cpg.write_tasks(split, cpg.ROWS["cpg"], tmp_path)
    tasks = cpg.read_tasks(tmp_path)
    assert len(tasks) == len(split.tasks) == cpg.TASKS
    for t, task in enumerate(split.tasks):
        for part, got in (("train", task.train), ("test", split.test[t])):
            x, y = tasks[t][part]
            assert np.array_equal(x, got.x.cpu().numpy())
            assert y.tolist() == (got.y - task.offset).tolist()
            assert sorted(set(y.tolist())) == list(range(cpg.CLASSES))


def test_written_statistics_and_goals(split, tmp_path):
    from cl_bench.data.batches import channel_stats
    cpg.write_tasks(split, cpg.ROWS["cpg"], tmp_path)
    stats = json.loads((tmp_path / "stats.json").read_text())
    goals = json.loads((tmp_path / "goals.json").read_text())
    for t, task in enumerate(split.tasks):
        mean, std = channel_stats(task.train.x)
        assert stats[f"task{t}"] == {"mean": mean, "std": std}
        assert goals[f"task{t}"] == cpg.GOAL
    # cl-bench normalises each task with the same statistics under protocol=official: shift row t is -mean/std
    shift = split.info.view.shift.reshape(len(split.tasks), -1).cpu()
    for t in range(len(split.tasks)):
        expected = -torch.tensor(stats[f"task{t}"]["mean"]) / torch.tensor(stats[f"task{t}"]["std"])
        assert torch.allclose(shift[t].float(), expected, atol=1e-5)


CPG_OUTPUT = """2026-12-02 08:38:09,419 - root - INFO - In validate()-> Val Ep. #1 loss: 0.694, accuracy: 49.00, \
sparsity: 0.000, task1 ratio: 1.000, zero ratio: 0.000, mpl: 1.0
Val Ep. #1:  50%|#####     | 1/2 [00:01<00:01,  1.18s/it, loss=0.429, accuracy=78.00, sparsity=0, mpl=1]
Val Ep. #1: 100%|##########| 2/2 [00:02<00:00,  1.20s/it, loss=0.474, accuracy=49.00, sparsity=0, mpl=1]
"""
PACKNET_OUTPUT = """Validate Epoch  #3:  50%|#####     | 1/2 [00:01<00:01, loss=0.41, accuracy=81.00, sparsity=0.6]
Validate Epoch  #3: 100%|##########| 2/2 [00:02<00:00, loss=0.43, accuracy=79.50, sparsity=0.6]
"""


def test_parses_the_last_printed_accuracy():
    assert cpg.parse_accuracy(CPG_OUTPUT) == pytest.approx(0.49)
    assert cpg.parse_accuracy(PACKNET_OUTPUT) == pytest.approx(0.795)
    with pytest.raises(ValueError):
        cpg.parse_accuracy("Traceback (most recent call last):")


@pytest.mark.parametrize("name", sorted(cpg.ROWS))
def test_both_sides_run_the_same_cut(name):
    from cl_bench import config
    row = cpg.ROWS[name]
    cfg = config.compose(common.clbench_overrides(row, 0))
    ref = cpg.settings(row)
    assert cfg.method.protocol == "official" and cfg.backbone.name == "vgg16_bn"
    assert (cfg.dataset.num_tasks, cfg.dataset.classes_per_task) == (cpg.TASKS, cpg.CLASSES)
    assert cfg.method.epochs == int(ref["epochs"])
    if ref["program"] == "cpg":
        assert list(cfg.method.prune_targets) == [float(v) for v in ref["prune_targets"].split(",")]
        assert cfg.method.prune_epochs == int(ref["prune_epochs"])
        assert cfg.method.prune_ramp_epochs == int(ref["pruning_interval"])
        assert cfg.method.prune_frequency == int(ref["pruning_frequency"])
        assert cfg.method.retrain_epochs == int(ref["retrain_epochs"])
        assert cfg.method.train_acc_bar == float(ref["train_acc_bar"])
        assert cfg.method.goal == float(ref["goal"]) and cfg.method.max_multiplier == float(ref["max_multiplier"])
        assert cfg.method.picking == (float(ref["lr_mask"]) > 0) == (ref["refit"] == "true")
    else:
        assert cfg.method.prune_ratio == float(ref["one_shot_prune_perc"])
        assert cfg.method.retrain_epochs == int(ref["retrain_epochs"])


def test_patches_are_distinct_and_explained():
    keys = [(p.file, p.old) for p in cpg.PATCHES]
    assert len(set(keys)) == len(keys) and all(p.why for p in cpg.PATCHES)


FAKE_PYTHON = """#!/bin/sh
# Stands in for the reference's interpreter: records each call, asks once for growth, prints an accuracy.
echo "$*" >> calls.txt
case "$*" in
  *"--mode finetune"*) if [ ! -e grown ]; then touch grown; exit 2; fi ;;
esac
echo "In validate()-> Val Ep. #1 loss: 0.5, accuracy: 61.50"
"""


def test_reference_phases_run_in_the_scripts_order(tmp_path):
    """The CPG sequence per task against a stand-in interpreter: growth retried at the next width, both
    sparsity targets, the choosing tool, the refit from the second task on, then every learned task evaluated."""
    copy, data = tmp_path / "ref", tmp_path / "tasks"
    (copy / "data").mkdir(parents=True)
    for t in range(3):
        for c in range(cpg.CLASSES):
            (data / "train" / f"task{t}" / cpg.class_folder(c)).mkdir(parents=True)
    (data / "goals.json").write_text("{}")
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    outcome = cpg.run_reference(copy, cpg.ROWS["cpg"], 0, data, str(python))
    assert outcome.ra == pytest.approx(0.615) and [len(r) for r in outcome.matrix] == [1, 2, 3]
    calls = (copy / "calls.txt").read_text().splitlines()
    mains = [c for c in calls if "--mode" in c]
    assert "--network_width_multiplier 1.0" in mains[0] and "--network_width_multiplier 1.5" in mains[1]
    assert sum("--finetune_again" in c for c in calls) == 2  # tasks 1 and 2
    assert sum("--mode prune" in c for c in calls) == 3 * len(cpg.PRUNE_TARGETS)
    assert sum("--mode inference" in c for c in calls) == 6
    assert sum("choose_appropriate" in c for c in calls) == 3 and sum("choose_retrain" in c for c in calls) == 2
    assert all("--seed 0" in c for c in mains)
