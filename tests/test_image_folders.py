"""data/image_folders.py: tiny-imagenet-200's and ImageNet's folder layouts enumerated in a fixed order with the
right labels, and images decoded, resized and centre-cropped alike inline and in worker processes. Every folder
is written here small with Pillow."""
from concurrent.futures import ProcessPoolExecutor as Pool
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cl_bench.data import image_folders
from cl_bench.data.image_folders import class_list, decode_into, imagenet_subset_files, tinyimagenet_files
from cl_bench.errors import UserError

WNIDS = ["n02", "n01", "n03"]  # not in sorted order: the label is the line's position, not the name's rank


def pixels(seed: int, width: int, height: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def save(path: Path, image: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(path)
    return path


def tiny_tree(root: Path) -> Path:
    """A tiny-imagenet-200 folder under root: 3 wnids × 4 train JPEGs, 2 val images each, and an unlabelled test/."""
    tiny = root / "tiny-imagenet-200"
    tiny.mkdir(parents=True)
    (tiny / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    (tiny / "words.txt").write_text("n01\tgoldfish, Carassius auratus\nn02\tshark\nn09\tunused\n")  # n03 unnamed
    for wnid in WNIDS:
        for i in (3, 0, 2, 1):
            save(tiny / "train" / wnid / "images" / f"{wnid}_{i}.JPEG", pixels(i, 64, 64))
        (tiny / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
    lines = []
    for k, wnid in enumerate(["n03", "n02", "n01", "n01", "n03", "n02"]):  # val_5 is n02, val_0 is n03, ...
        save(tiny / "val" / "images" / f"val_{k}.JPEG", pixels(10 + k, 64, 64))
        lines.append(f"val_{k}.JPEG\t{wnid}\t0\t0\t63\t63")
    (tiny / "val" / "val_annotations.txt").write_text("\n".join(reversed(lines)) + "\n")
    save(tiny / "test" / "images" / "test_0.JPEG", pixels(99, 64, 64))
    return tiny


def imagenet_tree(root: Path) -> Path:
    """train/<wnid>/ and val/<wnid>/ with non-square images of different sizes, plus a class left out."""
    sizes = [(80, 60), (50, 90), (64, 64), (33, 47)]
    for c, wnid in enumerate(["n10", "n20", "n30", "n40"]):
        for i, (w, h) in enumerate(sizes[:3] if c % 2 else sizes):
            save(root / "train" / wnid / f"{wnid}_{i}.JPEG", pixels(c * 10 + i, w, h))
        save(root / "val" / wnid / f"ILSVRC_val_{c}.JPEG", pixels(100 + c, *sizes[c]))
    (root / "train" / "n10" / "._n10_0.JPEG").write_bytes(b"macOS resource fork")  # a hidden file to skip
    return root


def names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


@pytest.mark.parametrize("given", ["parent", "itself"])
def test_tinyimagenet_order_and_labels(tmp_path, given):
    tiny = tiny_tree(tmp_path)
    data = tinyimagenet_files(tmp_path if given == "parent" else tiny)
    assert data.classes == ["shark", "goldfish", "n03"]
    paths, labels = data.train
    assert names(paths) == [f"{w}_{i}.JPEG" for w in WNIDS for i in range(4)]
    assert all(p.parent == tiny / "train" / p.name.split("_")[0] / "images" for p in paths)
    assert labels.dtype == np.int64 and labels.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    paths, labels = data.test
    assert names(paths) == [f"val_{k}.JPEG" for k in range(6)]
    assert all(p.parent == tiny / "val" / "images" for p in paths)
    assert labels.dtype == np.int64 and labels.tolist() == [2, 0, 1, 1, 2, 0]


def test_tinyimagenet_without_words_uses_wnids(tmp_path):
    tiny = tiny_tree(tmp_path)
    (tiny / "words.txt").unlink()
    assert tinyimagenet_files(tiny).classes == WNIDS


def test_tinyimagenet_missing_wnids(tmp_path):
    (tiny_tree(tmp_path) / "wnids.txt").unlink()
    with pytest.raises(UserError, match=r"holds no wnids\.txt .*tiny-imagenet-200"):
        tinyimagenet_files(tmp_path)


def test_tinyimagenet_bad_annotations(tmp_path):
    tiny = tiny_tree(tmp_path)
    with open(tiny / "val" / "val_annotations.txt", "a") as f:
        f.write("val_6.JPEG\tn77\t0\t0\t1\t1\n")
    with pytest.raises(UserError, match=r"val_annotations\.txt, line 7: .*'val_6\.JPEG\\tn77"):
        tinyimagenet_files(tiny)


def test_tinyimagenet_missing_val_image(tmp_path):
    tiny = tiny_tree(tmp_path)
    (tiny / "val" / "images" / "val_4.JPEG").unlink()
    with pytest.raises(UserError, match=r"val_4\.JPEG is annotated .* but missing \(1 missing"):
        tinyimagenet_files(tiny)


def test_tinyimagenet_blank_annotation_lines_are_skipped(tmp_path):
    tiny = tiny_tree(tmp_path)
    annotations = tiny / "val" / "val_annotations.txt"
    annotations.write_text("\n" + annotations.read_text().replace("\n", "\n\n"))
    assert tinyimagenet_files(tiny).test[1].tolist() == [2, 0, 1, 1, 2, 0]


@pytest.mark.parametrize(("damage", "error"), [
    ("empty_wnids", r"wnids\.txt lists no classes: it should hold one wnid per line"),
    ("wnids_not_utf8", r"cannot read the class list .*wnids\.txt: "),
    ("annotated_twice", r"val_annotations\.txt, line 7: val_0\.JPEG is annotated twice"),
    ("no_annotations", r"val_annotations\.txt labels no images: the val split would be empty"),
    ("class_not_unpacked", r"class n01: .*train/n01/images is not a folder; is the dataset unpacked completely\?"),
])
def test_tinyimagenet_damaged_tree(tmp_path, damage, error):
    import shutil
    tiny = tiny_tree(tmp_path)
    annotations = tiny / "val" / "val_annotations.txt"
    if damage == "empty_wnids":
        (tiny / "wnids.txt").write_text("\n\n")
    elif damage == "wnids_not_utf8":
        (tiny / "wnids.txt").write_bytes(b"n02\n\xff\xfe\n")
    elif damage == "annotated_twice":
        with open(annotations, "a") as f:
            f.write("val_0.JPEG\tn01\t0\t0\t63\t63\n")
    elif damage == "no_annotations":
        annotations.write_text("\n")
    else:
        shutil.rmtree(tiny / "train" / "n01" / "images")
    with pytest.raises(UserError, match=error):
        tinyimagenet_files(tiny)


def test_imagenet_subset_order_and_labels(tmp_path):
    root = imagenet_tree(tmp_path)
    data = imagenet_subset_files(root, ["n30", "n10"])
    assert data.classes == ["n30", "n10"]
    paths, labels = data.train
    assert names(paths) == [f"n30_{i}.JPEG" for i in range(4)] + [f"n10_{i}.JPEG" for i in range(4)]
    assert labels.dtype == np.int64 and labels.tolist() == [0] * 4 + [1] * 4
    paths, labels = data.test
    assert paths == [root / "val" / "n30" / "ILSVRC_val_2.JPEG", root / "val" / "n10" / "ILSVRC_val_0.JPEG"]
    assert labels.tolist() == [0, 1]


def test_imagenet_subset_readable_names_stay_distinct(tmp_path):
    root = imagenet_tree(tmp_path)
    (root / "LOC_synset_mapping.txt").write_text("n10 crane\nn20 crane, derrick\nn30 tench, Tinca tinca\n")
    assert imagenet_subset_files(root, ["n10", "n20", "n30"]).classes == ["crane (n10)", "crane (n20)", "tench"]


@pytest.mark.parametrize(("classes", "error"), [
    (["n10", "n99"], r"train has no folder for n99: check the class list"),
    (["n10", "n30", "n10"], r"n10 listed more than once"),
    ([], r"class list is empty"),
])
def test_imagenet_subset_bad_class_lists(tmp_path, classes, error):
    with pytest.raises(UserError, match=error):
        imagenet_subset_files(imagenet_tree(tmp_path), classes)


def test_imagenet_subset_needs_train_and_val(tmp_path):
    (tmp_path / "train" / "n10").mkdir(parents=True)
    with pytest.raises(UserError, match=r"holds no val/ folder: point --from at an ImageNet folder"):
        imagenet_subset_files(tmp_path, ["n10"])


def test_imagenet_subset_empty_class_and_flat_val(tmp_path):
    root = imagenet_tree(tmp_path)
    (root / "train" / "n50").mkdir()
    save(root / "val" / "n50" / "v.JPEG", pixels(0, 8, 8))
    with pytest.raises(UserError, match=r"class n50: .*train/n50 holds no images"):
        imagenet_subset_files(root, ["n10", "n50"])
    (root / "train" / "n60").mkdir()
    save(root / "val" / "ILSVRC2012_val_00000001.JPEG", pixels(0, 8, 8))
    with pytest.raises(UserError, match=r"val holds its images flat.*val/<wnid>/"):
        imagenet_subset_files(root, ["n10", "n60"])


def test_class_list(tmp_path):
    path = tmp_path / "classes.txt"
    path.write_text("# ImageNet-100\nn01440764  # tench\n\n  n01443537\n")
    assert class_list(path) == ["n01440764", "n01443537"]
    path.write_text("n01440764 tench\n")
    with pytest.raises(UserError, match=r"line 1: 'n01440764 tench' is not one wnid"):
        class_list(path)
    with pytest.raises(UserError, match=r"nothing\.txt not found"):
        class_list(tmp_path / "nothing.txt")
    path.write_text("# ImageNet-100, to be filled in\n\n")
    with pytest.raises(UserError, match=r"classes\.txt lists no classes: write one wnid"):
        class_list(path)


def test_decode_inline_and_in_processes_agree(tmp_path, monkeypatch):
    paths = imagenet_subset_files(imagenet_tree(tmp_path), ["n10", "n20", "n30", "n40"]).train[0]
    inline = np.zeros((len(paths), 3, 32, 32), dtype=np.uint8)
    decode_into(paths, 32, inline, workers=1, chunk=3)
    pools = []
    monkeypatch.setattr(image_folders, "ProcessPoolExecutor", lambda *a, **k: pools.append(a) or Pool(*a, **k))
    pooled = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.uint8, shape=inline.shape)
    decode_into(paths, 32, pooled, workers=2, chunk=3)  # 14 images: 5 chunks over 2 processes
    assert pools == [(2,)] and np.array_equal(inline, pooled)
    assert all(row.std() > 10 for row in inline)  # every row written with image content, none left zero


def test_square_png_at_its_size_is_exact(tmp_path):
    image = pixels(7, 64, 64)
    paths = [save(tmp_path / "a.png", image), save(tmp_path / "b.png", image[::-1].copy())]
    out = np.zeros((2, 3, 64, 64), dtype=np.uint8)
    decode_into(paths, 64, out, workers=1)
    assert np.array_equal(out[0], image.transpose(2, 0, 1)) and np.array_equal(out[1], image[::-1].transpose(2, 0, 1))
    default = np.zeros_like(out)
    decode_into(paths, 64, default)  # workers by default: the cores, here no more than the one chunk needs
    assert np.array_equal(default, out)


def test_non_square_resized_and_centre_cropped(tmp_path):
    # What resizing the whole image (shorter side to 20) and cropping its centre gives, computed here the slow way
    wide, tall = pixels(1, 180, 60), pixels(2, 60, 180)
    gray = tmp_path / "gray.png"
    Image.fromarray(pixels(3, 40, 30)[..., 0]).save(gray)
    out = np.zeros((3, 3, 20, 20), dtype=np.uint8)
    decode_into([save(tmp_path / "wide.png", wide), save(tmp_path / "tall.png", tall), gray], 20, out, workers=1)
    expected_wide = np.asarray(Image.fromarray(wide).resize((60, 20), Image.BILINEAR))[:, 20:40]
    expected_tall = np.asarray(Image.fromarray(tall).resize((20, 60), Image.BILINEAR))[20:40]
    assert np.array_equal(out[0], expected_wide.transpose(2, 0, 1))
    assert np.array_equal(out[1], expected_tall.transpose(2, 0, 1))
    assert (out[2, 0] == out[2, 1]).all() and (out[2, 1] == out[2, 2]).all() and out[2].std() > 10  # L -> RGB


def test_crop_is_centred(tmp_path):
    edge = np.zeros((60, 90, 3), dtype=np.uint8)
    edge[:, 45:] = 255  # the centred square's left half black, its right half white
    out = np.zeros((1, 3, 20, 20), dtype=np.uint8)
    decode_into([save(tmp_path / "edge.png", edge)], 20, out, workers=1)
    assert (out[0, :, :, :9] == 0).all() and (out[0, :, :, 11:] == 255).all()
    assert (0 < out[0, :, :, 9:11]).all() and (out[0, :, :, 9:11] < 255).all()  # the edge blends at the middle


def test_shorter_side_at_size_is_only_cropped(tmp_path):
    image = pixels(4, 64, 75)
    out = np.zeros((1, 3, 64, 64), dtype=np.uint8)
    decode_into([save(tmp_path / "a.png", image)], 64, out, workers=1)
    assert np.array_equal(out[0], image[5:69].transpose(2, 0, 1))


def test_corrupt_image_names_the_file(tmp_path):
    good = save(tmp_path / "good.png", pixels(0, 8, 8))
    bad = tmp_path / "bad.JPEG"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(good.read_bytes()[:60])
    out = np.zeros((2, 3, 8, 8), dtype=np.uint8)
    for workers in (1, 2):
        for broken in (bad, truncated):
            with pytest.raises(UserError, match=rf"{broken.name}: cannot decode this image"):
                decode_into([good, broken], 8, out, workers=workers, chunk=1)


def test_decode_into_checks_its_arguments(tmp_path):
    path = save(tmp_path / "a.png", pixels(0, 8, 8))
    with pytest.raises(ValueError, match="out must be uint8"):
        decode_into([path], 8, np.zeros((1, 3, 8, 8), dtype=np.float32))
    with pytest.raises(UserError, match="at least one process"):
        decode_into([path], 8, np.zeros((1, 3, 8, 8), dtype=np.uint8), workers=0)
    with pytest.raises(ValueError, match="chunk must be positive, not 0"):
        decode_into([path], 8, np.zeros((1, 3, 8, 8), dtype=np.uint8), chunk=0)
