"""Parity of cl-bench with La-MAML's code (montrealrobotics/La-MAML): La-MAML, ER and A-GEM on MNIST.

Its account: scripts/parity/README.md, section lamaml.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity import common  # noqa: E402
from parity.common import Diagnostic, Outcome, Row  # noqa: E402

NAME = "lamaml"
REPO = "montrealrobotics/La-MAML"
PINNED = "cff3524b0f23b932d574931c3a7495c42cbd8d9d"
SOURCE = "authors"  # La-MAML is the authors' own; ER there is their baseline, A-GEM not the same algorithm
WORDS = common.wording(NAME)  # wording.yaml: its torch and data lines, its rows' settings
TORCH, DATA = WORDS["torch"], WORDS["data"]

PATCHES = list(common.patches(NAME)["reference"])  # patches/lamaml.yaml, as TASK0

# run_experiments.sh's $ROT / $PERM: the 2 x 100 MLP, 1000 samples per task, one evaluation per task start.
MNIST = ("--arch", "linear", "--n_layers", "2", "--n_hiddens", "100", "--samples_per_task", "1000",
         "--log_every", "100")
# Its MNIST La-MAML line: asynchronous update, learned per-weight rates.
LAMAML = ("--model", "lamaml", "--memories", "200", "--batch_size", "10", "--replay_batch_size", "10",
          "--n_epochs", "1", "--glances", "5", "--opt_lr", "0.3", "--alpha_init", "0.15", "--learn_lr",
          "--use_old_task_memory")
# run_experiments.sh has no MNIST lines for the baselines; these are the values cl-bench's la_er_* and la_agem_*
# settings give (lr 0.1, batch 10, 5 glances, clipping at parser.py's default 2.0). A-GEM: 10 ring slots per task
# (cl-bench's 200 over 20 tasks); memory_strength is read by nothing on this path.
ER = ("--model", "eralg4", "--lr", "0.1", "--memories", "200", "--batch_size", "10", "--replay_batch_size", "10",
      "--n_epochs", "1", "--glances", "5")
AGEM = ("--model", "agem", "--lr", "0.1", "--n_memories", "10", "--memory_strength", "0.5", "--batch_size", "10",
        "--n_epochs", "1", "--glances", "5")

# CPU cut, the same on both sides: 2,000 of each task's 10,000 test images (evaluation after every one of the 20
# tasks over every task's test split would otherwise take most of a run's time on either side).
TEST_PER_TASK = 2000
BENCHMARKS = {  # row suffix -> cl-bench dataset, La-MAML dataset, words (wording.yaml's settings)
    bench: (dataset, ref_dataset, WORDS["settings"][bench].format(test=TEST_PER_TASK))
    for bench, dataset, ref_dataset in (("rotations", "rotated_mnist", "mnist_rotations"),
                                        ("permutations", "permuted_mnist", "mnist_permutations"))
}
METHODS = {  # row prefix -> docs name, cl-bench method, setting prefix, La-MAML arguments
    "lamaml": ("La-MAML", "lamaml", "lamaml", LAMAML),
    "er": ("ER", "er", "la_er", ER),
    "agem": ("A-GEM", "agem", "la_agem", AGEM),
}
# Where the reference's code comes from (SOURCE, unless listed), and the rows whose two sides differ by design.
SOURCES = {"er": "baseline"}
def _row(method: str, bench: str) -> Row:
    label, clbench_method, setting, args = METHODS[method]
    dataset, ref_dataset, words = BENCHMARKS[bench]
    return Row(label, words,
               (f"method={clbench_method}", f"dataset={dataset}", f"setting={setting}_{dataset}",
                "dataset.num_tasks=20", "dataset.samples_per_task=1000",
                f"dataset.test_samples_per_task={TEST_PER_TASK}"),
               (*args, *MNIST, "--dataset", ref_dataset), source=SOURCES.get(method, ""))


TASK0 = common.patches(NAME)["task0"][0]  # a diagnostic: A-GEM with task 0 recorded as observed
DIAGNOSTICS = {
    f"agem_task0_{bench}": Diagnostic(f"agem_{bench}", "reference", (0, 1, 2), patches=(TASK0,))
    for bench in BENCHMARKS
}


ROWS = {f"{m}_{b}": _row(m, b) for m in METHODS for b in BENCHMARKS}
ROWS, DIAGNOSTICS = common.annotated(NAME, ROWS, DIAGNOSTICS)  # notes and causes from findings/lamaml.md


def ref_dataset(row: Row) -> str:
    """The La-MAML dataset name a row runs: its loader reads <data_path>/<name>.pt."""
    args = list(row.reference)
    return args[args.index("--dataset") + 1]


def write_tasks(scenario, row: Row, folder: Path) -> None:
    """cl-bench's train and test split of every task, as GEM's float pixels in [0, 1], flattened to 784."""
    def task(t, split):
        return [f"cl-bench task {t}", split.x.cpu().flatten(1).float() / 255, split.y.cpu().long()]

    train = [task(t, task_.train) for t, task_ in enumerate(scenario.tasks)]
    test = [task(t, split) for t, split in enumerate(scenario.test)]
    torch.save([train, test], Path(folder) / f"{ref_dataset(row)}.pt")


def read_tasks(path: Path) -> tuple[list, list]:
    """A written file back as (train, test), each a list of (uint8 pixels N x 784, int64 labels)."""
    train, test = torch.load(path, weights_only=True)

    def back(tasks):
        return [(x.mul(255).round().to(torch.uint8), y) for _, x, y in tasks]

    return back(train), back(test)


def run_reference(copy: Path, row: Row, seed: int, data: Path, python: str) -> Outcome:
    logs = Path(data) / "logs"
    # --workers 0: no loader processes, so the run stays on one CPU thread; --cuda is simply not passed.
    command = [python, "main.py", *row.reference, "--data_path", str(data), "--log_dir", str(logs),
               "--seed", str(seed), "--workers", "0"]
    env = {**common.one_thread_env(), "MPLBACKEND": "Agg"}  # it saves a plot of the accuracies; no display
    common.run_logged(command, Path(copy), Path(data) / "reference.log", env)
    results = sorted(logs.rglob("results.txt"))
    if len(results) != 1:
        sys.exit(f"expected one results.txt under {logs}, found {len(results)}")
    return parse_results(results[0].read_text())


def parse_results(text: str) -> Outcome:
    """results.txt (GEM's confusion_matrix): the accuracies before training, '|', one row per finished task
    (row i: every task's test accuracy after task i), a blank line, then the summary lines."""
    lines = text.splitlines()
    start = lines.index("|") + 1
    end = lines.index("", start)
    matrix = [[float(v) for v in line.split()] for line in lines[start:end]]
    if not matrix or any(len(r) != len(matrix) for r in matrix):
        sys.exit(f"results.txt holds no square accuracy matrix:\n{text[:2000]}")
    return Outcome(sum(matrix[-1]) / len(matrix[-1]), matrix)


if __name__ == "__main__":
    common.main(sys.modules[__name__])
