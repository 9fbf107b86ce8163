"""SVHN's cropped digits: MATLAB .mat files, read with scipy."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cl_bench.errors import UserError

from .common import Layout, Reader, Source, _labels, _source


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


READERS = {"svhn": Reader(Layout("SVHN", "", ("train_32x32.mat", "test_32x32.mat"), ("",), "SVHN",
                                 ({"split": "train"}, {"split": "test"})), _load_svhn)}
