"""In every interpreter the tests start (the conftest puts this folder on PYTHONPATH): the whole-run count's hook
(tests/whole_runs.py) and, when $COVERAGE_PROCESS_START names a configuration, coverage.py's measurement."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import whole_runs  # noqa: E402

sys.path.pop(0)
whole_runs.install()
if os.environ.get("COVERAGE_PROCESS_START"):
    import coverage
    coverage.process_startup()
