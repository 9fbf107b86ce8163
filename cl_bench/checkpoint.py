"""Atomic checkpoints after every task: safetensors for tensors, JSON for the rest, nothing pickled.

checkpoints/task_<ttt>/ holds state.safetensors (method state and random-number states), masks.safetensors
(the method's masks, boolean ones packed to bits) and meta.json (accuracy matrix so far, checksums). A task
directory is written under a temporary name and renamed when complete; checkpoints/last is replaced last,
so a run killed at any moment leaves the previous checkpoint intact.
"""
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

SCHEMA = 1
FILES = ("state.safetensors", "masks.safetensors")


def save(run_dir: Path, task_id: int, method, acc: list, rng: dict[str, torch.Tensor], elapsed: float) -> Path:
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"task_{task_id:03d}"
    tmp = root / f".{name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
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
    save_file(state, tmp / FILES[0])
    save_file(masks, tmp / FILES[1])
    meta = {"schema": SCHEMA, "task_id": task_id, "method": method.name, "acc": acc, "elapsed_s": elapsed,
            "bits": bits, "sha256": {f: _sha256(tmp / f) for f in FILES}}
    _write_synced(tmp / "meta.json", json.dumps(meta, indent=1))
    final = root / name
    if final.exists():  # re-learned after a resume: swap the old one out only once the new one is whole
        trash = root / f".{name}.old{os.getpid()}"
        final.rename(trash)
        tmp.rename(final)
        shutil.rmtree(trash)
    else:
        tmp.rename(final)
    _write_synced(root / ".last.tmp", name)
    os.replace(root / ".last.tmp", root / "last")
    return final


def load(run_dir: Path, name: str | None = None):
    """The newest valid checkpoint (or the one named) as (state, masks, meta, problems); None when there is none.

    `last` is tried first, then every other task directory from the newest down; a directory whose files
    are missing or fail their checksum is skipped and named in `problems`."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    names = sorted((d.name for d in root.iterdir() if d.name.startswith("task_") and d.is_dir()), reverse=True)
    if name is not None:
        names = [name] if name in names else []
    last = (root / "last").read_text().strip() if (root / "last").is_file() else None
    if last in names:
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


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
