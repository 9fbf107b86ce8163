"""`cl-bench report` groups runs by their learning settings: every key that differs between runs becomes a column,
a seed counts once, --rank pairs only equal settings, --by and --ignore choose the columns.

Run directories are written by hand in the format real runs have: metrics.json (test_sweep_report's write_run),
.hydra/config.yaml (the composed config, nested, non-learning keys included) and, for newer runs, run.json with
the settings identity.settings gives."""
import csv
import json
import subprocess
import sys

import yaml
from conftest import ROOT, cl_bench
from test_sweep_report import write_run

from cl_bench import identity
from cl_bench.report import NO_INTERVAL, find_runs, report


def config(method="finetune", seed=0, **changes) -> dict:
    """A composed config as .hydra/config.yaml holds it, a dotted key=value per change."""
    cfg = {"method": {"name": method, "epochs": 1, "batch_size": 64, "lr": 0.01, "protocol": "honest"},
           "dataset": {"name": "split_mnist", "num_tasks": 1, "samples_per_task": "${method.batch_size}"},
           "backbone": {"name": "mlp"}, "hardware": {"device": "auto", "precision": "auto", "threads": None},
           "logger": {"console": False}, "data": {"root": "data", "val_fraction": 0.1},
           "checkpoint": {"enabled": False}, "seed": seed, "scenario": "class", "setting": None}
    for dotted, value in changes.items():
        node, *path, last = [cfg, *dotted.split("__")]
        for part in path:
            node = node[part]
        node[last] = value
    return cfg


def run(root, name, acc, method="finetune", seed=0, record=False, memory=0, **changes):
    """A finished run; record: its settings in run.json too, as runs from now on keep them."""
    folder = root / name
    root.mkdir(parents=True, exist_ok=True)
    write_run(folder, method, "split_mnist", acc, seed, memory=memory)
    (folder / ".hydra").mkdir()
    cfg = config(method, seed, **changes)
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (folder / "run.json").write_text(json.dumps({"overrides": [], **({"settings": identity.settings(
        {**cfg, "dataset": {**cfg["dataset"], "samples_per_task": 64}})} if record else {})}))
    return folder


def rows_of(root) -> list[dict]:
    return list(csv.DictReader(open(root / "report.csv")))


def test_an_lr_grid_at_one_seed_is_two_rows_with_an_lr_column(tmp_path, capsys):
    run(tmp_path, "0", 0.6, method__lr=0.01)
    run(tmp_path, "1", 0.7, method__lr=0.05, record=True)  # one from run.json, one from its config: one format
    rows = report([tmp_path], plots=False)
    assert [(r["settings"], r["seeds"]) for r in rows] == [({"method.lr": "0.01"}, 1), ({"method.lr": "0.05"}, 1)]
    assert [(r["method"], r["method.lr"], r["seeds"]) for r in rows_of(tmp_path)] == [
        ("finetune", "0.01", "1"), ("finetune", "0.05", "1")]
    assert "| finetune | split_mnist | 1 | class | mlp | – | honest | 0.01 | unrecorded | 1 |" in (
        tmp_path / "report.md").read_text()
    header = next(line for line in capsys.readouterr().out.splitlines() if "RA %" in line)
    assert "method.lr" in header


def test_seeds_at_one_setting_are_one_row_without_an_interval_below_three(tmp_path):
    run(tmp_path, "0", 0.6, seed=0, hardware__device="cuda", data__root="/elsewhere")  # no learning setting
    run(tmp_path, "1", 0.7, seed=1)
    [row] = report([tmp_path], plots=False)
    assert row["seeds"] == 2 and row["settings"] == {}
    table = (tmp_path / "report.md").read_text()
    assert "| 65.00 ± 7.07 |" in table and "[" not in table.split("\n| finetune")[1]  # no interval in any cell
    assert NO_INTERVAL in table and "12.7" in NO_INTERVAL


def test_a_seed_run_twice_at_one_setting_is_named_and_counted_once(tmp_path):
    run(tmp_path / "a", "0", 0.6, seed=0)
    run(tmp_path / "a", "1", 0.8, seed=1)
    run(tmp_path / "b", "0", 0.1, seed=0)  # the same sweep run again elsewhere: seed 0 twice
    proc = cl_bench("report", str(tmp_path), "--no-plots")
    assert proc.returncode == 0, proc.stderr
    [row] = rows_of(tmp_path)
    assert row["seeds"] == "2" and round(float(row["avg_acc"]), 6) == 0.7  # 0.6 and 0.8: b/0's 0.1 left out
    said = (f"- finetune, seed 0 ran twice: kept {tmp_path}/a/0 (the first by run directory), left {tmp_path}/b/0 "
            "out of the means")
    assert said in (tmp_path / "report.md").read_text() and said in proc.stdout


def test_rank_pairs_methods_only_at_otherwise_equal_settings(tmp_path):
    """A method's own keys (er's lr beside finetune's, the paper setting it picks) are the method's;
    data.val_fraction is not: finetune at 0.2 is ranked alone."""
    for seed in (0, 1):
        run(tmp_path, f"er{seed}", 0.8 + seed / 100, "er", seed, method__lr=0.1, setting="er_split_mnist")
        run(tmp_path, f"ft{seed}", 0.6 + seed / 100, "finetune", seed)
        run(tmp_path, f"ft_val{seed}", 0.5 + seed / 100, "finetune", seed, data__val_fraction=0.2)
    proc = cl_bench("report", str(tmp_path), "--no-plots", "--rank")
    assert proc.returncode == 0, proc.stderr
    ranking = (tmp_path / "ranking.md").read_text()
    # er - finetune = [20, 20]: sd 0, the interval is the point +20
    assert ("split_mnist · 1 · class · honest · data.val_fraction 0.1, n=2/2: er 80.50 ± 0.71 > finetune 60.50 ± "
            "0.71" in ranking)
    assert "  - er > finetune (+20.00 [+20.00, +20.00], 2 seeds)" in ranking
    assert "split_mnist · 1 · class · honest · data.val_fraction 0.2, n=2: finetune 50.50 ± 0.71" in ranking
    assert NO_INTERVAL in ranking and "method.lr" not in proc.stdout and "er_split_mnist" not in proc.stdout


def test_by_forces_a_column_and_ignore_pools_one(tmp_path, capsys):
    run(tmp_path, "0", 0.6, seed=0, method__lr=0.01)
    run(tmp_path, "1", 0.8, seed=1, method__lr=0.05)
    rows = report([tmp_path], plots=False, by=["method.epochs", "backbone.name"])  # backbone.name: the backbone
    assert [(r["settings"], r["seeds"]) for r in rows] == [({"method.epochs": "1", "method.lr": "0.01"}, 1),
                                                           ({"method.epochs": "1", "method.lr": "0.05"}, 1)]
    header = next(line for line in capsys.readouterr().out.splitlines() if "RA %" in line)
    assert "method.epochs" in header and "backbone" in header and "dataset" not in header
    [row] = report([tmp_path], plots=False, ignore=["method.lr"])
    assert row["seeds"] == 2 and round(row["avg_acc"], 6) == 0.7
    said = "- method.lr pooled (--ignore): runs of 0.01, 0.05 averaged as one setting"
    assert said in capsys.readouterr().out and said in (tmp_path / "report.md").read_text()


def test_an_unknown_key_is_one_line_naming_the_near_ones(tmp_path):
    run(tmp_path, "0", 0.6)
    for flag in ("--by", "--ignore"):
        proc = cl_bench("report", str(tmp_path), "--no-plots", flag, "method.lrr")
        assert proc.returncode == 2 and proc.stderr.strip() == (
            f"cl-bench: error: {flag} method.lrr: no run reported has this setting; did you mean method.lr?")
    proc = cl_bench("report", str(tmp_path), "--no-plots", "--ignore", "method")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def test_runs_without_settings_are_kept_apart_and_said(tmp_path):
    run(tmp_path, "0", 0.6, method__lr=0.01)
    run(tmp_path, "1", 0.7, method__lr=0.05)
    write_run(tmp_path / "old", "finetune", "split_mnist", 0.5, 0, memory=0)  # metrics.json alone
    rows = report([tmp_path], plots=False)
    assert sorted(r["settings"]["method.lr"] for r in rows) == ["0.01", "0.05", "?"]
    assert "- ?: 1 runs record no settings" in (tmp_path / "report.md").read_text()


def test_the_report_writes_its_tables_without_matplotlib(tmp_path):
    run(tmp_path, "0", 0.6)
    script = ("import sys; sys.modules['matplotlib'] = None; from cl_bench import cli; "
              f"sys.exit(cli.main(['report', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, text=True, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report.md").is_file() and (tmp_path / "report.csv").is_file()
    assert not (tmp_path / "plots").exists()
    [said] = [line for line in proc.stdout.splitlines() if "plots skipped" in line]
    assert "pip install 'cl-bench[plots]'" in said and "--no-plots" in said


def test_plots_are_named_by_method_settings_and_seed_and_never_collide(tmp_path):
    for seed in (0, 1):
        run(tmp_path / "grid", f"lo{seed}", 0.6, "er", seed, method__lr=0.01)
        run(tmp_path / "grid", f"hi{seed}", 0.7, "er", seed, method__lr=0.05)
    run(tmp_path / "again", "0", 0.6, "er", 0, method__lr=0.01)  # a repeat of grid/lo0: the same name but for it
    report([tmp_path], plots=True)
    made = {p.name for p in (tmp_path / "plots").glob("acc_*")}
    assert made == {"acc_er_lr0.01_seed0_lo0.png", "acc_er_lr0.01_seed0_again_0.png", "acc_er_lr0.01_seed1.png",
                    "acc_er_lr0.05_seed0.png", "acc_er_lr0.05_seed1.png"}


def test_a_paper_settings_interpolation_resolves_from_the_saved_config(tmp_path):
    """Hydra saves a setting's `${by_memory_size:...}` unresolved; the report resolves it as the run did."""
    for name, memory in (("small", 200), ("large", 500)):
        folder = run(tmp_path, name, 0.6, "er", memory=memory)
        cfg = yaml.safe_load((folder / ".hydra" / "config.yaml").read_text())
        cfg["method"].update(memory_size=memory, lr="${by_memory_size:{200: 0.01, 500: 0.1}}")
        (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert sorted((r["memory"], r["settings"]["method.lr"]) for r in find_runs([tmp_path])) == [(200, 0.01), (500, 0.1)]
    # memory tells the two apart already: method.lr, which follows it, is no column of its own
    assert [(r["memory"], r["settings"]) for r in report([tmp_path], plots=False)] == [(200, {}), (500, {})]
