"""What every reader shares: the Source it returns, the layout of a dataset's files under data.root, the registry
entry of a reader, and the checks and assembly of parsed arrays."""
from __future__ import annotations

import gzip
import pickle
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cl_bench.errors import UserError


@dataclass
class Source:
    name: str
    train_x: torch.Tensor  # uint8, NxCxHxW, contiguous
    train_y: torch.Tensor  # int64, N
    test_x: torch.Tensor
    test_y: torch.Tensor
    mean: tuple[float, ...]  # per channel, of the train pixels scaled to [0, 1]
    std: tuple[float, ...]
    train_coarse: torch.Tensor | None = None  # CIFAR-100 superclass labels, int64
    test_coarse: torch.Tensor | None = None


@dataclass(frozen=True)
class Layout:
    title: str  # the dataset's usual name, for messages
    folder: str  # where torchvision's download leaves the files, relative to data.root
    files: tuple[str, ...]
    suffixes: tuple[str, ...]  # accepted endings of each file, preferred first
    torchvision_class: str | None  # the torchvision.datasets class whose download=True fetches the files
    splits: tuple[dict, ...]  # its keyword arguments for the train and the test split
    where: str = ""  # for a dataset torchvision cannot fetch: where to get the files


@dataclass(frozen=True)
class Reader:
    """A source cl-bench reads from files under data.root: where they are, and the function that parses them."""

    layout: Layout
    read: Callable[[list[Path]], Source]


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            return gzip.decompress(path.read_bytes())  # at once: several times faster than reading a stream
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as error:  # gzip reports damage through all three
        raise UserError(f"cannot read {path}: {error}") from error


# numpy's array reconstructor, asked of numpy itself: files written by numpy 1 (all of CIFAR) name it
# `numpy.core.multiarray._reconstruct`, numpy 2 names it `numpy._core.multiarray._reconstruct`.
_reconstruct = np.zeros(0).__reduce__()[0]


_ARRAY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Resolves only the globals that pickled numpy arrays refer to, so a planted pickle cannot call anything else."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _ARRAY_GLOBALS:
            raise pickle.UnpicklingError(f"it refers to {module}.{name}, which a data file has no business calling")
        return _ARRAY_GLOBALS[module, name]


def _unpickle(path: Path, what: str = "a CIFAR pickle"):
    try:
        with open(path, "rb") as stream:
            return _ArrayOnlyUnpickler(stream, encoding="bytes").load()
    except Exception as error:  # a damaged pickle can fail with almost any exception type
        raise UserError(f"refusing to read {path} as {what}: {error}") from error


def _entry(batch: dict, key: str, path: Path):
    # The original files were pickled under Python 2 and load with bytes keys; re-pickled copies have str keys.
    for candidate in (key.encode(), key):
        if candidate in batch:
            return batch[candidate]
    raise UserError(f"{path} is not a CIFAR batch: it has no '{key}' entry")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _labels(values, count: int, valid: range, path: Path) -> np.ndarray:
    """`values` as int64 after checking that there is one integer label per image, each within `valid`."""
    labels = np.asarray(values)
    if labels.dtype.kind not in "iu" or labels.shape != (count,):
        raise UserError(f"{path}: expected {count} integer labels, found {labels.dtype} values of shape {labels.shape}")
    if count and (labels.min() < valid.start or labels.max() >= valid.stop):
        raise UserError(
            f"{path}: labels must lie in {valid.start}..{valid.stop - 1}, found {labels.min()}..{labels.max()}"
        )
    return labels.astype(np.int64)


def _source(name: str, train: tuple, test: tuple, coarse: tuple | None = None) -> Source:
    train_x = _tensor(train[0])
    mean, std = _channel_stats(train_x)
    return Source(
        name=name,
        train_x=train_x,
        train_y=_tensor(train[1]),
        test_x=_tensor(test[0]),
        test_y=_tensor(test[1]),
        mean=mean,
        std=std,
        train_coarse=None if coarse is None else _tensor(coarse[0]),
        test_coarse=None if coarse is None else _tensor(coarse[1]),
    )


def _tensor(array: np.ndarray) -> torch.Tensor:
    # A fresh C-ordered copy: the parsed arrays may be read-only views of file bytes or transposed.
    return torch.from_numpy(np.array(array, order="C"))


def _channel_stats(images: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and (population) std of uint8 images scaled to [0, 1]."""
    # Pixels take only 256 values, so a histogram per channel gives exact float64 moments
    # without materialising a float copy of the whole training set.
    levels = torch.arange(256, dtype=torch.float64) / 255
    means, stds = [], []
    for channel in images.unbind(1):
        counts = torch.bincount(channel.reshape(-1), minlength=256).double()
        mean = counts @ levels / counts.sum()
        means.append(mean.item())
        stds.append((counts @ (levels - mean) ** 2 / counts.sum()).sqrt().item())
    return tuple(means), tuple(stds)
