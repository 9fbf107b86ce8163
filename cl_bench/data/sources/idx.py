"""MNIST and Fashion-MNIST: IDX files, plain or gzipped."""
from __future__ import annotations

import math
import struct
from functools import partial
from pathlib import Path

import numpy as np

from cl_bench.errors import UserError

from .common import Layout, Reader, Source, _labels, _read_bytes, _source

_IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_TRAIN_TEST = ({"train": True}, {"train": False})


def _load_idx(name: str, paths: list[Path]) -> Source:
    train_images, train_labels, test_images, test_labels = paths
    return _source(name, _read_idx_split(train_images, train_labels), _read_idx_split(test_images, test_labels))


def _read_idx_split(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    images = _read_idx(images_path, ndim=3)
    labels = _labels(_read_idx(labels_path, ndim=1), len(images), range(10), labels_path)
    return images[:, None], labels


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    """An IDX file of unsigned bytes: 0x00 0x00 0x08 ndim, then ndim big-endian int32 sizes, then the data."""
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise UserError(f"{path} is not an IDX file: it does not start with the magic bytes 00 00")
    if raw[2] != 0x08:
        raise UserError(f"{path} holds IDX data of type 0x{raw[2]:02x}, expected 0x08 (unsigned byte)")
    if raw[3] != ndim:
        raise UserError(f"{path} holds {raw[3]}-dimensional IDX data, expected {ndim} dimensions")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise UserError(f"{path} is truncated: it ends inside the IDX header")
    sizes = struct.unpack(f">{ndim}I", raw[4:header])
    if len(raw) - header != math.prod(sizes):
        raise UserError(
            f"{path} is truncated or corrupt: its header announces {'x'.join(map(str, sizes))} = {math.prod(sizes)} "
            f"bytes of data but it holds {len(raw) - header}"
        )
    return np.frombuffer(raw, np.uint8, offset=header).reshape(sizes)


READERS = {
    "mnist": Reader(Layout("MNIST", "MNIST/raw", _IDX_FILES, ("", ".gz"), "MNIST", _TRAIN_TEST),
                    partial(_load_idx, "mnist")),
    "fashion_mnist": Reader(Layout("Fashion-MNIST", "FashionMNIST/raw", _IDX_FILES, ("", ".gz"), "FashionMNIST",
                                   _TRAIN_TEST), partial(_load_idx, "fashion_mnist")),
}
