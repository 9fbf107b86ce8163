"""Where a run keeps its images (data.residency), and the split whose images stay off the device.

- device: every split's uint8 pixels on the device (the default wherever they fit): a batch is one index_select;
- host: the pixels once in host memory (pinned when the device is a GPU); each batch is gathered there, pinned,
  and copied to the device asynchronously;
- stream: the pixels stay in the memory-mapped file `cl-bench data prepare` wrote (data/prepared.py); DataLoader
  workers gather each batch from the map (data.workers of them, two batches ahead each), and only the batch in
  flight is resident.

Labels and task ids stay on the device in every mode, the batch order is drawn there from the same generator, and
augmentation runs on the device after the copy: the batches a method sees, and so its metrics, are the same in
every mode. A method that reads a split whole (split.x: herding, a memory filled from a task) gets it on the
device, gathered once for that call.
"""
from __future__ import annotations

import contextlib
import os

import torch
from torch.utils.data import DataLoader

from .prepared import MappedImages

# auto: keep the images where they take at most this share of the free memory (room for model and activations)
FREE_SHARE = 0.5
PREFETCH_BATCHES = 2  # batches each stream worker prepares ahead
GPU_WORKERS = 2  # data.workers=null on a GPU: reading overlaps the device's work (on a CPU it takes its cores)


def free_bytes(device: torch.device) -> int:
    """Free memory where tensors of `device` live: the GPU's free memory, or the host's available memory."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return _host_available()


def _host_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):  # not Linux: the physical memory as os reports it
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def choose(requested: str, nbytes: int, device: torch.device, streamable: bool) -> tuple[str, str]:
    """The residency to use and why, in words for the log. auto keeps the images on the device where they fit,
    on the host where they fit there (a GPU run), and streams them from their prepared file otherwise."""
    size = f"{nbytes / 2**30:.2f} GiB of images"
    if requested != "auto":
        return requested, f"data.residency={requested}, {size}"
    free = free_bytes(device)
    where = f"{free / 2**30:.2f} GiB free on {device.type}"
    if nbytes <= FREE_SHARE * free:
        return "device", f"auto: {size}, {where}"
    if device.type == "cuda" and nbytes <= FREE_SHARE * _host_available():
        return "host", f"auto: {size} exceed half of the {where}; they fit in host memory"
    if streamable:
        return "stream", f"auto: {size} exceed half of the free memory ({where}); read from the prepared file"
    return "device", f"auto: {size}, {where}; no prepared file to stream from, so held whole anyway"


def stream_workers(requested: int | None, device: torch.device) -> int:
    """The DataLoader workers of a stream run: data.workers, or by the device when null."""
    if requested is not None:
        return requested
    return GPU_WORKERS if device.type == "cuda" else 0


class OffDeviceSplit:
    """One task's split whose pixels stay on the host (`images`: a tensor, pinned for a GPU, or MappedImages);
    `rows` are its images' indices there. Its labels and task ids are on the device; it batches as Split does."""

    def __init__(self, images, rows: torch.Tensor, y: torch.Tensor, t: torch.Tensor, workers: int = 0):
        self.images, self.rows, self.y, self.t, self.workers = images, rows, y, t, workers

    def __len__(self):
        return self.y.shape[0]

    @property
    def x(self) -> torch.Tensor:
        """The whole split's pixels on the device (gathered anew at each call)."""
        return _gather(self.images, self.rows).to(self.y.device)

    def batches(self, batch_size: int, generator: torch.Generator | None = None):
        """Split.batches' batches, in the same order: the order is drawn on the device, read once per epoch."""
        n, device = len(self), self.y.device
        order = (torch.randperm(n, device=device, generator=generator) if generator is not None
                 else torch.arange(n, device=device))
        rows = [self.rows[idx] for idx in order.cpu().split(batch_size)]
        workers = self.workers if isinstance(self.images, MappedImages) else 0  # in host memory: a gather is a copy
        with _loader(self.images, workers, device.type == "cuda") as loader:
            loader.sampler.rows = rows
            for idx, x in zip(order.split(batch_size), loader, strict=True):
                yield x.to(device, non_blocking=True), self.y.index_select(0, idx), self.t.index_select(0, idx)

    def sub(self, idx: torch.Tensor) -> OffDeviceSplit:
        """The samples at positions idx (on the device) of this split."""
        return OffDeviceSplit(self.images, self.rows[idx.cpu()], self.y[idx], self.t[idx], self.workers)


class _Batches(torch.utils.data.Sampler):
    """The sampler of a reused loader: each pass yields the batches (tensors of rows) its split set last."""

    def __init__(self):
        self.rows: list[torch.Tensor] = []

    def __iter__(self):
        return iter(self.rows)

    def __len__(self):
        return len(self.rows)


@contextlib.contextmanager
def _loader(images, workers: int, pin: bool):
    """A DataLoader over `images`. With workers, they persist across passes (starting them costs more than an epoch
    of a small task), kept by the mapped images themselves, so that they end with the scenario; a pass inside
    another over the same images (a validation pass within an epoch) gets a loader of its own."""
    kept = getattr(images, "loader", None) if workers else None
    if kept is not None and not kept.busy:
        kept.busy = True
        try:
            yield kept.loader
        finally:
            kept.busy = False
        return
    loader = DataLoader(_Rows(images), batch_size=None, sampler=_Batches(), num_workers=workers, pin_memory=pin,
                        prefetch_factor=PREFETCH_BATCHES if workers else None, persistent_workers=workers > 0)
    if workers and kept is None:
        images.loader = _Kept(loader)
        with _loader(images, workers, pin) as loader:
            yield loader
        return
    yield loader


class _Kept:
    """A persistent loader and whether a pass is using it."""

    def __init__(self, loader: DataLoader):
        self.loader, self.busy = loader, False


class _Rows(torch.utils.data.Dataset):
    """A DataLoader's dataset whose every item is a whole batch: the images at a tensor of rows."""

    def __init__(self, images):
        self.images = images

    def __getitem__(self, rows: torch.Tensor) -> torch.Tensor:
        return _gather(self.images, rows)


def _gather(images, rows: torch.Tensor) -> torch.Tensor:
    return images.gather(rows) if isinstance(images, MappedImages) else images.index_select(0, rows)


def cat(splits: list) -> OffDeviceSplit | None:
    """Off-device splits over the same images as one, or None when they are not all such."""
    if not splits or not all(isinstance(s, OffDeviceSplit) and s.images is splits[0].images for s in splits):
        return None
    return OffDeviceSplit(splits[0].images, torch.cat([s.rows for s in splits]), torch.cat([s.y for s in splits]),
                          torch.cat([s.t for s in splits]), splits[0].workers)
