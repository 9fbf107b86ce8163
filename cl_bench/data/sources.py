"""Read each dataset's canonical on-disk files straight into uint8 tensors.

Files are only ever fetched by torchvision's own downloader (which verifies checksums); the pixels
and labels always come from our readers below, which validate what they parse so that a truncated
or foreign file surfaces as a one-line UserError rather than as silently wrong data.
"""

from __future__ import annotations

import gzip
import math
import os
import pickle
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cl_bench.checks import Choice
from cl_bench.data import cache
from cl_bench.errors import UserError


class SourceName(Choice):
    """The datasets whose canonical files a source reads (dataset.source)."""

    digits = "digits"  # scikit-learn's bundled 8×8 digits
    mnist = "mnist"
    fashion_mnist = "fashion_mnist"
    cifar10 = "cifar10"
    cifar100 = "cifar100"
    svhn = "svhn"
    miniimagenet = "miniimagenet"  # the 100 classes of miniImageNet's cache pickles, 84×84
    core50 = "core50"  # CORe50's 50 objects, 128×128
    tensors = "tensors"  # your own arrays: an .npz or .safetensors file at dataset.path
    image_folder = "image_folder"  # your own images: dataset.path/{train,test}/<class>/<image>
    tinyimagenet = "tinyimagenet"  # Tiny ImageNet's 200 classes at 64×64, as `cl-bench data prepare` writes it
    imagenet_subset = "imagenet_subset"  # a class list over ImageNet, resized by `cl-bench data prepare`


# Sources read only from the files `cl-bench data prepare` writes (data/prepared.py): decoding their JPEG folders
# takes minutes, so it happens once there, never at the start of a run.
PREPARED = frozenset({SourceName.tinyimagenet, SourceName.imagenet_subset})


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
class _Layout:
    title: str  # the dataset's usual name, for messages
    folder: str  # where torchvision's download leaves the files, relative to data.root
    files: tuple[str, ...]
    suffixes: tuple[str, ...]  # accepted endings of each file, preferred first
    torchvision_class: str | None  # the torchvision.datasets class whose download=True fetches the files
    splits: tuple[dict, ...]  # its keyword arguments for the train and the test split
    where: str = ""  # for a dataset torchvision cannot fetch: where to get the files


_IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_TRAIN_TEST = ({"train": True}, {"train": False})
_LAYOUTS = {
    "mnist": _Layout("MNIST", "MNIST/raw", _IDX_FILES, ("", ".gz"), "MNIST", _TRAIN_TEST),
    "fashion_mnist": _Layout("Fashion-MNIST", "FashionMNIST/raw", _IDX_FILES, ("", ".gz"), "FashionMNIST", _TRAIN_TEST),
    "cifar10": _Layout(
        "CIFAR-10",
        "cifar-10-batches-py",
        (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"),
        ("",),
        "CIFAR10",
        _TRAIN_TEST,
    ),
    "cifar100": _Layout("CIFAR-100", "cifar-100-python", ("train", "test"), ("",), "CIFAR100", _TRAIN_TEST),
    "svhn": _Layout(
        "SVHN", "", ("train_32x32.mat", "test_32x32.mat"), ("",), "SVHN", ({"split": "train"}, {"split": "test"})
    ),
    "miniimagenet": _Layout(
        "miniImageNet", "miniImageNet", tuple(f"mini-imagenet-cache-{s}.pkl" for s in ("train", "val", "test")), ("",),
        None, (), "the cache pickles of Ravi & Larochelle's split, as learn2learn and Mammoth download them",
    ),
    "core50": _Layout(
        "CORe50", "core50", ("core50_imgs.npz", "paths.pkl"), ("",), None, (),
        "the 128×128 images as one npz and their paths, from the CORe50 site (vlomonaco.github.io/core50)",
    ),
}
MINIIMAGENET_TEST_SHARE = 6  # the last sixth of each class's images (100 of 600) is its test split
CORE50_TEST_SESSIONS = (3, 7, 10)  # CORe50's test sessions (Lomonaco & Maltoni 2017); the other 8 train


def load(name: str, root: str | os.PathLike, download: bool = False, use_cache: bool = False,
         path: str | os.PathLike | None = None, image_size: int | None = None) -> Source:
    """The train and test split of dataset `name`, read from its canonical files under `root` (or from the
    cache of decoded datasets, see data/cache.py, when `use_cache` and it holds these very files). Your own data
    (tensors, image_folder) is read from `path` instead, image folders resized to image_size when given."""
    if name == "digits":
        return _load_digits()
    if name in ("tensors", "image_folder"):
        files = _custom_files(name, Path(path))

        def read():
            return _load_tensors(files[0]) if name == "tensors" else _load_image_folder(Path(path), image_size)
        key = name if image_size is None else f"{name}-{image_size}px"
        return cache.cached(key, files, read, Source) if use_cache else read()
    if name not in _LAYOUTS:  # the config names SourceName's values only; this guards direct calls
        raise UserError(f"unknown data source '{name}': choose one of {', '.join(SourceName)}")
    paths = _files(name, Path(root), download)
    if use_cache:
        return cache.cached(name, paths, lambda: _read(name, paths), Source)
    return _read(name, paths)


def from_prepared(store, mapped: bool) -> Source:
    """A prepared dataset as a source: its images mapped from their files (stream) or read whole."""
    images = [store.images(split) for split in ("train", "test")]
    if not mapped:
        images = [x.load() for x in images]
    meta = store.meta
    return Source(meta["name"], images[0], store.labels("train"), images[1], store.labels("test"),
                  tuple(meta["mean"]), tuple(meta["std"]))


def _read(name: str, paths: list[Path]) -> Source:
    if name == "cifar10":
        return _load_cifar10(paths)
    if name == "cifar100":
        return _load_cifar100(paths)
    if name == "svhn":
        return _load_svhn(paths)
    if name == "miniimagenet":
        return _load_miniimagenet(paths)
    if name == "core50":
        return _load_core50(paths)
    return _load_idx(name, paths)


# --- locating and fetching files ---


def _files(name: str, root: Path, download: bool) -> list[Path]:
    """The dataset's files in the order of its layout, fetched first if missing and `download` is set."""
    layout = _LAYOUTS[name]
    folder = root / layout.folder
    missing = _missing(folder, layout)
    if missing and download and layout.torchvision_class is None:
        raise UserError(f"{name} cannot be downloaded by cl-bench: put {layout.where} "
                        f"({', '.join(missing)}) in {folder}")
    if missing and download:
        _download(layout, root)
        missing = _missing(folder, layout)
        if missing:
            raise UserError(f"{layout.title} was downloaded into {root} but {folder} still lacks {', '.join(missing)}")
    if missing:
        holder = f"contains {layout.folder}" if layout.folder else "holds them"
        fetch = f"; they are {layout.where}" if layout.torchvision_class is None else (
            ", or pass data.download=true to fetch them")
        raise UserError(
            f"{name} needs the {layout.title} files in {folder}, which lacks {', '.join(missing)}: put them there "
            f"or set data.root to the folder that {holder}{fetch}"
        )
    return [_first_existing(folder, stem, layout.suffixes) for stem in layout.files]


def _first_existing(folder: Path, stem: str, suffixes: tuple[str, ...]) -> Path | None:
    for suffix in suffixes:
        if (folder / (stem + suffix)).is_file():
            return folder / (stem + suffix)
    return None


def _missing(folder: Path, layout: _Layout) -> list[str]:
    """The expected file names not found in `folder`, written as `name[.gz]` when several endings are accepted."""
    endings = "".join(f"[{s}]" for s in layout.suffixes if s)
    return [stem + endings for stem in layout.files if _first_existing(folder, stem, layout.suffixes) is None]


def _download(layout: _Layout, root: Path) -> None:
    # Imported here: torchvision takes seconds to import and only downloads need it.
    import torchvision.datasets

    dataset_class = getattr(torchvision.datasets, layout.torchvision_class)
    try:
        for split in layout.splits:
            dataset_class(str(root), download=True, **split)
    except Exception as error:  # network, checksum and archive failures all mean "could not fetch"
        reason = " ".join(str(error).split()) or type(error).__name__
        raise UserError(f"could not download {layout.title} into {root}: {reason}") from error


# --- readers ---


def _load_digits() -> Source:
    """scikit-learn's bundled 8x8 digits (values 0..16), with a fixed stratified 20% test split."""
    # Imported here: scikit-learn is slow to import and only this reader needs it.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = np.rint(digits.images * (255 / 16)).astype(np.uint8)[:, None]
    train_x, test_x, train_y, test_y = train_test_split(
        images, digits.target, test_size=0.2, stratify=digits.target, random_state=0
    )
    return _source("digits", (train_x, train_y), (test_x, test_y))


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


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            return gzip.decompress(path.read_bytes())  # at once: several times faster than reading a stream
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as error:  # gzip reports damage through all three
        raise UserError(f"cannot read {path}: {error}") from error


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


def _entry(batch: dict, key: str, path: Path):
    # The original files were pickled under Python 2 and load with bytes keys; re-pickled copies have str keys.
    for candidate in (key.encode(), key):
        if candidate in batch:
            return batch[candidate]
    raise UserError(f"{path} is not a CIFAR batch: it has no '{key}' entry")


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


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _load_miniimagenet(paths: list[Path]) -> Source:
    """The three cache pickles ({'image_data': Nx84x84x3 uint8, 'class_dict': {wnid: indices}}) pooled: the 100
    classes, labelled in the order of their names; each class's last sixth (in file order) is its test split."""
    per_class = {}
    for path in paths:
        cache_file = _unpickle(path, "a miniImageNet cache pickle")
        if not isinstance(cache_file, dict):
            raise UserError(f"{path} is not a miniImageNet cache pickle: it holds a {type(cache_file).__name__}")
        images, class_dict = _entry(cache_file, "image_data", path), _entry(cache_file, "class_dict", path)
        if not (isinstance(images, np.ndarray) and images.dtype == np.uint8 and images.shape[1:] == (84, 84, 3)):
            raise UserError(f"{path}: 'image_data' must be a uint8 array of shape Nx84x84x3")
        for name, rows in class_dict.items():
            rows = np.asarray(rows)
            if rows.dtype.kind not in "iu" or rows.size == 0 or rows.min() < 0 or rows.max() >= len(images):
                raise UserError(f"{path}: class {_text(name)} lists image indices outside 0..{len(images) - 1}")
            per_class[_text(name)] = images[rows]
    train, test = ([], []), ([], [])
    for label, name in enumerate(sorted(per_class)):
        images = per_class[name]
        cut = len(images) - len(images) // MINIIMAGENET_TEST_SHARE
        for (xs, ys), part in ((train, images[:cut]), (test, images[cut:])):
            xs.append(part)
            ys.append(np.full(len(part), label, dtype=np.int64))
    return _source("miniimagenet", *((np.concatenate(x).transpose(0, 3, 1, 2), np.concatenate(y)) for x, y in
                                     (train, test)))


def _load_core50(paths: list[Path]) -> Source:
    """core50_imgs.npz ('x': Nx128x128x3 uint8) and paths.pkl (N paths 'sS/oO/...'): label = object O - 1 (50
    classes), test = the sessions CORE50_TEST_SESSIONS."""
    npz_path, paths_path = paths
    try:
        with np.load(npz_path, allow_pickle=False) as npz:
            images = npz["x"]
    except (OSError, KeyError, ValueError, zlib.error) as error:
        raise UserError(f"cannot read {npz_path} as CORe50's image archive: {error}") from error
    if not (images.dtype == np.uint8 and images.ndim == 4 and images.shape[1:] == (128, 128, 3)):
        raise UserError(f"{npz_path}: 'x' must be a uint8 array of shape Nx128x128x3")
    names = _unpickle(paths_path, "CORe50's list of image paths")
    if not isinstance(names, list) or len(names) != len(images):
        raise UserError(f"{paths_path} must list one path per image of {npz_path} ({len(images)})")
    parsed = [re.match(r"s(\d+)/o(\d+)/", _text(n)) for n in names]
    if any(m is None or not 1 <= int(m[2]) <= 50 for m in parsed):
        raise UserError(f"{paths_path}: every path must start 'sS/oO/' with O in 1..50")
    session = np.array([int(m[1]) for m in parsed])
    labels = np.array([int(m[2]) - 1 for m in parsed], dtype=np.int64)
    test = np.isin(session, CORE50_TEST_SESSIONS)
    return _source("core50", (images[~test].transpose(0, 3, 1, 2), labels[~test]),
                   (images[test].transpose(0, 3, 1, 2), labels[test]))


def _load_svhn(paths: list[Path]) -> Source:
    train_path, test_path = paths
    return _source("svhn", _read_svhn_split(train_path), _read_svhn_split(test_path))


def _read_svhn_split(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """SVHN's cropped-digits .mat: X is 32x32x3xN (height, width, channel, image), y is Nx1 with 10 for digit 0."""
    # Imported here: only this reader needs scipy.
    import scipy.io

    try:
        mat = scipy.io.loadmat(path)
    except Exception as error:  # scipy signals a damaged .mat with several unrelated exception types
        raise UserError(f"cannot read {path} as a MATLAB file: {error}") from error
    images, labels = mat.get("X"), mat.get("y")
    if isinstance(images, np.ndarray) and images.ndim == 3:  # MATLAB drops trailing singleton axes: N = 1
        images = images[..., None]
    if not (
        isinstance(images, np.ndarray)
        and images.dtype == np.uint8
        and images.shape[:3] == (32, 32, 3)
        and images.ndim == 4
    ):
        raise UserError(f"{path}: 'X' must be a uint8 array of shape 32x32x3xN")
    if not isinstance(labels, np.ndarray):
        raise UserError(f"{path} has no 'y' label array")
    labels = _labels(labels.reshape(-1), images.shape[3], range(1, 11), path)
    labels[labels == 10] = 0
    return images.transpose(3, 2, 0, 1), labels


# --- your own data ---

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")  # as torchvision's ImageFolder


def _custom_files(name: str, path: Path) -> list[Path]:
    """The files a custom source reads (the cache's key): the array file, or every image of the two splits."""
    if name == "tensors":
        if not (path.is_file() and path.suffix in (".npz", ".safetensors")):
            raise UserError(f"dataset.path={path} must be an .npz or .safetensors file holding train_x, train_y, "
                            "test_x and test_y")
        return [path]
    if not all((path / split).is_dir() for split in ("train", "test")):
        raise UserError(f"dataset.path={path} must hold train/ and test/, each with one folder of images per class "
                        "(torchvision's ImageFolder layout)")
    return [f for split in ("train", "test") for f in sorted((path / split).rglob("*"))
            if f.suffix.lower() in IMAGE_SUFFIXES]


def _load_tensors(path: Path) -> Source:
    """train_x, train_y, test_x, test_y: images N×H×W (grey), N×C×H×W or N×H×W×C (C of 1 or 3), uint8 or
    floats in [0, 1] (stored as 8 bits, like every source), integer labels from 0."""
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as packed:
                arrays = {k: packed[k] for k in packed.files}
        else:
            from safetensors.numpy import load_file
            arrays = load_file(path)
    except Exception as error:  # numpy and safetensors report damage with many exception types
        raise UserError(f"cannot read {path}: {error}") from error
    missing = [k for k in ("train_x", "train_y", "test_x", "test_y") if k not in arrays]
    if missing:
        found = ", ".join(sorted(arrays)) or "no arrays"
        raise UserError(f"{path} lacks {', '.join(missing)}: it holds {found}; dataset=custom needs train_x, "
                        "train_y, test_x and test_y (rename the arrays when saving them)")
    splits = []
    for split in ("train", "test"):
        x = _as_nchw_uint8(arrays[f"{split}_x"], path, f"{split}_x")
        y = np.asarray(arrays[f"{split}_y"]).reshape(-1)
        splits.append((x, _labels(y, len(x), range(0, max(int(y.max(initial=0)) + 1, 1)), path)))
    if splits[0][0].shape[1:] != splits[1][0].shape[1:]:
        raise UserError(f"{path}: train_x and test_x images differ in shape ({splits[0][0].shape[1:]} and "
                        f"{splits[1][0].shape[1:]})")
    return _source("tensors", *splits)


def _as_nchw_uint8(x: np.ndarray, path: Path, key: str) -> np.ndarray:
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[3] in (1, 3) and x.shape[1] not in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    elif not (x.ndim == 4 and x.shape[1] in (1, 3)):
        raise UserError(f"{path}: {key} must be images N×H×W, N×C×H×W or N×H×W×C with 1 or 3 channels, "
                        f"not of shape {x.shape}")
    if x.dtype == np.uint8:
        return x
    if x.dtype.kind == "f" and x.size and (np.nanmin(x) < 0 or np.nanmax(x) > 1 or np.isnan(x).any()):
        raise UserError(f"{path}: {key} holds floats outside [0, 1]: scale them to [0, 1] or store uint8 pixels")
    if x.dtype.kind != "f":
        raise UserError(f"{path}: {key} must be uint8 pixels or floats in [0, 1], not {x.dtype}")
    return np.rint(x * 255).astype(np.uint8)


def _load_image_folder(root: Path, image_size: int | None) -> Source:
    """root/{train,test}/<class>/<image>: classes labelled in the order of their folder names (as ImageFolder),
    grey if every image is, else RGB; decoded once (the cache keeps the result)."""
    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    test_classes = sorted(p.name for p in (root / "test").iterdir() if p.is_dir())
    if not classes or not set(test_classes) <= set(classes):
        raise UserError(f"{root}/train must hold one folder per class and {root}/test only folders among them; "
                        f"found {classes or 'none'} and {test_classes}")
    from PIL import Image, UnidentifiedImageError
    decoded = {}
    for split in ("train", "test"):
        for label, name in enumerate(classes):
            for f in sorted((root / split / name).glob("*")) if (root / split / name).is_dir() else []:
                if f.suffix.lower() not in IMAGE_SUFFIXES:
                    continue
                try:
                    image = Image.open(f)
                    image.load()
                except (UnidentifiedImageError, OSError) as error:
                    raise UserError(f"{f} could not be decoded as an image ({error})") from error
                if image_size:
                    image = image.resize((image_size, image_size), Image.BILINEAR)
                decoded.setdefault(split, []).append((image, label, f))
    grey = all(image.mode in ("L", "1") for part in decoded.values() for image, _, _ in part)
    splits = []
    for split in ("train", "test"):
        if not decoded.get(split):
            raise UserError(f"{root}/{split} holds no images ({', '.join(IMAGE_SUFFIXES)})")
        arrays = [np.asarray(image.convert("L" if grey else "RGB")) for image, _, _ in decoded[split]]
        shapes = {a.shape for a in arrays}
        if len(shapes) > 1:
            raise UserError(f"{root}/{split}: images of different sizes ({', '.join(map(str, sorted(shapes)))}): "
                            "pass dataset.image_size=N to resize them")
        x = np.stack(arrays)
        splits.append((x[:, None] if grey else x.transpose(0, 3, 1, 2),
                       np.array([label for _, label, _ in decoded[split]], dtype=np.int64)))
    return _source("image_folder", *splits)


# --- shared checks and assembly ---


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
