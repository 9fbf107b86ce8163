"""Step time of data-parallel training, for `scripts/bench.py ddp`: one cl-bench backbone and head on CIFAR-shaped
batches (random pixels: the cost of a step does not depend on them), SGD, a global batch split over the ranks.

    torchrun --nproc_per_node=2 scripts/ddp_step.py ddp        # DistributedDataParallel: bucketed all-reduce,
                                                               # overlapped with the backward pass
    torchrun --nproc_per_node=2 scripts/ddp_step.py per_param  # one blocking all-reduce per parameter after
                                                               # backward (cl-bench's hardware=ddp before DDP)
    python scripts/ddp_step.py single                          # one process, the whole global batch
                                                               # (bench.py images: the compute floor of a step)

Prints one JSON line (rank 0): the median step time in ms over --steps steps after --warmup.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from cl_bench import backbones


def model(name: str) -> nn.Module:
    net = backbones.build({"name": name}, (3, 32, 32))
    return nn.Sequential(net, nn.Linear(net.feature_dim, 10))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["ddp", "per_param", "single"])
    parser.add_argument("--backbone", default="convnet")
    parser.add_argument("--batch-size", type=int, default=128, help="the global batch")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads a process (one a core: 2 ranks on "
                        "2 cores, as the single process gets one)")
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    world = 1
    if opts.mode != "single":
        dist.init_process_group("gloo")
        world = dist.get_world_size()
    torch.manual_seed(0)
    net = model(opts.backbone)
    step_net = nn.parallel.DistributedDataParallel(net) if opts.mode == "ddp" else net
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    n = opts.batch_size // world
    x, y = torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,))
    times = []
    for i in range(opts.warmup + opts.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(step_net(x), y).backward()
        if opts.mode == "per_param":
            for p in net.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(world)
        opt.step()
        if i >= opts.warmup:
            times.append(time.perf_counter() - start)
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({"mode": opts.mode, "backbone": opts.backbone, "ranks": world,
                          "global_batch": opts.batch_size, "step_ms": 1000 * statistics.median(times),
                          "params": sum(p.numel() for p in net.parameters()),
                          "tensors": len(list(net.parameters()))}))
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
