"""checkpoint.keep: by default only the newest complete task's checkpoint stays (what a resume and init_from=RUN_DIR
read), with every resume still exact; keep=all keeps every task's, keep=N the newest N. CPG's fine-tune goal chains
live in the run's side/ folder, never in a checkpoint, and a resume or a branch finds them there."""
import json
import shutil

import pytest
from conftest import cl_bench, contract_problems, once_per_session, train
from safetensors.torch import load_file

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

TIMINGS = ("time_s", "peak_mem_mb")
FAST = ("method=finetune", "method.epochs=1", "dataset.num_tasks=4")
# PAE as the committed script runs it (fine-tune goal chains), on the digits and cut short
PAE = ("experiment=cpg_split_digits", "method.picking=false", "method.goal_source=finetune", "method.goal_repeats=2",
       "method.epochs=2", "method.prune_epochs=1", "method.retrain_epochs=1", "dataset.num_tasks=4")


def without_timings(metrics):
    return {k: v for k, v in metrics.items() if k not in TIMINGS}


def kept(run_dir) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.is_dir())


def cut_after(source, target, task_id: int, keep: str | None) -> None:
    """target: source as a run killed right after checkpointing task_id would have left it under checkpoint.keep
    `keep` (None: the default), its run record saying so."""
    shutil.copytree(source, target)
    done = sorted(p for p in (target / "checkpoints").glob("task_*"))
    for p in done[task_id + 1:] + (done[:task_id] if keep is None else []):
        shutil.rmtree(p)
    (target / "checkpoints" / "last").write_text(f"task_{task_id:03d}")
    (target / "metrics.json").unlink()
    record = json.loads((target / "run.json").read_text())
    record["overrides"] = [o for o in record["overrides"] if not o.startswith("checkpoint.keep=")]
    (target / "run.json").write_text(json.dumps(record))


@pytest.fixture
def whole(tmp_path_factory, worker_id, tmp_path):
    """FAST's run with checkpoint.keep=all, run once in the session and copied into each test that reads it."""
    def compute(folder):
        train(folder / "run", *FAST, "checkpoint.keep=all")
        return str(folder / "run")
    shutil.copytree(once_per_session(tmp_path_factory, worker_id, "fast_keep_all_run", compute), tmp_path / "whole")
    return tmp_path / "whole"


# The default (the newest task's alone) is what the resume below ends with; keep=all is the run it cuts from.
def test_keep_leaves_the_newest_n_or_all(tmp_path, whole):
    proc = cl_bench("train", f"hydra.run.dir={tmp_path / 'two'}", "logger=none", *FAST, "checkpoint.keep=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert kept(tmp_path / "two") == ["task_002", "task_003"] and contract_problems(tmp_path / "two") == []
    assert kept(whole) == [f"task_{t:03d}" for t in range(4)] and contract_problems(whole) == []


def test_a_resume_under_the_default_keep_is_exact_and_a_branch_reads_the_newest(tmp_path, whole):
    cut_after(whole, tmp_path / "cut", 1, keep=None)
    whole = json.loads((whole / "metrics.json").read_text())
    assert kept(tmp_path / "cut") == ["task_001"]
    proc = cl_bench("train", f"resume={tmp_path / 'cut'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    resumed = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    assert without_timings(resumed) == without_timings(whole)
    assert kept(tmp_path / "cut") == ["task_003"] and contract_problems(tmp_path / "cut") == []  # the default keep
    # a branch from the run directory (its newest checkpoint) needs nothing else; an earlier one not kept is named
    branched = train(tmp_path / "branch", *FAST, "checkpoint.keep=1", f"init_from={tmp_path / 'cut'}")
    assert branched["acc"] == whole["acc"]
    proc = cl_bench("train", f"hydra.run.dir={tmp_path / 'x'}", "logger=none", *FAST,
                    f"init_from={tmp_path / 'cut' / 'checkpoints' / 'task_001'}")
    assert proc.returncode != 0 and "checkpoint.keep=all" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("value", ["0", "-1", "some", "true"])
def test_a_bad_keep_is_one_line(tmp_path, value):
    proc = cl_bench("train", f"hydra.run.dir={tmp_path}", "logger=none", *FAST, f"checkpoint.keep={value}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "checkpoint.keep" in proc.stderr and "or all" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_goal_chains_stay_out_of_checkpoints_and_resume_and_branch_exactly(tmp_path):
    whole = train(tmp_path / "whole", *PAE)
    for t in range(4):
        state = load_file(tmp_path / "whole" / "checkpoints" / f"task_{t:03d}" / "state.safetensors")
        assert not [k for k in state if "goal" in k and "chain" in k or k == "goal_nets"]
    side = sorted(p.relative_to(tmp_path / "whole" / "side").as_posix()
                  for p in (tmp_path / "whole" / "side").rglob("*.safetensors"))
    assert side == [f"task_{t:03d}/cpg_goal_chain{c}.safetensors" for t in range(3) for c in range(2)]
    cut_after(tmp_path / "whole", tmp_path / "cut", 1, keep=None)  # later tasks' side files left: rewritten alike
    proc = cl_bench("train", f"resume={tmp_path / 'cut'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert without_timings(json.loads((tmp_path / "cut" / "metrics.json").read_text())) == without_timings(whole)
    # a branch from task 1 copies the chains of tasks 0 and 1, and continues them as the whole run did
    again = train(tmp_path / "branch", *PAE, f"init_from={tmp_path / 'whole' / 'checkpoints' / 'task_001'}")
    assert without_timings(again) == without_timings(whole)
