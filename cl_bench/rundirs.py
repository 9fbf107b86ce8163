"""Run directories of their own: the resolver behind hydra.run.dir's default (conf/config.yaml)."""
import itertools
from pathlib import Path

_claimed: dict[str, str] = {}


def unique_dir(path: str) -> str:
    """`path`, or path-2, path-3 ... when runs started in the same second took it; claimed with an atomic mkdir and
    kept for the process (Hydra resolves the key more than once)."""
    if path not in _claimed:
        for n in itertools.count(1):
            candidate = Path(path if n == 1 else f"{path}-{n}")
            candidate.parent.mkdir(parents=True, exist_ok=True)
            try:
                candidate.mkdir()
                break
            except FileExistsError:
                continue
        _claimed[path] = str(candidate)
    return _claimed[path]
