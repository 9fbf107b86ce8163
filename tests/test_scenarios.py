"""Scenarios cut sources into tasks; checked on small canonical files written here."""
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from test_sources import cifar_batch, write_idx_dataset, write_pickle

from cl_bench.config import DataConfig, DatasetConfig
from cl_bench.data import scenarios
from cl_bench.data.batches import View, random_crop, random_flip


def build(root, scenario="task", seed=0, **dataset):
    cfg = OmegaConf.structured(DatasetConfig(**dataset))
    data = OmegaConf.structured(DataConfig(root=str(root), val_fraction=0.25))
    return scenarios.build(cfg, data, scenario, seed, torch.device("cpu"))


def write_cifar100(root, per_class=4):
    """A CIFAR-100 with every fine class, superclasses assigned by a fixed shuffle (5 fine classes each)."""
    rng = np.random.default_rng(0)
    coarse_of = rng.permutation(np.repeat(np.arange(20), 5))
    for split, n in (("train", per_class), ("test", 2)):
        fine = np.repeat(np.arange(100), n)
        x = rng.integers(0, 256, (len(fine), 3, 32, 32), dtype=np.uint8)
        batch = cifar_batch(x, {"fine_labels": fine.tolist(), "coarse_labels": coarse_of[fine].tolist()}, False)
        write_pickle(root / "cifar-100-python" / split, batch, 3)
    return coarse_of


def test_cifar100_20_task_t_is_exactly_the_fine_classes_of_superclass_t(tmp_path):
    coarse_of = write_cifar100(tmp_path)
    s = build(tmp_path, name="cifar100_20", source="cifar100", kind="superclass", num_tasks=20)
    assert len(s.tasks) == 20
    for t, task in enumerate(s.tasks):
        assert task.classes == sorted(np.flatnonzero(coarse_of == t).tolist())
        assert task.offset == 5 * t
        labels = torch.cat([task.train.y, task.val.y]).unique().tolist()
        assert labels == list(range(5 * t, 5 * t + 5))
        assert len(s.test[t]) == 10 and len(task.train) + len(task.val) == 20


def test_split_cifar100_order_follows_the_seed(tmp_path):
    write_cifar100(tmp_path, per_class=1)
    kw = dict(name="split_cifar100", source="cifar100", kind="split", num_tasks=20, class_order="random")
    a, b, c = (build(tmp_path, seed=s, **kw).info.task_classes for s in (0, 0, 1))
    assert a == b and a != c
    assert sorted(sum(a, [])) == list(range(100)) and all(len(t) == 5 for t in a)


def test_split_mnist_relabels_each_task_and_carves_validation(tmp_path):
    write_idx_dataset(tmp_path / "MNIST" / "raw", suffix=".gz")  # 20 train, 10 test; labels 0..9 in turn
    s = build(tmp_path, name="split_mnist", source="mnist", num_tasks=5)
    assert s.info.task_classes == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    for task in s.tasks:
        assert len(task.train) == 3 and len(task.val) == 1 and len(s.test[task.id]) == 2
        assert set(s.test[task.id].y.tolist()) == {2 * task.id, 2 * task.id + 1}
        assert task.train.x.dtype == torch.uint8 and (task.train.t == task.id).all()
    # train and validation are disjoint and together all of the task's training images
    task = s.tasks[0]
    joined = torch.cat([task.train.x, task.val.x]).flatten(1)
    assert torch.unique(joined, dim=0).shape[0] == 4


@pytest.mark.parametrize("scenario, offsets", [("class", [0, 0, 0]), ("task", [0, 10, 20])])
def test_permuted_mnist_shares_labels_only_in_the_class_scenario(tmp_path, scenario, offsets):
    raw = write_idx_dataset(tmp_path / "MNIST" / "raw")
    s = build(tmp_path, scenario, name="permuted_mnist", source="mnist", kind="permuted", num_tasks=3,
              samples_per_task=2)
    assert s.info.offsets == offsets and s.info.num_outputs == (10 if scenario == "class" else 30)
    original = torch.from_numpy(raw["test_x"]).flatten(1)
    perms = []
    for task in s.tasks:
        assert len(task.train) == 2  # capped after the validation split
        permuted = s.test[task.id].x.flatten(1)
        # the same pixels, in another order, with one order for the whole task
        assert torch.equal(permuted.sort(dim=1).values, original.sort(dim=1).values)
        perms.append(permuted)
    assert not torch.equal(perms[0], perms[1])


def test_rotated_mnist_evenly_spaced_leaves_task_0_unrotated_and_gem_rotates_every_task(tmp_path):
    raw = write_idx_dataset(tmp_path / "MNIST" / "raw")
    s = build(tmp_path, name="rotated_mnist", source="mnist", kind="rotated", num_tasks=4, rotation="even")
    assert torch.equal(s.test[0].x[:, 0], torch.from_numpy(raw["test_x"]))
    assert not torch.equal(s.test[2].x, s.test[0].x)
    gem = build(tmp_path, name="rotated_mnist", source="mnist", kind="rotated", num_tasks=4)
    assert not torch.equal(gem.test[0].x[:, 0], torch.from_numpy(raw["test_x"]))  # an angle in [0°, 45°)


def test_too_many_tasks_for_the_classes_is_a_user_error(tmp_path):
    from cl_bench.errors import UserError
    write_idx_dataset(tmp_path / "MNIST" / "raw")
    with pytest.raises(UserError, match="lower dataset.num_tasks"):
        build(tmp_path, name="split_mnist", source="mnist", num_tasks=6, classes_per_task=2)


def test_a_cifar100_copy_with_fewer_superclasses_than_tasks_is_a_user_error(tmp_path):
    from cl_bench.errors import UserError
    rng = np.random.default_rng(0)
    for split in ("train", "test"):  # a copy holding 12 superclasses' classes only (the config allows 20 tasks)
        fine = np.arange(60)
        batch = cifar_batch(rng.integers(0, 256, (60, 3, 32, 32), dtype=np.uint8),
                            {"fine_labels": fine.tolist(), "coarse_labels": (fine // 5).tolist()}, False)
        write_pickle(tmp_path / "cifar-100-python" / split, batch, 3)
    assert len(build(tmp_path, name="cifar100_20", source="cifar100", kind="superclass", num_tasks=12).tasks) == 12
    with pytest.raises(UserError, match=r"dataset.num_tasks=13: cifar100 has 12 superclasses, one task each; lower "
                                        r"dataset.num_tasks"):
        build(tmp_path, name="cifar100_20", source="cifar100", kind="superclass", num_tasks=13)


@pytest.mark.parametrize("kind", ["permuted", "rotated"])
def test_tasks_transformed_on_the_device_refuse_another_residency(tmp_path, kind):
    from cl_bench.errors import UserError
    write_idx_dataset(tmp_path / "MNIST" / "raw")
    cfg = OmegaConf.structured(DatasetConfig(name=f"{kind}_mnist", source="mnist", kind=kind, num_tasks=2))
    data = OmegaConf.structured(DataConfig(root=str(tmp_path), residency="host"))
    with pytest.raises(UserError, match=rf"dataset.kind={kind} transforms its images when the tasks are built, on "
                                        rf"the device: use data.residency=device \(or auto\) with {kind}_mnist"):
        scenarios.build(cfg, data, "task", 0, torch.device("cpu"))


def test_batches_visit_every_sample_once_per_pass():
    split = scenarios.Split(torch.arange(10, dtype=torch.uint8)[:, None, None, None], torch.arange(10),
                            torch.zeros(10, dtype=torch.long))
    seen = torch.cat([y for _, y, _ in split.batches(3, torch.Generator().manual_seed(0))])
    assert sorted(seen.tolist()) == list(range(10)) and seen.tolist() != list(range(10))


def test_random_crop_cuts_windows_of_the_padded_image():
    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float).reshape(2, 3, 6, 6)
    out = random_crop(x, 2, torch.Generator().manual_seed(0))
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(2):
        windows = [padded[i, :, dy:dy + 6, dx:dx + 6] for dy in range(5) for dx in range(5)]
        assert any(torch.equal(out[i], w) for w in windows)
    assert torch.equal(random_crop(x, 0), x)


def test_random_flip_mirrors_some_images_whole():
    x = torch.randn(64, 3, 4, 4)
    out = random_flip(x, torch.Generator().manual_seed(0))
    flipped = [torch.equal(o, xi.flip(2)) for o, xi in zip(out, x)]
    kept = [torch.equal(o, xi) for o, xi in zip(out, x)]
    assert all(f or k for f, k in zip(flipped, kept)) and 10 < sum(flipped) < 54


def test_training_view_pads_with_black_as_torchvision_does():
    """torchvision's RandomCrop(32, padding=4) pads the image with black before ToTensor and Normalize: the padded
    border of a white image is normalised black, (0 - mean) / std, not 0 (the mean colour)."""
    view = View((0.5, 0.25), (0.5, 0.25), augment=True, device="cpu")
    white = torch.full((64, 2, 8, 8), 255, dtype=torch.uint8)
    out = view.train(white, torch.Generator().manual_seed(0))
    black, white_value = view.eval(torch.zeros(1, 2, 1, 1)), view.eval(torch.full((1, 2, 1, 1), 255.0))
    for c in range(2):
        values = set(out[:, c].unique().tolist())
        assert values == {black[0, c, 0, 0].item(), white_value[0, c, 0, 0].item()}  # black border, white rest


def test_view_normalises_per_channel():
    view = View((0.5, 0.25), (0.5, 0.25), augment=False, device="cpu")
    x = torch.full((1, 2, 2, 2), 255, dtype=torch.uint8)
    assert torch.allclose(view.eval(x), torch.tensor([1.0, 3.0]).view(1, 2, 1, 1).expand(1, 2, 2, 2))


def test_without_normalisation_pixels_are_only_scaled_to_the_unit_interval(tmp_path):
    """dataset.normalize=false gives Mammoth's MNIST inputs (ToTensor alone): 0 -> 0, 255 -> 1."""
    write_idx_dataset(tmp_path / "MNIST" / "raw", suffix=".gz")
    pixels = torch.tensor([0, 51, 255], dtype=torch.uint8).view(3, 1, 1, 1)
    plain = build(tmp_path, name="split_mnist", source="mnist", num_tasks=5, normalize=False).info.view
    torch.testing.assert_close(plain.eval(pixels).flatten(), torch.tensor([0.0, 0.2, 1.0]))
    normalised = build(tmp_path, name="split_mnist", source="mnist", num_tasks=5).info.view
    assert normalised.eval(pixels).flatten()[0] < 0  # the mean is subtracted by default
