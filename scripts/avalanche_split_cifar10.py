"""The image workload of `scripts/bench.py images` in Avalanche 0.6.0 (benchmark only; its own environment, see
scripts/setup_avalanche_env.sh):

    ../avalanche-venv/bin/python scripts/avalanche_split_cifar10.py DATA_ROOT STRATEGY [--backbone convnet] ...
        STRATEGY: naive | replay | packnet      DATA_ROOT holds cifar-10-batches-py/

The data, subsample, transforms (torchvision's, on PIL images) and network (cl-bench's backbone module) are those
of scripts/plain_split_cifar10.py; the benchmark is Avalanche's nc_benchmark over the classes in order, its
strategies train with SGD lr 0.01 momentum 0.9, one epoch an experience, its DataLoaders with --workers workers
(the machine's cores), and evaluate every seen experience after each.

- naive, replay: class-incremental, one 10-way head; the cross-entropy reads the classes seen so far, as
  cl-bench's and the plain loop's do (over all 10 outputs, Avalanche's default, the outputs of future classes are
  pushed down for four tasks and one epoch of the last one does not bring them back: 10.6 % against 14-15 % at
  2,000 samples a task). Replay: its default experience-balanced buffer of --memory samples, a memory batch as
  large as the new batch each step.
- packnet: task labels on (Avalanche's PackNet needs them), one 10-way head in PackNetModel; train_epochs=2 with
  post_prune_epochs=1 (one training epoch, prune --prune, one epoch retraining). Scored after the timed region
  with the prediction restricted to the task's own classes, as cl-bench's task scenario scores.

Prints one JSON line: strategy, train_eval_s, final_accs and final_avg_acc.
"""
import json
import time
import warnings

import plain_split_cifar10 as plain  # this folder is on the path when run as a script
import torch
from avalanche_split_mnist import task_aware
from torch import nn


class SeenClassesCE(nn.Module):
    """Cross-entropy over the first `seen` outputs (set before each experience)."""

    seen = 10

    def forward(self, logits, y):
        return nn.functional.cross_entropy(logits[:, : self.seen], y)


def main() -> None:
    opts = plain.workload_args(__doc__, "strategy", ["naive", "replay", "packnet"])

    warnings.filterwarnings("ignore")  # qpsolvers' "no QP solver" and Avalanche's deprecation notices
    from avalanche.benchmarks import nc_benchmark
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.models.packnet import PackNetModel
    from avalanche.training import Naive, PackNet, Replay
    from avalanche.training.plugins import EvaluationPlugin

    torch.manual_seed(opts.seed)  # Avalanche draws its shuffles and replay from torch's global generator
    (train_x, train_y), (test_x, test_y), mean, std = plain.load(opts.data_root, opts.samples, opts.test_samples,
                                                                 opts.seed)
    train_tf, test_tf = plain.transforms(mean, std)
    packnet = opts.strategy == "packnet"
    bm = nc_benchmark(plain.Images(train_x, train_y, None), plain.Images(test_x, test_y, None), n_experiences=5,
                      task_labels=packnet, shuffle=False, fixed_class_order=list(range(10)),
                      train_transform=train_tf, eval_transform=test_tf)
    body = plain.build({"name": opts.backbone}, (3, 32, 32))
    net = nn.Sequential(body, nn.Linear(body.feature_dim, 10))
    model = PackNetModel(net) if packnet else net
    common = dict(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                  criterion=(criterion := SeenClassesCE()), train_mb_size=opts.batch_size, train_epochs=1,
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
        if not packnet:
            criterion.seen = 2 * (t + 1)
        strategy.train(experience, num_workers=opts.workers)
        results = strategy.eval(bm.test_stream[: t + 1], num_workers=opts.workers)
    train_eval_s = time.perf_counter() - start
    if packnet:
        accs = task_aware(model, bm.test_stream)  # the MNIST peer's: untimed, the task's own classes
    else:
        accs = [float(results[f"Top1_Acc_Exp/eval_phase/test_stream/Task000/Exp{e.current_experience:03d}"])
                for e in bm.test_stream]
    print(json.dumps({"strategy": opts.strategy, "backbone": opts.backbone, "train_eval_s": round(train_eval_s, 3),
                      "final_accs": [round(a, 4) for a in accs], "final_avg_acc": round(sum(accs) / len(accs), 4)}))


if __name__ == "__main__":
    main()
