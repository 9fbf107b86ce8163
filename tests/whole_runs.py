"""Whole runs counted as they start (issue 74). A whole run is a `train.run` that built its scenario and method and
reached its task loop: every run the CLI, api.run or train.run starts, in this process, forked from the conftest's
server or in a fresh interpreter, whatever test helper started it, each job of a sweep apart; a run refused before
it trains is none. Each start appends one line to the file $CL_BENCH_RUN_LOG names: the test that was running
($PYTEST_CURRENT_TEST, which pytest sets and every process the test starts inherits). The conftest installs the hook
here and, through run_hook/sitecustomize.py on PYTHONPATH, in every interpreter the tests start; it fails a test not
marked slow that starts one, and scripts/count_runs.py counts them over a selection of the suite."""
import importlib.abc
import importlib.util
import os
import sys

LOG = "CL_BENCH_RUN_LOG"
MODULE = "cl_bench.recorders"


def record() -> None:
    """One line for the run starting now, unless it is a DDP run's rank above 0 (rank 0 counts the run)."""
    if os.environ.get(LOG) and os.environ.get("RANK", "0") == "0":
        test = current_test()
        fd = os.open(os.environ[LOG], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{test}\n".encode())
        finally:
            os.close(fd)


def current_test() -> str:
    """The node id of the test running now (pytest's $PYTEST_CURRENT_TEST less its phase)."""
    return os.environ.get("PYTEST_CURRENT_TEST", "outside a test").rsplit(" (", 1)[0]


def patch(recorders) -> None:
    """Recorders.run_start, which train.run calls once its scenario and method are built, records the start first."""
    def run_start(self, *args, **kwargs):
        record()
        for r in self.recorders:
            r.run_start(*args, **kwargs)
    recorders.Recorders.run_start = run_start


class Finder(importlib.abc.MetaPathFinder):
    """Patches cl_bench.recorders as it is first imported (sitecustomize runs before anything imports it)."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    if MODULE in sys.modules:
        patch(sys.modules[MODULE])
    elif not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, Finder())


def started(log: str, test: str) -> int:
    """How many whole runs the log records for the test (a node id)."""
    if not os.path.isfile(log):
        return 0
    with open(log) as lines:
        return sum(line.rstrip("\n") == test for line in lines)
