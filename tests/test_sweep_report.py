"""Sweeps through the real CLI, the report over them, re-running a half-finished sweep, and eval."""
import csv
import json
import math
import shutil
import statistics

import pytest
import yaml
from conftest import cl_bench, files, once_per_session, sweep_summary
from test_method_contract import trial

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out


def sweep(sweep_dir, *overrides):
    proc = cl_bench("train", "-m", "method=finetune,ewc", "seed=0,1", "method.epochs=1", "logger=none",
                    "checkpoint.keep=all",
                    f"hydra.sweep.dir={sweep_dir}", *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def metrics(job_dir):
    return json.loads((job_dir / "metrics.json").read_text())


@pytest.fixture
def two_by_two(tmp_path_factory, worker_id, tmp_path):
    """sweep()'s four jobs, run once in the session and copied into each test that reads or changes them."""
    def compute(folder):
        sweep(folder / "sweep")
        return str(folder / "sweep")
    sweep_dir = tmp_path / "sweep"
    shutil.copytree(once_per_session(tmp_path_factory, worker_id, "two_by_two_sweep", compute), sweep_dir)
    return sweep_dir


def test_two_by_two_sweep_and_its_report(two_by_two):
    sweep_dir = two_by_two
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1", "2", "3"]
    runs = [metrics(j) for j in jobs]
    assert sorted((r["method"], r["seed"]) for r in runs) == [("ewc", 0), ("ewc", 1), ("finetune", 0), ("finetune", 1)]

    proc = cl_bench("report", str(sweep_dir))
    assert proc.returncode == 0, proc.stderr
    rows = {r["method"]: r for r in csv.DictReader(open(sweep_dir / "report.csv"))}
    for method in ("finetune", "ewc"):
        values = [r["avg_acc"] for r in runs if r["method"] == method]
        assert float(rows[method]["avg_acc"]) == statistics.mean(values)
        assert abs(float(rows[method]["avg_acc_std"]) - statistics.stdev(values)) < 1e-12
        assert rows[method]["seeds"] == "2"
        forgetting = [r["forgetting"] for r in runs if r["method"] == method]
        assert float(rows[method]["forgetting"]) == statistics.mean(forgetting)
    table = (sweep_dir / "report.md").read_text()
    assert "| ewc | split_digits | 5 | task | convnet | – | honest | 1 x cpu | 2 |" in table
    plots = {p.name.split("_")[0] for p in (sweep_dir / "plots").glob("*.png")}
    assert {"acc", "avg"} <= plots


def test_rerunning_a_half_finished_sweep_completes_only_what_is_missing(two_by_two):
    sweep_dir = two_by_two
    before = {j: metrics(sweep_dir / j) for j in "0123"}
    # job 2 died after its second task; job 3 after Hydra recorded its config, before anything of its own
    job2 = sweep_dir / "2"
    for later in (job2 / "checkpoints").glob("task_*"):
        if later.name > "task_001":
            shutil.rmtree(later)
    (job2 / "checkpoints" / "last").write_text("task_001")
    (job2 / "metrics.json").unlink()
    for written in (sweep_dir / "3").iterdir():
        if written.is_file():
            written.unlink()
        elif written.name != ".hydra":
            shutil.rmtree(written)
    untouched = (sweep_dir / "0" / "events.jsonl").read_text()
    proc = sweep(sweep_dir)
    assert proc.stderr.count("is complete, skipped") == 2
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == ["0", "1", "2", "3"]  # found by settings
    assert (sweep_dir / "0" / "events.jsonl").read_text() == untouched
    resumed = [json.loads(line) for line in (job2 / "events.jsonl").read_text().splitlines()]
    assert [e["task"] for e in resumed if e["event"] == "task_start"] == [0, 1, 2, 3, 4, 2, 3, 4]
    for j in "0123":
        after = metrics(sweep_dir / j)
        assert {k: v for k, v in after.items() if k not in ("time_s", "peak_mem_mb")} == \
            {k: v for k, v in before[j].items() if k not in ("time_s", "peak_mem_mb")}


def test_incomplete_runs_are_listed_not_averaged(two_by_two, tmp_path):
    """Finetune's two seeds of the sweep (issue 74: not two runs of their own), the second cut short."""
    finetune = {metrics(job)["seed"]: job for job in two_by_two.iterdir()
                if job.is_dir() and metrics(job)["method"] == "finetune"}
    shutil.move(finetune[0], tmp_path / "a")
    shutil.move(finetune[1], tmp_path / "b")
    shutil.rmtree(two_by_two)
    record = metrics(tmp_path / "b")
    record.update(complete=False, acc=record["acc"][:2])
    (tmp_path / "b" / "metrics.json").write_text(json.dumps(record))
    proc = cl_bench("report", str(tmp_path), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(open(tmp_path / "report.csv")))
    assert len(rows) == 1 and rows[0]["seeds"] == "1"
    assert "Incomplete runs" in (tmp_path / "report.md").read_text() and "(2/5" in proc.stdout


def test_eval_rebuilds_a_checkpoint_and_reports_task_aware_accuracy(tmp_path_factory, worker_id, tmp_path):
    """On a copy of finetune's trial in the class scenario (test_method_contract.py), which keeps both tasks'
    checkpoints."""
    trial_run = trial(tmp_path_factory, worker_id, "finetune", "class")
    run_dir, m = tmp_path / "run", trial_run["metrics"]
    shutil.copytree(trial_run["run_dir"], run_dir)
    proc = cl_bench("eval", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((run_dir / "eval.json").read_text())
    assert result["acc"] == m["acc"][-1] and result["checkpoint"] == "task_001"
    assert all(aware >= plain for aware, plain in zip(result["task_aware_acc"], result["acc"]))
    proc = cl_bench("eval", str(run_dir), "--checkpoint", "task_000")
    assert proc.returncode == 0 and json.loads(proc.stdout)["acc"] == m["acc"][0]


def test_eval_and_report_errors_are_one_line(tmp_path):
    for args in (["eval", str(tmp_path)], ["report", str(tmp_path / "nope")], ["eval"]):
        proc = cl_bench(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) <= 2  # argparse adds its usage line


def _write_reports(paths, out, times):
    from cl_bench import report as report_module
    for _ in range(times):
        report_module.report(paths, out, plots=False)


def test_two_sweeps_reporting_into_one_place_never_leave_a_torn_file(tmp_path):
    """Both writers replace whole files atomically: the report always is one writer's, never a mix."""
    import multiprocessing

    from cl_bench import report as report_module

    def fake_sweep(name, method, accs):
        for seed, acc in enumerate(accs):
            run = tmp_path / name / str(seed)
            run.mkdir(parents=True)
            (run / "metrics.json").write_text(json.dumps({
                "method": method, "dataset": "split_digits", "scenario": "task", "backbone": "convnet",
                "complete": True, "capacity": {"params_total": 1000}, "avg_acc": acc, "forgetting": 0.0,
                "bwt": 0.0, "time_s": 1.0, "acc": [[acc]], "num_tasks": 1, "seed": seed}))
        return tmp_path / name

    a = fake_sweep("a", "finetune", [0.5, 0.6] * 50)
    b = fake_sweep("b", "ewc", [0.7, 0.8] * 50)
    expected = {}
    for name, path in (("a", a), ("b", b)):
        report_module.report([path], tmp_path / f"alone_{name}", plots=False)
        expected[name] = {f: (tmp_path / f"alone_{name}" / f).read_text() for f in ("report.md", "report.csv")}
    shared = tmp_path / "shared"
    ctx = multiprocessing.get_context("fork")
    writers = [ctx.Process(target=_write_reports, args=([p], shared, 25)) for p in (a, b)]
    for w in writers:
        w.start()
    for _ in range(200):  # read while both write
        for f in ("report.md", "report.csv"):
            if (shared / f).exists():
                assert (shared / f).read_text() in (expected["a"][f], expected["b"][f])
    for w in writers:
        w.join()
        assert w.exitcode == 0
    for f in ("report.md", "report.csv"):
        assert (shared / f).read_text() in (expected["a"][f], expected["b"][f])
    assert not [p.name for p in shared.iterdir() if p.name.startswith(".")], "no temporary files left behind"


def optuna_sweep(sweep_dir, *overrides, trials: int = 2):
    """Optuna trials over method.lr, through the real CLI, on two tasks of the class scenario (where validation and
    test accuracy differ): two, the fewest that a choice is made between (issue 74)."""
    proc = cl_bench("train", "-m", "hydra/sweeper=maximize_objective", f"hydra.sweeper.n_trials={trials}",
                    "method.epochs=1", "dataset.num_tasks=2", "scenario=class", "logger=none",
                    f"hydra.sweep.dir={sweep_dir}", *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    runs = [metrics(p) for p in sorted(sweep_dir.iterdir()) if (p / "metrics.json").is_file()]
    assert len(runs) == trials
    return best, runs, proc


def test_an_optuna_sweep_maximises_validation_accuracy_unless_told_otherwise(tmp_path):
    best, runs, _ = optuna_sweep(tmp_path / "val")
    assert {r["objective"] for r in runs} == {"val_avg_acc"}
    chosen = max(runs, key=lambda r: r["val_avg_acc"])
    assert best["best_value"] == chosen["val_avg_acc"] != chosen["avg_acc"]
    assert cl_bench("report", str(tmp_path / "val"), "--no-plots").returncode == 0
    table = (tmp_path / "val" / "report.md").read_text()
    assert "Optuna maximised val_avg_acc over 2 runs" in table and "TEST selection" not in table
    # grown by a trial: the sampler's seed draws the first two again, which find their runs; the third runs
    before = {p.name: files(p) for p in (tmp_path / "val").iterdir() if p.name.isdigit()}
    _, _, grown = optuna_sweep(tmp_path / "val", trials=3)
    assert sweep_summary(tmp_path / "val", 3, 1, 2) in grown.stderr
    assert {name: files(tmp_path / "val" / name) for name in before} == before

    best, runs, _ = optuna_sweep(tmp_path / "test", "sweep.objective=test_avg_acc")
    assert {r["objective"] for r in runs} == {"test_avg_acc"}
    assert best["best_value"] == max(r["avg_acc"] for r in runs)
    assert cl_bench("report", str(tmp_path / "test"), "--no-plots").returncode == 0
    table = (tmp_path / "test" / "report.md").read_text()
    assert "Optuna maximised test_avg_acc (TEST selection" in table and "test_avg_acc (TEST selection)" in table


def test_a_sweep_on_validation_needs_validation_data(tmp_path):
    proc = cl_bench("train", "-m", "seed=0", "data.val_fraction=0", f"hydra.sweep.dir={tmp_path}", "logger=none")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "sweep.objective=val_avg_acc needs validation data" in proc.stderr


def test_the_report_gives_the_count_and_a_t_confidence_interval(tmp_path):
    from cl_bench import report as report_module
    for seed, acc in enumerate([0.5, 0.6, 0.7]):
        run = tmp_path / str(seed)
        run.mkdir()
        (run / "metrics.json").write_text(json.dumps({
            "method": "finetune", "dataset": "split_digits", "scenario": "task", "backbone": "convnet",
            "complete": True, "capacity": {"params_total": 1000}, "avg_acc": acc, "val_avg_acc": acc - 0.1,
            "forgetting": 0.0, "bwt": 0.0, "bti": 0.0, "la": acc, "time_s": 1.0, "acc": [[acc]], "num_tasks": 1,
            "seed": seed, "objective": "val_avg_acc"}))
    [row] = report_module.report([tmp_path], plots=False)
    # sample std 0.1 over n = 3; t(0.975, 2) = 4.303 (tables): half-width 4.303 * 0.1 / sqrt(3) = 0.2484
    assert row["seeds"] == 3 and row["avg_acc_std"] == pytest.approx(0.1)
    assert row["avg_acc_ci95"] == pytest.approx(4.3027 * 0.1 / 3 ** 0.5, abs=1e-4)
    assert math.isnan(row["task_aware_avg_acc"])  # not recorded in the task scenario: not averaged as 0
    table = (tmp_path / "report.md").read_text()
    assert ("| finetune | split_digits | 1 | task | convnet | – | honest | unrecorded | 3 | "
            "60.00 ± 10.00 [35.16, 84.84] | 50.00 ± 10.00" in table)
    assert "RA % (test avg_acc)" in table and "BTI %" in table and "LA %" in table


@pytest.mark.parametrize(("df", "table"), [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045)])
def test_t_quantiles_match_the_tables(df, table):
    from cl_bench.report import t_quantile_975
    assert t_quantile_975(df) == pytest.approx(table, abs=5e-4)


def write_run(run, method, dataset, acc, seed, memory=200, tasks=1, **extra):
    """A finished run's metrics.json, its accuracy matrix `tasks` rows of `acc` on the tasks seen."""
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({**extra,
        "method": method, "dataset": dataset, "scenario": "class", "backbone": "mlp", "complete": True,
        "capacity": {"params_total": 1000, "memory_size": memory}, "avg_acc": acc, "val_avg_acc": acc,
        "forgetting": 0.0, "bwt": 0.0, "bti": 0.0, "la": acc, "time_s": 1.0, "num_tasks": tasks, "seed": seed,
        "acc": [[acc] * (t + 1) + [0.0] * (tasks - t - 1) for t in range(tasks)], "objective": "val_avg_acc"}))


def test_rehearsal_runs_of_different_memory_sizes_are_reported_apart(tmp_path):
    from cl_bench import report as report_module
    for i, (memory, acc) in enumerate([(200, 0.7), (200, 0.8), (500, 0.9)]):
        write_run(tmp_path / str(i), "er", "split_mnist", acc, i, memory=memory)
    rows = report_module.report([tmp_path], plots=False)
    assert [(r["memory"], r["seeds"], round(r["avg_acc"], 6)) for r in rows] == [(200, 2, 0.75), (500, 1, 0.9)]
    table = (tmp_path / "report.md").read_text()
    assert "| er | split_mnist | 1 | class | mlp | 500 | honest | unrecorded | 1 |" in table


def test_runs_of_different_task_counts_are_reported_apart(tmp_path):
    """20 permutations and La-MAML's 100 are different benchmarks over one dataset name."""
    from cl_bench import report as report_module
    for i, (tasks, acc) in enumerate([(2, 0.7), (3, 0.8), (3, 0.6)]):
        write_run(tmp_path / str(i), "nccl", "permuted_mnist", acc, i, tasks=tasks)
    rows = report_module.report([tmp_path], plots=True)  # the curves too: one plot per task count
    assert [(r["tasks"], r["seeds"], round(r["avg_acc"], 6)) for r in rows] == [(2, 1, 0.7), (3, 2, 0.7)]
    assert {p.name for p in (tmp_path / "plots").glob("avg_acc_*")} == {
        "avg_acc_permuted_mnist_2tasks_class_mlp.png", "avg_acc_permuted_mnist_3tasks_class_mlp.png"}


def test_rank_orders_each_settings_methods_by_ra_with_paired_verdicts(tmp_path):
    # Seeds 0-2 (t(0.975, 2) = 4.3027, se = sd / sqrt 3). gated - icarl = [10, 1, -8]: mean 1, sd 9, 95% CI
    # 1 ± 22.36: undetermined. icarl - er = [20, 28, 36]: mean 28, sd 8, 28 ± 19.87 = [8.13, 47.87]: different.
    # gated - er = [30, 29, 28]: mean 29, sd 1, 29 ± 2.484 = [26.52, 31.48]: different. (tests/test_report_rank.py
    # has the equivalent and margin cases.)
    values = {"gated": (0.90, 0.91, 0.92), "er": (0.60, 0.62, 0.64), "icarl": (0.80, 0.90, 1.00)}
    for method, accs in values.items():
        for seed, acc in enumerate(accs):
            write_run(tmp_path / f"{method}{seed}", method, "split_mnist", acc, seed, memory=500)
    write_run(tmp_path / "other", "er", "permuted_mnist", 0.5, 0)
    proc = cl_bench("report", str(tmp_path), "--no-plots", "--rank")
    assert proc.returncode == 0, proc.stderr
    ranking = (tmp_path / "ranking.md").read_text()
    assert ("split_mnist · 1 · class · honest, n=3/3/3: gated (memory 500) 91.00 ± 1.00 [88.52, 93.48] ? icarl "
            in ranking)
    assert " > er (memory 500) 62.00 ± 2.00" in ranking
    assert "  - gated (memory 500) ? icarl (memory 500) undetermined (3 seeds; +1.00 [-21.36, +23.36])" in ranking
    assert "  - icarl (memory 500) > er (memory 500) (+28.00 [+8.13, +47.87], 3 seeds)" in ranking
    assert "  - gated (memory 500) > er (memory 500) (+29.00 [+26.52, +31.48], 3 seeds)" in ranking
    assert "permuted_mnist · 1 · class · honest, n=1: er (memory 200) 50.00 ± 0.00" in ranking
    assert ranking.splitlines()[2] in proc.stdout and "every pair: " in proc.stdout


def test_the_report_plots_a_task_prediction_matrix_where_a_run_has_one(tmp_path):
    from cl_bench import report as report_module
    write_run(tmp_path / "er", "er", "split_mnist", 0.8, 0, tasks=2)
    write_run(tmp_path / "gated", "gated", "split_mnist", 0.7, 0, tasks=2)
    metrics_path = tmp_path / "gated" / "metrics.json"
    m = json.loads(metrics_path.read_text())
    m["task_prediction_acc"] = [[1.0, 0.0], [0.9, 0.8]]
    metrics_path.write_text(json.dumps(m))
    report_module.report([tmp_path], plots=True)
    assert {p.name for p in (tmp_path / "plots").glob("task_prediction_*")} == {"task_prediction_gated_seed0.png"}
    assert {p.name for p in (tmp_path / "plots").glob("acc_*")} == {"acc_er_seed0.png", "acc_gated_seed0.png"}


def test_runs_on_other_hardware_are_reported_apart(tmp_path):
    """metrics.json's ran_on: one process's runs are never averaged with two nodes' (nor with runs that predate it)."""
    from cl_bench import report as report_module
    one = {"launcher": "cl-bench", "world_size": 1, "hosts": ["a"], "nodes": 1, "device": "cuda", "threads": 8}
    two = {"launcher": "torchrun", "world_size": 4, "hosts": ["a", "a", "b", "b"], "nodes": 2, "device": "cuda",
           "threads": 8}
    for i, (where, acc) in enumerate([(one, 0.7), (one, 0.8), (two, 0.9), (None, 0.5)]):
        write_run(tmp_path / str(i), "er", "split_mnist", acc, i, **({"ran_on": where} if where else {}))
    rows = report_module.report([tmp_path], plots=False)
    assert sorted((r["ran_on"], r["seeds"], round(r["avg_acc"], 6)) for r in rows) == [
        ("1 x cuda", 2, 0.75), ("4 x cuda on 2 nodes", 1, 0.9), ("unrecorded", 1, 0.5)]
    assert "| er | split_mnist | 1 | class | mlp | 200 | honest | 4 x cuda on 2 nodes | 1 |" in (
        tmp_path / "report.md").read_text()


def test_the_printed_table_keeps_to_the_columns_that_differ_and_wide_shows_all(tmp_path):
    for i, (method, memory) in enumerate([("er", 200), ("der", 200), ("er", 500)]):
        write_run(tmp_path / str(i), method, "split_mnist", 0.5 + i / 10, i, memory=memory)
    narrow = cl_bench("report", str(tmp_path), "--no-plots")
    assert narrow.returncode == 0, narrow.stderr
    header = next(line for line in narrow.stdout.splitlines() if "RA %" in line)
    assert "memory" in header and "method" in header and "dataset" not in header and "backbone" not in header
    assert "dataset split_mnist" in narrow.stdout and "backbone mlp" in narrow.stdout  # said once, in the title
    assert max(len(line) for line in narrow.stdout.splitlines() if "┃" in line or "│" in line) <= 100
    wide = cl_bench("report", str(tmp_path), "--no-plots", "--wide")
    header = next(line for line in wide.stdout.splitlines() if "RA %" in line)
    assert all(column in header for column in ("dataset", "backbone", "forgetting", "params", "time_s"))


def test_capacity_and_gate_plots_follow_what_a_run_reports_not_its_method_name(tmp_path):
    """A run whose capacity reports growth or free fraction over tasks gets a capacity plot, one that reports the
    kernels each layer froze gets a gate plot, whatever the method is called; a run reporting neither gets none."""
    from cl_bench import report as report_module
    write_run(tmp_path / "grows", "my_masks", "split_mnist", 0.8, 0, tasks=2)
    write_run(tmp_path / "gates", "my_gates", "split_mnist", 0.7, 0, tasks=2)
    write_run(tmp_path / "plain", "cpg", "split_mnist", 0.6, 0, tasks=2)  # a mask method's name, no such capacity
    grows = tmp_path / "grows"
    m = json.loads((grows / "metrics.json").read_text())
    m["capacity"]["growth"] = 1.5
    (grows / "metrics.json").write_text(json.dumps(m))
    (grows / "events.jsonl").write_text("".join(json.dumps({"event": "task_end", "capacity": {"growth": g}}) + "\n"
                                                for g in (1.0, 1.5)))
    gates = tmp_path / "gates" / "metrics.json"
    m = json.loads(gates.read_text())
    m["capacity"]["frozen_fraction"] = {"conv1": 0.5, "conv2": 0.25}
    gates.write_text(json.dumps(m))
    report_module.report([tmp_path], plots=True)
    made = {p.name for p in (tmp_path / "plots").glob("*.png")}
    assert {"capacity_my_masks_seed0.png", "gates_my_gates_seed0.png"} <= made
    assert not {name for name in made if name.startswith(("capacity_", "gates_")) and "cpg" in name}
