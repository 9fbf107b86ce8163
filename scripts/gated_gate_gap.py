"""How much of a gated path's accuracy its evaluation gates lose: train gated on the first task of Split MNIST (0
against 1, every training image) and classify its test split with the gates as training samples them (Gumbel-
sigmoid) and as evaluation thresholds them (logit > 0), before and after re-estimating the batch norms' statistics
under the hard gates. REPRODUCING.md quotes its output (gated's class scenario on every training image).

    python scripts/gated_gate_gap.py --root DATA [--epochs 2] [--seed 0]
"""
import argparse

import torch
from omegaconf import OmegaConf

from cl_bench import backbones, config, methods
from cl_bench.data import scenarios
from cl_bench.methods.gated import GatedConfig
from cl_bench.nn import gated
from cl_bench.recorders import Recorders


def accuracy(method, info, test, norm: str | None, hard: bool = False) -> float:
    """Task 0's test accuracy with its own head: norm None is evaluation mode (hard gates, running statistics);
    otherwise a training-mode forward that normalises as `norm` says (nn.gated.NORM_MODES), hard or sampled gates."""
    hits = 0
    with torch.no_grad():
        for raw, y, t in test.batches(1000):
            method.train(norm is not None)
            gated.route(method.routed, [0], **({} if norm is None else {"norm": norm, "hard": hard}))
            hits += (method.heads(method.backbone(info.view.eval(raw, t)), 0).argmax(1) == y).sum().item()
    return hits / len(test)


@torch.no_grad()
def recalibrate(method, info, train) -> None:
    """Re-estimate every batch norm's statistics of path 0 (cumulative averages) over the training split with hard
    gates."""
    for module in method.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None
    method.train()
    for raw, _, t in train.batches(1000):
        gated.route(method.routed, [0], hard=True)
        method.backbone(info.view.eval(raw, t))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="data.root holding MNIST")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(opts.seed)
    config.register()
    cfg = config.compose(["method=gated", "dataset=split_mnist", "scenario=class", "backbone=convnet",
                          f"data.root={opts.root}", f"seed={opts.seed}"])
    sc = scenarios.build(cfg.dataset, cfg.data, "class", opts.seed, torch.device("cpu"))
    ctx = methods.Context(torch.device("cpu"), None, torch.Generator().manual_seed(opts.seed), Recorders([]))
    method = methods.build(OmegaConf.structured(GatedConfig(epochs=opts.epochs)),
                           backbones.build(cfg.backbone, sc.info.input_shape), sc.info, ctx)
    task, test = sc.tasks[0], sc.test[0]
    method.heads.seen = sc.info.seen_outputs(0)
    method._fit_path(task)  # the path as training leaves it, before freezing
    rows = [("sampled gates, running statistics (training's gates)", accuracy(method, sc.info, test, "running")),
            ("hard gates, running statistics (evaluation)", accuracy(method, sc.info, test, None))]
    recalibrate(method, sc.info, task.train)
    rows.append(("hard gates, statistics re-estimated under hard gates", accuracy(method, sc.info, test, None)))
    for name, value in rows:
        print(f"{100 * value:6.2f} %  {name}")


if __name__ == "__main__":
    main()
