"""Your own data (dataset=custom): arrays in an .npz or .safetensors file, or an image folder; and scikit-learn's
bundled digits, the default dataset that needs no file."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cl_bench.errors import UserError

from ..image_folders import IMAGE_SUFFIXES
from .common import Source, _labels, _source


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
