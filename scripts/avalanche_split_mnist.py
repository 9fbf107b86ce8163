"""Peer comparison: the cl-bench Split MNIST workload run with Avalanche 0.6.0 (benchmark only).

Runs in its own environment, never cl-bench's (see scripts/setup_avalanche_env.sh):

    ../avalanche-venv/bin/python scripts/avalanche_split_mnist.py DATA_ROOT STRATEGY [--eval-mb-size N]
        STRATEGY: naive | ewc | replay | packnet        DATA_ROOT holds MNIST/raw/*-ubyte.gz

The workload matches scripts/plain_split_mnist.py and bench.py's WORKLOAD: Split MNIST, 5 experiences of classes
(0,1),(2,3),...,(8,9) in that order, a 784-256-256-10 MLP (ReLU, no dropout), SGD lr 0.01 momentum 0.9, train
batch 128, 1 epoch per experience, on CPU, evaluation on every seen experience's test set after each experience.
MNIST comes from the IDX gz files into in-memory tensors (normalised 0.1307/0.3081, flattened), wrapped as a
TensorDataset with a `targets` attribute and split by Avalanche's nc_benchmark (what its own SplitMNIST uses),
fixed_class_order=[0..9].

- naive, ewc, replay: class-incremental (task_labels=False), one 10-way head, Avalanche's plain cross-entropy over
  all 10 outputs (cl-bench masks unseen outputs in training; after the last task all 10 are seen, so the final
  row is comparable). EWC: lambda 5000 (--ewc-lambda), mode="separate". Avalanche's penalty is lambda*sum F d^2,
  cl-bench's with method.fisher=batched method.penalty=half is lambda/2*sum F d^2 (same batched Fisher), so
  Avalanche lambda 2500 is cl-bench's lambda 5000;
  at Avalanche lambda 5000 this workload diverges to NaN weights in the third experience (finite_params: false).
  Replay: mem_size=500 (default ExperienceBalancedBuffer,
  128 new + 128 memory samples per step, as cl-bench's er).
- packnet: Avalanche's PackNet needs task labels (PackNetModel.forward takes the task id), so the benchmark is
  task-incremental (task_labels=True, global class ids kept as SplitMNIST does by default, single 10-way head
  wrapped in PackNetModel). PackNet requires train_epochs > post_prune_epochs, so each experience is 1 training
  epoch + prune + 1 post-prune epoch (train_epochs=2, post_prune_epochs=1), prune_proportion 0.5 (PackNetPlugin's
  default; the strategy itself has none; cl-bench's default prune_ratio is 0.6). final_accs is Avalanche's
  accuracy (argmax over all 10 outputs); task_aware_accs (argmax over the task's own 2 classes, what cl-bench's
  task scenario measures) is computed once after the timed region.

Data loaders are Avalanche's defaults: num_workers=0, train shuffle=True, eval_mb_size=None (= train_mb_size 128).
The evaluator is an EvaluationPlugin with experience accuracy only and no loggers.

Prints one JSON line: strategy, train_eval_s (start of the first training to the end of the last evaluation),
final_avg_acc (mean of the per-experience accuracies after the last experience), final_accs.
"""
import argparse
import json
import time
import warnings
from pathlib import Path

import plain_split_mnist  # this folder is on the path when run as a script
import torch
from torch import nn

STRATEGIES = ("naive", "ewc", "replay", "packnet")


def load(root: Path, split: str) -> torch.utils.data.TensorDataset:
    """The plain script's tensors (same reader, same normalisation), as the dataset Avalanche wants."""
    x, y = plain_split_mnist.load(root, split)
    ds = torch.utils.data.TensorDataset(x, y)
    ds.targets = y.tolist()  # Avalanche reads the class of each sample from `targets`
    return ds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_root", type=Path)
    parser.add_argument("strategy", choices=STRATEGIES)
    parser.add_argument("--eval-mb-size", type=int, default=None, help="default: Avalanche's (= train batch 128)")
    parser.add_argument("--ewc-lambda", type=float, default=5000.0, help="ewc only (Avalanche adds lambda*sum F d^2)")
    parser.add_argument("--prune-proportion", type=float, default=0.5, help="packnet only")
    args = parser.parse_args()

    warnings.filterwarnings("ignore")  # qpsolvers' "no QP solver" and Avalanche's deprecation notices
    from avalanche.benchmarks import nc_benchmark
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.models.packnet import PackNetModel
    from avalanche.training import EWC, Naive, PackNet, Replay
    from avalanche.training.plugins import EvaluationPlugin

    torch.manual_seed(0)
    packnet = args.strategy == "packnet"
    bm = nc_benchmark(load(args.data_root, "train"), load(args.data_root, "t10k"), n_experiences=5,
                      task_labels=packnet, shuffle=False, fixed_class_order=list(range(10)))

    model = PackNetModel(plain_split_mnist.mlp()) if packnet else plain_split_mnist.mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    common = dict(model=model, optimizer=optimizer, criterion=nn.CrossEntropyLoss(), train_mb_size=128,
                  train_epochs=1, eval_mb_size=args.eval_mb_size, device="cpu",
                  evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
    if args.strategy == "naive":
        strategy = Naive(**common)
    elif args.strategy == "ewc":
        strategy = EWC(**common, ewc_lambda=args.ewc_lambda, mode="separate")
    elif args.strategy == "replay":
        strategy = Replay(**common, mem_size=500)
    else:
        common["train_epochs"] = 2  # 1 training epoch + 1 post-prune epoch
        common.pop("criterion")
        strategy = PackNet(**common, post_prune_epochs=1, prune_proportion=args.prune_proportion)

    start = time.perf_counter()
    for t, experience in enumerate(bm.train_stream):
        strategy.train(experience)
        results = strategy.eval(bm.test_stream[: t + 1])
    train_eval_s = time.perf_counter() - start

    accs = []
    for exp in bm.test_stream:
        task = exp.task_label if packnet else 0
        accs.append(float(results[f"Top1_Acc_Exp/eval_phase/test_stream/Task{task:03d}/Exp{exp.current_experience:03d}"]))
    record = {"strategy": args.strategy, "train_eval_s": round(train_eval_s, 3),
              "final_avg_acc": round(sum(accs) / len(accs), 4), "final_accs": [round(a, 4) for a in accs]}
    if args.strategy == "ewc":
        record["ewc_lambda"] = args.ewc_lambda
        record["finite_params"] = all(bool(p.isfinite().all()) for p in model.parameters())
    if packnet:
        record["task_aware_accs"] = task_aware(model, bm.test_stream)
        record["task_aware_avg_acc"] = round(sum(record["task_aware_accs"]) / 5, 4)
        record["prune_proportion"] = args.prune_proportion
    print(json.dumps(record))


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
        accs.append(round((classes[logits.argmax(1)] == y).float().mean().item(), 4))
    return accs


if __name__ == "__main__":
    main()
