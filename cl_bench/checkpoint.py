"""Atomic checkpoints after every task: safetensors for tensors, JSON for the rest, nothing pickled.

checkpoints/task_<ttt>/ holds state.safetensors (method state and random-number states), masks.safetensors
(the method's masks, boolean ones packed to bits) and meta.json (accuracy matrices so far, checksums). A task
directory is written under a temporary name and renamed when complete; checkpoints/last is replaced last,
so a run killed at any moment leaves the previous checkpoint intact.

With checkpoint.every_epochs, checkpoints/task_<ttt>_within/ is also written (and rewritten) while task ttt
is learned: it adds the optimiser's state and meta.json's "within" = {phase, epoch}; `last` does not name it, and
it is removed once task_<ttt>/ is written.
"""
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .errors import UserError

SCHEMA = 1
FILES = ("state.safetensors", "masks.safetensors")
SIDE = "side"  # the run directory's folder of side state (SideStore)


def save(run_dir: Path, task_id: int, method, results: dict, rng: dict[str, torch.Tensor], elapsed: float,
         within: dict | None = None) -> Path:
    """results: the accuracy matrices so far by name (acc, val_acc, ...), kept in meta.json.
    within: {"phase", "epoch", "optimizer": its state_dict, "side_optimizers": [state_dict, ...] (those a
    method steps itself, such as Piggyback's for its mask scores)} for a checkpoint written within task_id."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"task_{task_id:03d}" + ("_within" if within else "")
    tmp = root / f".{name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        return _save(root, name, tmp, task_id, method, results, rng, elapsed, within)
    except BaseException:  # a full disk, a kill: what is half-written goes; the previous checkpoint is intact
        shutil.rmtree(tmp, ignore_errors=True)
        (root / ".last.tmp").unlink(missing_ok=True)
        raise


def _save(root: Path, name: str, tmp: Path, task_id: int, method, results: dict, rng: dict[str, torch.Tensor],
          elapsed: float, within: dict | None) -> Path:
    """save()'s writing, into tmp, then renamed into place."""
    state = {k: v.detach().cpu().contiguous().clone() for k, v in method.state_dict().items()}
    mask_keys = method.mask_keys() & state.keys()
    masks, bits = {}, {}
    for k in mask_keys:
        v = state.pop(k)
        if v.dtype == torch.bool:  # one bit per weight
            bits[k] = list(v.shape)
            v = torch.from_numpy(np.packbits(v.numpy().ravel()))
        masks[k] = v
    state.update({f"_rng.{k}": v.cpu() for k, v in rng.items()})
    meta = {"schema": SCHEMA, "task_id": task_id, "method": method.name, **results, "elapsed_s": elapsed,
            "bits": bits}
    if within:
        optim, tensors = _flatten_optimizer(within["optimizer"])
        state.update(tensors)
        meta["within"] = {"phase": within["phase"], "epoch": within["epoch"], "optimizer": optim,
                          "side_optimizers": []}
        for j, side in enumerate(within.get("side_optimizers", ())):
            optim, tensors = _flatten_optimizer(side, prefix=f"_optim_side{j}.")
            state.update(tensors)
            meta["within"]["side_optimizers"].append(optim)
    _save_file(state, tmp / FILES[0])
    _save_file(masks, tmp / FILES[1])
    meta["sha256"] = {f: _sha256(tmp / f) for f in FILES}
    _write_synced(tmp / "meta.json", json.dumps(meta, indent=1))
    final = root / name
    if final.exists():  # re-learned after a resume: swap the old one out only once the new one is whole
        trash = root / f".{name}.old{os.getpid()}"
        final.rename(trash)
        tmp.rename(final)
        shutil.rmtree(trash)
    else:
        tmp.rename(final)
    if not within:  # `last` names complete tasks only
        _write_synced(root / ".last.tmp", name)
        os.replace(root / ".last.tmp", root / "last")
        shutil.rmtree(root / f"{name}_within", ignore_errors=True)  # the task is whole: this one is spent
    return final


def prune(run_dir: Path, keep: int | str) -> None:
    """checkpoint.keep: delete complete tasks' checkpoints but the newest `keep` (none with "all"); called after a
    task's checkpoint and `last` are written, so a kill at any moment leaves the newest one whole."""
    if keep == "all":
        return
    root = Path(run_dir) / "checkpoints"
    complete = sorted(d for d in root.iterdir() if d.is_dir() and d.name.startswith("task_")
                      and not d.name.endswith("_within"))
    for old in complete[:-keep]:
        shutil.rmtree(old)


def _flatten_optimizer(state: dict, prefix: str = "_optim.") -> tuple[dict, dict[str, torch.Tensor]]:
    """An optimiser state_dict as JSON (param groups, scalars) and tensors (momentum buffers, moments)."""
    tensors, scalars = {}, {}
    for index, slots in state["state"].items():
        for key, value in slots.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{prefix}{index}.{key}"] = value.detach().cpu().contiguous().clone()
            elif value is not None:
                scalars[f"{index}.{key}"] = value
    return {"param_groups": state["param_groups"], "scalars": scalars}, tensors


def optimizer_state(meta_optimizer: dict, state: dict, prefix: str = "_optim.") -> dict:
    """The inverse of _flatten_optimizer, taking the tensors under `prefix` out of state."""
    slots: dict[int, dict] = {}
    for key in [k for k in state if k.startswith(prefix)]:
        index, name = key[len(prefix):].split(".", 1)
        slots.setdefault(int(index), {})[name] = state.pop(key)
    for key, value in meta_optimizer["scalars"].items():
        index, name = key.split(".", 1)
        slots.setdefault(int(index), {})[name] = value
    return {"state": slots, "param_groups": meta_optimizer["param_groups"]}


def load(run_dir: Path, name: str | None = None, within: bool = False):
    """The newest valid checkpoint (or the one named) as (state, masks, meta, problems); None when there is none.

    `last` is tried first, then every other task directory from the newest down (a task's within-task
    checkpoint counts as older than the task's own, and is considered only when `within`); a directory whose
    files are missing or fail their checksum is skipped and named in `problems`."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    names = [d.name for d in root.iterdir() if d.name.startswith("task_") and d.is_dir()]
    names = sorted((n for n in names if within or not n.endswith("_within")),
                   key=lambda n: (n[:8], not n.endswith("_within")), reverse=True)
    if name is not None:
        names = [name] if name in names else []
    last = (root / "last").read_text().strip() if (root / "last").is_file() else None
    if last in names and not names[0].endswith("_within"):  # a task in flight is newer than the last whole one
        names.remove(last)
        names.insert(0, last)
    problems = []
    for name in names:
        found = _read(root / name)
        if isinstance(found, str):
            problems.append(found)
            continue
        return (*found, problems)
    return None if not problems else (None, None, None, problems)


def absent(run_dir: Path, name: str | None, keep) -> str:
    """Why checkpoint `name` cannot be read though nothing is damaged (load() found none of that name), in a line:
    written and pruned by checkpoint.keep, not written (yet), or no such name; with what there is."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return f"{run_dir} holds no checkpoints: it stopped before its first, or ran with checkpoint.enabled=false"
    held = sorted(d.name for d in root.iterdir() if d.is_dir() and d.name.startswith("task_"))
    if name is None:
        return f"{root} holds no complete task's checkpoint: the run stopped within its first task"
    there = f"{root} holds {', '.join(held)}" if held else f"{root} holds none"
    last = (root / "last").read_text().strip() if (root / "last").is_file() else None
    if not (name.startswith("task_") and name[5:].isdigit()):
        return f"no checkpoint named {name!r}: names are task_<ttt> (e.g. task_000); {there}"
    if last is not None and name <= last and keep != "all":
        newest = "the newest only" if keep == 1 else f"the newest {keep}"
        return (f"{name} was written, then pruned by checkpoint.keep={keep}, which keeps {newest}; {there}: "
                f"evaluate {'that' if len(held) == 1 else 'one of those'}, or run with checkpoint.keep=all to keep "
                "every task's")
    return f"{name} was not written (the run's newest is {last or 'none'}); {there}"


def _read(path: Path):
    try:
        meta = json.loads((path / "meta.json").read_text())
        for f in FILES:
            if _sha256(path / f) != meta["sha256"][f]:
                return f"{path / f} fails its checksum"
        state, masks = load_file(path / FILES[0]), load_file(path / FILES[1])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{path} is unreadable ({type(e).__name__}: {e})"
    for k, shape in meta["bits"].items():
        n = int(np.prod(shape))
        masks[k] = torch.from_numpy(np.unpackbits(masks[k].numpy())[:n].astype(bool).reshape(shape))
    return state, masks, meta


def split_rng(state: dict) -> tuple[dict, dict]:
    """Separate the random-number states from the method's state."""
    rng = {k[len("_rng."):]: state.pop(k) for k in [k for k in state if k.startswith("_rng.")]}
    return state, rng


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _save_file(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' save_file, its I/O errors (a full disk) raised as the OSError they are (failures.py)."""
    from .failures import as_os_error
    try:
        save_file(tensors, path)
    except SafetensorError as e:
        raise (as_os_error(e, path) or e) from None


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


class SideStore:
    """State a method keeps beside its checkpoints because it is too large to hold on the device, clone into
    snapshots or write into every checkpoint (CPG's fine-tuned goal networks: a chain's network per task), by task
    and name: with a run directory, files side/task_<ttt>/<name>.safetensors, each written once (atomically) and
    read back when needed, where a resume (or a branch, which copies them) finds them again; without one (a method
    built by hand), host memory. A task learned again after a resume writes the same entries again."""

    def __init__(self, run_dir: Path | None = None):
        self.root = None if run_dir is None else Path(run_dir) / SIDE
        self.memory: dict[tuple[int, str], torch.Tensor] = {}

    def put(self, task_id: int, name: str, tensor: torch.Tensor) -> None:
        tensor = tensor.detach().cpu().contiguous().clone()
        if self.root is None:
            self.memory[task_id, name] = tensor
            return
        folder = self.root / f"task_{task_id:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}.tmp{os.getpid()}"
        _save_file({"tensor": tensor}, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, folder / f"{name}.safetensors")

    def get(self, task_id: int, name: str) -> torch.Tensor:
        if self.root is None:
            return self.memory[task_id, name]
        path = self.root / f"task_{task_id:03d}" / f"{name}.safetensors"
        try:
            return load_file(path)["tensor"]
        except (OSError, ValueError, KeyError, SafetensorError) as e:  # SafetensorError: a damaged file
            raise UserError(f"{path} is missing or unreadable ({type(e).__name__}): the run's side state for task "
                            f"{task_id}; restart the run, or resume from a copy of its whole directory") from None
