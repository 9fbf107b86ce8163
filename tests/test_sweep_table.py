"""scripts/sweep_table.py: a sweep's runs grouped by the config values that tell them apart, paired against a
baseline group by seed (hand values)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_run(run: Path, epochs: int, seed: int, ra: float) -> None:
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(f"method:\n  name: er\n  epochs: {epochs}\n")
    (run / "metrics.json").write_text(json.dumps({
        "dataset": "split_mnist", "seed": seed, "avg_acc": ra, "bti": -0.1, "la": 0.9, "complete": True,
        "capacity": {"moved": [0.0, 1e-3 * epochs]}}))


def test_groups_are_paired_against_the_baseline_by_seed(tmp_path):
    # epochs 10 - epochs 2 per seed: +2, +3, +4 points: mean 3, sd 1, t(0.975, 2) = 4.3027: 3 +- 2.48, so the 95%
    # interval [+0.52, +5.48] is not wholly outside +-1, nor is the 90% one [+1.31, +4.69] inside: undetermined
    for seed, (low, high) in enumerate([(0.70, 0.72), (0.71, 0.74), (0.70, 0.74)]):
        write_run(tmp_path / f"a{seed}", 2, seed, low)
        write_run(tmp_path / f"b{seed}", 10, seed, high)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_table.py"), str(tmp_path), "--by",
                          "method.epochs", "--versus", "2", "--capacity", "moved"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[2] == "| split_mnist | 2 | 3 | 70.33 ± 0.58 | -10.00 ± 0.00 | 90.00 ± 0.00 | 2.00e-03 | – |"
    assert out[3] == ("| split_mnist | 10 | 3 | 73.33 ± 1.15 | -10.00 ± 0.00 | 90.00 ± 0.00 | 1.00e-02 "
                      "| +3.00 [+0.52, +5.48], undetermined |")


def test_also_reports_values_by_their_state_after_the_last_task(tmp_path):
    """--also: a number as it is, a per-task list by its mean, a matrix by its last row's mean; :% in percent; a
    group whose runs lack the key shows –."""
    for seed, frozen in enumerate([100, 120]):
        write_run(tmp_path / f"a{seed}", 2, seed, 0.7)
        metrics = json.loads((tmp_path / f"a{seed}" / "metrics.json").read_text())
        metrics["capacity"].update(kernels_frozen=frozen, offline=[[1.0], [0.5, 0.7 + 0.1 * seed]])
        metrics["task_aware_avg_acc"] = 0.9
        (tmp_path / f"a{seed}" / "metrics.json").write_text(json.dumps(metrics))
        write_run(tmp_path / f"b{seed}", 10, seed, 0.7)
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_table.py"), str(tmp_path), "--by",
                          "method.epochs", "--also", "task_aware_avg_acc:%", "capacity.kernels_frozen",
                          "capacity.offline:%"], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].endswith("| task_aware_avg_acc % | capacity.kernels_frozen | capacity.offline % | RA − baseline, "
                           "paired [95% CI], verdict at ±1 |")
    # the offline rows' last: (0.5 + 0.7) / 2 = 0.60 and (0.5 + 0.8) / 2 = 0.65: 62.50 ± 3.54
    assert "| 90.00 ± 0.00 | 110.00 ± 14.14 | 62.50 ± 3.54 |" in out[2]
    assert "| – | – | – |" in out[3]


def test_versus_takes_values_in_the_by_order_and_refuses_an_override_look(tmp_path):
    for seed in range(2):
        write_run(tmp_path / f"a{seed}", 2, seed, 0.70)
        write_run(tmp_path / f"b{seed}", 10, seed, 0.72)

    def table(*versus):
        return subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_table.py"), str(tmp_path), "--by",
                               "method.epochs", "--versus", *versus], capture_output=True, text=True)
    assert all(line.endswith("| – |") for line in table("-").stdout.splitlines()[2:])  # -: each its own baseline
    assert table("2").stdout.splitlines()[3].endswith("| +2.00 [+2.00, +2.00], different |")
    for wrong, said in [(["method.epochs=2"], "not KEY=VALUE"), (["2", "3"], "2 values for 1 --by keys")]:
        out = table(*wrong)
        assert out.returncode == 2 and said in out.stderr


def test_help_states_also_in_words():
    """argparse formats help with %: an unescaped one printed the action's dict in place of --also's text."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep_table.py"), "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert ":% reports fractions in percent" in " ".join(out.split()) and "option_strings" not in out
