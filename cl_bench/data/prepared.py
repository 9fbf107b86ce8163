"""A dataset decoded once into uint8 files that runs read through a memory map (data.residency=stream).

`cl-bench data prepare NAME --root ROOT` writes ROOT/prepared/NAME/:

- train_x.npy, test_x.npy: the images, N×C×H×W uint8, in NumPy's .npy format (readable by anyone);
- train_y.npy, test_y.npy: the labels, int64;
- meta.json: the classes' names, the image shape, the split sizes and the per-channel mean and std of the train
  pixels (scaled to [0, 1]), so that a run learns them without a pass over the data. It is written last: a
  folder without it is an interrupted prepare, and is rewritten.

A run under `stream` never holds the images whole: each batch gathers its rows from the map (one fancy index, on
a loader worker), and the pages it touched are dropped from the process at once, so that the resident set stays
about a batch whatever the dataset's size (the kernel's page cache still keeps what memory allows).
"""
from __future__ import annotations

import json
import mmap
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from ..files import write_json_atomic
from .batches import chunked_channel_stats

FOLDER = "prepared"
STATS_CHUNK = 4096  # images per chunk when computing the channel statistics at prepare time


def folder(root: str | os.PathLike, name: str) -> Path:
    return Path(root) / FOLDER / name


def prepare_command(name: str, root: str | os.PathLike) -> str:
    return f"cl-bench data prepare {name} --root {root}"


class MappedImages:
    """The rows of an N×C×H×W uint8 .npy file, read through a read-only memory map opened on first use (and
    again in each loader worker: the map itself is not pickled)."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            shape, fortran, dtype = _header(f, version)
            self.offset = f.tell()
        if dtype != np.uint8 or fortran or len(shape) != 4:
            raise UserError(f"{path}: expected N×C×H×W uint8 images in C order; prepare the dataset again")
        self.shape = tuple(shape)
        self._map = None
        self.loader = None  # data/residency.py's persistent stream loader over these images, once one runs

    def __len__(self):
        return self.shape[0]

    def __getstate__(self):  # a loader worker gets the file's path, and maps it itself
        return {**self.__dict__, "_map": None, "loader": None}

    def _array(self) -> np.ndarray:
        if self._map is None:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return np.frombuffer(self._map, np.uint8, count=int(np.prod(self.shape)), offset=self.offset).reshape(
            self.shape)

    def gather(self, rows: np.ndarray | torch.Tensor) -> torch.Tensor:
        """The images at `rows`, copied out of the map; the map's pages leave the resident set afterwards."""
        rows = rows.numpy() if isinstance(rows, torch.Tensor) else rows
        images = torch.from_numpy(self._array()[rows])  # fancy indexing copies
        self._map.madvise(mmap.MADV_DONTNEED)  # clean file pages: dropped from this process, re-read on demand
        return images

    def chunks(self, size: int):
        """Every image in order, `size` at a time (each gathered as a batch is)."""
        for start in range(0, len(self), size):
            yield self.gather(np.arange(start, min(start + size, len(self))))

    def load(self) -> torch.Tensor:
        """Every image in memory (device and host residency)."""
        return torch.from_numpy(np.load(self.path))


def _header(f, version) -> tuple:
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


@dataclass
class Prepared:
    """A prepared dataset's folder and what its meta.json says."""

    path: Path
    meta: dict

    @property
    def nbytes(self) -> int:
        per_image = int(np.prod(self.meta["shape"]))
        return per_image * (self.meta["train"] + self.meta["test"])

    def images(self, split: str) -> MappedImages:
        return MappedImages(self.path / f"{split}_x.npy")

    def labels(self, split: str) -> torch.Tensor:
        return torch.from_numpy(np.load(self.path / f"{split}_y.npy")).long()


def find(root: str | os.PathLike, name: str) -> Prepared | None:
    """The prepared dataset `name` under root, or None when it was never (completely) prepared."""
    path = folder(root, name)
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    return Prepared(path, meta)


def require(root: str | os.PathLike, name: str) -> Prepared:
    found = find(root, name)
    if found is None:
        raise UserError(f"{folder(root, name)} holds no prepared {name}: run `{prepare_command(name, root)}` first "
                        "(or set data.root to where it was prepared)")
    return found


class Writer:
    """Writes one prepared dataset into a fresh folder: open_images() gives a writable map per split, to fill in
    any order (say, as parallel decoding finishes); finish() adds the labels and statistics, then meta.json."""

    def __init__(self, root: str | os.PathLike, name: str):
        self.path = folder(root, name)
        if self.path.exists():
            shutil.rmtree(self.path)  # a complete one was never passed in (see prepare_*); this one is partial
        self.path.mkdir(parents=True)
        self.sizes: dict[str, int] = {}

    def open_images(self, split: str, count: int, shape: tuple[int, int, int]) -> np.memmap:
        self.sizes[split] = count
        return np.lib.format.open_memmap(self.path / f"{split}_x.npy", mode="w+", dtype=np.uint8,
                                         shape=(count, *shape))

    def finish(self, name: str, classes: list[str], labels: dict[str, np.ndarray], source: str) -> Prepared:
        for split, y in labels.items():
            if len(y) != self.sizes[split]:
                raise ValueError(f"{split}: {len(y)} labels for {self.sizes[split]} images")
            np.save(self.path / f"{split}_y.npy", np.asarray(y, dtype=np.int64))
        train = MappedImages(self.path / "train_x.npy")
        mean, std = chunked_channel_stats(train.chunks(STATS_CHUNK))
        meta = {"name": name, "classes": list(classes), "shape": list(train.shape[1:]), "train": self.sizes["train"],
                "test": self.sizes["test"], "mean": mean, "std": std, "source": source}
        write_json_atomic(self.path / "meta.json", meta)  # last: marks the folder complete
        return Prepared(self.path, meta)


def prepare_source(source, root: str | os.PathLike, classes: list[str] | None = None) -> Prepared:
    """A source already read into memory (any dataset.source cl-bench reads) written as a prepared dataset."""
    writer = Writer(root, source.name)
    for split, x in (("train", source.train_x), ("test", source.test_x)):
        writer.open_images(split, x.shape[0], tuple(x.shape[1:]))[:] = x.numpy()
    names = classes or [str(c) for c in range(int(source.train_y.max()) + 1)]
    return writer.finish(source.name, names, {"train": source.train_y.numpy(), "test": source.test_y.numpy()},
                         f"cl-bench's {source.name} reader")
