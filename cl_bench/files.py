"""Files written whole or not at all: through a private temporary name in the same folder, then renamed over the
target, so that a reader (another process, a resume after a kill) sees the old content or the new, never half."""
import json
import os
from pathlib import Path


def write_bytes_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")  # this process's: concurrent writers never share one
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:  # a full disk, a kill: the half-written file goes, the old content stays
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def write_json_atomic(path: Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1))
