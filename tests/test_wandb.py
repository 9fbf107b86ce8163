"""logger=wandb writes a real offline W&B run under the run directory; read its records back."""
import json
import shutil
import struct
from pathlib import Path

import pytest
from conftest import cl_bench, once_per_session
from test_health import packnet_releasing_nothing
from wandb.proto import wandb_internal_pb2

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out


def wandb_records(path):
    """Records of a .wandb file: a 7-byte header, then 32 KiB blocks of LevelDB-log style chunks
    (crc32, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    data, pos, block, pending = path.read_bytes(), 7, 32768, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def items(entries) -> dict:
    """Key/value items of a record; keys come either flat or as a one-element nested key."""
    return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in entries}


# A run of three tasks, named, tagged and logging its checkpoints: the per-task series and the naming tests read it
NAMED = ("logger=wandb", "method.epochs=1", "dataset.num_tasks=3", "checkpoint.keep=all",  # cut back below
         "logger.log_checkpoints=true", "logger.tags=[mine]")


@pytest.fixture
def named_run(tmp_path_factory, worker_id, tmp_path) -> Path:
    """NAMED's run, once in the session (issue 74: one run for both tests), copied into the test's folder."""
    def compute(folder):
        proc = cl_bench("train", f"hydra.run.dir={folder / 'run'}", *NAMED)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return str(folder / "run")
    shutil.copytree(once_per_session(tmp_path_factory, worker_id, "wandb_named_run", compute), tmp_path / "run")
    return tmp_path / "run"


def test_offline_wandb_run_holds_per_task_series_and_summary(named_run):
    run_dir = named_run
    [run_file] = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    summary, history, config = {}, [], {}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "summary":
            summary.update(items(record.summary.update))
        elif kind == "history":
            history.append(items(record.history.item))
        elif kind == "config":
            config.update(items(record.config.update))
        elif kind == "run":  # the run record carries the config given to wandb.init
            config.update(items(record.run.config.update))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert summary["avg_acc"] == metrics["avg_acc"]
    assert summary["forgetting"] == metrics["forgetting"] and summary["bwt"] == metrics["bwt"]
    steps = [h for h in history if "avg_acc" in h]
    assert [h["_step"] for h in steps] == [1, 2, 3]  # tasks learned
    assert [h["task"] for h in steps] == [0, 1, 2]  # the task, numbered as every other line numbers it
    assert [h["acc/task_0"] for h in steps] == [row[0] for row in metrics["acc"]]
    assert "acc/task_2" in steps[-1] and "forgetting/task_0" in steps[-1]
    assert any("acc_matrix" in k for k in summary)  # the matrix as a table
    assert config["method"]["name"] == "finetune"
    assert config["dataset"]["name"] == "split_digits"
    assert "setting" in config and config["setting"] is None  # the paper setting composed: none on the digits


def runs_and_artifacts(run_dir):
    """The run record and the artifact records of every offline W&B run under run_dir, oldest first."""
    found = []
    for run_file in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        records = list(wandb_records(run_file))
        [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        found.append((run, [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]))
    return found


def test_wandb_run_is_named_tagged_logs_checkpoints_and_resumes_under_its_id(named_run):
    run_dir = named_run
    [(run, artifacts)] = runs_and_artifacts(run_dir)
    run_id = (run_dir / "wandb" / "run_id").read_text().strip()
    assert run.run_id == run_id and run.display_name == "finetune_split_digits_task_s0" and run.run_group == ""
    assert list(run.tags) == ["finetune", "split_digits", "task", "mine"]
    artifacts = [a for a in artifacts if a.type == "checkpoint"]  # the accuracy tables are artifacts too
    assert [sorted(a.aliases) for a in artifacts] == [["latest", f"task_{t:03d}"] for t in range(3)]
    assert {e.path for e in artifacts[-1].manifest.contents} >= {"state.safetensors", "meta.json"}

    # killed after task 1: `resume=` continues the same W&B run
    shutil.rmtree(run_dir / "checkpoints" / "task_002")
    (run_dir / "checkpoints" / "last").write_text("task_001")
    (run_dir / "metrics.json").unlink()  # a resume of a complete run changes nothing
    proc = cl_bench("train", f"resume={run_dir}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = runs_and_artifacts(run_dir)
    assert len(runs) == 2 and runs[1][0].run_id == run_id


def test_wandb_runs_of_a_sweep_share_its_group(tmp_path):
    sweep_dir = tmp_path / "my-sweep"
    proc = cl_bench("train", "-m", "seed=0,1", "logger=wandb", "method.epochs=1", "dataset.num_tasks=2",
                    f"hydra.sweep.dir={sweep_dir}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = [run for job in ("0", "1") for run, _ in runs_and_artifacts(sweep_dir / job)]
    assert [(r.run_group, r.display_name) for r in runs] == [("my-sweep", "finetune_split_digits_task_s0"),
                                                            ("my-sweep", "finetune_split_digits_task_s1")]
    assert runs[0].run_id != runs[1].run_id


def test_wandb_disabled_writes_nothing_and_runs(tmp_path):
    run_dir = tmp_path / "run"
    proc = cl_bench("train", f"hydra.run.dir={run_dir}", "logger=wandb", "logger.mode=disabled", "method.epochs=1",
                    "dataset.num_tasks=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((run_dir / "metrics.json").read_text())["complete"]
    assert not list(run_dir.glob("wandb/offline-run-*")) and not (run_dir / "wandb" / "run_id").exists()


def test_tripped_health_checks_are_alerts_and_summary_keys(tmp_path_factory, worker_id):
    """On test_health.py's PackNet run that releases nothing, which logs to W&B for this test."""
    run_dir = packnet_releasing_nothing(tmp_path_factory, worker_id)
    [run_file] = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    records = list(wandb_records(run_file))
    summary = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            summary.update(items(record.summary.update))
    alerts = [r.alert for r in records if r.WhichOneof("record_type") == "alert"]
    findings = json.loads((run_dir / "metrics.json").read_text())["health"]["findings"]
    assert summary["health/tripped"] == len(findings) > 0
    assert summary["health/checks"] == sorted({f["check"] for f in findings})
    assert [a.title for a in alerts] == [f"{f['check']} (task {f['task']})" for f in findings]
    assert all(a.level == "WARN" for a in alerts)
