"""Scenarios turn a source (images + labels) into a sequence of tasks, their pixels where data.residency says
(held on the device by default; data/residency.py).

Labels live in one scenario-wide label space: task t owns outputs [offset_t, offset_t + size_t). Split
datasets give each task fresh labels; permuted and rotated MNIST share the ten digit labels (offset 0)
in the class scenario, the domain-incremental protocol of GEM and La-MAML, and get a head each in the
task scenario.
"""
import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import UserError
from . import prepared, residency, sources
from .batches import View, channel_stats

log = logging.getLogger("cl_bench")


@dataclass
class Split:
    """One task's samples on the device: uint8 pixels, labels in the scenario's label space, task ids."""

    x: torch.Tensor
    y: torch.Tensor
    t: torch.Tensor

    def __len__(self):
        return self.y.shape[0]

    def batches(self, batch_size: int, generator: torch.Generator | None = None):
        """Index batches over this split: a fresh on-device shuffle when a generator is given."""
        n = len(self)
        order = (torch.randperm(n, device=self.y.device, generator=generator) if generator is not None
                 else torch.arange(n, device=self.y.device))
        for idx in order.split(batch_size):  # index_select: several times cheaper than x[idx] per batch
            yield self.x.index_select(0, idx), self.y.index_select(0, idx), self.t.index_select(0, idx)

    @staticmethod
    def cat(splits):
        """One split of several (off-device ones over the same images stay off the device)."""
        return residency.cat(splits) or Split(*(torch.cat(parts) for parts in zip(*((s.x, s.y, s.t) for s in splits))))


@dataclass
class Task:
    """What a learner receives of one task. It has no test split: test data lives in Scenario.test, which
    only train.py's evaluation reads, so no method can select (goals, ratios, relevance) on test data."""

    id: int
    classes: list[int]  # the source's class ids in this task
    offset: int  # first output of this task in the scenario's label space
    train: Split
    val: Split  # data.val_fraction of the task's training data, held out for the method's own selection

    @property
    def num_classes(self):
        return len(self.classes)


@dataclass
class Info:
    """What a method may know about the scenario before seeing any data."""

    dataset: str
    scenario: str  # "task" or "class"
    input_shape: tuple[int, int, int]
    task_classes: list[list[int]]
    offsets: list[int]
    view: View = field(repr=False)

    @property
    def num_tasks(self):
        return len(self.task_classes)

    @property
    def sizes(self):
        return [len(c) for c in self.task_classes]

    def seen_outputs(self, task_id: int) -> int:
        """Outputs of the single head once tasks 0..task_id have been seen."""
        return max(o + n for o, n in zip(self.offsets[: task_id + 1], self.sizes))

    @property
    def num_outputs(self):
        return self.seen_outputs(self.num_tasks - 1)


@dataclass
class Scenario:
    tasks: list[Task]
    test: list[Split]  # test[j]: task j's test split, for train.py's evaluation alone
    info: Info
    residency: str = "device"  # where the pixels live (data.residency as chosen)


def build(dataset_cfg, data_cfg, scenario: str, seed: int, device: torch.device,
          channels_last: bool = False, select_on_test: bool = False, per_task_norm: bool = False) -> Scenario:
    """Read the dataset's source and cut it into tasks, their pixels on `device` or off it as data.residency
    says (labels and task ids always on it). select_on_test (the official
    protocol of reference code that selected on test data): nothing is held out, and the split a learner
    selects on (Task.val) is the task's test split. per_task_norm (data.normalization): each task's images are
    normalised with the mean and std of that task's own training split (never its validation or test data)."""
    src, place, mode = _placed_source(dataset_cfg, data_cfg, device)
    rng = np.random.default_rng(seed)
    kind = dataset_cfg.kind
    if kind == "split":
        task_classes, shared_labels = _class_split(src, dataset_cfg, rng), False
    elif kind == "superclass":
        task_classes, shared_labels = _superclasses(src, dataset_cfg.num_tasks), False
    elif kind in ("permuted", "rotated"):
        labels = _labels_present(src.train_y)
        task_classes, shared_labels = [labels] * dataset_cfg.num_tasks, True
    else:
        raise UserError(f"dataset.kind={kind!r} is unknown: use split, superclass, permuted or rotated")
    offsets = _offsets(task_classes, shared_labels and scenario == "class")
    mean, std = (src.mean, src.std) if dataset_cfg.normalize else ([0.0] * len(src.mean), [1.0] * len(src.std))
    tasks, test = zip(*(_task(src, t, task_classes[t], offsets[t], kind, dataset_cfg, data_cfg, rng, place,
                              select_on_test) for t in range(len(task_classes))))
    if per_task_norm:
        mean, std = (list(rows) for rows in zip(*(channel_stats(task.train.x) for task in tasks)))
    view = View(mean, std, dataset_cfg.augment, device, channels_last, brightness=dataset_cfg.brightness_jitter)
    info = Info(dataset_cfg.name, scenario, tuple(src.train_x.shape[1:]), task_classes, offsets, view)
    return Scenario(list(tasks), list(test), info, mode)


def _class_split(src, cfg, rng) -> list[list[int]]:
    classes = _labels_present(src.train_y)
    if cfg.task_classes is not None:
        _check_known(cfg, [c for task in cfg.task_classes for c in task], classes, "dataset.task_classes")
        return [list(task) for task in cfg.task_classes]
    given_order = not isinstance(cfg.class_order, str)  # a list of class ids (a ListConfig from Hydra)
    if given_order:
        _check_known(cfg, list(cfg.class_order), classes, "dataset.class_order")
        classes = list(cfg.class_order)
    per_task = cfg.classes_per_task or len(classes) // cfg.num_tasks
    if per_task < 1 or per_task * cfg.num_tasks > len(classes):
        raise UserError(f"{cfg.name}: {cfg.num_tasks} tasks of {per_task} classes need more than the "
                        f"{len(classes)} classes {cfg.source} has; lower dataset.num_tasks")
    if cfg.class_order == "random":
        classes = rng.permutation(classes).tolist()
    tasks = [classes[i * per_task:(i + 1) * per_task] for i in range(cfg.num_tasks)]
    return tasks if given_order else [sorted(task) for task in tasks]  # a given order holds within tasks too


def _check_known(cfg, given: list[int], classes: list[int], key: str) -> None:
    unknown = sorted(set(given) - set(classes))
    if unknown or len(set(given)) != len(given):
        what = f"classes {unknown} that {cfg.source} does not have" if unknown else "a class twice"
        raise UserError(f"{key} names {what}: use distinct ids among {classes[0]}..{classes[-1]}")


def _superclasses(src, num_tasks: int) -> list[list[int]]:
    """The fine classes of the first num_tasks superclasses, a task each, in the order of the coarse labels."""
    if src.train_coarse is None:
        raise UserError(f"dataset.kind=superclass needs coarse labels, which {src.name} does not have")
    fine, coarse = src.train_y, src.train_coarse
    superclasses = _labels_present(coarse)
    if num_tasks > len(superclasses):
        raise UserError(f"dataset.num_tasks={num_tasks}: {src.name} has {len(superclasses)} superclasses, one task "
                        f"each; lower dataset.num_tasks")
    return [_labels_present(fine[coarse == c]) for c in superclasses[:num_tasks]]


def _offsets(task_classes, shared: bool) -> list[int]:
    if shared:
        return [0] * len(task_classes)
    return np.cumsum([0] + [len(c) for c in task_classes[:-1]]).tolist()


def _placed_source(dataset_cfg, data_cfg, device):
    """The source, read whole or mapped from its prepared file, the function that makes a split of its rows where
    data.residency puts it, and the residency chosen (said in the log)."""
    name = dataset_cfg.source
    store = prepared.require(data_cfg.root, name) if name in sources.PREPARED else prepared.find(data_cfg.root, name)
    src = None
    if store is None:
        src = sources.load(name, data_cfg.root, data_cfg.download, data_cfg.cache, dataset_cfg.path,
                           dataset_cfg.image_size)
    nbytes = store.nbytes if store is not None else src.train_x.nbytes + src.test_x.nbytes
    mode, why = residency.choose(data_cfg.residency, nbytes, device, streamable=store is not None)
    workers = residency.stream_workers(data_cfg.workers, device)
    log.info(f"data residency: {mode} ({why})" + (f", {workers} loader workers" if mode == "stream" else ""))
    if mode == "stream" and store is None:
        raise UserError(f"data.residency=stream reads the dataset from its prepared file: run "
                        f"`{prepared.prepare_command(name, data_cfg.root)}` first, or use data.residency=host")
    if mode != "device" and dataset_cfg.kind in ("permuted", "rotated"):
        raise UserError(f"dataset.kind={dataset_cfg.kind} transforms its images when the tasks are built, on the "
                        f"device: use data.residency=device (or auto) with {dataset_cfg.name}")
    if src is None:
        src = sources.from_prepared(store, mapped=mode == "stream")
    if mode == "host" and device.type == "cuda":  # pinned: the copies to the device run asynchronously
        src.train_x, src.test_x = src.train_x.pin_memory(), src.test_x.pin_memory()

    def place(x, transform, rows, y, t):
        y, t = y.to(device), torch.full((len(rows),), t, dtype=torch.long, device=device)
        if mode == "device":
            return Split(transform(x[rows]).to(device), y, t)
        return residency.OffDeviceSplit(x, rows, y, t, workers)
    return src, place, mode


def _task(src, t, classes, offset, kind, cfg, data_cfg, rng, place, select_on_test) -> tuple[Task, Split]:
    """Task t as its learner sees it, and its test split apart."""
    relabel = torch.full((int(src.train_y.max()) + 1,), -1, dtype=torch.long)
    relabel[torch.tensor(classes)] = torch.arange(len(classes)) + offset
    train_rows, test_rows = _rows(src.train_y, relabel), _rows(src.test_y, relabel)
    transform = (_domain_transform(cfg, t, src.train_x.shape[1:], rng)
                 if kind in ("permuted", "rotated") else (lambda x: x))
    order = torch.from_numpy(rng.permutation(len(train_rows)))
    n_val = 0 if select_on_test else int(round(data_cfg.val_fraction * len(train_rows)))
    val_idx, train_idx = order[:n_val], order[n_val:]
    if cfg.val_samples_per_task is not None:
        val_idx = val_idx[: cfg.val_samples_per_task]
    if cfg.samples_per_task is not None:
        train_idx = train_idx[: cfg.samples_per_task]
    if cfg.test_samples_per_task is not None:
        test_rows = test_rows[torch.from_numpy(np.sort(rng.permutation(len(test_rows))[: cfg.test_samples_per_task]))]

    def split(x, y, rows):  # one gather from the source per split: the data is copied once
        return place(x, transform, rows, relabel[y[rows]], t)

    test = split(src.test_x, src.test_y, test_rows)
    val = test if select_on_test else split(src.train_x, src.train_y, train_rows[val_idx])
    return Task(t, list(classes), offset, split(src.train_x, src.train_y, train_rows[train_idx]), val), test


def _rows(y, relabel) -> torch.Tensor:
    """Indices of the samples whose label belongs to the task, in the source's order."""
    return torch.nonzero(relabel[y] >= 0).squeeze(1)


def _labels_present(y: torch.Tensor) -> list[int]:
    return torch.nonzero(torch.bincount(y)).squeeze(1).tolist()


def _domain_transform(cfg, t, shape, rng):
    if cfg.kind == "permuted":
        perm = torch.from_numpy(rng.permutation(int(np.prod(shape))))
        return lambda x: x.flatten(1)[:, perm].reshape(x.shape)
    from torchvision.transforms.v2 import functional as TF  # imported here: torchvision takes seconds to load
    slot = 180.0 / cfg.num_tasks
    if cfg.rotation == "gem":  # GEM's mnist_rotations.py: uniform within the task's slot, PIL's default resampling
        angle, mode = float(rng.uniform(slot * t, slot * (t + 1))), TF.InterpolationMode.NEAREST
    else:
        angle, mode = slot * t, TF.InterpolationMode.BILINEAR
    return lambda x: TF.rotate(x, angle, interpolation=mode)
