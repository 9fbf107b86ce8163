"""The Mammoth parity runner (scripts/parity/mammoth.py) without Mammoth: the split it writes reads back as
cl-bench's, and what Mammoth prints parses into the record."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from parity import common, mammoth  # noqa: E402


def write_idx_dataset(raw: Path) -> None:
    """MNIST's four canonical files, small: 20 train and 10 test images of 6x5 (non-square: swapped axes show),
    two of each digit in train, one in test."""
    rng = np.random.default_rng(0)
    raw.mkdir(parents=True)
    for split, count in (("train", 20), ("t10k", 10)):
        common.write_idx(raw / f"{split}-images-idx3-ubyte", rng.integers(0, 256, (count, 6, 5), dtype=np.uint8))
        common.write_idx(raw / f"{split}-labels-idx1-ubyte", (np.arange(count) % 10).astype(np.uint8))


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """cl-bench's split_mnist over small idx files (20 train, 10 test images of 6x5), and its files for Mammoth."""
    root = tmp_path_factory.mktemp("data")
    write_idx_dataset(root / "MNIST" / "raw")
    row = mammoth.ROWS["er_200"]
    scenario = common.scenario([*common.clbench_overrides(row, 3, str(root)), "data.val_fraction=0.25",
                                "data.cache=false"])
    folder = tmp_path_factory.mktemp("mammoth")
    mammoth.write_tasks(scenario, row, folder)
    return scenario, folder


def digits_of(splits, tasks):
    return torch.cat([torch.tensor(task.classes)[s.y - task.offset] for s, task in zip(splits, tasks)])


def test_written_split_reads_back_as_clbench(split):
    scenario, folder = split
    source = mammoth.read_tasks(folder)
    tasks = scenario.tasks
    assert torch.equal(source.train_x, torch.cat([t.train.x for t in tasks]))
    assert torch.equal(source.train_y, digits_of([t.train for t in tasks], tasks))
    assert torch.equal(source.test_x, torch.cat([s.x for s in scenario.test]))
    assert torch.equal(source.test_y, digits_of(scenario.test, tasks))
    held_out = sum(len(t.val) for t in tasks)
    assert held_out > 0 and len(source.train_y) == 20 - held_out  # the validation samples stay out of training


def test_mammoth_finds_the_files_where_torchvision_looks(split):
    _, folder = split
    for name in ("MNIST", "MyMNIST"):  # seq-mnist's train set is a subclass of torchvision's MNIST
        raw = folder / "MNIST" / name / "raw"
        assert sorted(p.name for p in raw.iterdir()) == sorted(common.IDX.values())


def test_tasks_out_of_seq_mnist_order_are_refused(tmp_path):
    write_idx_dataset(tmp_path / "MNIST" / "raw")
    scenario = common.scenario(["method=er", "dataset=split_mnist", f"data.root={tmp_path}", "data.cache=false",
                                "dataset.class_order=[2,3,0,1,4,5,6,7,8,9]"])
    with pytest.raises(ValueError, match="seq-mnist"):
        mammoth.write_tasks(scenario, mammoth.ROWS["er_200"], tmp_path / "out")


# What Mammoth prints (stderr, then the same through logging) after each task, shortened to three tasks.
PRINTED = """\
Accuracy for 1 task(s): \t [Class-IL]: 99.95 % \t [Task-IL]: 99.95 %
[INFO] 02-Dec-26 08:43:34 - Accuracy for 1 task(s): \t [Class-IL]: 99.95 % \t [Task-IL]: 99.95 %
\tRaw accuracy values: Class-IL [99.95271867612293] | Task-IL [99.95271867612293]
[INFO] 02-Dec-26 08:43:34 - \tRaw accuracy values: Class-IL [99.95271867612293] | Task-IL [99.95271867612293]
Accuracy for 2 task(s): \t [Class-IL]: 95.92 % \t [Task-IL]: 97.65 %
\tRaw accuracy values: Class-IL [96.6903073286052, 95.15181194906954] | Task-IL [99.76359338061465, 95.5435847208619]
Accuracy for 3 task(s): \t [Class-IL]: 91.0 % \t [Task-IL]: 97.6 %
\tRaw accuracy values: Class-IL [np.float64(94.18439716312056), np.float64(80.80313418217435), 98.02561366061899] \
| Task-IL [99.81087470449172, 94.17238001958864, 98.82604055496265]
[INFO] 02-Dec-26 08:43:53 - \tRaw accuracy values: Class-IL [94.18439716312056, 80.80313418217435, \
98.02561366061899] | Task-IL [99.81087470449172, 94.17238001958864, 98.82604055496265]
"""


def test_parse_reads_the_class_il_matrix():
    outcome = mammoth.parse(PRINTED)
    assert [len(r) for r in outcome.matrix] == [1, 2, 3]
    assert outcome.matrix[1] == pytest.approx([0.966903073286052, 0.9515181194906954])
    assert outcome.ra == pytest.approx(np.mean([0.9418439716312056, 0.8080313418217435, 0.9802561366061899]))


def test_parse_refuses_output_without_accuracies():
    with pytest.raises(ValueError, match="Raw accuracy"):
        mammoth.parse("Traceback (most recent call last):\n")


def test_parse_checks_the_printed_mean():
    with pytest.raises(ValueError, match="disagrees"):
        mammoth.parse(PRINTED.replace("[Class-IL]: 91.0 %", "[Class-IL]: 92.0 %"))


def test_rows_cover_every_method_at_both_buffers():
    methods = ("er", "agem", "der", "derpp", "er_ace", "icarl", "gdumb")
    assert set(mammoth.ROWS) == {f"{m}_{b}" for m in methods for b in (200, 500)}
    for name, row in mammoth.ROWS.items():
        memory = name.rsplit("_", 1)[1]
        assert f"method.memory_size={memory}" in row.clbench and f"--buffer_size={memory}" in row.reference
        assert "--dataset=seq-mnist" in row.reference


def test_command_runs_mammoth_with_its_own_arguments(tmp_path):
    command = mammoth.command(mammoth.ROWS["der_500"], 4, tmp_path, "python")
    assert command[:2] == ["python", "main.py"]
    assert f"--base_path={tmp_path}/" in command and "--seed=4" in command and "--load_best_args" in command


def test_best_arguments_replace_every_placeholder():
    """The zeros that get past Mammoth's first parse are all among its seq-mnist best arguments (values copied
    from utils/best_args.py at the pinned commit for this check), so none of them reaches training."""
    best_keys = {"er": {"lr"}, "agem": {"lr"}, "der": {"lr", "alpha"}, "derpp": {"lr", "alpha", "beta"},
                 "icarl": {"lr"}}
    for name, row in mammoth.ROWS.items():
        if "--load_best_args" not in row.reference:
            continue
        model = name.rsplit("_", 1)[0]
        zeros = {a[2:-2] for a in row.reference if a.endswith("=0") and a != "--opt_wd=0"}
        assert zeros <= best_keys[model], name
