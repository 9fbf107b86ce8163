"""Count the whole runs a selection of the test suite starts (issue 74): runs pytest with the arguments given
(default: the whole suite as `make test` runs it) and prints how many runs started, by test file and by test.

A whole run is a `train.run` that reached its task loop, in whatever process and through whatever helper a test
started it (tests/whole_runs.py defines and records them); a sweep counts each of its jobs, a refused run none.

    python scripts/count_runs.py                                    # the whole suite, two workers
    python scripts/count_runs.py -n 2 -m "not shape and not slow"  # what `make test-fast` runs: should be 0

With COVERAGE_PROCESS_START=RCFILE set, every interpreter of the run (pytest's, its workers', the forked and fresh
runs') is measured by coverage.py as well (tests/run_hook/sitecustomize.py)."""
import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(pytest_args: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp, "runs.log")
        log.touch()
        path = os.pathsep.join([str(ROOT / "tests" / "run_hook"), str(ROOT),
                                *filter(None, [os.environ.get("PYTHONPATH")])])
        env = {**os.environ, "CL_BENCH_RUN_LOG": str(log), "PYTHONPATH": path}
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
                              cwd=ROOT, env=env).returncode
        tests = collections.Counter(log.read_text().splitlines())
    files = collections.Counter()
    for test, n in tests.items():
        files[test.split("::")[0]] += n
    print(f"\nwhole runs started: {sum(tests.values())}, by {len(tests)} tests (pytest {' '.join(pytest_args)}, "
          f"exit {code})")
    for name, n in files.most_common():
        print(f"{n:5d}  {name}")
    print("\nby test:")
    for name, n in tests.most_common():
        print(f"{n:5d}  {name}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["-n", "2", "--dist", "worksteal"]))
