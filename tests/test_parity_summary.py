"""The parity summary's arithmetic and its table, on records written here (no reference checkout needed)."""
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from parity import summary  # noqa: E402
from parity.common import Patch, Record, Row, hold, save  # noqa: E402

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out


def test_difference_ci_is_welchs_interval():
    # equal sizes and variances: Welch's df is 2(n - 1) = 4, t(0.975, 4) = 2.7764 from the tables
    ours, theirs = [0.80, 0.82, 0.84], [0.78, 0.80, 0.82]
    diff, lo, hi = summary.difference_ci(ours, theirs)
    half = 2.7764 * math.sqrt(2 * 0.02 ** 2 / 3)
    assert diff == pytest.approx(0.02)
    assert (lo, hi) == pytest.approx((0.02 - half, 0.02 + half), abs=1e-4)


def test_difference_ci_unequal_variances():
    # s1 = 1 (n=3), s2 = 3 (n=5): v1 = 1/3, v2 = 9/5; df = (v1+v2)^2 / (v1^2/2 + v2^2/4) = 5.2580;
    # t(0.975, 5.2580) = 2.5331 (scipy.stats.t.ppf, checked against the tables' 2.571 at 5 and 2.447 at 6)
    ours, theirs = [1.0, 2.0, 3.0], [0.0, -3.0, 3.0, 3.0, -3.0]
    diff, lo, hi = summary.difference_ci(ours, theirs)
    se = math.sqrt(1 / 3 + 9 / 5)
    assert diff == pytest.approx(2.0)
    assert hi - diff == pytest.approx(2.5331 * se, abs=1e-3)
    assert diff - lo == pytest.approx(hi - diff)


def test_one_seed_has_no_interval_and_equal_runs_a_point():
    assert math.isnan(summary.difference_ci([0.5], [0.4, 0.6])[1])
    assert summary.difference_ci([0.5, 0.5], [0.4, 0.4]) == pytest.approx((0.1, 0.1, 0.1))


def test_gap_needs_a_cause_beyond_a_point_or_when_the_interval_excludes_zero():
    assert not summary.needs_cause((0.5, -1.0, 2.0))
    assert summary.needs_cause((1.5, -1.0, 4.0))
    assert summary.needs_cause((0.4, 0.1, 0.7))


def reference():
    return SimpleNamespace(NAME="toy", REPO="someone/toy", PINNED="0123456789abcdef", PATCHES=[
        Patch("main.py", "a", "b", "runs on the CPU")], ROWS={"m_1": Row("M", "toy setting", ("method=m",), ("--m",))})


def record(side, seed, ra, seconds=10.0):
    return Record("toy", "m_1", side, seed, ra, [[ra]], seconds, "c0ffee" * 4, "cmd")


def test_a_second_runner_in_the_same_work_folder_is_refused(tmp_path):
    first = hold(tmp_path / "cpg", "cpg")
    with pytest.raises(SystemExit, match="another parity run of cpg is using .*--work DIR"):
        hold(tmp_path / "cpg", "cpg")
    hold(tmp_path / "hat", "hat").close()  # another reference's folder is free
    first.close()
    hold(tmp_path / "cpg", "cpg").close()  # free again once the first has ended


def test_records_accumulate_newer_runs_replace_older(tmp_path):
    committed = tmp_path / "parity.json"
    committed.write_text(json.dumps([vars(record("reference", 0, 0.5)), vars(record("reference", 1, 0.6))]))
    save(record("reference", 0, 0.7), tmp_path / "records")
    rows = summary.merged(tmp_path / "records", committed)
    assert [(r["seed"], r["ra"]) for r in rows] == [(0, 0.7), (1, 0.6)]


def test_document_shows_both_sides_and_the_difference():
    records = [vars(record("reference", s, ra, 20.0)) for s, ra in enumerate((0.80, 0.82, 0.84))]
    records += [vars(record("cl-bench", s, ra)) for s, ra in enumerate((0.70, 0.72, 0.74))]
    text = summary.document([reference()], records)
    line = next(line for line in text.splitlines() if line.startswith("| M |"))
    half = 2.7764 * math.sqrt(2 * 2.0 ** 2 / 3)
    assert "82.00 ± 2.00 (n=3)" in line and "72.00 ± 2.00 (n=3)" in line
    assert f"-10.00 [{-10 - half:+.2f}, {-10 + half:+.2f}] †" in line
    assert "| 20 / 10 |" in line
    assert "`main.py`: runs on the CPU" in text and "make parity-toy REF=DIR" in text


def test_a_row_not_run_says_so():
    text = summary.document([reference()], [])
    assert "| not run | not run | – |" in text


@pytest.mark.parametrize("name", summary.REFERENCES)
def test_every_rows_overrides_compose_and_validate(name):
    """A misspelt override in a row fails here, in seconds, not after the reference's hour."""
    import importlib

    from cl_bench import config
    config.register()
    module = importlib.import_module(f"parity.{name}")
    assert module.ROWS and len(module.PINNED) == 40
    for row in module.ROWS.values():
        config.validate(config.compose([*row.clbench, "seed=0"]))


def test_make_parity_target_runs_the_runner_with_the_users_arguments():
    import subprocess
    out = subprocess.run(["make", "-n", "parity-cpg", "REF=/src/CPG", "DATA=/data", "SEEDS=0,1", "ROWS=cpg pae"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.replace("\\\n", " ")
    line = next(line for line in out.splitlines() if line.startswith(".venv/bin/python scripts/parity/cpg.py"))
    assert "--ref /src/CPG" in line and "--seeds 0 1" in line and "--data-root /data" in line
    assert "--rows cpg pae" in line
    missing = subprocess.run(["make", "parity-hat"], cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode != 0 and "pass REF=DIR" in missing.stdout + missing.stderr
