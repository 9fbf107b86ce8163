"""The two image-folder layouts `cl-bench data prepare` decodes into a memory-mapped file (data/prepared.py):

- tiny-imagenet-200 as its official archive unpacks: wnids.txt (the classes, in label order), words.txt (their
  names, optional), train/<wnid>/images/*.JPEG, and val/images/*.JPEG labelled by val/val_annotations.txt. The
  official test/ has no labels and is ignored: val is our test split.
- an ImageNet folder, train/<wnid>/*.JPEG and val/<wnid>/*.JPEG (val sorted into class folders), of which a subset
  of classes is taken, labelled by their position in the class list.

Enumeration is cheap and strict (a wrong folder fails here, before hours of decoding); `decode_into` then decodes,
resizes and centre-crops every image in parallel.
"""
from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UserError

# Image files, by lower-cased suffix (as torchvision's ImageFolder): ImageNet's files are .JPEG, copies made by
# other tools often .jpg. dataset.source=image_folder reads the same ones (sources/custom.py).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")

TINY_FOLDER = "tiny-imagenet-200"
NAME_FILES = ("words.txt", "LOC_synset_mapping.txt")  # wnid, then its names: tiny-imagenet's and Kaggle ImageNet's
# Pillow's reducing_gap: first shrink by an integer factor (a cheap box filter, or JPEG's own DCT scaling) while
# the image stays this many times the target, then resample. Pillow documents 3.0 as indistinguishable from a
# full-size resample in most cases, and it makes large ImageNet photos several times faster to shrink.
REDUCING_GAP = 3.0


@dataclass
class FolderDataset:
    """Readable class names (index = label) and, per split, the image paths and their int64 labels."""
    classes: list[str]
    train: tuple[list[Path], np.ndarray]
    test: tuple[list[Path], np.ndarray]


def tinyimagenet_files(root: Path) -> FolderDataset:
    """tiny-imagenet-200's train and val images (val as the test split); root is that folder or one holding it."""
    root = _tiny_root(Path(root))
    wnids = _wnids(root / "wnids.txt")
    train = [_images(root / "train" / wnid / "images", f"class {wnid}") for wnid in wnids]
    return FolderDataset(_readable(root, wnids), _labelled(train), _tiny_val(root, wnids))


def imagenet_subset_files(root: Path, classes: list[str]) -> FolderDataset:
    """The given wnids' images from root/train/<wnid>/ and root/val/<wnid>/, labelled by position in `classes`."""
    root = Path(root)
    _check_class_list(classes, where="the class list: ")
    # Every class folder is looked for in both splits before any is listed: a wrong class list fails at once
    for split in ("train", "val"):
        if not (root / split).is_dir():
            raise UserError(f"{root} holds no {split}/ folder: point --from at an ImageNet folder with train/<wnid>/ "
                            "and val/<wnid>/")
        missing = [wnid for wnid in classes if not (root / split / wnid).is_dir()]
        if missing:
            raise UserError(_missing_classes(root / split, missing))
    train, test = (_labelled([_images(root / split / wnid, f"class {wnid}") for wnid in classes])
                   for split in ("train", "val"))
    return FolderDataset(_readable(root, list(classes)), train, test)


def class_list(path: Path) -> list[str]:
    """The wnids in a class-list file, one per line; blank lines and # comments are ignored."""
    lines = _read_lines(Path(path), "class list")
    wnids = []
    for number, line in enumerate(lines, 1):
        entry = line.split("#", 1)[0].strip()
        if len(entry.split()) > 1:
            raise UserError(f"{path}, line {number}: {entry!r} is not one wnid; write one wnid (e.g. n01440764) "
                            "per line, names after a #")
        if entry:
            wnids.append(entry)
    if not wnids:
        raise UserError(f"{path} lists no classes: write one wnid (e.g. n01440764) per line")
    return wnids


def decode_into(paths: list[Path], size: int, out: np.ndarray, workers: int | None = None, chunk: int = 256) -> None:
    """Decode paths[i] to RGB, resize its shorter side to `size`, centre-crop, and write it channel-major into
    out[i] (out: N×3×size×size uint8, e.g. an np.memmap). Chunks are decoded by `workers` processes (default: the
    cores this process may use; 1 decodes here) and written as they complete, so memory holds a few chunks."""
    if out.shape != (len(paths), 3, size, size) or out.dtype != np.uint8:
        raise ValueError(f"out must be uint8 of shape {(len(paths), 3, size, size)}, not {out.dtype} {out.shape}")
    if workers is not None and workers < 1:
        raise UserError(f"--workers {workers}: decoding needs at least one process")
    if chunk < 1:
        raise ValueError(f"chunk must be positive, not {chunk}")
    starts = range(0, len(paths), chunk)
    workers = min(workers or _cores(), len(starts))
    if workers <= 1:
        for start in starts:
            out[start:start + chunk] = _decode_chunk(paths[start:start + chunk], size)
        return
    _decode_in_pool(paths, size, out, workers, chunk)


def _cores() -> int:
    from ..hardware import cores  # here: the decoding workers import this module, and need no torch
    return cores()


def _decode_in_pool(paths: list[Path], size: int, out: np.ndarray, workers: int, chunk: int) -> None:
    # Not fork: it copies a parent that may hold torch's threads, which can deadlock a child (Python 3.12 warns).
    # forkserver forks workers from a clean single-threaded server; spawn where the platform lacks it
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    pending = iter(range(0, len(paths), chunk))
    running: dict[Future, int] = {}
    pool = ProcessPoolExecutor(workers, mp_context=context)
    try:
        # Two chunks in flight per worker keep every worker busy while bounding what waits in memory
        _submit(pool, running, pending, paths, size, chunk, 2 * workers)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                start = running.pop(future)
                out[start:start + chunk] = future.result()  # re-raises a worker's UserError here
            _submit(pool, running, pending, paths, size, chunk, len(done))
    finally:
        # After an error, chunks not yet started are dropped rather than decoded for nothing
        pool.shutdown(wait=True, cancel_futures=True)


def _submit(pool: ProcessPoolExecutor, running: dict[Future, int], pending: Iterator[int], paths: list[Path],
            size: int, chunk: int, count: int) -> None:
    for start in pending:
        running[pool.submit(_decode_chunk, paths[start:start + chunk], size)] = start
        count -= 1
        if count == 0:
            return


def _decode_chunk(paths: list[Path], size: int) -> np.ndarray:
    """One chunk's images as k×3×size×size uint8: what a worker sends back (the parent writes it)."""
    rows = np.empty((len(paths), 3, size, size), dtype=np.uint8)
    for i, path in enumerate(paths):
        rows[i] = _decode_one(path, size).transpose(2, 0, 1)
    return rows


def _decode_one(path: Path, size: int) -> np.ndarray:
    """One image as size×size×3 uint8: the shorter side resized to `size`, the longer centre-cropped. EXIF
    orientation is not applied, as torchvision's ImageFolder does not apply it either."""
    from PIL import Image
    try:
        with Image.open(path) as image:
            if image.size != (size, size):
                # JPEG only: decode at 1/2, 1/4 or 1/8 scale while that stays REDUCING_GAP times the target
                scale = size / min(image.size)
                image.draft(None, (int(image.width * scale * REDUCING_GAP), int(image.height * scale * REDUCING_GAP)))
            image = image.convert("RGB")
            if image.size != (size, size):  # a size×size image is kept bit for bit
                image = _resize_crop(image, size)
            return np.asarray(image)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise UserError(f"{path}: cannot decode this image ({error}); replace or delete the file") from error


def _resize_crop(image, size: int):
    # The centred square (the whole shorter side) resampled straight to size×size: what resizing the shorter side
    # to `size` and cropping gives, without resampling the pixels the crop drops. Its offset is rounded to a whole
    # source pixel, so that an image whose shorter side is already `size` is only cropped, not resampled.
    # BILINEAR over LANCZOS: Pillow's filters widen with the reduction, so bilinear does not alias when shrinking,
    # and with reducing_gap it is several times faster, which counts over ImageNet's 1.3M large photos; Lanczos'
    # extra sharpness is invisible at 64 or 224 pixels, and it rings at edges.
    from PIL import Image
    width, height = image.size
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    box = (left, top, left + side, top + side)
    if side == size:
        return image.crop(box)
    return image.resize((size, size), Image.BILINEAR, box=box, reducing_gap=REDUCING_GAP)


def _tiny_root(root: Path) -> Path:
    for candidate in (root, root / TINY_FOLDER):
        if (candidate / "wnids.txt").is_file():
            return candidate
    raise UserError(f"{root} holds no wnids.txt (nor {TINY_FOLDER}/wnids.txt): point --from at the unpacked "
                    f"{TINY_FOLDER} folder or the folder holding it")


def _wnids(path: Path) -> list[str]:
    wnids = [line.strip() for line in _read_lines(path, "class list") if line.strip()]
    if not wnids:
        raise UserError(f"{path} lists no classes: it should hold one wnid per line")
    _check_class_list(wnids, where=f"{path}: ")
    return wnids


def _check_class_list(wnids: list[str], where: str = "") -> None:
    if not wnids:
        raise UserError(f"{where}the class list is empty: name at least one wnid")
    repeated = sorted(wnid for wnid, count in Counter(wnids).items() if count > 1)
    if repeated:
        raise UserError(f"{where}{', '.join(repeated)} listed more than once: each class must appear once")


def _tiny_val(root: Path, wnids: list[str]) -> tuple[list[Path], np.ndarray]:
    """val/images labelled by val_annotations.txt (file, wnid, box), in file-name order."""
    annotations = root / "val" / "val_annotations.txt"
    label = {wnid: i for i, wnid in enumerate(wnids)}
    labelled: dict[str, int] = {}
    for number, line in enumerate(_read_lines(annotations, "val annotations"), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in label:
            raise UserError(f"{annotations}, line {number}: expected a file name and one of wnids.txt's wnids, "
                            f"tab-separated, got {line.strip()!r}")
        if fields[0] in labelled:
            raise UserError(f"{annotations}, line {number}: {fields[0]} is annotated twice")
        labelled[fields[0]] = label[fields[1]]
    if not labelled:
        raise UserError(f"{annotations} labels no images: the val split would be empty")
    paths = [root / "val" / "images" / name for name in sorted(labelled)]
    absent = [p for p in paths if not p.is_file()]
    if absent:
        raise UserError(f"{absent[0]} is annotated in {annotations} but missing ({len(absent)} missing in all): "
                        "unpack the whole archive again")
    return paths, np.array([labelled[p.name] for p in paths], dtype=np.int64)


def _images(folder: Path, what: str) -> list[Path]:
    """The image files in folder, in name order; a missing or empty folder is an error."""
    if not folder.is_dir():
        raise UserError(f"{what}: {folder} is not a folder; is the dataset unpacked completely?")
    # scandir: its entries know their type without a stat per file (an ImageNet class holds about 1300).
    # Hidden files are skipped: copies made on macOS leave ._name.JPEG files that are not images.
    with os.scandir(folder) as entries:
        found = sorted(Path(e.path) for e in entries
                       if Path(e.name).suffix.lower() in IMAGE_SUFFIXES and not e.name.startswith(".") and e.is_file())
    if not found:
        raise UserError(f"{what}: {folder} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    return found


def _missing_classes(folder: Path, missing: list[str]) -> str:
    """The error for class folders absent from train/ or val/, with a hint when val/ is ImageNet's flat layout."""
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    with os.scandir(folder) as entries:
        flat = any(e.is_file() and Path(e.name).suffix.lower() in IMAGE_SUFFIXES for e in entries)
    if folder.name == "val" and flat:
        return (f"{folder} holds its images flat, not in class folders: move each into val/<wnid>/ (the labels are "
                f"in ImageNet's LOC_val_solution.csv or its devkit) and run again")
    return f"{folder} has no folder for {shown}: check the class list's wnids against {folder}"


def _labelled(per_class: list[list[Path]]) -> tuple[list[Path], np.ndarray]:
    """Class by class, each class's files in name order; label = the class's position."""
    paths = [p for files in per_class for p in files]
    labels = np.repeat(np.arange(len(per_class), dtype=np.int64), [len(files) for files in per_class])
    return paths, labels


def _readable(root: Path, wnids: list[str]) -> list[str]:
    """Each wnid's first name from a names file in root, else the wnid. A name two classes share (ImageNet has
    two "crane"s and two "maillot"s) gets its wnid appended, so that every class reads differently."""
    names = next((_names(root / f) for f in NAME_FILES if (root / f).is_file()), {})
    readable = [names.get(wnid) or wnid for wnid in wnids]
    counts = Counter(readable)
    return [f"{name} ({wnid})" if counts[name] > 1 else name for name, wnid in zip(readable, wnids)]


def _names(path: Path) -> dict[str, str]:
    """wnid -> first name, from lines `wnid<TAB or space>name, other name, ...`."""
    names = {}
    for line in _read_lines(path, "class names"):
        parts = line.strip().split(maxsplit=1)
        if len(parts) == 2:
            names[parts[0]] = parts[1].split(",")[0].strip()
    return names


def _read_lines(path: Path, what: str) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as error:
        raise UserError(f"{path} not found: the {what} is needed; check the path") from error
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read the {what} {path}: {error}") from error
