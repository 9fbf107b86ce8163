"""Diagnostic for the gated parity row (docs/parity.md, cgate): does a new task's path learn over frozen kernels?

Its account: scripts/parity/README.md, section gated_task1.py.
"""
import argparse
import copy
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

from cl_bench import config, recorders, train
from cl_bench.methods import gated as gated_method
from cl_bench.nn import gated

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity.cgate import ROWS  # noqa: E402

VARIANTS = ("sampled", "hard", "open")


class StepLog:
    """Stands in for torch.nn.functional inside cl_bench.methods.gated: records each training cross-entropy."""

    def __init__(self, layers):
        self.layers, self.steps = layers, []

    def __getattr__(self, name):
        return getattr(F, name)

    def cross_entropy(self, logits, target, *args, **kwargs):
        loss = F.cross_entropy(logits, target, *args, **kwargs)
        if logits.requires_grad:
            open_share = [round(layer.last_gates.float().mean().item(), 3) for layer in self.layers[:4]]
            self.steps.append((round(loss.item(), 3), round((logits.argmax(1) == target).float().mean().item(), 3),
                               open_share))
        return loss


def hard_route(modules, tasks, norm="train", hard=False):
    gated.route(modules, tasks, norm, True)


def batch_statistics(norm: gated.TaskNorm, z: torch.Tensor) -> torch.Tensor:
    """TaskNorm's evaluation forward with each task's rows normalised by their own batch statistics."""
    n = z.shape[0] // len(norm.tasks)
    return torch.cat([F.batch_norm(rows, None, None, norm.bns[t].weight, norm.bns[t].bias, True, 0.0, norm.bns[t].eps)
                      for rows, t in zip(z.split(n), norm.tasks)])


def evaluate_on_batch_statistics(method, scenario, task_id: int, ctx, batch: int):
    running = gated.TaskNorm.forward
    gated.TaskNorm.forward = lambda norm, z: running(norm, z) if norm.training else batch_statistics(norm, z)
    try:
        return train.evaluate(method, scenario, task_id, False, ctx, batch)
    finally:
        gated.TaskNorm.forward = running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--torch-norms", action="store_true")
    parser.add_argument("--eval-batch-stats", action="store_true")
    args = parser.parse_args()
    config.register()
    norms = ["method.norm_eps=null", "method.norm_momentum=null"] if args.torch_norms else []
    cfg = config.compose([*ROWS["gated_task"].clbench, *norms, "dataset.num_tasks=2", "dataset.classes_per_task=2",
                          f"data.root={args.data_root}", f"seed={args.seed}", "hardware=cpu", "hardware.threads=1"])
    scenario, method, ctx = train.build(cfg, recorders.Recorders([]))
    first, second = scenario.tasks
    log = StepLog(method.layers)
    gated_method.F = log
    method.learn(first)
    # Each variant from the same state: the weights, the run's generator (batches) and torch's global one (the
    # gates' Gumbel draws), so that a variant's numbers do not depend on which ran before it.
    state, rng, global_rng = copy.deepcopy(method.state_dict()), ctx.generator.get_state(), torch.get_rng_state()
    for variant in args.variants:
        method.load_state_dict(state)
        ctx.generator.set_state(rng)
        torch.set_rng_state(global_rng)
        method.seen_tasks, log.steps = [first.id], []
        if variant == "open":
            for layer in method.layers:
                torch.nn.init.constant_(layer.gates[second.id].fc2.bias, 3.0)
        gated_method.gated = types.SimpleNamespace(**{**vars(gated), "route": hard_route}) if variant == "hard" \
            else gated
        method.learn(second)
        gated_method.gated = gated
        result = train.evaluate(method, scenario, second.id, False, ctx, cfg.data.eval_batch_size)
        print(f"{variant}: steps (loss, train acc) {[s[:2] for s in log.steps]}; open gates, first units, first "
              f"step {log.steps[0][2]} last step {log.steps[-1][2]}; test accuracy task 0 {result.test[0]:.3f}, "
              f"task 1 {result.test[1]:.3f}", flush=True)
        if args.eval_batch_stats:
            result = evaluate_on_batch_statistics(method, scenario, second.id, ctx, cfg.data.eval_batch_size)
            print(f"{variant}, scored on batch statistics: test accuracy task 0 {result.test[0]:.3f}, task 1 "
                  f"{result.test[1]:.3f}", flush=True)


if __name__ == "__main__":
    main()
