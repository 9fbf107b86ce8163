"""Your own data: dataset=custom over an .npz / .safetensors file or an ImageFolder tree that the tests write,
and custom class orders and task splits for every split dataset."""
import numpy as np
import pytest
import torch
from conftest import cl_bench, contract_problems, train
from PIL import Image

from cl_bench import config
from cl_bench.data import scenarios, sources
from cl_bench.errors import UserError

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out


def arrays(n_train=60, n_test=30, classes=6, shape=(8, 8, 3), seed=0):
    rng = np.random.default_rng(seed)
    return {f"{split}_{k}": v for split, n in (("train", n_train), ("test", n_test))
            for k, v in (("x", rng.integers(0, 256, (n, *shape), dtype=np.uint8)), ("y", np.arange(n) % classes))}


def build(*overrides, scenario="class"):
    config.register()
    cfg = config.compose(["dataset=custom", "data.val_fraction=0", *overrides])
    return scenarios.build(cfg.dataset, cfg.data, scenario, 0, torch.device("cpu"))


def test_npz_images_channels_last_load_exactly(tmp_path):
    data = arrays()
    np.savez(tmp_path / "mine.npz", **data)
    src = sources.load("tensors", tmp_path, path=tmp_path / "mine.npz")
    assert torch.equal(src.train_x, torch.from_numpy(data["train_x"]).permute(0, 3, 1, 2))
    assert src.train_y.tolist() == data["train_y"].tolist() and src.test_x.shape == (30, 3, 8, 8)


def test_safetensors_floats_in_unit_range_become_8_bit_pixels(tmp_path):
    from safetensors.numpy import save_file
    data = arrays(shape=(1, 5, 7))  # N×C×H×W
    floats = {k: (v / 255).astype(np.float32) if k.endswith("_x") else v.astype(np.int64) for k, v in data.items()}
    save_file(floats, tmp_path / "mine.safetensors")
    src = sources.load("tensors", tmp_path, path=tmp_path / "mine.safetensors")
    assert torch.equal(src.train_x, torch.from_numpy(data["train_x"]))


def write_image_folder(root, classes=("cat", "ant", "bee"), per_class=(5, 2), size=(6, 4)):
    rng = np.random.default_rng(0)
    pixels = {}
    for split, n in zip(("train", "test"), per_class):
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                image = rng.integers(0, 256, (size[1], size[0]), dtype=np.uint8)
                Image.fromarray(image, mode="L").save(root / split / name / f"{i}.png")
                pixels[split, name, i] = image
    return pixels


def test_image_folder_labels_classes_by_folder_name_and_keeps_grey_images_grey(tmp_path):
    pixels = write_image_folder(tmp_path / "imgs")
    src = sources.load("image_folder", tmp_path, path=tmp_path / "imgs")
    assert src.train_x.shape == (15, 1, 4, 6) and src.test_x.shape == (6, 1, 4, 6)
    for label, name in enumerate(("ant", "bee", "cat")):  # sorted folder names, as torchvision's ImageFolder
        rows = (src.train_y == label).nonzero().squeeze(1)
        assert [torch.equal(src.train_x[r, 0], torch.from_numpy(pixels["train", name, i]))
                for i, r in enumerate(rows)] == [True] * 5


def test_image_folder_of_mixed_sizes_needs_image_size(tmp_path):
    write_image_folder(tmp_path / "imgs")
    Image.fromarray(np.zeros((9, 9), np.uint8), mode="L").save(tmp_path / "imgs" / "train" / "ant" / "big.png")
    with pytest.raises(UserError, match="images of different sizes .* dataset.image_size=N"):
        sources.load("image_folder", tmp_path, path=tmp_path / "imgs")
    src = sources.load("image_folder", tmp_path, path=tmp_path / "imgs", image_size=5)
    assert src.train_x.shape == (16, 1, 5, 5)


# Each source once and each scenario once: a source is read before the scenario splits its classes into tasks, and the
# split reads the classes alone, so the other two pairs would only show these facts again (issue 74).
@pytest.mark.parametrize(("kind", "scenario"), [("npz", "task"), ("image_folder", "class")])
def test_dataset_custom_trains_in_both_scenarios(tmp_path, scenario, kind):
    if kind == "npz":
        np.savez(tmp_path / "mine.npz", **arrays())
        source = ["dataset.source=tensors", f"dataset.path={tmp_path / 'mine.npz'}", "dataset.num_tasks=3"]
    else:
        write_image_folder(tmp_path / "imgs", classes=("a", "b", "c", "d"), size=(8, 8))
        source = ["dataset.source=image_folder", f"dataset.path={tmp_path / 'imgs'}", "dataset.num_tasks=2"]
    run = tmp_path / "run"
    metrics = train(run, "dataset=custom", *source, f"scenario={scenario}", "backbone=mlp", "method.epochs=1",
                    "data.cache=false")
    assert metrics["complete"] and metrics["dataset"] == "custom" and contract_problems(run) == []


@pytest.mark.parametrize("overrides, complaint", [
    (["dataset.path=nowhere.npz"], "must be an .npz or .safetensors file"),
    (["dataset.source=image_folder", "dataset.path=."], "must hold train/ and test/"),
    ([], "dataset.path=None is out of range: use a file or folder"),
])
def test_a_wrong_layout_is_one_line(tmp_path, overrides, complaint):
    proc = cl_bench("train", f"hydra.run.dir={tmp_path / 'run'}", "logger=none", "dataset=custom", *overrides)
    assert proc.returncode != 0 and complaint in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_npz_without_the_four_arrays_is_a_user_error(tmp_path):
    np.savez(tmp_path / "mine.npz", train_x=np.zeros((2, 4, 4), np.uint8), labels=np.zeros(2), X_test=np.zeros(2))
    with pytest.raises(UserError, match="lacks train_y, test_x, test_y: it holds X_test, labels, train_x;"):
        sources.load("tensors", tmp_path, path=tmp_path / "mine.npz")


def test_class_order_list_and_task_classes_set_the_split(tmp_path):
    config.register()
    cfg = config.compose(["dataset=split_digits", "dataset.num_tasks=3", "dataset.class_order=[9,3,5,0,1,2]",
                          "dataset.classes_per_task=2"])
    s = scenarios.build(cfg.dataset, cfg.data, "class", 0, torch.device("cpu"))
    assert [t.classes for t in s.tasks] == [[9, 3], [5, 0], [1, 2]]
    assert s.tasks[0].train.y.unique().tolist() == [0, 1]  # labels in the order learned
    np.savez(tmp_path / "mine.npz", **arrays())
    s = build("dataset.source=tensors", f"dataset.path={tmp_path / 'mine.npz'}", "dataset.num_tasks=2",
              "dataset.task_classes=[[4,1,2],[0,5]]")
    assert [t.classes for t in s.tasks] == [[4, 1, 2], [0, 5]]
    with pytest.raises(UserError, match="names classes \\[7\\]"):
        build("dataset.source=tensors", f"dataset.path={tmp_path / 'mine.npz'}", "dataset.num_tasks=1",
              "dataset.task_classes=[[7]]")
    with pytest.raises(UserError, match="set dataset.num_tasks=2"):
        config.validate(config.compose(["dataset=split_digits", "dataset.task_classes=[[0],[1]]"]))


def test_grey_images_without_a_channel_axis_load_as_one_channel(tmp_path):
    data = arrays(shape=(5, 7))  # N×H×W
    np.savez(tmp_path / "mine.npz", **data)
    src = sources.load("tensors", tmp_path, path=tmp_path / "mine.npz")
    assert torch.equal(src.train_x, torch.from_numpy(data["train_x"])[:, None]) and src.test_x.shape == (30, 1, 5, 7)


@pytest.mark.parametrize(("change", "complaint"), [
    ("damaged", r"cannot read .*mine\.npz: "),
    ("test_smaller", r"mine\.npz: train_x and test_x images differ in shape \(\(3, 8, 8\) and \(3, 6, 6\)\)"),
    ("flat", r"mine\.npz: train_x must be images N×H×W, N×C×H×W or N×H×W×C with 1 or 3 channels, not of shape "
             r"\(60, 192\)"),
    ("beyond_unit_range", r"mine\.npz: test_x holds floats outside \[0, 1\]: scale them to \[0, 1\]"),
    ("int_pixels", r"mine\.npz: train_x must be uint8 pixels or floats in \[0, 1\], not int64"),
])
def test_arrays_the_reader_refuses_are_said(tmp_path, change, complaint):
    data = arrays()
    if change == "test_smaller":
        data["test_x"] = data["test_x"][:, :6, :6]
    elif change == "flat":
        data["train_x"] = data["train_x"].reshape(60, -1)
    elif change == "beyond_unit_range":
        data["test_x"] = data["test_x"].astype(np.float32)  # 0..255, never scaled
    elif change == "int_pixels":
        data["train_x"] = data["train_x"].astype(np.int64)
    np.savez(tmp_path / "mine.npz", **data)
    if change == "damaged":
        (tmp_path / "mine.npz").write_bytes((tmp_path / "mine.npz").read_bytes()[:100])
    with pytest.raises(UserError, match=complaint):
        sources.load("tensors", tmp_path, path=tmp_path / "mine.npz")


def test_image_folder_skips_files_that_are_not_images(tmp_path):
    write_image_folder(tmp_path / "imgs")
    (tmp_path / "imgs" / "train" / "ant" / "notes.txt").write_text("where these came from")
    src = sources.load("image_folder", tmp_path, path=tmp_path / "imgs")
    assert src.train_x.shape == (15, 1, 4, 6) and torch.bincount(src.train_y).tolist() == [5, 5, 5]


@pytest.mark.parametrize(("change", "complaint"), [
    ("no_classes", r"imgs/train must hold one folder per class and .*imgs/test only folders among them; found "
                   r"none and \['ant', 'bee', 'cat'\]"),
    ("undecodable", r"imgs/test/bee/bad\.png could not be decoded as an image \("),
    ("empty_test", r"imgs/test holds no images \(\.png, \.jpg"),
])
def test_image_folders_the_reader_refuses_are_said(tmp_path, change, complaint):
    import shutil
    write_image_folder(tmp_path / "imgs")
    if change == "no_classes":
        shutil.rmtree(tmp_path / "imgs" / "train")
        (tmp_path / "imgs" / "train").mkdir()
    elif change == "undecodable":
        (tmp_path / "imgs" / "test" / "bee" / "bad.png").write_bytes(b"not a PNG")
    else:
        for name in ("ant", "bee", "cat"):
            shutil.rmtree(tmp_path / "imgs" / "test" / name)
            (tmp_path / "imgs" / "test" / name).mkdir()
    with pytest.raises(UserError, match=complaint):
        sources.load("image_folder", tmp_path, path=tmp_path / "imgs")
