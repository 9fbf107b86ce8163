"""CORe50: its 128x128 images as one npz, and the paths that name each image's session and object."""
from __future__ import annotations

import re
import zipfile
import zlib
from pathlib import Path

import numpy as np

from cl_bench.errors import UserError

from .common import Layout, Reader, Source, _source, _text, _unpickle

CORE50_TEST_SESSIONS = (3, 7, 10)  # CORe50's test sessions (Lomonaco & Maltoni 2017); the other 8 train


def _load_core50(paths: list[Path]) -> Source:
    """core50_imgs.npz ('x': Nx128x128x3 uint8) and paths.pkl (N paths 'sS/oO/...'): label = object O - 1 (50
    classes), test = the sessions CORE50_TEST_SESSIONS."""
    npz_path, paths_path = paths
    try:
        with np.load(npz_path, allow_pickle=False) as npz:
            images = npz["x"]
    except (OSError, KeyError, ValueError, zlib.error, zipfile.BadZipFile) as error:  # BadZipFile: cut short
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


READERS = {"core50": Reader(Layout(
    "CORe50", "core50", ("core50_imgs.npz", "paths.pkl"), ("",), None, (),
    "the 128×128 images as one npz and their paths, from the CORe50 site (vlomonaco.github.io/core50)",
), _load_core50)}
