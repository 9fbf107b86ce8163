"""data.residency: the same batches, so the same metrics, whether the images live on the device, on the host or in
the memory-mapped file `cl-bench data prepare` writes; auto's choice by size; one-line refusals."""
import json

import numpy as np
import pytest
import torch
from conftest import cl_bench, train

from cl_bench.data import prepared, residency, sources
from cl_bench.data.scenarios import Split

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

MODES = ("device", "host", "stream")
# Methods that read the data in every way a method can: batches (finetune), whole splits on the device
# (icarl's herding and class means), a split of several tasks (joint), a rehearsal memory written per step (er).
METHODS = (("finetune",), ("icarl", "scenario=class"), ("joint",), ("er",))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    proc = cl_bench("data", "prepare", "digits", "--root", str(root))
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.parametrize(("method", "extra"), [(m[0], m[1:]) for m in METHODS])
def test_every_residency_gives_the_metrics_of_device(method, extra, data_root, tmp_path):
    runs = {mode: train(tmp_path / mode, f"method={method}", *extra, "method.epochs=3", f"data.root={data_root}",
                        f"data.residency={mode}", "data.workers=1") for mode in MODES}
    for mode in MODES:
        assert f"data residency: {mode}" in (tmp_path / mode / "train.log").read_text()
    device = runs["device"]
    # It learned (chance: 0.5 on the task scenario's 2-way heads, at most 0.25 on average over the class
    # scenario's growing head): the comparison is between runs that did something.
    assert device["la"] > (0.4 if device["scenario"] == "class" else 0.75)
    for mode in ("host", "stream"):
        assert runs[mode]["acc"] == device["acc"] and runs[mode]["val_acc"] == device["val_acc"], mode


def test_the_prepared_file_holds_the_source_exactly(data_root):
    src = sources.load("digits", data_root)
    store = prepared.require(data_root, "digits")
    mapped = store.images("train")
    assert mapped.shape == tuple(src.train_x.shape)
    rows = torch.tensor([5, 0, 1436, 5])
    assert torch.equal(mapped.gather(rows), src.train_x[rows])
    assert torch.equal(store.images("test").load(), src.test_x)
    assert torch.equal(store.labels("train"), src.train_y)
    np.testing.assert_allclose(store.meta["mean"], src.mean, rtol=1e-6)
    np.testing.assert_allclose(store.meta["std"], src.std, rtol=1e-6)
    assert store.nbytes == src.train_x.nbytes + src.test_x.nbytes


def test_an_interrupted_prepare_is_not_taken_for_a_prepared_dataset(data_root, tmp_path):
    partial = prepared.Writer(tmp_path, "digits")
    partial.open_images("train", 3, (1, 8, 8))
    assert prepared.find(tmp_path, "digits") is None  # no meta.json: written last, it marks completion


def test_a_prepare_after_an_interrupted_one_starts_afresh(tmp_path):
    from cl_bench.data.prepare import prepare_stream
    partial = prepared.Writer(tmp_path, "digits")
    partial.open_images("train", 3, (3, 4, 4))  # another shape, from a run that was killed
    done = prepare_stream("digits", tmp_path)
    assert done.meta["train"] == 1437 and done.images("train").shape == (1437, 1, 8, 8)
    assert sorted(p.name for p in done.path.iterdir()) == ["meta.json", "test_x.npy", "test_y.npy", "train_x.npy",
                                                          "train_y.npy"]


def test_images_in_a_version_2_npy_read_alike(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (5, 3, 4, 4), dtype=np.uint8)
    with open(tmp_path / "train_x.npy", "wb") as f:  # numpy writes 2.0 where a header outgrows 1.0's 64 KiB
        np.lib.format.write_array(f, x, version=(2, 0))
    mapped = prepared.MappedImages(tmp_path / "train_x.npy")
    assert mapped.shape == x.shape and torch.equal(mapped.gather(np.array([4, 1])), torch.from_numpy(x[[4, 1]]))


@pytest.mark.parametrize("array", [np.zeros((2, 3, 4, 4), np.float32), np.zeros((2, 16), np.uint8),
                                   np.asfortranarray(np.zeros((2, 3, 4, 4), np.uint8))])
def test_a_prepared_file_of_other_images_says_prepare_again(tmp_path, array):
    from cl_bench.errors import UserError
    np.save(tmp_path / "train_x.npy", array)
    with pytest.raises(UserError, match=r"train_x\.npy: expected N×C×H×W uint8 images in C order; prepare the "
                                        r"dataset again"):
        prepared.MappedImages(tmp_path / "train_x.npy")


def test_off_device_splits_batch_as_device_splits(data_root):
    src = sources.from_prepared(prepared.require(data_root, "digits"), mapped=True)
    rows = torch.arange(100, 300)
    y, t = src.train_y[rows], torch.zeros(200, dtype=torch.long)
    on, off = Split(src.train_x.load()[rows], y, t), residency.OffDeviceSplit(src.train_x, rows, y, t, workers=2)
    for a, b in zip(on.batches(32, torch.Generator().manual_seed(3)), off.batches(32, torch.Generator().manual_seed(3)),
                    strict=True):
        assert all(torch.equal(u, v) for u, v in zip(a, b))
    # A pass inside another (a validation pass within an epoch) gets its own loader: both see their own batches.
    inner = [torch.cat([x for x, _, _ in off.batches(64)]) for _ in off.batches(100, torch.Generator().manual_seed(3))]
    assert len(inner) == 2 and all(torch.equal(x, on.x) for x in inner)
    assert off.images.loader is not None and not off.images.loader.busy  # kept for the next pass, free again
    both = Split.cat([off, off.sub(torch.tensor([0, 1]))])
    assert isinstance(both, residency.OffDeviceSplit) and len(both) == 202
    assert torch.equal(both.x, torch.cat([on.x, on.x[:2]]))


@pytest.mark.parametrize(("free", "streamable", "want"), [(10**9, True, "device"), (10**5, True, "stream"),
                                                          (10**5, False, "device")])
def test_auto_keeps_images_on_the_device_while_they_take_half_its_free_memory(monkeypatch, free, streamable, want):
    monkeypatch.setattr(residency, "free_bytes", lambda device: free)
    mode, why = residency.choose("auto", 10**5, torch.device("cpu"), streamable)
    assert mode == want and why.startswith("auto:")
    assert residency.choose("host", 10**12, torch.device("cpu"), False)[0] == "host"  # asked for: no second guess


def test_stream_without_a_prepared_file_names_the_command(tmp_path):
    proc = cl_bench("train", f"hydra.run.dir={tmp_path / 'run'}", "logger=none", f"data.root={tmp_path}",
                    "data.residency=stream", "debug=fast")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"run `cl-bench data prepare digits --root {tmp_path}` first" in proc.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_prepared_only_source_without_its_files_names_the_command(tmp_path):
    proc = cl_bench("train", f"hydra.run.dir={tmp_path / 'run'}", "logger=none", f"data.root={tmp_path}",
                    "dataset=split_tinyimagenet", "debug=fast")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cl-bench data prepare tinyimagenet --root" in proc.stderr


def test_the_prepared_meta_counts_the_splits_and_the_shape(data_root):
    meta = json.loads((data_root / "prepared" / "digits" / "meta.json").read_text())
    assert meta["train"] == 1437 and meta["test"] == 360 and meta["shape"] == [1, 8, 8]


def test_tiny_imagenet_and_an_imagenet_subset_from_their_folders_train_under_every_residency(tmp_path):
    from test_image_folders import imagenet_tree, tiny_tree
    root = tmp_path / "data"
    tiny = tiny_tree(tmp_path / "downloads")
    imagenet = imagenet_tree(tmp_path / "imagenet")
    (tmp_path / "classes.txt").write_text("n30\nn10\n")
    subset = ["--from", str(imagenet), "--classes", str(tmp_path / "classes.txt"), "--size", "32"]
    for args in (["tinyimagenet", "--from", str(tiny)], ["imagenet_subset", *subset]):
        proc = cl_bench("data", "prepare", *args, "--root", str(root), "--workers", "1")
        assert proc.returncode == 0 and "is ready" in proc.stdout, proc.stderr
    tiny_meta = prepared.require(root, "tinyimagenet").meta
    assert tiny_meta["shape"] == [3, 64, 64] and (tiny_meta["train"], tiny_meta["test"]) == (12, 6)
    assert prepared.require(root, "imagenet_subset").meta["classes"][0].startswith("n30")
    small = ("scenario=class", "backbone=convnet", "backbone.channels=[4]", "debug=fast", f"data.root={root}",
             "data.val_fraction=0.25")
    for dataset, tasks in (("split_tinyimagenet", 3), ("split_imagenet_subset", 2)):
        runs = [train(tmp_path / f"{dataset}-{mode}", f"dataset={dataset}", f"dataset.num_tasks={tasks}", *small,
                      f"data.residency={mode}") for mode in ("device", "stream")]
        assert runs[0]["num_tasks"] == tasks and runs[0]["acc"] == runs[1]["acc"], dataset
