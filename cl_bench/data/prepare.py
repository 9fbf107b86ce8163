"""`cl-bench data prepare cifar10 --from SRC --root ROOT`: CIFAR-10 in the layout torchvision's download leaves
(ROOT/cifar-10-batches-py/: data_batch_1..5, test_batch, batches.meta), which dataset=split_cifar10 reads, built
from the files a user has:

- the official archive, cifar-10-python.tar.gz (or a folder holding it): its batches are extracted as they are;
- an image folder, SRC/{train,test}/<class>/<image> (torchvision's ImageFolder layout), the ten class folders
  named as CIFAR-10's classes;
- encoded images packed into one .npz: per split (train, test) `<split>_jpeg`, the encoded files back to back
  (uint8), `<split>_offsets`, where each begins (N + 1 entries), and `<split>_labels` (N).

Decoding happens once here; runs then read the canonical batches (and cache them, see data/cache.py).

`cl-bench data prepare SOURCE --root ROOT` writes a dataset as the memory-mapped files of data/prepared.py, which
data.residency=stream reads: Tiny ImageNet and ImageNet subsets from their JPEG folders (decoded in parallel,
resized once), any other source from the files its reader reads.
"""
import io
import pickle
import tarfile
import zipfile
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..files import write_bytes_atomic

TINYIMAGENET_SIZE = 64
IMAGENET_SIZE = 224  # ImageNet-100 as class-incremental papers train it (LUCIR, PODNet): 224×224 crops
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
FOLDER = "cifar-10-batches-py"
ARCHIVE = "cifar-10-python.tar.gz"
TRAIN_BATCHES = 5


def prepare_cifar10(source: Path, root: Path) -> Path:
    """Write root/cifar-10-batches-py from source; an existing complete folder is left as it is."""
    out = root / FOLDER
    if (out / "test_batch").is_file() and (out / "batches.meta").is_file():
        return out
    if source.is_dir() and (source / ARCHIVE).is_file():
        source = source / ARCHIVE
    if source.name.endswith((".tar.gz", ".tgz")):
        return _extract(source, root)
    if source.suffix == ".npz":
        train, test = (_from_npz(source, split) for split in ("train", "test"))
    elif (source / "train").is_dir() and (source / "test").is_dir():
        train, test = (_from_folder(source / split) for split in ("train", "test"))
    else:
        raise UserError(f"{source} is none of what `cl-bench data prepare cifar10` reads: {ARCHIVE} (or a folder "
                        "holding it), a folder with train/ and test/ class folders, or an .npz of encoded images")
    _write_batches(out, train, test)
    return out


def _extract(archive: Path, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith(f"{FOLDER}/")]
            if not members:
                raise UserError(f"{archive} holds no {FOLDER}/: it is not CIFAR-10's python archive")
            tar.extractall(root, members=members, filter="data")  # regular files under FOLDER only
    except (tarfile.TarError, OSError) as error:
        raise UserError(f"cannot extract {archive}: {error}") from error
    return root / FOLDER


def _from_npz(path: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        packed = np.load(path)
        blob, offsets, labels = (packed[f"{split}_{key}"] for key in ("jpeg", "offsets", "labels"))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:  # BadZipFile: a file cut short
        raise UserError(f"{path}: not an .npz of encoded images with {split}_jpeg, {split}_offsets and "
                        f"{split}_labels ({error})") from error
    files = [blob[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:])]
    return _decode(files, path), _checked_labels(labels, len(files), path)


def _from_folder(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    found = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if sorted(found) != sorted(CLASSES):
        raise UserError(f"{folder} must hold one folder per CIFAR-10 class ({', '.join(CLASSES)}), found "
                        f"{', '.join(found) or 'none'}")
    paths = [(p, label) for label, name in enumerate(CLASSES) for p in sorted((folder / name).iterdir()) if p.is_file()]
    images = _decode([p.read_bytes() for p, _ in paths], folder)
    return images, np.array([label for _, label in paths], dtype=np.int64)


def _decode(files: list[bytes], where: Path) -> np.ndarray:
    """Encoded images (JPEG, PNG, ...) to N×3072 uint8 rows, channel-major as in CIFAR's batches. Once per
    dataset, so one image at a time through Pillow (torchvision's decoders are deprecated)."""
    from PIL import Image, UnidentifiedImageError
    rows = np.empty((len(files), 3 * 32 * 32), dtype=np.uint8)
    for i, data in enumerate(files):
        try:
            image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        except (UnidentifiedImageError, OSError) as error:
            raise UserError(f"{where}: image {i} could not be decoded ({error})") from error
        if image.shape != (32, 32, 3):
            raise UserError(f"{where}: CIFAR-10 images are 32×32, image {i} is {image.shape[1]}×{image.shape[0]}")
        rows[i] = image.transpose(2, 0, 1).reshape(-1)
    return rows


def _checked_labels(labels: np.ndarray, n: int, where: Path) -> np.ndarray:
    labels = np.asarray(labels, dtype=np.int64)
    if labels.shape != (n,) or labels.min(initial=0) < 0 or labels.max(initial=0) >= len(CLASSES):
        raise UserError(f"{where}: expected {n} labels in 0..9")
    return labels


def _write_batches(out: Path, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray]) -> None:
    """The canonical files, each written under a temporary name and renamed, meta last (it marks completeness)."""
    out.mkdir(parents=True, exist_ok=True)
    parts = np.array_split(np.arange(len(train[1])), TRAIN_BATCHES)
    batches = {f"data_batch_{i + 1}": (train[0][rows], train[1][rows]) for i, rows in enumerate(parts)}
    batches["test_batch"] = test
    for name, (x, y) in batches.items():
        _dump(out / name, {"batch_label": name, "data": x, "labels": y.tolist()})
    _dump(out / "batches.meta", {"label_names": list(CLASSES), "num_cases_per_batch": len(parts[0]),
                                 "num_vis": 3072})


def _dump(path: Path, obj: dict) -> None:
    write_bytes_atomic(path, pickle.dumps(obj, protocol=4))


def prepare_stream(name: str, root: Path, source: Path | None = None, classes: Path | None = None,
                   size: int = IMAGENET_SIZE, workers: int | None = None, download: bool = False):
    """Write root/prepared/<name>/ (data/prepared.py) and return it; a complete one is left as it is."""
    from . import prepared, sources
    done = prepared.find(root, name)
    if done is not None:
        return done
    if name in sources.PREPARED:
        from . import image_folders  # Pillow and a process pool: only for the image folders
    if name == "tinyimagenet":
        return _from_image_folders(name, root, image_folders.tinyimagenet_files(_required(source, name)),
                                   TINYIMAGENET_SIZE, workers, f"tiny-imagenet-200 at {source}")
    if name == "imagenet_subset":
        if classes is None:
            raise UserError("cl-bench data prepare imagenet_subset needs --classes FILE: the wnids, one per line")
        folders = image_folders.imagenet_subset_files(_required(source, name), image_folders.class_list(classes))
        return _from_image_folders(name, root, folders, size, workers, f"ImageNet at {source}, classes {classes}")
    if source is not None:
        raise UserError(f"--from is for cifar10, tinyimagenet and imagenet_subset: {name} is read from its files "
                        f"under --root")
    from .sources.files import MissingFiles
    try:
        loaded = sources.load(name, root, download=download)
    except MissingFiles as missing:  # said with this command's options, not a run's keys
        raise UserError(missing.for_prepare()) from None
    return prepared.prepare_source(loaded, root)


def _required(source: Path | None, name: str) -> Path:
    if source is None:
        raise UserError(f"cl-bench data prepare {name} needs --from DIR: the dataset's image folder")
    return source


def _from_image_folders(name: str, root: Path, folders, size: int, workers: int | None, described: str):
    from . import image_folders, prepared
    writer = prepared.Writer(root, name)
    for split in ("train", "test"):
        paths, _ = getattr(folders, split)
        out = writer.open_images(split, len(paths), (3, size, size))
        image_folders.decode_into(paths, size, out, workers)
        out.flush()
        del out
    return writer.finish(name, folders.classes, {split: getattr(folders, split)[1] for split in ("train", "test")},
                         described)
