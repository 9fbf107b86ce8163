"""CIFAR-10 and CIFAR-100: the python pickles of torchvision's download (read without running any pickled code)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cl_bench.errors import UserError

from .common import Layout, Reader, Source, _entry, _labels, _source, _unpickle
from .idx import _TRAIN_TEST


def _load_cifar10(paths: list[Path]) -> Source:
    *train_paths, test_path = paths
    return _source("cifar10", _read_cifar(train_paths, {"labels": 10}), _read_cifar([test_path], {"labels": 10}))


def _load_cifar100(paths: list[Path]) -> Source:
    train_path, test_path = paths
    classes = {"fine_labels": 100, "coarse_labels": 20}
    train_x, train_fine, train_coarse = _read_cifar([train_path], classes)
    test_x, test_fine, test_coarse = _read_cifar([test_path], classes)
    return _source("cifar100", (train_x, train_fine), (test_x, test_fine), coarse=(train_coarse, test_coarse))


def _read_cifar(paths: list[Path], classes: dict[str, int]) -> tuple[np.ndarray, ...]:
    """Images (Nx3x32x32) then one label array per key of `classes`, concatenated over the batch files."""
    batches = [_read_cifar_batch(path, classes) for path in paths]
    return tuple(np.concatenate(parts) for parts in zip(*batches, strict=True))


def _read_cifar_batch(path: Path, classes: dict[str, int]) -> tuple[np.ndarray, ...]:
    batch = _unpickle(path)
    if not isinstance(batch, dict):
        raise UserError(f"{path} is not a CIFAR batch: it holds a {type(batch).__name__}, not a dict")
    data = _entry(batch, "data", path)
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2 and data.shape[1] == 3072):
        found = f"{data.dtype} array of shape {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise UserError(f"{path}: 'data' must be a uint8 array of shape Nx3072, found a {found}")
    labels = [_labels(_entry(batch, key, path), len(data), range(count), path) for key, count in classes.items()]
    # Rows are channel-major (1024 red, then green, then blue values), so they reshape straight to 3x32x32.
    return data.reshape(-1, 3, 32, 32), *labels


READERS = {
    "cifar10": Reader(Layout("CIFAR-10", "cifar-10-batches-py",
                             (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"), ("",), "CIFAR10", _TRAIN_TEST),
                      _load_cifar10),
    "cifar100": Reader(Layout("CIFAR-100", "cifar-100-python", ("train", "test"), ("",), "CIFAR100", _TRAIN_TEST),
                       _load_cifar100),
}
