"""The image workload of `scripts/bench.py images`, written the way most research code is: torchvision transforms
on PIL images, a DataLoader with workers, a Python loop. Split CIFAR-10 (classes 0/1, 2/3, ... in order), a
random `--samples` training images and `--test-samples` test images a task, pad-crop 4 and horizontal flip,
per-channel normalisation by the training pixels' mean and std, SGD lr 0.01 momentum 0.9, one epoch a task.

    python scripts/plain_split_cifar10.py DATA_ROOT METHOD [--backbone convnet] [--samples 2000] ...
        METHOD: finetune | er | packnet     DATA_ROOT holds cifar-10-batches-py/ (cl-bench data prepare cifar10)

- finetune and er: class scenario, one 10-way head read over the classes seen so far (as cl-bench's).
- er: a memory of --memory samples written at the end of each task, an equal share per task seen (cl-bench's
  memory_policy=balanced, Avalanche's default buffer), stored as raw images; each step adds a batch drawn from
  it, each sample transformed on its own (as Mammoth's buffer does).
- packnet: task scenario, a 2-way head per task; train an epoch on the free weights, prune --prune of the task's
  weights by magnitude (per layer), retrain an epoch, freeze; a task is evaluated with the weights of later tasks
  masked out and its own batch norms, each task's starting from the previous one's (as cl-bench's packnet).

The backbone is cl-bench's own module (cl_bench/backbones, on the path from this checkout), so the three tools
train the same network. Prints one JSON line: method, train_eval_s (first step to last evaluation), the final
row of accuracies and its mean.
"""
import argparse
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cl_bench.backbones import build  # noqa: E402  the same network cl-bench trains

TASKS = [(2 * t, 2 * t + 1) for t in range(5)]


def read(root: Path, names) -> tuple[np.ndarray, np.ndarray]:
    """cifar-10-batches-py pickles as (N, 32, 32, 3) uint8 images and int64 labels."""
    xs, ys = [], []
    for name in names:
        with open(root / "cifar-10-batches-py" / name, "rb") as f:
            d = pickle.load(f, encoding="latin1")  # as torchvision reads them: str keys
        xs.append(np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        ys.append(np.asarray(d["labels"], dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def subsample(x, y, per_task: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """A random per_task images of each task, in class order."""
    keep = np.concatenate([rng.permutation(np.flatnonzero(np.isin(y, pair)))[:per_task] for pair in TASKS])
    keep.sort()
    return x[keep], y[keep]


def workload_args(doc: str, what: str, choices: list[str]) -> argparse.Namespace:
    """The workload's command line, the same for this loop and the Avalanche script."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("data_root", type=Path)
    parser.add_argument(what, choices=choices)
    parser.add_argument("--backbone", default="convnet")
    parser.add_argument("--samples", type=int, default=2000, help="training images a task")
    parser.add_argument("--test-samples", type=int, default=1000, help="test images a task")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--memory", type=int, default=500, help="er / replay: samples kept")
    parser.add_argument("--prune", type=float, default=0.5, help="packnet: share of a task's weights released")
    parser.add_argument("--seed", type=int, default=0, help="the subsets, the initialisation and every draw")
    return parser.parse_args()


def load(root: Path, samples: int, test_samples: int, seed: int):
    """(train_x, train_y), (test_x, test_y), mean, std: HWC uint8 images, subsampled per task."""
    rng = np.random.default_rng((seed, 0))
    train = subsample(*read(root, [f"data_batch_{i}" for i in range(1, 6)]), samples, rng)
    test = subsample(*read(root, ["test_batch"]), test_samples, rng)
    scaled = train[0].reshape(-1, 3) / 255.0
    return train, test, tuple(scaled.mean(0).tolist()), tuple(scaled.std(0).tolist())


def transforms(mean, std):
    from torchvision import transforms as T
    train = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(mean, std)])
    return train, T.Compose([T.ToTensor(), T.Normalize(mean, std)])


class Images(torch.utils.data.Dataset):
    """HWC uint8 images as PIL images through a transform, as torchvision's CIFAR10 serves them."""

    def __init__(self, x, y, transform):
        self.x, self.targets, self.transform = x, y.tolist(), transform

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        image = _pil(self.x[i])
        return (image if self.transform is None else self.transform(image)), self.targets[i]


class Net(nn.Module):
    def __init__(self, backbone: str, heads: list[int]):
        super().__init__()
        self.body = build({"name": backbone}, (3, 32, 32))
        self.heads = nn.ModuleList(nn.Linear(self.body.feature_dim, n) for n in heads)

    def forward(self, x, head: int = 0):
        return self.heads[head](self.body(x))


def loader(ds, batch_size, workers, shuffle):
    return torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=shuffle, num_workers=workers)


@torch.no_grad()
def evaluate(net, test_sets, seen: int, workers: int, task_heads: bool, before_task=None) -> list[float]:
    net.eval()
    accs = []
    for t, ds in enumerate(test_sets):
        if before_task is not None:
            before_task(t)
        correct = 0
        for x, y in loader(ds, 256, workers, False):
            logits = net(x, t) if task_heads else net(x)[:, :seen]
            correct += int((logits.argmax(1) == (y - 2 * t if task_heads else y)).sum())
        accs.append(correct / len(ds))
    return accs


def prunable(net) -> list[nn.Module]:
    return [m for m in net.body.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


def main() -> None:
    opts = workload_args(__doc__, "method", ["finetune", "er", "packnet"])
    torch.manual_seed(opts.seed)
    (train_x, train_y), (test_x, test_y), mean, std = load(opts.data_root, opts.samples, opts.test_samples,
                                                           opts.seed)
    train_tf, test_tf = transforms(mean, std)
    packnet = opts.method == "packnet"
    net = Net(opts.backbone, [2] * 5 if packnet else [10])
    owner = {m: torch.zeros_like(m.weight, dtype=torch.long) for m in prunable(net)}  # packnet: 0 free, t+1 task t
    bn_keys = _batch_norm_keys(net.body)
    bn_states = []  # packnet: each task's batch norms, as it ended (the next task starts from them)
    memory = []  # er: indices into the training set
    rng = np.random.default_rng((opts.seed, 1))  # replay draws and the memory's choice
    test_sets = [Images(test_x[np.isin(test_y, p)], test_y[np.isin(test_y, p)], test_tf) for p in TASKS]
    start = time.perf_counter()
    for t, pair in enumerate(TASKS):
        rows = np.flatnonzero(np.isin(train_y, pair))
        ds = Images(train_x[rows], train_y[rows], train_tf)
        params = [p for p in net.parameters() if p.requires_grad]
        opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
        for o in owner.values():
            o[o == 0] = t + 1  # packnet: the free weights become this task's
        args = (net, ds, opt, t, memory, (train_x, train_y), owner, rng, opts)
        train_epoch(*args)
        if packnet:  # release the smallest --prune of this task's weights, retrain the rest, keep its batch norms
            for m, o in owner.items():
                mine = o == t + 1
                cut = m.weight.detach()[mine].abs().quantile(opts.prune)
                released = mine & (m.weight.detach().abs() <= cut)
                o[released] = 0
                with torch.no_grad():
                    m.weight[released] = 0
            train_epoch(*args)
            bn_states.append({k: v.clone() for k, v in net.body.state_dict().items() if k in bn_keys})
        if opts.method == "er":  # balanced: memory // tasks seen per task, random
            share = opts.memory // (t + 1)
            per_task = [[i for i in memory if train_y[i] // 2 == j][:share] for j in range(t)]
            memory = [i for kept in per_task for i in kept] + list(rng.permutation(rows)[:share])
        acc = evaluate(net, test_sets[: t + 1], 2 * (t + 1), opts.workers, packnet,
                       _packnet_view(owner, net.body, bn_states) if packnet else None)
    train_eval_s = time.perf_counter() - start
    print(json.dumps({"method": opts.method, "backbone": opts.backbone, "train_eval_s": round(train_eval_s, 3),
                      "final_accs": [round(a, 4) for a in acc], "final_avg_acc": round(sum(acc) / len(acc), 4)}))


def train_epoch(net, ds, opt, t: int, memory, train, owner, rng, opts) -> None:
    """One epoch on task t's dataset; with a memory (er), a replay batch beside each batch; packnet: only the free
    weights and task t's learn."""
    packnet = opts.method == "packnet"
    net.train()
    for x, y in loader(ds, opts.batch_size, opts.workers, True):
        if memory:  # each stored image transformed on its own
            pick = rng.choice(memory, opts.batch_size)
            x = torch.cat([x, torch.stack([ds.transform(_pil(train[0][i])) for i in pick])])
            y = torch.cat([y, torch.from_numpy(train[1][pick])])
        logits = net(x, t) if packnet else net(x)[:, : 2 * (t + 1)]
        loss = F.cross_entropy(logits, y - 2 * t if packnet else y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if packnet:
            for m, o in owner.items():
                m.weight.grad.mul_((o == 0) | (o == t + 1))
        opt.step()


def _pil(img):
    from PIL import Image
    return Image.fromarray(img)


def _batch_norm_keys(body) -> set[str]:
    return {f"{name}.{k}" for name, m in body.named_modules() if isinstance(m, nn.BatchNorm2d)
            for k in m.state_dict()}


def _packnet_view(owner, body, bn_states):
    """Before evaluating task t: the weights of tasks after t zeroed (from a copy taken now) and task t's own
    batch norms loaded; the last task viewed is the newest, so training continues from where it was."""
    saved = {m: m.weight.detach().clone() for m in owner}

    def view(t):
        with torch.no_grad():
            for m, o in owner.items():
                m.weight.copy_(saved[m] * ((o >= 1) & (o <= t + 1)))
        body.load_state_dict(bn_states[t], strict=False)
    return view


if __name__ == "__main__":
    main()
