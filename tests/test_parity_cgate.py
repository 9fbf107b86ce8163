"""The cgate parity runner: the split it writes is cl-bench's, in files torchvision's CIFAR10 reads, and the
matrix cgate prints parses into cl-bench's layout. No reference checkout or real data needed."""
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from parity import cgate, common  # noqa: E402

PER_CLASS = {"train": 13, "test": 7}  # odd sizes, so that the caps and the held-out share leave uneven splits


def write_cifar10(root: Path) -> None:
    """Small canonical cifar-10-batches-py files (bytes keys, as the published ones), every class present."""
    rng = np.random.default_rng(0)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    names = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
    for split, files in names.items():
        labels = rng.permutation(np.repeat(np.arange(10), PER_CLASS[split]))
        for name, part in zip(files, np.array_split(labels, len(files))):
            images = rng.integers(0, 256, (len(part), 3072), dtype=np.uint8)
            (folder / name).write_bytes(pickle.dumps({b"data": images, b"labels": part.tolist()}, protocol=3))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    write_cifar10(root)
    row = cgate.ROWS["gated_task"]
    return common.scenario([*common.clbench_overrides(row, 3, str(root)), "data.cache=false",
                            "dataset.samples_per_task=20", "dataset.test_samples_per_task=11"])


@pytest.fixture
def written(scenario, tmp_path):
    cgate.write_tasks(scenario, cgate.ROWS["gated_task"], tmp_path)
    return tmp_path


def test_written_split_reads_back_as_cl_benchs(scenario, written):
    back = cgate.read_tasks(written)
    assert len(back) == len(scenario.tasks) == 5
    for task, test, got in zip(scenario.tasks, scenario.test, back):
        for name, split in (("train", task.train), ("val", task.val), ("test", test)):
            x, y = got[name]
            assert len(y) > 0
            np.testing.assert_array_equal(x, split.x.cpu().numpy(), err_msg=f"task {task.id} {name}")
            np.testing.assert_array_equal(y, split.y.cpu().numpy(), err_msg=f"task {task.id} {name}")


def test_torchvision_reads_the_files_as_cgate_does(scenario, written, monkeypatch):
    """cgate opens them with torchvision's CIFAR10; the PATCHES only skip its checksums."""
    cifar = pytest.importorskip("torchvision.datasets.cifar")
    monkeypatch.setattr(cifar, "check_integrity", lambda *args, **kwargs: True)
    train = cifar.CIFAR10(written, train=True)
    test = cifar.CIFAR10(written, train=False)
    sizes = {name: sum(len(getattr(t, name)) for t in scenario.tasks) for name in ("train", "val")}
    assert len(train.targets) == sizes["train"] + sizes["val"]
    assert len(test.targets) == sum(len(s) for s in scenario.test)
    held = np.load(written / cgate.HELDOUT)
    np.testing.assert_array_equal(held, np.arange(sizes["train"], sizes["train"] + sizes["val"]))
    first = scenario.tasks[0].train.x[0].cpu().numpy().transpose(1, 2, 0)  # torchvision keeps images H x W x C
    np.testing.assert_array_equal(train.data[0], first)


def test_task_pairs_name_each_tasks_classes(written):
    assert cgate.task_pairs(written) == "TASK_PAIRS=[(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]"


# What cgate's src/train.py prints at its end (tqdm's bars before it), as captured from a run.
CAPTURED = """\
  0%|          | 0/4 [00:00<?, ?it/s] 25%|##5       | 1/4 [00:05<00:15,  5.04s/it]100%|##########| 4/4
Files already downloaded and verified

---- Task incremental accuracies ----
tensor([[0.9062, 0.9043, 0.9043],
        [0.0000, 0.7500, 0.7480],
        [0.0000, 0.0000, 8.1250e-01]])
"""


def test_printed_matrix_parses_into_cl_benchs_layout():
    outcome = cgate.parse_accuracies(CAPTURED)
    assert outcome.matrix == [[0.9062], [0.9043, 0.75], [0.9043, 0.748, 0.8125]]
    assert outcome.ra == pytest.approx((0.9043 + 0.748 + 0.8125) / 3)


def test_missing_matrix_is_an_error():
    with pytest.raises(SystemExit, match="Task incremental accuracies"):
        cgate.parse_accuracies("Traceback (most recent call last):\n")


def test_patches_say_why_and_name_one_place_each():
    places = [(p.file, p.old) for p in cgate.PATCHES]
    assert len(set(places)) == len(places)
    assert all(p.why and p.old != p.new for p in cgate.PATCHES)


def test_the_rows_task_norms_are_cgates_batch_norms():
    """cgate builds nn.BatchNorm2d(num_channels, affine, track_running_stats) (src/freezable_layers.py:23), which
    makes eps and momentum True, that is 1.0; the row's overrides give cl-bench's per-task norms the same, and
    without them the backbone's stay."""
    import torch

    from cl_bench import api
    reference = torch.nn.BatchNorm2d(8, True, True)
    overrides = [o for o in cgate.ROWS["gated_task"].clbench if o.startswith("method.")]
    small = ["dataset=split_digits", "backbone=convnet", "backbone.channels=[8,16]", "scenario=task"]
    row = api.build(api.compose("method=gated", *small, *overrides)).method
    default = api.build(api.compose("method=gated", *small)).method
    for method, (eps, momentum) in ((row, (reference.eps, reference.momentum)), (default, (1e-5, 0.1))):
        norms = [bn for norm in method.norms for bn in norm.bns]
        assert norms and all(bn.eps == eps and bn.momentum == momentum for bn in norms)
