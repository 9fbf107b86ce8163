"""The whole-run count (tests/whole_runs.py) that scripts/count_runs.py reports and the conftest's guard reads."""
import whole_runs

from cl_bench import recorders


def test_a_start_is_recorded_against_the_running_test_once_per_run(tmp_path, monkeypatch):
    log = tmp_path / "runs.log"
    monkeypatch.setenv(whole_runs.LOG, str(log))
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_x.py::test_y[a] (call)")
    whole_runs.record()
    whole_runs.record()
    monkeypatch.setenv("RANK", "1")  # a DDP rank above 0: its run is rank 0's, counted there
    whole_runs.record()
    assert whole_runs.started(str(log), "tests/test_x.py::test_y[a]") == 2
    assert whole_runs.started(str(log), "tests/test_x.py::test_y") == 0


def test_the_run_start_that_train_run_calls_records_it_here(tmp_path, monkeypatch):
    log = tmp_path / "runs.log"
    monkeypatch.setenv(whole_runs.LOG, str(log))
    seen = []
    recorders.Recorders([type("R", (), {"run_start": lambda self, *a: seen.append(a)})()]).run_start(1, 2, 3, 0)
    assert seen == [(1, 2, 3, 0)] and whole_runs.started(str(log), whole_runs.current_test()) == 1
