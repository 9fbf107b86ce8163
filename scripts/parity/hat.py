"""Parity of cl-bench's HAT with the authors' code (joansj/hat): MNIST in the task scenario, src/run.py's mlp_hat.

Its account: scripts/parity/README.md, section hat.py.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity import common  # noqa: E402
from parity.common import Diagnostic, Outcome, Row  # noqa: E402

NAME = "hat"
REPO = "joansj/hat"
PINNED = "6fd0b9d98e089bec1f9da6cc20550916ce196829"
SOURCE = "authors"
WORDS = common.wording(NAME)  # wording.yaml: its torch and data lines, its rows' settings
TORCH, DATA = WORDS["torch"], WORDS["data"]

MEAN, STD = 0.1307, 0.3081  # HAT's transforms.Normalize for MNIST (dataloaders/mnist2.py:15-16, pmnist.py:23-24)
SPLITS = {"train": "train", "valid": "val", "test": "test"}  # HAT's split name -> cl-bench's
ENV = "HAT_PARITY_DATA"  # where the patched dataloaders find the written tasks
META = "tasks.json"
EPOCHS = 10  # per task on both sides, cut from run.py's 200 (see the rows' note)

PATCHES = list(common.patches(NAME)["reference"])  # patches/hat.yaml

MLP = ("method=hat", "scenario=task", "setting=none", "backbone=hat_mlp", "data.val_fraction=0.1",
       f"method.epochs={EPOCHS}")


DIAGNOSTICS = {
    f"no_dropout_{name}": Diagnostic(f"hat_{name}", "cl-bench", (0, 1, 2),
                                     ("backbone=mlp", "backbone.hidden_sizes=[2000,2000]"))
    for name in ("mnist2", "pmnist")
}


ROWS = {
    "hat_mnist2": Row("HAT", WORDS["settings"]["hat_mnist2"],
                      (*MLP, "dataset=split_mnist", "dataset.num_tasks=2"),
                      ("--experiment", "mnist2", "--approach", "hat", "--nepochs", str(EPOCHS))),
    "hat_pmnist": Row("HAT", WORDS["settings"]["hat_pmnist"],
                      (*MLP, "dataset=permuted_mnist"),
                      ("--experiment", "pmnist", "--approach", "hat", "--nepochs", str(EPOCHS))),
}
ROWS, DIAGNOSTICS = common.annotated(NAME, ROWS, DIAGNOSTICS)  # notes and causes from findings/hat.md


# --- the data -------------------------------------------------------------------------------------------------
def normalise(x: torch.Tensor) -> torch.Tensor:
    """uint8 pixels as HAT feeds them: ToTensor's x/255, then Normalize's (x - mean)/std, in float32."""
    return (x.float() / 255 - MEAN) / STD


def pixels(x: torch.Tensor) -> torch.Tensor:
    """normalise's inverse, back to uint8 (exact: the float error is far below half a grey level)."""
    return torch.round((x * STD + MEAN) * 255).to(torch.uint8)


def write_tasks(scenario, row: Row, folder: Path) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tasks = []
    for task, test in zip(scenario.tasks, scenario.test):
        splits = {"train": task.train, "valid": task.val, "test": test}
        for name, split in splits.items():
            # HAT's heads index labels from 0 within each task; cl-bench's carry the task's offset.
            torch.save(normalise(split.x.cpu()), folder / f"data{task.id}{name}x.bin")
            torch.save((split.y.cpu() - task.offset).long(), folder / f"data{task.id}{name}y.bin")
        tasks.append({"name": f"{scenario.info.dataset}-{task.id}", "ncla": task.num_classes,
                      "classes": list(task.classes), "offset": task.offset})
    size = list(scenario.info.input_shape)
    (folder / META).write_text(json.dumps({"size": size, "tasks": tasks}, indent=1))


def read_tasks(folder: Path) -> list[dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """Per task, cl-bench's split name -> (uint8 images, labels in the scenario's label space), as written."""
    folder = Path(folder)
    meta = json.loads((folder / META).read_text())
    out = []
    for t, task in enumerate(meta["tasks"]):
        load = {k: {s: torch.load(folder / f"data{t}{s}{k}.bin") for s in SPLITS} for k in "xy"}
        out.append({ours: (pixels(load["x"][theirs]), load["y"][theirs] + task["offset"])
                    for theirs, ours in SPLITS.items()})
    return out


# --- the reference's run --------------------------------------------------------------------------------------
def run_reference(copy: Path, row: Row, seed: int, data: Path, python: str) -> Outcome:
    saved = Path(data) / "acc.txt"
    command = [python, "run.py", *row.reference, "--seed", str(seed), "--output", str(saved)]
    env = {**common.one_thread_env(), ENV: str(data)}
    text = common.run_logged(command, Path(copy) / "src", Path(data) / "reference.log", env)
    matrix = saved_matrix(saved.read_text())
    printed = printed_matrix(text)
    if len(printed) != len(matrix) or any(abs(a - b) > 6e-4 for r, p in zip(matrix, printed) for a, b in zip(r, p)):
        sys.exit(f"{saved} and the printed accuracies disagree: {matrix} vs {printed}")
    return Outcome(sum(matrix[-1]) / len(matrix[-1]), matrix)


def saved_matrix(text: str) -> list[list[float]]:
    """run.py's --output file (np.savetxt of acc[i][j], zeros where j > i): the lower triangle, in [0, 1]."""
    rows = [[float(v) for v in line.split()] for line in text.splitlines() if line.strip()]
    return [row[: i + 1] for i, row in enumerate(rows)]


TEST_LINE = re.compile(r">>> Test on task\s+(\d+) - .*?acc=\s*([\d.]+)% <<<")


def printed_matrix(text: str) -> list[list[float]]:
    """The accuracies run.py prints after each task (one decimal of a percent): a row restarts at task 0."""
    rows: list[list[float]] = []
    for task, acc in TEST_LINE.findall(text):
        if int(task) == 0:
            rows.append([])
        rows[-1].append(float(acc) / 100)
    return rows


if __name__ == "__main__":
    common.main(sys.modules[__name__])
