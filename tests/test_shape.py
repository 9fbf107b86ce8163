"""debug=shape: paper settings at their real shape (every task, phase, target and round) with each phase cut to one
epoch of one batch, and the bounds that follow from each setting: state and checkpoints within a small multiple of
the network plus masks and memory, nothing that grows with the number of snapshots (phases) or goal chains.

The VGG16-BN / ResNet-18 settings are marked `shape` and deselected by default (`-m shape` runs them: minutes
each on a CPU); their data is written here in the canonical formats, random pixels at the real sizes."""
import json
import pickle

import numpy as np
import pytest
from conftest import train
from test_settings import setting_command
from test_sources import write_idx, write_svhn

from cl_bench import settings

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

PAE_DIGITS = ("experiment=cpg_split_digits", "method.picking=false", "method.goal_source=finetune")


def shape_run(run_dir, *overrides) -> dict:
    metrics = train(run_dir, *overrides, "debug=shape", "hardware.threads=1", "checkpoint.keep=all")
    assert metrics["complete"]
    return metrics


def phases(metrics) -> list[list[str]]:
    return [[p["name"] for p in task["phases"]] for task in metrics["shape"]["tasks"]]


def test_shape_records_every_phase_capped_and_the_sizes(tmp_path):
    m = shape_run(tmp_path / "cpg", "experiment=cpg_split_digits")
    shape, num_tasks = m["shape"], m["num_tasks"]
    assert shape["phase_cap"] == {"epochs": 1, "batches": 1}
    assert shape["peak_rss_mb"] > 0 and shape["peak_device_mb"] is None  # on a CPU
    targets = [f"prune_{t}" for t in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)]
    for t, names in enumerate(phases(m)):  # one batch measures no accuracy: every target still runs
        assert names[0] == "goal" and names[1] == "train" and [n for n in names if n.startswith("prune")] == targets
        assert ("refit" in names) == (t > 0)  # the picking refit, from the second task on
    assert "grow_1.5x" in phases(m)[0]
    for task in shape["tasks"]:
        assert {"learn_s", "eval_s", "checkpoint_s"} <= task.keys() and all(p["s"] >= 0 for p in task["phases"])
    events = [json.loads(line) for line in (tmp_path / "cpg" / "events.jsonl").read_text().splitlines()]
    assert all(e["epoch"] == 0 for e in events if e["event"] == "epoch_end")  # one epoch per phase
    written = shape["checkpoint_bytes_per_task"]
    assert len(written) == num_tasks and shape["checkpoint_bytes_written"] == sum(written)
    assert shape["checkpoint_bytes_kept"] >= sum(written)  # keep=all, plus `last`
    # the state: the (grown) network, its per-task heads and batch norms, and its masks (a byte per weight each)
    assert shape["state_bytes"] <= 2 * shape["network_bytes"] + num_tasks * shape["network_bytes"] // 4
    assert max(written) <= 1.05 * shape["state_bytes"] + 16_384 and shape["side_state_bytes"] == 0


def test_nothing_grows_with_the_number_of_phases_or_goal_chains(tmp_path):
    """Snapshots (one per compaction target) and PAE's fine-tune goal chains stay out of the state and the
    checkpoints: the same bytes with 1 or 10 targets, and with 1 or 5 chains; the chains are side files."""
    sizes = {}
    for name, extra in [("ten_targets", ()), ("one_target", ("method.prune_targets=[0.5]",)),
                        ("pae1", (*PAE_DIGITS, "method.goal_repeats=1")),
                        ("pae5", (*PAE_DIGITS, "method.goal_repeats=5"))]:
        extra = extra if name.startswith("pae") else ("experiment=cpg_split_digits", *extra)
        shape = shape_run(tmp_path / name, *extra)["shape"]
        sizes[name] = shape
    for a, b in [("ten_targets", "one_target"), ("pae1", "pae5")]:
        assert sizes[a]["state_bytes"] == sizes[b]["state_bytes"]
        for x, y in zip(sizes[a]["checkpoint_bytes_per_task"], sizes[b]["checkpoint_bytes_per_task"], strict=True):
            assert abs(x - y) < 4096  # meta.json's numbers differ, not the tensors
    # every chain's goal network of every task but the last, in fp32: convnet's floats (network_bytes minus the
    # batch norms' step counters) per file, plus safetensors' header
    side = tmp_path / "pae5" / "side"
    files = sorted(p.relative_to(side).as_posix() for p in side.rglob("*.safetensors"))
    num_tasks = 5
    assert files == [f"task_{t:03d}/cpg_goal_chain{c}.safetensors" for t in range(num_tasks - 1) for c in range(5)]
    assert sizes["pae5"]["side_state_bytes"] == sum(p.stat().st_size for p in side.rglob("*") if p.is_file())


@pytest.mark.parametrize("preset", [("experiment=nccl_split_digits",),
                                    ("experiment=gated_split_digits", "scenario=class")],
                         ids=["nccl", "gated-class"])
def test_online_and_gated_phases_are_capped_and_bounded(tmp_path, preset):
    m = shape_run(tmp_path / "run", *preset)
    shape, memory = m["shape"], m["capacity"].get("memory_bytes", 0)
    names = phases(m)
    if "nccl" in preset[0]:
        assert names == [["stream"]] * m["num_tasks"]
    else:  # gated: the path of each task, and the joint task classifier trained with it
        assert all(n and set(n) <= {"train", "task_classifier"} for n in names)
    assert shape["state_bytes"] <= 4 * shape["network_bytes"] + 2 * memory + m["num_tasks"] * shape["network_bytes"]
    assert max(shape["checkpoint_bytes_per_task"]) <= 1.05 * shape["state_bytes"] + 16_384


def test_permuted_mnist_nccl_at_its_shape(tmp_path):
    """GEM's permuted MNIST (20 tasks) with NCCL: 60,000 random 28×28 training images in MNIST's IDX files."""
    rng = np.random.default_rng(0)
    raw = tmp_path / "data" / "MNIST" / "raw"
    for stem, count in (("train", 60_000), ("t10k", 10_000)):
        write_idx(raw / f"{stem}-images-idx3-ubyte", rng.integers(0, 256, (count, 28, 28), dtype=np.uint8))
        write_idx(raw / f"{stem}-labels-idx1-ubyte", (np.arange(count) % 10).astype(np.uint8))
    m = shape_run(tmp_path / "run", "method=nccl", "dataset=permuted_mnist", f"data.root={tmp_path / 'data'}",
                  "data.cache=false")
    shape = m["shape"]
    assert m["num_tasks"] == 20 and phases(m) == [["stream"]] * 20
    assert shape["state_bytes"] <= 4 * shape["network_bytes"] + 2 * m["capacity"]["memory_bytes"]
    assert max(shape["checkpoint_bytes_per_task"]) <= 1.05 * shape["state_bytes"] + 16_384


# --- the paper settings at full size (pytest -m shape) ----------------------------------------------------------
def write_cifar100(root, train=50_000, test=10_000) -> None:
    """cifar-100-python/{train,test} as CIFAR's own pickles: random pixels, fine labels balanced, coarse = fine % 20
    (5 fine classes each)."""
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, count in (("train", train), ("test", test)):
        fine = np.arange(count) % 100
        batch = {b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8), b"fine_labels": fine.tolist(),
                 b"coarse_labels": (fine % 20).tolist(), b"filenames": [b"x.png"] * count}
        (folder / split).write_bytes(pickle.dumps(batch, protocol=3))


def write_cifar10(root, train=50_000, test=10_000) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name, count in zip(names, [train // 5] * 5 + [test], strict=True):
        batch = {b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
                 b"labels": (np.arange(count) % 10).tolist(), b"filenames": [b"x.png"] * count}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=3))


def write_mnist(root, train=60_000, test=10_000) -> None:
    rng = np.random.default_rng(0)
    for stem, count in (("train", train), ("t10k", test)):
        write_idx(root / "MNIST" / "raw" / f"{stem}-images-idx3-ubyte",
                  rng.integers(0, 256, (count, 28, 28), dtype=np.uint8))
        write_idx(root / "MNIST" / "raw" / f"{stem}-labels-idx1-ubyte", (np.arange(count) % 10).astype(np.uint8))


def write_svhn_files(root, train=73_257, test=26_032) -> None:
    rng = np.random.default_rng(0)
    for split, count in (("train", train), ("test", test)):
        write_svhn(root, split, rng.integers(0, 256, (count, 3, 32, 32), dtype=np.uint8), np.arange(count) % 10)


# Every packaged paper setting, composed as a user picks it (its pair, or setting=NAME); the CIFAR and SVHN ones
# take minutes each on a CPU (VGG16-BN, ResNet-18), the MNIST ones seconds to a minute.
PAPER = {name: tuple(setting_command(name)) for name in settings.available()}


@pytest.mark.shape
@pytest.mark.parametrize("name", sorted(PAPER))
def test_paper_setting_at_its_shape(tmp_path_factory, name):
    data = tmp_path_factory.getbasetemp() / "paper-data"
    if not data.exists():
        write_cifar100(data)
        write_cifar10(data)
        write_mnist(data)
        write_svhn_files(data)
    run = tmp_path_factory.mktemp(name)
    m = train(run, *PAPER[name], "debug=shape", f"data.root={data}", "data.cache=false", "hardware.threads=2",
              "checkpoint.keep=1")
    shape, memory = m["shape"], m["capacity"].get("memory_bytes", 0)
    assert m["complete"]
    # the (grown) network with its masks and per-task parts, and the memory: nothing per snapshot or goal chain
    assert shape["state_bytes"] <= 4 * shape["network_bytes"] + 2 * memory
    # meta.json carries the accuracy matrices, tasks² numbers (100 tasks: most of a checkpoint of the 2×100 MLP)
    matrices = len(json.dumps([m["acc"], m["val_acc"], m.get("task_aware_acc")]))
    assert max(shape["checkpoint_bytes_per_task"]) <= 1.05 * shape["state_bytes"] + 2 * matrices + 65_536
    assert shape["checkpoint_bytes_kept"] <= 1.05 * max(shape["checkpoint_bytes_per_task"]) + 4096  # keep=1
    if name.startswith("pae"):  # 5 chains × 19 tasks of VGG16-BN's goal networks, on disk beside the checkpoints
        assert len(list((run / "side").rglob("*.safetensors"))) == 5 * 19 and shape["side_state_bytes"] > 0


def test_the_shape_line_of_a_task_and_of_the_run():
    from cl_bench import shape
    section = {"peak_rss_mb": 812.4, "peak_device_mb": None, "state_bytes": 3 * 2**20, "side_state_bytes": 0,
               "checkpoint_bytes_kept": 6 * 2**20, "checkpoint_bytes_written": 9 * 2**20,
               "tasks": [{"id": 0, "phases": [{"name": "train", "s": 1.234}, {"name": "prune_0.5", "s": 0.5}]}]}
    sizes = "peak RSS 812 MB; state 3.0 MB, side 0.0 MB, checkpoints kept 6.0 MB of 9.0 MB written"
    assert shape.summary(section, 0) == f"shape, task 0: 2 phases (train 1.23s, prune_0.5 0.50s); {sizes}"
    assert shape.summary(section) == f"shape: {sizes}"  # the run's end: its totals
    assert shape.summary(section, 1) == f"shape: {sizes}"  # a task not recorded (yet): the sizes alone
    assert shape.summary({**section, "peak_device_mb": 2048.0}).startswith("shape: peak RSS 812 MB, device 2048 MB; ")
