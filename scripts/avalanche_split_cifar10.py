"""The image workload of `scripts/bench.py images` in Avalanche 0.6.0 (benchmark only; its own environment, see
scripts/setup_avalanche_env.sh):

    ../avalanche-venv/bin/python scripts/avalanche_split_cifar10.py DATA_ROOT STRATEGY [--backbone convnet] ...
        STRATEGY: naive | replay | packnet      DATA_ROOT holds cifar-10-batches-py/

The data, subsample, transforms (torchvision's, on PIL images) and network (cl-bench's backbone module) are those
of scripts/plain_split_cifar10.py; the benchmark is Avalanche's nc_benchmark over the classes in order, its
strategies train with SGD lr 0.01 momentum 0.9, one epoch an experience, its DataLoaders with --workers workers
(the machine's cores), and evaluate every seen experience after each.

- naive, replay: class-incremental, one 10-way head, Avalanche's cross-entropy over all 10 outputs. Replay: its
  default experience-balanced buffer of --memory samples, a memory batch as large as the new batch each step.
- packnet: task labels on (Avalanche's PackNet needs them), one 10-way head in PackNetModel; train_epochs=2 with
  post_prune_epochs=1 (one training epoch, prune --prune, one epoch retraining). Scored after the timed region
  with the prediction restricted to the task's own classes, as cl-bench's task scenario scores.

Prints one JSON line: strategy, train_eval_s, final_accs and final_avg_acc.
"""
import argparse
import json
import time
import warnings
from pathlib import Path

import plain_split_cifar10 as plain  # this folder is on the path when run as a script
import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_root", type=Path)
    parser.add_argument("strategy", choices=["naive", "replay", "packnet"])
    parser.add_argument("--backbone", default="convnet")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--test-samples", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory", type=int, default=500)
    parser.add_argument("--prune", type=float, default=0.5)
    opts = parser.parse_args()

    warnings.filterwarnings("ignore")  # qpsolvers' "no QP solver" and Avalanche's deprecation notices
    from avalanche.benchmarks import nc_benchmark
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.models.packnet import PackNetModel
    from avalanche.training import Naive, PackNet, Replay
    from avalanche.training.plugins import EvaluationPlugin

    torch.manual_seed(0)
    (train_x, train_y), (test_x, test_y), mean, std = plain.load(opts.data_root, opts.samples, opts.test_samples)
    train_tf, test_tf = plain.transforms(mean, std)
    packnet = opts.strategy == "packnet"
    bm = nc_benchmark(plain.Images(train_x, train_y, None), plain.Images(test_x, test_y, None), n_experiences=5,
                      task_labels=packnet, shuffle=False, fixed_class_order=list(range(10)),
                      train_transform=train_tf, eval_transform=test_tf)
    body = plain.build({"name": opts.backbone}, (3, 32, 32))
    net = nn.Sequential(body, nn.Linear(body.feature_dim, 10))
    model = PackNetModel(net) if packnet else net
    common = dict(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                  criterion=nn.CrossEntropyLoss(), train_mb_size=opts.batch_size, train_epochs=1,
                  eval_mb_size=256, device="cpu",
                  evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    if opts.strategy == "naive":
        strategy = Naive(**common)
    elif opts.strategy == "replay":
        strategy = Replay(**common, mem_size=opts.memory)
    else:
        common["train_epochs"] = 2  # 1 training epoch + 1 post-prune epoch
        common.pop("criterion")
        strategy = PackNet(**common, post_prune_epochs=1, prune_proportion=opts.prune)

    start = time.perf_counter()
    for t, experience in enumerate(bm.train_stream):
        strategy.train(experience, num_workers=opts.workers)
        results = strategy.eval(bm.test_stream[: t + 1], num_workers=opts.workers)
    train_eval_s = time.perf_counter() - start
    if packnet:
        accs = task_aware(model, bm.test_stream)
    else:
        accs = [float(results[f"Top1_Acc_Exp/eval_phase/test_stream/Task000/Exp{e.current_experience:03d}"])
                for e in bm.test_stream]
    print(json.dumps({"strategy": opts.strategy, "backbone": opts.backbone, "train_eval_s": round(train_eval_s, 3),
                      "final_accs": [round(a, 4) for a in accs], "final_avg_acc": round(sum(accs) / len(accs), 4)}))


@torch.inference_mode()
def task_aware(model, test_stream) -> list[float]:
    """Per-experience accuracy with the prediction restricted to the experience's own classes (untimed)."""
    model.eval()
    accs = []
    for exp in test_stream:
        x = torch.stack([exp.dataset[i][0] for i in range(len(exp.dataset))])
        y = torch.tensor(exp.dataset.targets)
        classes = torch.tensor(sorted(exp.classes_in_this_experience))
        logits = model(x, torch.full((len(x),), exp.task_label))[:, classes]
        accs.append((classes[logits.argmax(1)] == y).float().mean().item())
    return accs


if __name__ == "__main__":
    main()
