"""Parity with Mammoth (aimagelab/mammoth) on the DER paper's S-MNIST at buffer 200 and 500.

Its account: scripts/parity/README.md, section mammoth.py.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from parity import common  # noqa: E402
from parity.common import Diagnostic, Outcome, Row  # noqa: E402

NAME = "mammoth"
REPO = "aimagelab/mammoth"
PINNED = "e75a491c69fd729edeb01431afb753d9157d9a81"
SOURCE = "baseline"  # Mammoth is DER's authors' framework: DER and DER++ are the authors' (their rows say so)
WORDS = common.wording(NAME)  # wording.yaml: its torch and data lines, its rows' settings
TORCH, DATA = WORDS["torch"], WORDS["data"]

PATCHES = list(common.patches(NAME)["reference"])  # patches/mammoth.yaml

# Mammoth passes torchvision's MNIST root=<base_path>/MNIST: it reads common.IDX's files from
# <base_path>/MNIST/MNIST/raw.
SETTING = WORDS["setting"]  # filled with the buffer's size


def _mammoth_args(model: str, memory: int, *extra: str) -> tuple[str, ...]:
    return (f"--model={model}", "--dataset=seq-mnist", f"--buffer_size={memory}", *extra)


# The arguments a model requires besides --lr: Mammoth checks them on the command line before it adds the best ones.
REQUIRED = {"der": ("alpha",), "derpp": ("alpha", "beta")}


def _best(model: str, memory: int, *extra: str) -> tuple[str, ...]:
    """Mammoth's own best arguments for seq-mnist (utils/best_args.py), loaded by --load_best_args. Its parser
    checks the command line for the required arguments before it appends the best ones, which then win (argparse
    keeps the last): the zeros here only get past that check, every one of them is among the best arguments."""
    placeholders = [f"--{name}=0" for name in ("lr", *REQUIRED.get(model, ()))]
    return _mammoth_args(model, memory, "--load_best_args", *placeholders, *extra)


def _rows_at(memory: int) -> dict[str, Row]:
    cl = ("dataset=split_mnist", f"method.memory_size={memory}")
    # Mammoth forces the replay batch to the batch size (main.py, extend_args: minibatch_size = batch_size
    # whenever batch_size is set, as the best arguments set it), so its runs replay 10 samples, not the 128 of
    # its best arguments; cl-bench's side replays as many, to train the same thing.
    same_replay = ("method.replay_batch_size=10",)
    return {
        f"er_{memory}": Row("ER", SETTING.format(memory=memory), ("method=er", *cl), _best("er", memory)),
        f"agem_{memory}": Row("A-GEM", SETTING.format(memory=memory), ("method=agem", *cl, *same_replay),
                              _best("agem", memory)),
        f"der_{memory}": Row("DER", SETTING.format(memory=memory), ("method=der", *cl, *same_replay),
                             _best("der", memory), source="authors"),
        f"derpp_{memory}": Row("DER++", SETTING.format(memory=memory), ("method=derpp", *cl, *same_replay),
                               _best("derpp", memory), source="authors"),
        f"er_ace_{memory}": Row("ER-ACE", SETTING.format(memory=memory), ("method=er_ace", *cl),
                                _mammoth_args("er_ace", memory, "--lr=0.1", "--batch_size=10", "--minibatch_size=10",
                                              "--n_epochs=1", "--task_free=1")),
        f"icarl_{memory}": Row("iCaRL", SETTING.format(memory=memory),
                               ("method=icarl", *cl, "method.loss_outputs=all", "method.mean_flips=always"),
                               _best("icarl", memory, "--opt_wd=0")),
        f"gdumb_{memory}": Row("GDumb", SETTING.format(memory=memory),
                               ("method=gdumb", *cl, "method.regularization=cutmix", "method.clip_norm=1e9"),
                               _mammoth_args("gdumb", memory, "--lr=0", "--batch_size=16", "--n_epochs=1",
                                             "--fitting_epochs=128", "--maxlr=0.05", "--minlr=0.0005",
                                             "--optim_mom=0.9", "--optim_wd=1e-6")),
    }


ROWS: dict[str, Row] = {**_rows_at(200), **_rows_at(500)}

# Runs that test a cause the findings below name: cl-bench with one option changed, against the row's Mammoth
# records of the same seeds (`make parity-mammoth DIAG=NAME`).
DIAGNOSTICS: dict[str, Diagnostic] = {
    **{f"er_replacement_{m}": Diagnostic(f"er_{m}", "cl-bench", tuple(range(24)),
                                         ("method.replay_draw=replacement",)) for m in (200, 500)},
    **{f"gdumb_reservoir_{m}": Diagnostic(f"gdumb_{m}", "cl-bench", tuple(range(6)),
                                          ("method.sampler=reservoir",)) for m in (200, 500)},
    "er_ace_seen_200": Diagnostic("er_ace_200", "cl-bench", (0, 1, 2),
                                  ("method.ce_outputs=seen",)),
    "agem_memory_40": Diagnostic("agem_200", "cl-bench", (0, 1, 2), ("method.memory_size=40",)),
    "er_pytorch_init_200": Diagnostic("er_200", "cl-bench", (0, 1, 2), ("backbone.init=pytorch",)),
}
ROWS, DIAGNOSTICS = common.annotated(NAME, ROWS, DIAGNOSTICS)  # notes and causes from findings/mammoth.md




def raw_folder(folder: Path) -> Path:
    return Path(folder) / "MNIST" / "MNIST" / "raw"


def digits(task) -> list[int]:
    """The original digits of a task, checked to be the ones Mammoth's seq-mnist puts in the same task."""
    want = [2 * task.id, 2 * task.id + 1]
    if sorted(task.classes) != want or task.offset != 2 * task.id:
        raise ValueError(f"task {task.id} holds digits {task.classes} at offset {task.offset}; seq-mnist's task "
                         f"{task.id} is digits {want}: use dataset.class_order=natural with 5 tasks")
    return list(task.classes)


def to_digits(split, task) -> np.ndarray:
    lookup = np.asarray(digits(task))
    return lookup[split.y.cpu().numpy() - task.offset]


def write_tasks(scenario, row: Row, folder: Path) -> None:
    """The union of the tasks' training splits and of their test splits, as MNIST's idx files."""
    tasks = scenario.tasks
    arrays = {
        "train_x": np.concatenate([t.train.x.cpu().numpy() for t in tasks])[:, 0],
        "train_y": np.concatenate([to_digits(t.train, t) for t in tasks]),
        "test_x": np.concatenate([s.x.cpu().numpy() for s in scenario.test])[:, 0],
        "test_y": np.concatenate([to_digits(s, t) for s, t in zip(scenario.test, tasks)]),
    }
    raw = raw_folder(folder)
    raw.mkdir(parents=True, exist_ok=True)
    for key, stem in common.IDX.items():
        common.write_idx(raw / stem, arrays[key])
    # torchvision looks in <root>/<class name>/raw, and Mammoth reads its training set through MNIST's subclass
    # MyMNIST: the same files, under that name too.
    (raw.parent.parent / "MyMNIST").symlink_to("MNIST", target_is_directory=True)


def read_tasks(folder: Path):
    """What write_tasks wrote, read back by cl-bench's own MNIST reader (a Source: NxCxHxW uint8, digit labels)."""
    from cl_bench.data import sources
    return sources.load("mnist", Path(folder) / "MNIST", use_cache=False)


def command(row: Row, seed: int, data: Path, python: str) -> list[str]:
    # No --device: with CUDA hidden (one_thread_env) Mammoth picks the CPU, and its --device takes GPU ids only.
    return [python, "main.py", *row.reference, f"--seed={seed}", f"--base_path={data}/", "--num_workers=0",
            "--non_verbose=1"]


def run_reference(copy: Path, row: Row, seed: int, data: Path, python: str) -> Outcome:
    # Mammoth logs to W&B when WANDB_ENTITY and WANDB_PROJECT are set: disabled here. Its models/tak.py fetches a
    # CLIP model from the Hugging Face hub as Mammoth lists its models; offline, that fails at once (and is
    # caught) instead of after minutes of retries.
    env = {**common.one_thread_env(), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    text = common.run_logged(command(row, seed, data, python), copy, data / "mammoth.log", env)
    return parse(text)


RAW = re.compile(r"Raw accuracy values: Class-IL \[([^\]]*)\]")
MEAN = re.compile(r"Accuracy for (\d+) task\(s\):\s*\[Class-IL\]:\s*([0-9.]+) %")


def numbers(listed: str) -> list[float]:
    """The values of a printed list, plain floats or numpy's np.float64(...)."""
    cleaned = re.sub(r"np\.\w+\(([^)]*)\)", r"\1", listed)
    return [float(v) for v in cleaned.split(",") if v.strip()]


def parse(text: str) -> Outcome:
    """Class-IL accuracies Mammoth prints after each task (percent, seen tasks only) -> RA in [0, 1] and the
    lower-triangular matrix. Each line may come twice (print and logging); the last of each length wins."""
    rows = {}
    for listed in RAW.findall(text):
        values = numbers(listed)
        rows[len(values)] = [v / 100 for v in values]
    if not rows:
        raise ValueError("no 'Raw accuracy values: Class-IL' line in Mammoth's output")
    matrix = [rows[n] for n in sorted(rows)]
    ra = float(np.mean(matrix[-1]))
    means = MEAN.findall(text)
    if means and abs(float(means[-1][1]) - 100 * ra) > 0.01:
        raise ValueError(f"Mammoth's mean {means[-1][1]} % disagrees with its raw values ({100 * ra:.3f} %)")
    return Outcome(ra, matrix)


if __name__ == "__main__":
    common.main(sys.modules[__name__])
