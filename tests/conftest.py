import hashlib
import json
import math
import multiprocessing
import os
import pickle
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import pytest
import whole_runs

# One torch thread per process, here and in the CLI runs the tests start: `make test` runs two pytest workers on
# two cores, and small ops on shared cores run fastest so. Set before torch is imported anywhere.
os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]

# Whole runs counted as they start, here and in every interpreter the tests start (tests/whole_runs.py): into the
# log scripts/count_runs.py names, else into this session's own.
RUN_LOG = os.environ.setdefault(whole_runs.LOG, os.path.join(tempfile.mkdtemp(prefix="cl-bench-runs-"), "runs.log"))
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "run_hook"), str(ROOT),
                                            *filter(None, [os.environ.get("PYTHONPATH")])])
whole_runs.install()


def real_data(*parts: str) -> Path:
    """A folder under $CL_BENCH_DATA (a data root holding real datasets, e.g. MNIST/raw), or skip saying why."""
    root = os.environ.get("CL_BENCH_DATA")
    if not root:
        pytest.skip("real data: set CL_BENCH_DATA to a data root (MNIST/raw, cifar10-jpeg.npz) to run this test")
    path = Path(root, *parts)
    if not path.exists():
        pytest.skip(f"real data: {path} not found under CL_BENCH_DATA")
    return path


def cl_bench(*args, cwd=None, timeout=600, fresh=False) -> subprocess.CompletedProcess:
    """Run the real `cl-bench` entry point in a process of its own: forked from the server below, or, with fresh=True
    and for what relies on the interpreter's exit handlers (sweeps' launchers, W&B) or on another torch thread count
    at import, a fresh interpreter."""
    env = {**os.environ, "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "0"}
    exits = {"-m", "--multirun", "logger=wandb"} & set(args) or any(a.startswith("logger.mode=") for a in args)
    if fresh or exits or env.get("OMP_NUM_THREADS") != "1":
        return subprocess.run([sys.executable, "-m", "cl_bench", *args], cwd=cwd or ROOT, env=env, text=True,
                              capture_output=True, timeout=timeout)
    return forked(args, env, cwd, timeout)


# cl_bench() and train() start a run in a process of its own, forked from a server that imported the package once
# (multiprocessing's forkserver, whose server runs nothing else): each run is as isolated as `cl-bench train` in a
# fresh interpreter, without paying the seconds of imports again. The server also imports what every run imports
# later, inside the run: torch._dynamo (train.build imports it, since torch.optim would on its first step) and
# scikit-learn (the embedded digits' reader). Without them here, a default run forked from the server took 3 s longer
# (4.8 s against 1.8, on two busy cores), more than it trains. The server starts on first use, with the environment
# of then.
FORKSERVER = multiprocessing.get_context("forkserver")
FORKSERVER.set_forkserver_preload(["cl_bench.cli", "cl_bench.app", "cl_bench.train", "torch._dynamo",
                                   "sklearn.datasets", "sklearn.model_selection"])


def _forked_cli(argv: list[str], env: dict, cwd: str, out: str, err: str) -> None:
    """In the forked process: the command line as the console script runs it, its output into the files named."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    sys.argv = ["cl-bench", *argv]
    from cl_bench import cli
    try:
        code = cli.main()
    except SystemExit as stop:
        code = stop.code
    except BaseException:
        traceback.print_exc()  # as the interpreter would, for an error that escaped
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)


def forked(args, env: dict, cwd, timeout) -> subprocess.CompletedProcess:
    """The command line in a process forked from the server, as subprocess.run(capture_output=True) returns it."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        child = FORKSERVER.Process(target=_forked_cli, args=(list(args), env, str(cwd or ROOT), out, err))
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(["cl-bench", *args], timeout)
        return subprocess.CompletedProcess(["cl-bench", *args], child.exitcode, Path(out).read_text(),
                                           Path(err).read_text())


class ForkedTrain:
    """`cl-bench train ARGS` started in a process forked from the server and left running, for a test that signals
    it mid-run: poll, send_signal, wait and communicate as subprocess.Popen has them (a signal's death reads
    as -signum), without the fresh interpreter's seconds of imports at each start."""

    def __init__(self, *args, cwd=None):
        self._files = tempfile.TemporaryDirectory()
        self._out, self._err = (os.path.join(self._files.name, name) for name in ("stdout", "stderr"))
        env = {**os.environ, "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "0"}
        self._child = FORKSERVER.Process(target=_forked_cli,
                                         args=(["train", *args], env, str(cwd or ROOT), self._out, self._err))
        self._child.start()

    @property
    def returncode(self) -> int | None:
        return self._child.exitcode

    def poll(self) -> int | None:
        return self._child.exitcode

    def send_signal(self, sig: int) -> None:
        os.kill(self._child.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        self._child.join(timeout)
        if self._child.exitcode is None:
            raise subprocess.TimeoutExpired(["cl-bench", "train"], timeout)
        return self._child.exitcode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        out, err = Path(self._out).read_text(), Path(self._err).read_text()
        self._files.cleanup()
        return out, err


_ONCE: dict[str, str] = {}  # without xdist: each result computed in this session, as JSON


def once_per_session(tmp_path_factory, worker_id: str, name: str, compute) -> dict | list:
    """compute(folder)'s JSON result, computed once in the whole session: under xdist every worker that needs it
    waits on one file lock, the first computes it into the workers' shared folder and the rest read it; without
    xdist, kept in this process. (A module fixture runs once per worker that draws one of its tests, and
    `--dist loadgroup`, which would keep a module's tests on one worker, groups nothing under pytest 9: xdist
    renames nodes through an attribute pytest 9 no longer reads.)"""
    from filelock import FileLock
    if worker_id == "master":
        if name not in _ONCE:
            _ONCE[name] = json.dumps(compute(tmp_path_factory.mktemp(name)))
        return json.loads(_ONCE[name])
    result = tmp_path_factory.getbasetemp().parent / f"{name}.json"  # the session's folder, above each worker's
    with FileLock(f"{result}.lock"):
        if not result.is_file():  # a worker whose computation failed leaves none: the next computes afresh
            computed = compute(tmp_path_factory.mktemp(name))
            result.write_text(json.dumps(computed))
        return json.loads(result.read_text())


NO_CHECKPOINTS = ("checkpoint.enabled=false", "debug=fast", "debug=profile")  # the overrides that turn them off


def train(run_dir: Path, *overrides, check=True) -> dict:
    """`cl-bench train` into run_dir on the embedded digits, quietly; returns metrics.json. Every task's checkpoint
    is kept (unless overrides say otherwise), so that tests can cut a run back to an earlier task."""
    keep = [] if any(o.startswith("checkpoint.keep=") or o in NO_CHECKPOINTS for o in overrides) \
        else ["checkpoint.keep=all"]  # (with checkpoints off, checkpoint.keep is refused as unread)
    proc = cl_bench("train", f"hydra.run.dir={run_dir}", "logger=none", *keep, *overrides)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run_dir / "metrics.json").read_text())


def contract_problems(run_dir: Path) -> list[str]:
    """The run directory contract of docs/architecture.md, checked independently of the package."""
    m = json.loads((run_dir / "metrics.json").read_text())
    fields = {"schema": int, "method": str, "dataset": str, "backbone": str, "scenario": str, "seed": int,
              "num_tasks": int, "tasks": list, "acc": list, "avg_acc": float, "forgetting": float, "bwt": float,
              "capacity": dict, "time_s": float, "peak_mem_mb": float, "complete": bool}
    out = [f"{k} missing or not {t.__name__}" for k, t in fields.items()
           if not isinstance(m.get(k), t) and not (t is float and isinstance(m.get(k), int))]
    if out:
        return out
    acc, n = m["acc"], len(m["acc"])
    if m["complete"] != (n == m["num_tasks"]):
        out.append("complete disagrees with the number of rows")
    for i, row in enumerate(acc):
        if len(row) < i + 1 or not all(0 <= a <= 1 for a in row):
            out.append(f"bad row {i}")
    last = acc[-1][:n]
    want_forgetting = (sum(max(acc[i][j] for i in range(j, n - 1)) - last[j] for j in range(n - 1)) / (n - 1)
                       if n > 1 else 0.0)
    want_bwt = sum(last[j] - acc[j][j] for j in range(n - 1)) / (n - 1) if n > 1 else 0.0
    for key, want in (("avg_acc", sum(last) / n), ("forgetting", want_forgetting), ("bwt", want_bwt)):
        if not math.isclose(m[key], want, abs_tol=1e-9):
            out.append(f"{key} {m[key]} != {want}")
    ckpt = run_dir / "checkpoints"
    kept = [t for t in range(n) if (ckpt / f"task_{t:03d}").is_dir()]  # all, or the newest (checkpoint.keep)
    if n - 1 not in kept:
        out.append(f"checkpoints/task_{n - 1:03d} missing")
    for t in kept:
        for f in ("state.safetensors", "masks.safetensors", "meta.json"):
            if not (ckpt / f"task_{t:03d}" / f).is_file():
                out.append(f"checkpoints/task_{t:03d}/{f} missing")
    if (ckpt / "last").read_text().strip() != f"task_{n - 1:03d}":
        out.append("checkpoints/last does not name the newest task")
    events = [json.loads(line)["event"] for line in (run_dir / "events.jsonl").read_text().splitlines()]
    for kind in ("task_start", "epoch_end", "eval", "task_end", "run_end"):
        if kind not in events:
            out.append(f"events.jsonl has no {kind}")
    return out


def is_online(name: str) -> bool:
    """Whether a method learns from a stream in one pass (its class says so: an OnlineMethod)."""
    from cl_bench.methods import METHODS
    from cl_bench.methods.online import OnlineMethod
    return issubclass(METHODS[name], OnlineMethod)


def quick_args(name: str, scenario: str) -> list[str]:
    """Overrides for a short in-process run of method `name`: two tasks of the embedded digits, one epoch (online
    methods: 40 samples per task), no logging or checkpoints."""
    args = [f"method={name}", f"scenario={scenario}", "logger=none", "checkpoint.enabled=false", "dataset.num_tasks=2"]
    args.append("dataset.samples_per_task=40" if is_online(name) else "method.epochs=1")
    from cl_bench.methods import METHODS
    return args + list(METHODS[name].traits.short_schedule)  # the extra phases (goals, compacting, retraining) cut



@pytest.fixture(autouse=True, scope="session")
def dataset_cache(tmp_path_factory):
    """Decoded datasets go to a cache of this session's own (inherited by the CLI runs), never to ~/.cache."""
    os.environ["CL_BENCH_CACHE"] = str(tmp_path_factory.mktemp("dataset-cache"))
    return Path(os.environ["CL_BENCH_CACHE"])


@pytest.fixture(autouse=True)
def whole_runs_are_marked_slow(request):
    """`make test-fast` (-m "not shape and not slow") starts no whole run: a test that starts one unmarked fails."""
    yield
    marked = {m.name for m in request.node.iter_markers()} & {"slow", "shape"}
    started = whole_runs.started(RUN_LOG, request.node.nodeid)
    if started and not marked:
        pytest.fail(f"{started} whole run(s) started by a test not marked slow: mark it @pytest.mark.slow")


@pytest.fixture
def run_dir(tmp_path):
    return tmp_path / "run"


@pytest.fixture
def one_thread(monkeypatch):
    """One intra-op thread, here and in the CLI runs: small ops on a shared 2-core machine run fastest so."""
    import torch
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def cifar10(tmp_path_factory) -> str:
    """cifar-10-batches-py as the official archive unpacks, 6 training and 4 test images per class."""
    root = tmp_path_factory.mktemp("data")
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, per_class in [*((f"data_batch_{i}", 6) for i in range(1, 6)), ("test_batch", 4)]:
        labels = np.repeat(np.arange(10), per_class)
        images = rng.integers(0, 256, (len(labels), 3 * 32 * 32), dtype=np.uint8)
        (folder / name).write_bytes(pickle.dumps({b"data": images, b"labels": labels.tolist()}))
    return str(root)


# Sweeps re-run or grown into their folder (tests/test_sweep_identity.py, the joblib and Optuna ones beside their
# launchers' tests): what a job folder holds, and the line a sweep ends with.
def files(folder: Path) -> dict:
    """Every file under folder, hidden ones (.hydra/) included: its bytes' digest and its mtime."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def sweep_summary(sweep_dir, jobs_: int, ran: int, skipped: int) -> str:
    return (f"cl-bench: {jobs_} jobs in {sweep_dir} ({ran} run, {skipped} skipped as complete); compare them with: "
            f"cl-bench report {sweep_dir}")
