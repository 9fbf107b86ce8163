"""`cl-bench data prepare cifar10`: the canonical cifar-10-batches-py/ from the official archive, an image folder or
an .npz of encoded images, each written here small; the real CIFAR-10 from $CL_BENCH_DATA when it is set."""
import io
import pickle
import tarfile

import numpy as np
import pytest
import torch
from conftest import cl_bench, real_data

from cl_bench.data import sources
from cl_bench.data.prepare import CLASSES


def images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8), np.arange(n) % 10


def pngs(x: np.ndarray) -> list[bytes]:
    """Each image as a PNG file's bytes (lossless: the pixels survive)."""
    from PIL import Image
    out = []
    for img in x:
        buffer = io.BytesIO()
        Image.fromarray(img.transpose(1, 2, 0)).save(buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


def same(root, train, test) -> None:
    """The prepared files read back through the project's CIFAR-10 reader as exactly these images and labels."""
    source = sources.load("cifar10", root)
    for (x, y), got_x, got_y in ((train, source.train_x, source.train_y), (test, source.test_x, source.test_y)):
        assert torch.equal(got_x, torch.from_numpy(x)) and got_y.tolist() == y.tolist()


def test_from_an_npz_of_encoded_images(tmp_path):
    train, test = images(20, 0), images(10, 1)
    packed = {}
    for split, (x, y) in (("train", train), ("test", test)):
        files = pngs(x)
        packed[f"{split}_jpeg"] = np.frombuffer(b"".join(files), dtype=np.uint8)
        packed[f"{split}_offsets"] = np.cumsum([0, *map(len, files)])
        packed[f"{split}_labels"] = y
    np.savez(tmp_path / "cifar.npz", **packed)
    proc = cl_bench("data", "prepare", "cifar10", "--from", str(tmp_path / "cifar.npz"), "--root", str(tmp_path / "d"))
    assert proc.returncode == 0, proc.stderr
    assert f"data.root={tmp_path / 'd'}" in proc.stdout
    same(tmp_path / "d", train, test)


def test_from_an_image_folder(tmp_path):
    train, test = images(20, 2), images(10, 3)
    for split, (x, y) in (("train", train), ("test", test)):
        for i, (img, label) in enumerate(zip(pngs(x), y)):
            folder = tmp_path / "folder" / split / CLASSES[label]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i:03d}.png").write_bytes(img)
    from cl_bench.data.prepare import prepare_cifar10
    prepare_cifar10(tmp_path / "folder", tmp_path / "d")
    order = [np.argsort(y, kind="stable") for _, y in (train, test)]  # read back class by class, in file order
    same(tmp_path / "d", *((x[o], y[o]) for (x, y), o in zip((train, test), order)))


def test_from_the_official_archive(tmp_path):
    train, test = images(20, 4), images(10, 5)
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tar:
        parts = np.array_split(np.arange(20), 5)
        batches = {f"data_batch_{i + 1}": (train[0][p], train[1][p]) for i, p in enumerate(parts)}
        for name, (x, y) in {**batches, "test_batch": test}.items():
            blob = pickle.dumps({b"data": x.reshape(len(x), -1), b"labels": y.tolist()})
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    proc = cl_bench("data", "prepare", "cifar10", "--from", str(tmp_path), "--root", str(tmp_path / "d"))
    assert proc.returncode == 0, proc.stderr
    same(tmp_path / "d", train, test)


@pytest.mark.parametrize("make", ["nothing", "wrong_classes"])
def test_what_it_cannot_read_is_one_line(tmp_path, make):
    (tmp_path / "src" / "train" / ("cats" if make == "wrong_classes" else "")).mkdir(parents=True)
    (tmp_path / "src" / "test").mkdir()
    source = tmp_path / ("src" if make == "wrong_classes" else "src/train")
    proc = cl_bench("data", "prepare", "cifar10", "--from", str(source), "--root", str(tmp_path / "d"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_real_cifar10(tmp_path):
    npz = real_data("cifar10-jpeg.npz")
    proc = cl_bench("data", "prepare", "cifar10", "--from", str(npz), "--root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    source = sources.load("cifar10", tmp_path)
    assert source.train_x.shape == (50000, 3, 32, 32) and source.test_x.shape == (10000, 3, 32, 32)
    assert torch.bincount(source.train_y).tolist() == [5000] * 10
    assert source.mean == pytest.approx((0.4914, 0.4822, 0.4465), abs=2e-3)  # CIFAR-10's usual constants


def npz_of(tmp_path, files: list[bytes], labels) -> object:
    """An .npz of encoded images holding the same files and labels for train and test."""
    blob = np.frombuffer(b"".join(files), dtype=np.uint8)
    offsets, labels = np.cumsum([0, *map(len, files)]), np.asarray(labels)
    np.savez(tmp_path / "cifar.npz", **{f"{split}_{key}": value for split in ("train", "test")
                                        for key, value in (("jpeg", blob), ("offsets", offsets), ("labels", labels))})
    return tmp_path / "cifar.npz"


def test_a_complete_folder_is_left_as_it_is(tmp_path):
    from cl_bench.data.prepare import prepare_cifar10
    train = images(10, 6)
    source = npz_of(tmp_path, pngs(train[0]), train[1])
    out = prepare_cifar10(source, tmp_path / "d")
    written = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    source.unlink()  # not read again: the folder is complete
    assert prepare_cifar10(source, tmp_path / "d") == out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == written


def tar_with(path, names: list[str]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))


@pytest.mark.parametrize(("make", "error"), [
    ("other_archive", r"holds no cifar-10-batches-py/: it is not CIFAR-10's python archive"),
    ("not_an_archive", r"cannot extract .*cifar-10-python\.tar\.gz: "),
    ("npz_without_keys", r"cifar\.npz: not an \.npz of encoded images with train_jpeg, train_offsets and "
                         r"train_labels \("),
    ("npz_cut_short", r"cifar\.npz: not an \.npz of encoded images with train_jpeg, train_offsets and "
                      r"train_labels \(File is not a zip file\)"),
    ("not_images", r"cifar\.npz: image 1 could not be decoded \("),
    ("wrong_size", r"cifar\.npz: CIFAR-10 images are 32×32, image 0 is 16×8"),
    ("label_out_of_range", r"cifar\.npz: expected 2 labels in 0\.\.9"),
    ("too_few_labels", r"cifar\.npz: expected 2 labels in 0\.\.9"),
])
def test_what_it_cannot_read_is_said(tmp_path, make, error):
    from cl_bench.data.prepare import prepare_cifar10
    from cl_bench.errors import UserError
    good = pngs(images(2, 8)[0])
    if make == "other_archive":
        tar_with(source := tmp_path / "cifar-10-python.tar.gz", ["cifar-100-python/train"])
    elif make == "not_an_archive":
        (source := tmp_path / "cifar-10-python.tar.gz").write_bytes(b"not gzip at all")
    elif make == "npz_without_keys":
        np.savez(source := tmp_path / "cifar.npz", train_x=np.zeros((2, 3072), np.uint8))
    elif make == "npz_cut_short":
        source = npz_of(tmp_path, good, [0, 1])
        source.write_bytes(source.read_bytes()[:300])  # a download cut short
    elif make == "not_images":
        source = npz_of(tmp_path, [good[0], b"no image"], [0, 1])
    elif make == "wrong_size":
        small = io.BytesIO()
        from PIL import Image
        Image.fromarray(np.zeros((8, 16, 3), np.uint8)).save(small, format="PNG")
        source = npz_of(tmp_path, [small.getvalue(), good[1]], [0, 1])
    else:
        source = npz_of(tmp_path, good, [0, 10] if make == "label_out_of_range" else [0])
    with pytest.raises(UserError, match=error):
        prepare_cifar10(source, tmp_path / "d")
    assert not (tmp_path / "d" / "cifar-10-batches-py" / "batches.meta").exists()


def test_a_complete_prepared_dataset_is_left_as_it_is(tmp_path):
    from cl_bench.data import prepared
    from cl_bench.data.prepare import prepare_stream
    writer = prepared.Writer(tmp_path, "tinyimagenet")
    writer.open_images("train", 2, (3, 4, 4))[:] = 7
    writer.open_images("test", 1, (3, 4, 4))[:] = 9
    done = writer.finish("tinyimagenet", ["a", "b"], {"train": np.array([0, 1]), "test": np.array([1])}, "here")
    before = {p.name: p.stat().st_mtime_ns for p in done.path.iterdir()}
    again = prepare_stream("tinyimagenet", tmp_path)  # without --from: nothing to read, nothing needed
    assert again.path == done.path and again.meta == done.meta
    assert {p.name: p.stat().st_mtime_ns for p in done.path.iterdir()} == before


@pytest.mark.parametrize(("args", "error"), [
    (["tinyimagenet"], "cl-bench data prepare tinyimagenet needs --from DIR: the dataset's image folder"),
    (["imagenet_subset", "--from", "."], "cl-bench data prepare imagenet_subset needs --classes FILE: the wnids, "
                                         "one per line"),
    (["digits", "--from", "."], "--from is for cifar10, tinyimagenet and imagenet_subset: digits is read from its "
                                "files under --root"),
    (["cifar10", "--from", "nowhere.npz"], "no such file or folder: nowhere.npz"),
])
def test_a_wrong_option_is_one_line(tmp_path, args, error):
    proc = cl_bench("data", "prepare", *args, "--root", str(tmp_path / "d"))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"cl-bench: error: {error}"], proc.stderr
    assert not (tmp_path / "d").exists()
