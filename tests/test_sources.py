"""Readers of cl_bench.data.sources, each fed small files written here in the dataset's canonical format."""

import gzip
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch
import torchvision.datasets
from conftest import real_data

from cl_bench.data import sources
from cl_bench.errors import UserError

IDX_FOLDERS = {"mnist": "MNIST/raw", "fashion_mnist": "FashionMNIST/raw"}


def write_idx(path: Path, array: np.ndarray) -> None:
    """An IDX file of unsigned bytes, gzipped when `path` ends in .gz."""
    payload = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as stream:
            stream.write(payload)
    else:
        path.write_bytes(payload)


def idx_split(seed: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Random images (non-square, to catch swapped axes) and labels covering every digit."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, 6, 5), dtype=np.uint8), (np.arange(count) % 10).astype(np.uint8)


def write_idx_dataset(folder: Path, suffix: str = "", seed: int = 0) -> dict[str, np.ndarray]:
    train_x, train_y = idx_split(seed, 20)
    test_x, test_y = idx_split(seed + 1, 10)
    for stem, array in [
        ("train-images-idx3-ubyte", train_x),
        ("train-labels-idx1-ubyte", train_y),
        ("t10k-images-idx3-ubyte", test_x),
        ("t10k-labels-idx1-ubyte", test_y),
    ]:
        write_idx(folder / (stem + suffix), array)
    return {"train_x": train_x, "train_y": train_y, "test_x": test_x, "test_y": test_y}


def assert_split(source: sources.Source, expected: dict[str, np.ndarray]) -> None:
    """`source` holds exactly the expected NxCxHxW uint8 images and int64 labels."""
    for key, array in expected.items():
        tensor = getattr(source, key)
        want = torch.from_numpy(array.astype(np.int64) if key.endswith(("_y", "_coarse")) else array)
        assert tensor.dtype == want.dtype, key
        assert tensor.shape == want.shape, key
        assert tensor.is_contiguous(), key
        assert torch.equal(tensor, want), key


def assert_stats(source: sources.Source) -> None:
    pixels = source.train_x.numpy() / 255
    assert source.mean == pytest.approx(tuple(pixels.mean(axis=(0, 2, 3))), abs=1e-9)
    assert source.std == pytest.approx(tuple(pixels.std(axis=(0, 2, 3))), abs=1e-9)


# --- MNIST and Fashion-MNIST (IDX) ---


@pytest.mark.parametrize("suffix", ["", ".gz"], ids=["plain", "gz"])
@pytest.mark.parametrize("name", IDX_FOLDERS)
def test_idx_files_load_exactly(tmp_path, name, suffix):
    written = write_idx_dataset(tmp_path / IDX_FOLDERS[name], suffix)
    source = sources.load(name, tmp_path)
    assert source.name == name
    assert_split(source, {key: a[:, None] if key.endswith("_x") else a for key, a in written.items()})
    assert source.train_x.shape == (20, 1, 6, 5)
    assert_stats(source)
    assert source.train_coarse is None and source.test_coarse is None


def test_idx_prefers_plain_file_over_gz(tmp_path):
    folder = tmp_path / "MNIST/raw"
    plain = write_idx_dataset(folder, "", seed=0)
    write_idx_dataset(folder, ".gz", seed=5)
    source = sources.load("mnist", tmp_path)
    assert torch.equal(source.train_x[:, 0], torch.from_numpy(plain["train_x"]))


def test_idx_accepts_a_mix_of_plain_and_gz(tmp_path):
    folder = tmp_path / "MNIST/raw"
    written = write_idx_dataset(folder, ".gz")
    write_idx(folder / "t10k-images-idx3-ubyte", written["test_x"])
    (folder / "t10k-images-idx3-ubyte.gz").unlink()
    assert torch.equal(sources.load("mnist", tmp_path).test_x[:, 0], torch.from_numpy(written["test_x"]))


@pytest.mark.parametrize("suffix", ["", ".gz"], ids=["plain", "gz"])
def test_truncated_idx_is_a_user_error(tmp_path, suffix):
    folder = tmp_path / "MNIST/raw"
    write_idx_dataset(folder, suffix)
    path = folder / ("train-images-idx3-ubyte" + suffix)
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(UserError, match="train-images-idx3-ubyte"):
        sources.load("mnist", tmp_path)


@pytest.mark.parametrize(
    "patch, complaint",
    [
        (lambda raw: b"\x01" + raw[1:], "magic"),
        (lambda raw: raw[:2] + b"\x0d" + raw[3:], "type 0x0d"),
        (lambda raw: raw[:3] + b"\x02" + raw[4:], "2-dimensional"),
        (lambda raw: raw + b"\x00", "truncated or corrupt"),
        (lambda raw: raw[:9], "IDX header"),
    ],
    ids=["magic", "type", "ndim", "trailing-bytes", "short-header"],
)
def test_malformed_idx_header_is_a_user_error(tmp_path, patch, complaint):
    folder = tmp_path / "MNIST/raw"
    write_idx_dataset(folder)
    path = folder / "train-images-idx3-ubyte"
    path.write_bytes(patch(path.read_bytes()))
    with pytest.raises(UserError, match=complaint) as caught:
        sources.load("mnist", tmp_path)
    assert str(path) in str(caught.value)


def test_idx_label_out_of_range_is_a_user_error(tmp_path):
    folder = tmp_path / "FashionMNIST/raw"
    written = write_idx_dataset(folder)
    labels = written["test_y"].copy()
    labels[3] = 10
    write_idx(folder / "t10k-labels-idx1-ubyte", labels)
    with pytest.raises(UserError, match=r"t10k-labels-idx1-ubyte: labels must lie in 0\.\.9"):
        sources.load("fashion_mnist", tmp_path)


def test_idx_label_count_mismatch_is_a_user_error(tmp_path):
    folder = tmp_path / "MNIST/raw"
    written = write_idx_dataset(folder)
    write_idx(folder / "train-labels-idx1-ubyte", written["train_y"][:-1])
    with pytest.raises(UserError, match="expected 20 integer labels"):
        sources.load("mnist", tmp_path)


# --- CIFAR-10 and CIFAR-100 (pickles) ---


def cifar_images(seed: int, count: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (count, 3, 32, 32), dtype=np.uint8)


def write_pickle(path: Path, batch: dict, protocol: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(batch, protocol=protocol))


def cifar_batch(images: np.ndarray, labels: dict[str, list[int]], str_keys: bool) -> dict:
    """A batch dict like CIFAR's own (bytes keys, from Python 2) or a Python 3 re-pickle (str keys)."""
    batch = {
        "batch_label": "test batch",
        "data": images.reshape(len(images), -1),
        **labels,
        "filenames": [f"{i}.png" for i in range(len(images))],
    }
    return batch if str_keys else {key.encode(): value for key, value in batch.items()}


@pytest.mark.parametrize("str_keys, protocol", [(False, 3), (True, 4)], ids=["bytes-keys", "str-keys"])
def test_cifar10_batches_load_exactly(tmp_path, str_keys, protocol):
    folder = tmp_path / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    images = [cifar_images(i, 4) for i in range(5)] + [cifar_images(9, 10)]
    labels = [[(3 * i + j) % 10 for j in range(len(x))] for i, x in enumerate(images)]
    for name, x, y in zip(names, images, labels, strict=True):
        write_pickle(folder / name, cifar_batch(x, {"labels": y}, str_keys), protocol)
    source = sources.load("cifar10", tmp_path)
    assert_split(
        source,
        {
            "train_x": np.concatenate(images[:5]),
            "train_y": np.concatenate(labels[:5]),
            "test_x": images[5],
            "test_y": np.array(labels[5]),
        },
    )
    assert source.train_x.shape == (20, 3, 32, 32)
    assert_stats(source)


def write_cifar100(root: Path, corrupt: str | None = None) -> dict[str, np.ndarray]:
    """Train and test files; `corrupt` names a label key whose first train label is set one past its range."""
    expected = {}
    for split, count, seed in [("train", 20, 0), ("test", 10, 1)]:
        x = cifar_images(seed, count)
        labels = {"fine_labels": (np.arange(count) * 7 + seed) % 100}
        labels["coarse_labels"] = labels["fine_labels"] % 20
        if corrupt and split == "train":
            labels[corrupt][0] = {"fine_labels": 100, "coarse_labels": 20}[corrupt]
        as_lists = {key: value.tolist() for key, value in labels.items()}
        write_pickle(root / "cifar-100-python" / split, cifar_batch(x, as_lists, str_keys=False), 3)
        expected |= {f"{split}_x": x, f"{split}_y": labels["fine_labels"], f"{split}_coarse": labels["coarse_labels"]}
    return expected


def test_cifar100_loads_fine_and_coarse_labels(tmp_path):
    expected = write_cifar100(tmp_path)
    source = sources.load("cifar100", tmp_path)
    assert_split(source, expected)
    assert_stats(source)


def test_cifar_pickled_by_numpy_1_loads(tmp_path):
    """numpy 1 (which wrote the real CIFAR files) names the array reconstructor numpy.core.multiarray."""
    expected = write_cifar100(tmp_path)
    path = tmp_path / "cifar-100-python" / "train"
    legacy = path.read_bytes().replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")
    assert b"cnumpy.core.multiarray\n_reconstruct\n" in legacy
    path.write_bytes(legacy)
    assert torch.equal(sources.load("cifar100", tmp_path).train_x, torch.from_numpy(expected["train_x"]))


@pytest.mark.parametrize("corrupt, complaint", [("fine_labels", r"0\.\.99"), ("coarse_labels", r"0\.\.19")])
def test_cifar100_label_out_of_range_is_a_user_error(tmp_path, corrupt, complaint):
    write_cifar100(tmp_path, corrupt)
    with pytest.raises(UserError, match=complaint):
        sources.load("cifar100", tmp_path)


def test_cifar10_wrong_data_shape_is_a_user_error(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        write_pickle(folder / name, {b"data": np.zeros((2, 1024), np.uint8), b"labels": [0, 1]}, 3)
    with pytest.raises(UserError, match="Nx3072"):
        sources.load("cifar10", tmp_path)


@pytest.mark.parametrize(("batch", "complaint"), [
    ([1, 2, 3], r"test_batch is not a CIFAR batch: it holds a list, not a dict"),
    ({b"labels": [0, 1]}, r"test_batch is not a CIFAR batch: it has no 'data' entry"),
])
def test_cifar10_batch_of_another_kind_is_a_user_error(tmp_path, batch, complaint):
    folder = tmp_path / "cifar-10-batches-py"
    for name in [f"data_batch_{i}" for i in range(1, 6)]:
        write_pickle(folder / name, {b"data": cifar_images(0, 2).reshape(2, -1), b"labels": [0, 1]}, 3)
    write_pickle(folder / "test_batch", batch, 3)
    with pytest.raises(UserError, match=complaint):
        sources.load("cifar10", tmp_path)


class Planted:
    """Unpickling this runs `call(*args)`: the shape of a malicious pickle."""

    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


@pytest.mark.parametrize("payload", ["system", "exec"])
def test_planted_pickle_cannot_run_code(tmp_path, payload):
    marker = tmp_path / "pwned"
    planted = (
        Planted(os.system, f"touch '{marker}'")
        if payload == "system"
        else Planted(exec, f"open({str(marker)!r}, 'w').close()")
    )
    folder = tmp_path / "cifar-10-batches-py"
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        write_pickle(folder / name, {b"data": cifar_images(0, 2).reshape(2, -1), b"labels": [0, 1]}, 3)
    write_pickle(folder / "data_batch_3", {b"data": planted, b"labels": [0, 1]}, 3)
    with pytest.raises(UserError, match="data_batch_3") as caught:
        sources.load("cifar10", tmp_path)
    assert "no business" in str(caught.value)
    assert not marker.exists()
    # The planted file is live: an ordinary unpickler does run it.
    pickle.loads((folder / "data_batch_3").read_bytes())
    assert marker.exists()


# --- SVHN (.mat) ---


def write_svhn(root: Path, split: str, images: np.ndarray, digits: np.ndarray) -> None:
    """SVHN's layout: X is heightxwidthxchannelxN, y is Nx1 with 10 standing for digit 0."""
    root.mkdir(parents=True, exist_ok=True)
    labels = np.where(digits == 0, 10, digits).astype(np.uint8)[:, None]
    scipy.io.savemat(root / f"{split}_32x32.mat", {"X": images.transpose(2, 3, 1, 0), "y": labels})


def test_svhn_maps_10_to_0_and_reorders_axes(tmp_path):
    expected = {}
    for split, count, seed in [("train", 20, 0), ("test", 10, 1)]:
        images, digits = cifar_images(seed, count), np.arange(count) % 10
        write_svhn(tmp_path, split, images, digits)
        expected |= {f"{split}_x": images, f"{split}_y": digits}
    source = sources.load("svhn", tmp_path)
    assert_split(source, expected)
    assert (source.test_y == 0).any()
    assert_stats(source)


@pytest.mark.parametrize("bad_label", [0, 11])
def test_svhn_label_out_of_range_is_a_user_error(tmp_path, bad_label):
    images = cifar_images(0, 3)
    write_svhn(tmp_path, "train", images, np.array([1, 2, 3]))
    scipy.io.savemat(
        tmp_path / "test_32x32.mat",
        {"X": images.transpose(2, 3, 1, 0), "y": np.array([[1], [bad_label], [3]], np.uint8)},
    )
    with pytest.raises(UserError, match=r"test_32x32\.mat: labels must lie in 1\.\.10"):
        sources.load("svhn", tmp_path)


def test_svhn_split_of_one_image_loads(tmp_path):
    """MATLAB drops a trailing axis of length 1: the X it saves for one image is 32x32x3."""
    images = cifar_images(0, 3)
    write_svhn(tmp_path, "train", images[:2], np.array([1, 0]))
    scipy.io.savemat(tmp_path / "test_32x32.mat", {"X": images[2].transpose(1, 2, 0), "y": np.array([[7]], np.uint8)})
    source = sources.load("svhn", tmp_path)
    assert torch.equal(source.test_x, torch.from_numpy(images[2:])) and source.test_y.tolist() == [7]


@pytest.mark.parametrize(("content", "complaint"), [
    ("damaged", r"cannot read .*test_32x32\.mat as a MATLAB file: "),
    ("float_images", r"test_32x32\.mat: 'X' must be a uint8 array of shape 32x32x3xN"),
    ("no_labels", r"test_32x32\.mat has no 'y' label array"),
])
def test_svhn_file_of_another_kind_is_a_user_error(tmp_path, content, complaint):
    images = cifar_images(0, 3)
    write_svhn(tmp_path, "train", images, np.array([1, 2, 3]))
    test = tmp_path / "test_32x32.mat"
    if content == "damaged":
        test.write_bytes(b"MATLAB 5.0 MAT-file, cut short")
    else:
        x, y = images.transpose(2, 3, 1, 0), np.array([[1], [2], [3]], np.uint8)
        scipy.io.savemat(test, {"X": x / 255, "y": y} if content == "float_images" else {"X": x})
    with pytest.raises(UserError, match=complaint):
        sources.load("svhn", tmp_path)


# --- scikit-learn digits ---


def test_digits_split_is_fixed_and_stratified():
    source = sources.load("digits", "/nonexistent")
    assert source.train_x.shape == (1437, 1, 8, 8) and source.test_x.shape == (360, 1, 8, 8)
    assert source.train_x.dtype == torch.uint8 and source.train_y.dtype == torch.int64
    assert source.train_x.max() == 255 and source.train_x.min() == 0
    per_class = torch.bincount(source.train_y, minlength=10) + torch.bincount(source.test_y, minlength=10)
    assert ((torch.bincount(source.test_y, minlength=10) - 0.2 * per_class).abs() <= 1).all()
    # The split is pinned (random_state=0): these are its first test labels and its test pixel sum.
    assert source.test_y[:12].tolist() == [7, 6, 3, 7, 7, 3, 2, 8, 9, 3, 2, 6]
    assert source.test_x.sum().item() == 1790819
    assert_stats(source)


# --- missing files, downloads, names ---

LAYOUT_FOLDERS = {
    "mnist": "MNIST/raw",
    "fashion_mnist": "FashionMNIST/raw",
    "cifar10": "cifar-10-batches-py",
    "cifar100": "cifar-100-python",
    "svhn": "",
}


@pytest.mark.parametrize("name", LAYOUT_FOLDERS)
def test_missing_files_name_the_path_and_the_fixes(tmp_path, name):
    with pytest.raises(UserError) as caught:
        sources.load(name, tmp_path, download=False)
    message = str(caught.value)
    assert str(tmp_path / LAYOUT_FOLDERS[name]) in message
    assert "data.download=true" in message and "data.root" in message
    assert "\n" not in message


def test_missing_file_lists_only_what_is_missing(tmp_path):
    folder = tmp_path / "MNIST/raw"
    write_idx_dataset(folder, ".gz")
    (folder / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(UserError, match=r"lacks t10k-labels-idx1-ubyte\[\.gz\]: put them there"):
        sources.load("mnist", tmp_path)


def test_download_goes_through_torchvision_then_our_reader(tmp_path, monkeypatch):
    calls = []

    class FakeMNIST:
        """Stands in for torchvision.datasets.MNIST: leaves the .gz files where the real one does."""

        def __init__(self, root, train, download):
            calls.append((root, train, download))
            write_idx_dataset(Path(root) / "MNIST/raw", ".gz")

    monkeypatch.setattr(torchvision.datasets, "MNIST", FakeMNIST)
    source = sources.load("mnist", tmp_path, download=True)
    assert calls == [(str(tmp_path), True, True), (str(tmp_path), False, True)]
    assert torch.equal(source.train_x[:, 0], torch.from_numpy(idx_split(0, 20)[0]))


@pytest.mark.parametrize(
    "name, class_name, splits",
    [
        ("mnist", "MNIST", [{"train": True}, {"train": False}]),
        ("fashion_mnist", "FashionMNIST", [{"train": True}, {"train": False}]),
        ("cifar10", "CIFAR10", [{"train": True}, {"train": False}]),
        ("cifar100", "CIFAR100", [{"train": True}, {"train": False}]),
        ("svhn", "SVHN", [{"split": "train"}, {"split": "test"}]),
    ],
)
def test_download_failure_is_a_one_line_user_error(tmp_path, monkeypatch, name, class_name, splits):
    calls = []

    def offline(root, download, **split):
        """Fetches the train split, then fails on the test split as an offline torchvision would."""
        calls.append(split)
        if len(calls) == 2:
            raise RuntimeError("Error downloading archive:\nTried https://example.invalid, got:\n<urlopen error>")

    monkeypatch.setattr(torchvision.datasets, class_name, offline)
    with pytest.raises(UserError, match="could not download") as caught:
        sources.load(name, tmp_path, download=True)
    assert "\n" not in str(caught.value)
    assert calls == splits


def test_download_that_leaves_no_files_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setattr(torchvision.datasets, "SVHN", lambda root, split, download: None)
    with pytest.raises(UserError, match=r"still lacks train_32x32\.mat"):
        sources.load("svhn", tmp_path, download=True)


def test_unknown_source_is_a_user_error():
    with pytest.raises(UserError, match="choose one of digits, mnist"):
        sources.load("imagenet", "/tmp")


# --- opt-in: the real MNIST files ---


def test_real_mnist():
    source = sources.load("mnist", real_data("MNIST", "raw").parents[1])
    assert source.train_x.shape == (60000, 1, 28, 28) and source.test_x.shape == (10000, 1, 28, 28)
    assert source.train_x.dtype == torch.uint8 and source.train_y.dtype == torch.int64
    for labels in (source.train_y, source.test_y):
        assert labels.min() == 0 and labels.max() == 9 and torch.bincount(labels).min() > 800
    # The normalisation constants everyone quotes for MNIST.
    assert source.mean == pytest.approx((0.1307,), abs=1e-4)
    assert source.std == pytest.approx((0.3081,), abs=1e-4)


# --- miniImageNet (the cache pickles) and CORe50 (npz + paths) ---

def write_miniimagenet(folder: Path, per_class: int = 12, seed: int = 0) -> dict[str, np.ndarray]:
    """The three cache pickles, two classes each, every image filled with its class's index and its own rank."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    names = {"train": ["n03", "n01"], "val": ["n05", "n02"], "test": ["n04", "n06"]}
    images = {}
    for split, wnids in names.items():
        data, class_dict = [], {}
        for wnid in wnids:
            block = rng.integers(0, 256, (per_class, 84, 84, 3), dtype=np.uint8)
            class_dict[wnid] = list(range(len(data) * per_class, (len(data) + 1) * per_class))
            images[wnid] = block
            data.append(block)
        order = rng.permutation(len(wnids) * per_class)  # class_dict indices point into a shuffled image array
        stacked = np.concatenate(data)
        shuffled = np.empty_like(stacked)
        shuffled[order] = stacked
        class_dict = {w: [int(order[i]) for i in rows] for w, rows in class_dict.items()}
        with open(folder / f"mini-imagenet-cache-{split}.pkl", "wb") as f:
            pickle.dump({"image_data": shuffled, "class_dict": class_dict}, f)
    return images


def test_miniimagenet_pools_the_100_class_pickles_and_holds_out_a_sixth_of_each_class(tmp_path):
    images = write_miniimagenet(tmp_path / "miniImageNet")
    src = sources.load("miniimagenet", tmp_path)
    wnids = sorted(images)  # labels follow the sorted class names, whatever pickle they came from
    assert src.train_x.shape == (6 * 10, 3, 84, 84) and src.test_x.shape == (6 * 2, 3, 84, 84)
    for label, wnid in enumerate(wnids):
        x = torch.from_numpy(images[wnid]).permute(0, 3, 1, 2)
        assert torch.equal(src.train_x[src.train_y == label], x[:10])
        assert torch.equal(src.test_x[src.test_y == label], x[10:])


def test_miniimagenet_with_foreign_content_is_a_user_error(tmp_path):
    write_miniimagenet(tmp_path / "miniImageNet")
    with open(tmp_path / "miniImageNet" / "mini-imagenet-cache-val.pkl", "wb") as f:
        pickle.dump({"image_data": np.zeros((2, 32, 32, 3), np.uint8), "class_dict": {"n1": [0, 1]}}, f)
    with pytest.raises(UserError, match="'image_data' must be a uint8 array of shape Nx84x84x3"):
        sources.load("miniimagenet", tmp_path)



@pytest.mark.parametrize(("content", "complaint"), [
    ([1, 2], r"mini-imagenet-cache-val\.pkl is not a miniImageNet cache pickle: it holds a list"),
    ({"image_data": np.zeros((2, 84, 84, 3), np.uint8), "class_dict": {"n1": [0, 2]}},
     r"mini-imagenet-cache-val\.pkl: class n1 lists image indices outside 0\.\.1"),
])
def test_miniimagenet_pickle_of_another_kind_is_a_user_error(tmp_path, content, complaint):
    write_miniimagenet(tmp_path / "miniImageNet", per_class=6)
    with open(tmp_path / "miniImageNet" / "mini-imagenet-cache-val.pkl", "wb") as f:
        pickle.dump(content, f)
    with pytest.raises(UserError, match=complaint):
        sources.load("miniimagenet", tmp_path)


def write_core50(folder: Path, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [f"s{s}/o{o}/C_{s:02d}_{o:02d}_{i:03d}.png"
             for s in (1, 3, 7, 10, 11) for o in (1, 2, 50) for i in range(2)]
    x = rng.integers(0, 256, (len(paths), 128, 128, 3), dtype=np.uint8)
    np.savez_compressed(folder / "core50_imgs.npz", x=x)
    with open(folder / "paths.pkl", "wb") as f:
        pickle.dump(paths, f)
    return x, paths


def test_core50_labels_objects_and_tests_on_sessions_3_7_and_10(tmp_path):
    x, paths = write_core50(tmp_path / "core50")
    src = sources.load("core50", tmp_path)
    test = np.array([p.split("/")[0] in ("s3", "s7", "s10") for p in paths])
    labels = np.array([int(p.split("/")[1][1:]) - 1 for p in paths])
    assert torch.equal(src.train_x, torch.from_numpy(x[~test]).permute(0, 3, 1, 2))
    assert torch.equal(src.test_x, torch.from_numpy(x[test]).permute(0, 3, 1, 2))
    assert src.train_y.tolist() == labels[~test].tolist() and src.test_y.tolist() == labels[test].tolist()
    assert sorted(set(src.train_y.tolist())) == [0, 1, 49]


def test_core50_paths_that_do_not_match_the_images_are_a_user_error(tmp_path):
    write_core50(tmp_path / "core50")
    with open(tmp_path / "core50" / "paths.pkl", "wb") as f:
        pickle.dump(["s1/o1/a.png"], f)
    with pytest.raises(UserError, match="must list one path per image"):
        sources.load("core50", tmp_path)



@pytest.mark.parametrize(("damage", "complaint"), [
    ("not_an_npz", r"cannot read .*core50_imgs\.npz as CORe50's image archive: "),
    ("no_x", r"cannot read .*core50_imgs\.npz as CORe50's image archive: "),
    ("small_images", r"core50_imgs\.npz: 'x' must be a uint8 array of shape Nx128x128x3"),
    ("object_51", r"paths\.pkl: every path must start 'sS/oO/' with O in 1\.\.50"),
    ("not_a_path", r"paths\.pkl: every path must start 'sS/oO/' with O in 1\.\.50"),
])
def test_core50_files_of_another_kind_are_a_user_error(tmp_path, damage, complaint):
    x, paths = write_core50(tmp_path / "core50")
    npz = tmp_path / "core50" / "core50_imgs.npz"
    if damage == "not_an_npz":
        npz.write_bytes(b"PK\x03\x04 cut short")
    elif damage == "no_x":
        np.savez(npz, images=x)
    elif damage == "small_images":
        np.savez(npz, x=x[:, :64, :64])
    else:
        paths[3] = "s1/o51/C_01_51_000.png" if damage == "object_51" else "C_01_01_000.png"
        with open(tmp_path / "core50" / "paths.pkl", "wb") as f:
            pickle.dump(paths, f)
    with pytest.raises(UserError, match=complaint):
        sources.load("core50", tmp_path)


@pytest.mark.parametrize("name, folder", [("miniimagenet", "miniImageNet"), ("core50", "core50")])
def test_datasets_torchvision_cannot_fetch_say_where_to_get_them(tmp_path, name, folder):
    for download in (False, True):
        with pytest.raises(UserError, match=f"{tmp_path / folder}") as caught:
            sources.load(name, tmp_path, download=download)
        assert "\n" not in str(caught.value) and ("cannot be downloaded" in str(caught.value)) == download


@pytest.mark.parametrize("dataset, writer", [("split_miniimagenet", write_miniimagenet),
                                             ("split_core50", write_core50)])
def test_split_miniimagenet_and_core50_build_through_their_configs(tmp_path, dataset, writer):
    from cl_bench import config
    from cl_bench.data import scenarios
    writer(tmp_path / ("miniImageNet" if dataset == "split_miniimagenet" else "core50"))
    config.register()
    classes = 6 if dataset == "split_miniimagenet" else 3
    cfg = config.compose([f"dataset={dataset}", f"data.root={tmp_path}", f"dataset.num_tasks={classes}",
                          "data.val_fraction=0"])
    s = scenarios.build(cfg.dataset, cfg.data, "class", 0, torch.device("cpu"))
    assert len(s.tasks) == classes and all(t.num_classes == 1 for t in s.tasks)
    assert sorted(c for t in s.tasks for c in t.classes) == sorted(set(sources.load(cfg.dataset.source, tmp_path)
                                                                       .train_y.tolist()))
