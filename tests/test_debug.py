"""debug=fast runs every method in seconds; debug=profile leaves a profiler trace of task 0."""
import json

from conftest import cl_bench, train

from cl_bench import methods


def test_debug_fast_runs_every_method(tmp_path):
    by_scenario = {"task": [], "class": []}
    for name, cls in sorted(methods.METHODS.items()):
        by_scenario["task" if "task" in cls.scenarios else "class"].append(name)
    for scenario, names in by_scenario.items():
        sweep = tmp_path / scenario
        proc = cl_bench("train", "-m", "debug=fast", f"scenario={scenario}", f"method={','.join(names)}",
                        f"hydra.sweep.dir={sweep}", timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for job, name in enumerate(names):
            metrics = json.loads((sweep / str(job) / "metrics.json").read_text())
            assert metrics["method"] == name and metrics["complete"] and len(metrics["acc"]) == 2
            assert not (sweep / str(job) / "checkpoints").exists()
            events = [json.loads(line) for line in (sweep / str(job) / "events.jsonl").read_text().splitlines()]
            if name == "finetune":  # one epoch a task, of one batch
                assert [(e["task"], e["epoch"]) for e in events if e["event"] == "epoch_end"] == [(0, 0), (1, 0)]


def test_debug_profile_writes_a_trace_of_task_0(tmp_path):
    run = tmp_path / "run"
    train(run, "debug=profile", "dataset.num_tasks=2", "method.epochs=1")
    trace = json.loads((run / "profile" / "task_000.json").read_text())
    assert any(e.get("name", "").startswith("aten::") for e in trace["traceEvents"])
    assert "Self CPU" in (run / "profile" / "task_000.txt").read_text()
    assert not (run / "profile" / "task_001.json").exists()
