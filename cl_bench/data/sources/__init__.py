"""Read each dataset's canonical on-disk files straight into uint8 tensors.

Files are only ever fetched by torchvision's own downloader (which verifies checksums); the pixels
and labels always come from our readers, which validate what they parse so that a truncated
or foreign file surfaces as a one-line UserError rather than as silently wrong data.

One module per family of formats, each registering its sources (where their files lie, the function that parses
them) in its READERS: idx.py (MNIST, Fashion-MNIST), cifar.py (CIFAR-10 and -100), svhn.py (.mat), miniimagenet.py,
core50.py; custom.py reads your own arrays and image folders and scikit-learn's digits. files.py locates and
downloads, common.py holds the Source every reader returns and the checks they share. A new dataset: a reader
module (or an entry in one), its READERS in the table below, a SourceName value, and a YAML under conf/dataset/.
"""
from __future__ import annotations

import os
from pathlib import Path

from cl_bench.data import SourceName, cache
from cl_bench.errors import UserError

from . import cifar, core50, custom, idx, miniimagenet, svhn
from .common import Layout, Reader, Source
from .files import _files

# Sources read only from the files `cl-bench data prepare` writes (data/prepared.py): decoding their JPEG folders
# takes minutes, so it happens once there, never at the start of a run.
PREPARED = frozenset({SourceName.tinyimagenet, SourceName.imagenet_subset})
# The sources read from files under data.root, by name: one table of every reader module's entries.
READERS: dict[str, Reader] = {**idx.READERS, **cifar.READERS, **svhn.READERS, **miniimagenet.READERS,
                              **core50.READERS}


def load(name: str, root: str | os.PathLike, download: bool = False, use_cache: bool = False,
         path: str | os.PathLike | None = None, image_size: int | None = None) -> Source:
    """The train and test split of dataset `name`, read from its canonical files under `root` (or from the
    cache of decoded datasets, see data/cache.py, when `use_cache` and it holds these very files). Your own data
    (tensors, image_folder) is read from `path` instead, image folders resized to image_size when given."""
    if name == "digits":
        return custom._load_digits()
    if name in ("tensors", "image_folder"):
        files = custom._custom_files(name, Path(path))

        def read():
            if name == "tensors":
                return custom._load_tensors(files[0])
            return custom._load_image_folder(Path(path), image_size)
        key = name if image_size is None else f"{name}-{image_size}px"
        return cache.cached(key, files, read, Source) if use_cache else read()
    if name not in READERS:  # the config names SourceName's values only; this guards direct calls
        raise UserError(f"unknown data source '{name}': choose one of {', '.join(SourceName)}")
    paths = _files(READERS[name].layout, name, Path(root), download)
    if use_cache:
        return cache.cached(name, paths, lambda: _read(name, paths), Source)
    return _read(name, paths)


def _read(name: str, paths: list[Path]) -> Source:
    return READERS[name].read(paths)


def from_prepared(store, mapped: bool) -> Source:
    """A prepared dataset as a source: its images mapped from their files (stream) or read whole."""
    images = [store.images(split) for split in ("train", "test")]
    if not mapped:
        images = [x.load() for x in images]
    meta = store.meta
    return Source(meta["name"], images[0], store.labels("train"), images[1], store.labels("test"),
                  tuple(meta["mean"]), tuple(meta["std"]))


__all__ = ["PREPARED", "READERS", "Layout", "Reader", "Source", "SourceName", "from_prepared", "load"]
