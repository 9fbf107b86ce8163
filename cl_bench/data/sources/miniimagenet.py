"""miniImageNet: the three cache pickles of Ravi & Larochelle's split."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cl_bench.errors import UserError

from .common import Layout, Reader, Source, _entry, _source, _text, _unpickle

MINIIMAGENET_TEST_SHARE = 6  # the last sixth of each class's images (100 of 600) is its test split


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


READERS = {"miniimagenet": Reader(Layout(
    "miniImageNet", "miniImageNet", tuple(f"mini-imagenet-cache-{s}.pkl" for s in ("train", "val", "test")), ("",),
    None, (), "the cache pickles of Ravi & Larochelle's split, as learn2learn and Mammoth download them",
), _load_miniimagenet)}
