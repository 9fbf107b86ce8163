"""The HAT parity runner (scripts/parity/hat.py) without its reference checkout or real MNIST: the tasks it writes
read back as cl-bench's split, its patched loader reads them, and what HAT prints and saves parses."""
import os
import sys
from pathlib import Path

import pytest
import torch
from test_sources import write_idx_dataset

from cl_bench import config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from parity import common, hat  # noqa: E402

# What run.py printed for two tasks (src/run.py's per-task test lines and final table), shortened.
PRINTED = """\
Task  0 (split_mnist-0)
  0.429  | Epoch   1, time= 34.3ms/  9.0ms | Train: loss=0.416, acc= 97.0% |  0.429   Valid: loss=0.422, acc= 96.6% | *
  0.000  >>> Test on task  0 - split_mnist-0  : loss=0.077, acc= 97.7% <<<
Save at acc.txt
Task  1 (split_mnist-1)
  0.410  | Epoch   1, time= 34.2ms/ 13.9ms | Train: loss=0.453, acc= 95.2% |  0.410   Valid: loss=0.453, acc= 95.2% | *
  0.000  >>> Test on task  0 - split_mnist-0  : loss=0.077, acc= 97.5% <<<
  0.000  >>> Test on task  1 - split_mnist-1  : loss=0.155, acc=100.0% <<<
Accuracies =
\t 97.7%   0.0%
\t 97.5% 100.0%
"""
SAVED = "0.9771 0.0000\n0.9754 1.0000\n"


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_idx_dataset(root / "MNIST/raw")
    return root


def scenario_of(row: str, root: Path):
    return common.scenario([*common.clbench_overrides(hat.ROWS[row], 0, str(root)), "data.cache=false"])


@pytest.mark.parametrize("row", sorted(hat.ROWS))
def test_written_tasks_read_back_as_clbench_split(row, mnist_root, tmp_path):
    scenario = scenario_of(row, mnist_root)
    hat.write_tasks(scenario, hat.ROWS[row], tmp_path)
    back = hat.read_tasks(tmp_path)
    assert len(back) == len(scenario.tasks)
    for task, test, written in zip(scenario.tasks, scenario.test, back):
        for name, split in (("train", task.train), ("val", task.val), ("test", test)):
            x, y = written[name]
            assert x.dtype == torch.uint8 and torch.equal(x, split.x), (task.id, name)
            assert torch.equal(y, split.y), (task.id, name)


def test_written_tasks_are_what_hat_feeds_its_net(mnist_root, tmp_path):
    """HAT's own pipeline: ToTensor (x/255), Normalize(0.1307, 0.3081); labels from 0 within each task."""
    scenario = scenario_of("hat_mnist2", mnist_root)
    hat.write_tasks(scenario, hat.ROWS["hat_mnist2"], tmp_path)
    task = scenario.tasks[1]
    x = torch.load(tmp_path / "data1trainx.bin")
    y = torch.load(tmp_path / "data1trainy.bin")
    assert x.dtype == torch.float32 and x.shape == task.train.x.shape
    assert torch.allclose(x, (task.train.x.float() / 255 - 0.1307) / 0.3081)
    assert y.dtype == torch.int64 and torch.equal(y, task.train.y - task.offset) and int(y.min()) >= 0


def test_patched_loader_reads_the_written_tasks(mnist_root, tmp_path, monkeypatch):
    """The reader the patches put into HAT's dataloaders (the same in both, read where hat.ENV is set), run on its
    own: get()'s data, taskcla and size."""
    scenario = scenario_of("hat_mnist2", mnist_root)
    hat.write_tasks(scenario, hat.ROWS["hat_mnist2"], tmp_path)
    space = {"os": os, "torch": torch}
    readers = [p.new.split(p.old)[0] for p in hat.PATCHES if "dataloaders" in p.file]
    assert len(readers) == 2 and readers[0] == readers[1] and all(hat.ENV in p.new for p in hat.PATCHES[-2:])
    exec(readers[0], space)
    data, taskcla, size = space["parity_tasks"](str(tmp_path))
    assert taskcla == [(0, 5), (1, 5)] and data["ncla"] == 10 and size == [1, 6, 5]
    for t, task in enumerate(scenario.tasks):
        assert set(data[t]) == {"name", "ncla", "train", "valid", "test"}
        assert len(data[t]["valid"]["y"]) == len(task.val) and len(data[t]["train"]["y"]) == len(task.train)


def test_patches_keep_the_text_they_replace():
    """Every patch adds to the reference's line rather than rewriting it (its learning code is left alone)."""
    for patch in hat.PATCHES:
        assert patch.why and patch.old.strip()
        if "dataloaders" in patch.file or "approaches" in patch.file:
            assert patch.old in patch.new, patch.file


def test_parses_saved_and_printed_accuracies():
    assert hat.saved_matrix(SAVED) == [[0.9771], [0.9754, 1.0]]
    rows = hat.printed_matrix(PRINTED)
    assert [len(r) for r in rows] == [1, 2]
    assert sum(rows, []) == pytest.approx([0.977, 0.975, 1.0])


def test_rows_compose():
    for row in hat.ROWS.values():
        cfg = config.compose(common.clbench_overrides(row, 0))
        assert cfg.method.name == "hat" and cfg.scenario == "task" and list(cfg.backbone.hidden_sizes) == [2000, 2000]
        assert cfg.method.epochs == hat.EPOCHS and str(hat.EPOCHS) in row.reference
