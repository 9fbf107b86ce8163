"""`cl-bench report --rank`: methods paired seed by seed (cl_bench/stats.py) and given a verdict at --margin.

Run directories are written by hand (test_sweep_report's write_run) with RA values chosen so the verdicts can be
worked out on paper; the arithmetic is in the comments. Student's t quantiles: t(0.975, 4) = 2.7764,
t(0.95, 4) = 2.1318, t(0.975, 1) = 12.706."""
import pytest
from conftest import cl_bench
from test_sweep_report import write_run

from cl_bench.report import find_runs, ranking_lines, report, summarise

# RA points on seeds 0-4, memory 500 each.
RA = {
    "der": [90.0, 91.0, 92.0, 93.0, 94.0],  # mean 92
    # der - er = [4, 5, 6, 5, 5]: mean 5, sd sqrt(2/4) = 0.7071, se 0.3162; 95% half 2.7764 * 0.3162 = 0.8780,
    # so [4.12, 5.88], wholly above 1: different. At margin 5 the 95% interval reaches below 5 and the 90% one
    # (5 ± 2.1318 * 0.3162 = [4.33, 5.67]) is not inside ±5: undetermined.
    "er": [86.0, 86.0, 86.0, 88.0, 89.0],  # mean 87
    # er - icarl = [0.2, 0.0, 0.3, -0.1, 0.1]: mean 0.1, sd sqrt(0.1/4) = 0.1581, se 0.07071; 90% half
    # 2.1318 * 0.07071 = 0.1507, so [-0.05, 0.25], inside ±1: equivalent. At margin 0.2 it reaches past 0.2, and
    # the 95% interval 0.1 ± 0.1963 = [-0.10, 0.30] is not outside ±0.2: undetermined.
    "icarl": [85.8, 86.0, 85.7, 88.1, 88.9],  # mean 86.9, sd sqrt(8.9/4) = 1.4916
    # icarl - agem = [3, -1, 4, -2, 1]: mean 1, sd sqrt(26/4) = 2.5495, se 1.1402; 95% half 2.7764 * 1.1402 =
    # 3.1656, so [-2.17, 4.17]: neither outside nor (90%: 1 ± 2.4307) inside ±1: undetermined.
    "agem": [82.8, 87.0, 81.7, 90.1, 87.9],  # mean 85.9
}


def write_setting(root, dataset="split_mnist"):
    for method, values in RA.items():
        for seed, ra in enumerate(values):
            write_run(root / f"{method}{seed}", method, dataset, ra / 100, seed, memory=500)


def lines_of(root, margin=1.0, every_pair=True):
    return ranking_lines(summarise(find_runs([root])), margin, every_pair)


def test_neighbours_are_called_different_equivalent_or_undetermined_by_their_paired_difference(tmp_path):
    write_setting(tmp_path)
    lines = lines_of(tmp_path, every_pair=False)
    assert lines[0] == ("split_mnist · 1 · class · honest, n=5/5/5/5: der (memory 500) 92.00 ± 1.58 [90.04, 93.96] "
                        "> er (memory 500) 87.00 ± 1.41 [85.24, 88.76] ≈ icarl (memory 500) 86.90 ± 1.49 "
                        "[85.05, 88.75] ? agem (memory 500) 85.90 ± 3.54 [81.51, 90.29]")
    assert lines[1:] == [
        "  - der (memory 500) > er (memory 500) (+5.00 [+4.12, +5.88], 5 seeds)",
        "  - er (memory 500) ≈ icarl (memory 500) within 1 point (+0.10, 90% CI [-0.05, +0.25], 5 seeds)",
        "  - icarl (memory 500) ? agem (memory 500) undetermined (5 seeds; +1.00 [-2.17, +4.17])"]


def test_every_pair_is_listed_below_the_neighbours(tmp_path):
    write_setting(tmp_path)
    lines = lines_of(tmp_path)
    # der - icarl = [4.2, 5, 6.3, 4.9, 5.1]: mean 5.1, its 95% interval wholly above 1.
    assert lines[4].startswith("  - der (memory 500) > icarl (memory 500) (+5.10 [")
    assert lines[5].startswith("  - der (memory 500) > agem (memory 500) (+6.10 [")
    assert lines[6].startswith("  - er (memory 500) ? agem (memory 500) undetermined (5 seeds; +1.10 [")
    assert len(lines) == 7


@pytest.mark.parametrize(("margin", "expected"), [
    (5.0, "  - der (memory 500) ? er (memory 500) undetermined (5 seeds; +5.00 [+4.12, +5.88])"),
    (0.2, "  - er (memory 500) ? icarl (memory 500) undetermined (5 seeds; +0.10 [-0.10, +0.30])"),
    (4.0, "  - icarl (memory 500) ≈ agem (memory 500) within 4 points (+1.00, 90% CI [-1.43, +3.43], 5 seeds)")])
def test_the_margin_changes_the_verdict(tmp_path, margin, expected):
    write_setting(tmp_path)
    assert expected in lines_of(tmp_path, margin, every_pair=False)


def test_pairs_without_two_shared_seeds_say_so(tmp_path):
    for method, runs in {"x": {0: 0.70, 1: 0.72}, "y": {2: 0.60, 3: 0.62}, "z": {1: 0.50, 2: 0.52}}.items():
        for seed, acc in runs.items():
            write_run(tmp_path / f"{method}{seed}", method, "permuted_mnist", acc, seed, memory=0)
    lines = lines_of(tmp_path)
    # two seeds each: no interval (t(0.975, 1) = 12.706 would span most of the scale)
    assert lines[0] == "permuted_mnist · 1 · class · honest, n=2/2/2: x 71.00 ± 1.41 ? y 61.00 ± 1.41 ? z 51.00 ± 1.41"
    assert lines[1:] == ["  - x ? y: no shared seeds, no paired comparison (it needs 2)",
                         "  - y ? z: 1 shared seed, no paired comparison (it needs 2)",
                         "  - x ? z: 1 shared seed, no paired comparison (it needs 2)"]


def test_the_paired_difference_can_reverse_the_order_of_the_means(tmp_path):
    # p's third seed lifts its mean (66.67) over q's (61), but on the seeds both ran q is ahead: q - p = [10, 11],
    # mean 10.5, sd 0.7071, se 0.5; 95% half 12.706 * 0.5 = 6.353, so [4.15, 16.85], wholly above 1.
    for method, values in {"p": [0.50, 0.51, 0.99], "q": [0.60, 0.62]}.items():
        for seed, acc in enumerate(values):
            write_run(tmp_path / f"{method}{seed}", method, "split_mnist", acc, seed, memory=0)
    lines = lines_of(tmp_path)
    assert " < q 61.00" in lines[0] and lines[0].split(": ", 1)[1].startswith("p 66.67")
    assert lines[1:] == ["  - q > p (+10.50 [+4.15, +16.85], 2 seeds)"]


def test_runs_on_other_backbones_are_ranked_apart_and_their_groups_say_which(tmp_path):
    """A method is compared only at otherwise equal settings: two backbones are two groups, never a pair."""
    for seed in (0, 1):
        write_run(tmp_path / f"mlp{seed}", "er", "split_mnist", 0.8 + seed / 100, seed, memory=0)
        write_run(tmp_path / f"conv{seed}", "er", "split_mnist", 0.7 + seed / 100, seed, memory=0)
        metrics = tmp_path / f"conv{seed}" / "metrics.json"
        metrics.write_text(metrics.read_text().replace('"backbone": "mlp"', '"backbone": "conv"'))
    assert lines_of(tmp_path) == ["split_mnist · 1 · class · honest · backbone conv, n=2: er 70.50 ± 0.71",
                                  "split_mnist · 1 · class · honest · backbone mlp, n=2: er 80.50 ± 0.71"]


def test_rank_writes_ranking_md_and_prints_the_neighbours(tmp_path, capsys):
    write_setting(tmp_path)
    report([tmp_path], plots=False, rank=True, margin=0.2)
    ranking = (tmp_path / "ranking.md").read_text()
    assert "Margin M: 0.2 points of RA (--margin)." in ranking
    assert "\n\nsplit_mnist · 1 · class · honest, n=5/5/5/5: der" in ranking
    assert "\n  - er (memory 500) ? icarl (memory 500) undetermined (5 seeds; +0.10 [-0.10, +0.30])\n" in ranking
    printed = capsys.readouterr().out
    assert "  - icarl (memory 500) ? agem (memory 500) undetermined" in printed
    assert "der (memory 500) > agem" not in printed and f"every pair: {tmp_path}/ranking.md" in printed


def test_the_cli_takes_a_margin_and_refuses_one_that_is_not_positive(tmp_path):
    write_setting(tmp_path)
    proc = cl_bench("report", str(tmp_path), "--no-plots", "--rank", "--margin", "5")
    assert proc.returncode == 0, proc.stderr
    assert "  - der (memory 500) ? er (memory 500) undetermined (5 seeds; +5.00 [+4.12, +5.88])" in proc.stdout
    for margin in ("0", "-1"):
        proc = cl_bench("report", str(tmp_path), "--no-plots", "--rank", "--margin", margin)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.strip() == f"cl-bench: error: --margin must be a positive number of RA points, not {margin}"
