"""The physical-limit reference for the bench's overhead workload: Split MNIST, class scenario, a 784-256-256-10
MLP, SGD lr 0.01 momentum 0.9, batch 128, one epoch per task, evaluation on every seen task's whole test set after
each task; plain PyTorch on in-memory tensors, no framework.

    python scripts/plain_split_mnist.py DATA_ROOT     # (holding MNIST/raw) prints train+eval seconds and accuracies
"""
import gzip
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def read_idx(path: Path) -> np.ndarray:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    dims = raw[3]
    shape = np.frombuffer(raw[4:4 + 4 * dims], dtype=">u4")
    return np.frombuffer(raw[4 + 4 * dims:], dtype=np.uint8).reshape(shape)


def load(root: Path, split: str):
    folder = root / "MNIST" / "raw"
    name = lambda kind: next(folder.glob(f"{split}-{kind}*"))  # noqa: E731
    x = torch.from_numpy(read_idx(name("images")).copy()).float().div_(255).sub_(0.1307).div_(0.3081)
    return x.flatten(1), torch.from_numpy(read_idx(name("labels")).astype(np.int64))


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def main(root: Path) -> None:
    torch.manual_seed(0)
    (train_x, train_y), (test_x, test_y) = load(root, "train"), load(root, "t10k")
    net = mlp()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    start = time.perf_counter()
    tasks = [(2 * t, 2 * t + 1) for t in range(5)]
    for t, classes in enumerate(tasks):
        seen = 2 * (t + 1)
        idx = torch.nonzero((train_y == classes[0]) | (train_y == classes[1])).squeeze(1)
        net.train()
        for batch in idx[torch.randperm(len(idx))].split(128):
            loss = F.cross_entropy(net(train_x[batch])[:, :seen], train_y[batch])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        net.eval()
        with torch.inference_mode():
            acc = []
            for c0, c1 in tasks[: t + 1]:
                mask = (test_y == c0) | (test_y == c1)
                acc.append((net(test_x[mask])[:, :seen].argmax(1) == test_y[mask]).float().mean().item())
    print(f"train+eval {time.perf_counter() - start:.3f} s; final accuracies {[round(a, 4) for a in acc]}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
