"""init_from=RUN_DIR[/checkpoints/task_<ttt>]: a new run that branches from another run's finished task."""
import json
from pathlib import Path

import pytest
from conftest import cl_bench, contract_problems, once_per_session, train
from omegaconf import OmegaConf

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

COMMON = ("dataset.num_tasks=3", "method.epochs=1", "backbone=mlp", "backbone.hidden_sizes=[32]")


PARENTS = {"er": ("method=er", "scenario=class", "method.memory_size=40"),  # memory
           "packnet": ("method=packnet", "method.epochs=1")}  # masks


def parent_run(tmp_path_factory, worker_id, name: str) -> tuple[Path, dict]:
    """COMMON's run of PARENTS[name] with every task's checkpoint, once in the session: its folder and metrics
    (the branches below read it and write only their own folders)."""
    def compute(folder):
        return [str(folder / "parent"), train(folder / "parent", *COMMON, *PARENTS[name])]
    run_dir, metrics = once_per_session(tmp_path_factory, worker_id, f"init-from-parent-{name}", compute)
    return Path(run_dir), metrics


@pytest.mark.parametrize("name", sorted(PARENTS))
def test_a_branch_continues_from_the_task_with_weights_masks_memory_and_records_its_origin(tmp_path_factory, worker_id,
                                                                                          tmp_path, name):
    method = PARENTS[name]
    parent, full = parent_run(tmp_path_factory, worker_id, name)
    same = tmp_path / "same"  # the same settings from task 1's checkpoint: the parent's run, exactly
    again = train(same, *COMMON, *method, f"init_from={parent / 'checkpoints' / 'task_001'}")
    drop = ("time_s", "peak_mem_mb")
    assert {k: v for k, v in again.items() if k not in drop} == {k: v for k, v in full.items() if k not in drop}
    events = [json.loads(line) for line in (same / "events.jsonl").read_text().splitlines()]
    assert [e["task"] for e in events if e["event"] == "task_start"] == [2]  # it learned task 2 only
    assert contract_problems(same) == []

    other = tmp_path / "other"  # new hyperparameters from the parent's last checkpoint (task 2): nothing to learn
    branched = train(other, *COMMON, *method, "method.lr=0.003", f"init_from={parent}")
    assert branched["acc"] == full["acc"]
    recorded = OmegaConf.load(other / ".hydra" / "config.yaml")
    assert recorded.init_from == str(parent) and recorded.method.lr == 0.003


def test_branching_from_another_setting_or_nowhere_is_one_line(tmp_path_factory, worker_id, tmp_path):
    parent, _ = parent_run(tmp_path_factory, worker_id, "er")  # the branch test's ER parent (issue 74)
    for overrides, complaint in [(("dataset.num_tasks=4",), "that run's tasks are not this run's"),
                                 ((), "not a run directory with a finished task's checkpoint")]:
        source = parent if overrides else tmp_path
        # a directory of its own each: the refused run's record stays, and a new run never takes its directory
        proc = cl_bench("train", f"hydra.run.dir={tmp_path / str(len(overrides))}", "logger=none", *COMMON,
                        *PARENTS["er"], *overrides, f"init_from={source}")
        assert proc.returncode != 0 and complaint in proc.stderr and "Traceback" not in proc.stderr
