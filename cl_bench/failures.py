"""When a run cannot go on: an I/O failure (a full disk, a read-only or vanished folder, a file taken away) said in
one line with what to do next, the run's temporary files removed, and its folder marked FAILED with the reason, so
that it does not pass for a run (`cl-bench report` averages complete runs only; a resume clears the mark)."""
import contextlib
import errno
import logging
import os
import re
import shutil
from pathlib import Path

from .errors import UserError

MARK = "FAILED"  # in the run directory: the one-line reason the run stopped
log = logging.getLogger("cl_bench")

# What each failure is, in words, by errno; a missing entry reads as the system's own words.
WHAT = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "no such file or folder (removed while the run used it?)",
}
# What to change before going on, by errno.
FIX = {
    errno.ENOSPC: "free space there",
    errno.EDQUOT: "free space there",
    errno.EROFS: "make it writable",
    errno.EACCES: "give this user access to it",
    errno.EPERM: "give this user access to it",
    errno.ENOENT: "put it back",
}


def describe(error: OSError, run_dir: Path | None = None, started: bool = True) -> str:
    """One line: what failed where, then what to do: before the run started, choose another folder; after, fix
    the cause and resume (the last complete checkpoint is intact)."""
    error = _plain(error)
    what = WHAT.get(error.errno, error.strerror or str(error).strip().splitlines()[-1])
    where = error.filename or run_dir
    if run_dir is not None and ".tmp" in str(where):  # a temporary name, gone by now: the folder it was under
        where = run_dir
    text = f"{what}: {where}" if where else what
    fix = FIX.get(error.errno, "fix that")
    if not started or run_dir is None:
        return f"{text}; {fix}, or choose another hydra.run.dir"
    return f"{text}; the run stopped, its last complete checkpoint intact: {fix}, then continue it with " \
           f"cl-bench train resume={run_dir}"


def _plain(error: OSError) -> OSError:
    """An OSError re-raised without its errno (a DataLoader worker's, whose text is the worker's traceback) as the
    error its last `[Errno N] ...: 'path'` says."""
    if error.errno is not None:
        return error
    found = re.search(r"\[Errno (\d+)\][^:\n]*(?:: '([^'\n]*)')?", str(error))
    return OSError(int(found[1]), os.strerror(int(found[1])), found[2]) if found else error


def at_start(error: OSError, resume: str | None) -> str:
    """An I/O failure before the run's first step: a resume is continued once fixed; a new run goes elsewhere."""
    return describe(error, Path(resume) if resume else None, started=bool(resume))


def as_os_error(error: Exception, path: Path) -> OSError | None:
    """An OSError for a library's own I/O error (safetensors says `I/O error: ... (os error 28)`), else None."""
    found = re.search(r"os error (\d+)", str(error))
    if found is None:
        return None
    code = int(found[1])
    return OSError(code, os.strerror(code), str(path))


@contextlib.contextmanager
def recorded(run_dir: Path, writer: bool = True, spared: tuple[type, ...] = ()):
    """Around a run: an OSError leaves as a UserError (one line, exit 2), and any failure but those `spared` (a
    stop by signal, which leaves a run to resume) removes this process's temporary files and marks the run
    directory FAILED with its reason (writer: the process that owns the directory). A run that starts again (a
    resume) clears the mark."""
    try:
        if writer:
            clear(run_dir)  # inside: a folder gone read-only fails here, and says so in one line
        yield
    except spared:
        raise
    except OSError as e:
        reason = describe(e, run_dir)
        if writer:
            mark(run_dir, reason)
        raise UserError(reason) from e
    except UserError as e:
        if writer:
            mark(run_dir, str(e))
        raise
    except Exception as e:
        if writer:
            said = str(e).splitlines()[0] if str(e) else ""
            mark(run_dir, f"{type(e).__name__}: {said} (an error of cl-bench's own: its traceback is in train.log)")
        raise


def mark(run_dir: Path, reason: str) -> None:
    """Remove this process's temporary files, then write FAILED; a folder that cannot take even that (read-only,
    full) is left as it is: the error line says what happened."""
    remove_temporaries(run_dir)
    try:
        (Path(run_dir) / MARK).write_text(reason + "\n")
    except OSError as e:
        log.warning(f"could not mark {run_dir} {MARK}: {e}")


def clear(run_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (Path(run_dir) / MARK).unlink()


def remove_temporaries(run_dir: Path) -> None:
    """What this process was writing under temporary names (`.NAME.tmpPID` files and checkpoint folders, files.py
    and checkpoint.py): half-written, never renamed into place."""
    pid = os.getpid()
    for path in Path(run_dir).rglob(f".*.tmp{pid}"):
        with contextlib.suppress(OSError):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
