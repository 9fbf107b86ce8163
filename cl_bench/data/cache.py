"""A cache of decoded datasets, so that a run reads uint8 tensors instead of decompressing and unpickling the
canonical files and histogramming their pixels again (about 0.4 s per MNIST run on 2 cores, more for CIFAR).

An entry is keyed by the source files' paths, sizes and modification times (as Python keys its .pyc files), so
replacing a dataset file makes a new entry, and the entry of the files it replaced is deleted. Entries are
written atomically and only ever after the readers have validated the files. A damaged or unreadable entry is
read as a miss and rewritten; a cache folder that cannot be written is skipped. Turn it off with data.cache=false;
delete the folder (see `folder`) to empty it.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from safetensors import SafetensorError, safe_open

FORMAT = 1  # bump when what the readers produce changes, so that old entries are not read back
TENSORS = ("train_x", "train_y", "test_x", "test_y", "train_coarse", "test_coarse")


def folder() -> Path:
    """$CL_BENCH_CACHE, else cl-bench/ under $XDG_CACHE_HOME, else ~/.cache/cl-bench."""
    if os.environ.get("CL_BENCH_CACHE"):
        return Path(os.environ["CL_BENCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cl-bench"


def entry(name: str, resolved: list[Path]) -> Path:
    stamps = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in resolved]
    key = hashlib.sha256(json.dumps([FORMAT, name, stamps]).encode()).hexdigest()[:20]
    return folder() / f"{name}-{key}.safetensors"


def cached(name: str, paths: list[Path], read: Callable, make_source: Callable):
    """The Source for these files: from the cache when it holds them, else `read()` and remember the result."""
    resolved = [p.resolve() for p in paths]
    path = entry(name, resolved)
    source = _load(path, make_source)
    if source is None:
        source = read()
        _store(path, source, sources=[str(p) for p in resolved])
    return source


def _load(path: Path, make_source: Callable):
    try:
        with safe_open(path, framework="pt") as entry_file:
            meta = entry_file.metadata()  # the per-channel statistics travel in the header's string metadata
            tensors = {k: entry_file.get_tensor(k) for k in entry_file.keys()}
        return make_source(name=meta["name"], mean=tuple(json.loads(meta["mean"])), std=tuple(json.loads(meta["std"])),
                           **{k: tensors.get(k) for k in TENSORS})
    except (OSError, SafetensorError, KeyError, ValueError, TypeError):  # absent or damaged: a miss
        return None


def _store(path: Path, source, sources: list[str]) -> None:
    from safetensors.torch import save_file  # here: catalog.py reads `folder` without torch
    tensors = {k: getattr(source, k) for k in TENSORS if getattr(source, k) is not None}
    meta = {"name": source.name, "mean": json.dumps(source.mean), "std": json.dumps(source.std),
            "sources": json.dumps(sources)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".safetensors")
        os.close(fd)
        try:
            save_file(tensors, tmp, metadata=meta)
            os.replace(tmp, path)  # readers see the old state or the whole entry, never half of it
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _drop_replaced(path, meta["sources"])
    except (OSError, SafetensorError):  # a read-only or full disk costs the speed-up, never the run
        pass


def _drop_replaced(kept: Path, sources: str) -> None:
    """Delete the entries decoded from these same paths before the files changed: no run can hit them again."""
    for other in kept.parent.glob(kept.name.split("-")[0] + "-*.safetensors"):
        if other == kept:
            continue
        try:
            with safe_open(other, framework="pt") as entry_file:
                if (entry_file.metadata() or {}).get("sources") == sources:
                    other.unlink()
        except (OSError, SafetensorError):  # another process's entry in the making, or damaged: left alone
            continue
