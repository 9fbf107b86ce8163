"""The cache of decoded datasets (cl_bench/data/cache.py): a hit returns exactly what the readers return, a
changed or damaged file is never served from it, and a cache that cannot be written costs nothing but time."""
import json
import os

import pytest
import torch
from conftest import real_data, train
from test_sources import write_cifar100, write_idx, write_idx_dataset

from cl_bench.data import cache, sources
from cl_bench.errors import UserError

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CL_BENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def same_source(a: sources.Source, b: sources.Source) -> None:
    assert a.name == b.name and a.mean == b.mean and a.std == b.std
    for key in cache.TENSORS:
        x, y = getattr(a, key), getattr(b, key)
        assert (x is None) == (y is None), key
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), key


def refuse_to_read(monkeypatch):
    def fail(name, paths):
        raise AssertionError("the dataset files were decoded although the cache holds them")
    monkeypatch.setattr(sources, "_read", fail)


def test_a_hit_is_exactly_the_readers_output(tmp_path, cache_dir, monkeypatch):
    write_idx_dataset(tmp_path / "MNIST/raw", ".gz")
    uncached = sources.load("mnist", tmp_path)
    first = sources.load("mnist", tmp_path, use_cache=True)
    assert len(list(cache_dir.glob("mnist-*.safetensors"))) == 1
    refuse_to_read(monkeypatch)
    same_source(sources.load("mnist", tmp_path, use_cache=True), uncached)
    same_source(first, uncached)


def test_cifar100_coarse_labels_survive_the_cache(tmp_path, cache_dir):
    write_cifar100(tmp_path)
    uncached = sources.load("cifar100", tmp_path)
    sources.load("cifar100", tmp_path, use_cache=True)
    same_source(sources.load("cifar100", tmp_path, use_cache=True), uncached)


def test_a_changed_file_is_read_afresh(tmp_path, cache_dir):
    folder = tmp_path / "MNIST/raw"
    write_idx_dataset(folder, seed=0)
    sources.load("mnist", tmp_path, use_cache=True)
    stat = (folder / "train-images-idx3-ubyte").stat()
    rewritten = write_idx_dataset(folder, seed=7)  # same sizes: only the modification time tells them apart
    os.utime(folder / "train-images-idx3-ubyte", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    source = sources.load("mnist", tmp_path, use_cache=True)
    assert torch.equal(source.train_x[:, 0], torch.from_numpy(rewritten["train_x"]))


def test_a_damaged_file_is_an_error_not_a_hit(tmp_path, cache_dir):
    folder = tmp_path / "MNIST/raw"
    written = write_idx_dataset(folder)
    sources.load("mnist", tmp_path, use_cache=True)
    write_idx(folder / "train-labels-idx1-ubyte", written["train_y"][:5])  # five labels for twenty images
    with pytest.raises(UserError, match="expected 20 integer labels"):
        sources.load("mnist", tmp_path, use_cache=True)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_damaged_entry_is_a_miss_and_is_rewritten(tmp_path, cache_dir, monkeypatch, damage):
    write_idx_dataset(tmp_path / "MNIST/raw")
    uncached = sources.load("mnist", tmp_path)
    sources.load("mnist", tmp_path, use_cache=True)
    (entry,) = cache_dir.glob("mnist-*.safetensors")
    data = entry.read_bytes()
    entry.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"\x07" * len(data), "empty": b""}[damage])
    same_source(sources.load("mnist", tmp_path, use_cache=True), uncached)
    refuse_to_read(monkeypatch)  # rewritten whole: the next load is a hit
    same_source(sources.load("mnist", tmp_path, use_cache=True), uncached)


def test_an_unwritable_cache_costs_nothing_but_time(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("CL_BENCH_CACHE", str(blocker / "cache"))
    write_idx_dataset(tmp_path / "MNIST/raw")
    same_source(sources.load("mnist", tmp_path, use_cache=True), sources.load("mnist", tmp_path))


def test_cli_uses_the_cache_unless_told_not_to(tmp_path, cache_dir):  # the CLI's child process inherits the env
    write_idx_dataset(tmp_path / "MNIST/raw")
    args = ("dataset=split_mnist", "backbone=mlp", "method.epochs=1", "data.val_fraction=0", f"data.root={tmp_path}")
    train(tmp_path / "off", *args, "data.cache=false")
    assert not list(cache_dir.glob("mnist-*"))
    off = (tmp_path / "off" / "metrics.json").read_text()
    train(tmp_path / "on", *args)
    assert len(list(cache_dir.glob("mnist-*.safetensors"))) == 1
    (entry,) = cache_dir.glob("mnist-*.safetensors")
    written = entry.stat().st_mtime_ns
    train(tmp_path / "hit", *args)
    assert entry.stat().st_mtime_ns == written  # read, not rewritten
    for run in ("on", "hit"):
        assert results(off) == results((tmp_path / run / "metrics.json").read_text())


def results(metrics_text: str) -> dict:
    return {k: v for k, v in json.loads(metrics_text).items() if k not in ("time_s", "peak_mem_mb")}


def test_real_mnist_from_the_cache(cache_dir, monkeypatch):
    root = real_data("MNIST", "raw").parents[1]
    uncached = sources.load("mnist", root)
    sources.load("mnist", root, use_cache=True)
    refuse_to_read(monkeypatch)
    same_source(sources.load("mnist", root, use_cache=True), uncached)


def test_the_entry_of_replaced_files_is_deleted(tmp_path, cache_dir):
    folder = tmp_path / "MNIST/raw"
    write_idx_dataset(folder, seed=0)
    sources.load("mnist", tmp_path, use_cache=True)
    (before,) = cache_dir.glob("mnist-*.safetensors")
    other = tmp_path / "elsewhere"
    write_idx_dataset(other / "MNIST/raw", seed=3)
    sources.load("mnist", other, use_cache=True)  # other files: a second entry, kept
    stat = (folder / "train-images-idx3-ubyte").stat()
    write_idx_dataset(folder, seed=7)
    os.utime(folder / "train-images-idx3-ubyte", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    sources.load("mnist", tmp_path, use_cache=True)
    entries = sorted(cache_dir.glob("mnist-*.safetensors"))
    assert len(entries) == 2 and before not in entries


def test_a_full_cache_disk_costs_nothing_but_time(tmp_path, monkeypatch):
    """safetensors reports a full disk as its own SafetensorError: the entry is dropped, half-written file and all."""
    import subprocess

    import numpy as np
    from test_io_failures import mount
    disk = tmp_path / "disk"
    mount(disk, "size=16k")
    try:
        monkeypatch.setenv("CL_BENCH_CACHE", str(disk))
        rng = np.random.default_rng(0)
        for stem, n in (("train", 2000), ("t10k", 10)):  # 60 KB of training images: more than the disk holds
            write_idx(tmp_path / "MNIST/raw" / f"{stem}-images-idx3-ubyte", rng.integers(0, 256, (n, 6, 5), np.uint8))
            write_idx(tmp_path / "MNIST/raw" / f"{stem}-labels-idx1-ubyte", (np.arange(n) % 10).astype(np.uint8))
        same_source(sources.load("mnist", tmp_path, use_cache=True), sources.load("mnist", tmp_path))
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_damaged_entry_of_other_files_is_left_alone(tmp_path, cache_dir):
    write_idx_dataset(tmp_path / "MNIST/raw")
    cache_dir.mkdir()
    (cache_dir / "mnist-0123456789abcdef0123.safetensors").write_bytes(b"another process's entry, half written")
    sources.load("mnist", tmp_path, use_cache=True)
    assert len(list(cache_dir.glob("mnist-*.safetensors"))) == 2
    assert (cache_dir / "mnist-0123456789abcdef0123.safetensors").read_bytes().startswith(b"another process's")
