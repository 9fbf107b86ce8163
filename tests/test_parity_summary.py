"""The parity instrument: the paired arithmetic and the equivalence verdict against hand values, the seed plans
against their pilots, provenance flags, diagnostics, and docs/parity.md against the document its records make."""
import io
import itertools
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from parity import plans, summary  # noqa: E402
from parity.common import ENVIRONMENT, LEARNING, PROVENANCE_KEYS, Diagnostic, Patch, Record, Row, hold, save  # noqa: E402

from cl_bench import stats  # noqa: E402

DOC, RECORDS = ROOT / "docs" / "parity.md", ROOT / "docs" / "parity.json"


# --- the arithmetic, against hand values ---------------------------------------------------------------------------
def test_paired_difference_and_its_intervals_by_hand():
    # differences 1, 2, 3: mean 2, sd 1, n 3; t(0.975, 2) = 4.3027 and t(0.95, 2) = 2.9200 from the tables, so the
    # 95% interval is 2 +- 4.3027 / sqrt(3) = 2 +- 2.4842 and the 90% one 2 +- 1.6859
    p = stats.paired({0: 11.0, 1: 12.0, 2: 13.0, 7: 50.0}, {0: 10.0, 1: 10.0, 2: 10.0, 8: 0.0})
    assert (p.mean, p.sd, p.n) == pytest.approx((2.0, 1.0, 3))
    assert p.ci95 == pytest.approx((2 - 2.4842, 2 + 2.4842), abs=1e-3)
    assert p.ci90 == pytest.approx((2 - 1.6859, 2 + 1.6859), abs=1e-3)
    assert p.verdict(1.0) == stats.UNDETERMINED  # 90% not inside +-1, 95% not wholly outside


def test_verdicts_equivalent_different_and_the_margin():
    # differences 0.1, -0.1, 0.2, 0, -0.2: mean 0, sd 0.1581; t(0.95, 4) = 2.1318: 90% interval +-0.1508, inside +-1
    close = stats.paired(dict(enumerate([0.1, -0.1, 0.2, 0.0, -0.2])), dict.fromkeys(range(5), 0.0))
    assert close.ci90[1] == pytest.approx(0.1508, abs=1e-3)
    assert close.verdict(1.0) == stats.EQUIVALENT
    assert close.verdict(0.1) == stats.UNDETERMINED  # a tighter margin than the interval
    # differences 3, 3.5, 4, 3.2: mean 3.425, sd 0.4349; t(0.975, 3) = 3.1824: 95% interval [2.733, 4.117], above +1
    far = stats.paired(dict(enumerate([3.0, 3.5, 4.0, 3.2])), dict.fromkeys(range(4), 0.0))
    assert far.ci95[0] == pytest.approx(3.425 - 3.1824 * 0.4349 / 2, abs=1e-3)
    assert far.verdict(1.0) == stats.DIFFERENT
    assert far.verdict(3.5) == stats.UNDETERMINED  # 90% [2.913, 3.937] not inside, 95% not wholly outside
    assert far.verdict(4.0) == stats.EQUIVALENT  # a margin wider than the gap: equivalent at that margin
    assert stats.paired({0: 1.0}, {0: 0.0}).verdict(1.0) == stats.UNDETERMINED  # one seed tells nothing


def test_welch_difference_of_unpaired_samples_by_hand():
    # a = 1, 2, 3 (mean 2, sd 1) and b = 2, 4, 6 (mean 4, sd 2): variances of the means 1/3 and 4/3, standard error
    # sqrt(5/3) = 1.2910, Welch-Satterthwaite df (5/3)^2 / ((1/3)^2 / 2 + (4/3)^2 / 2) = 2.9412, t(0.975, 2.9412) =
    # 3.2188: the 95% interval is -2 +- 4.1554, whatever order the seeds came in (nothing is paired)
    w = stats.welch([3.0, 1.0, 2.0], [2.0, 4.0, 6.0])
    assert (w.mean, w.sd, w.n) == pytest.approx((-2.0, 1.2910, 3), abs=1e-4)
    assert w.ci95 == pytest.approx((-2 - 4.1554, -2 + 4.1554), abs=1e-3)
    assert w.verdict(1.0) == stats.UNDETERMINED
    # b's spread 0: the df fall to a's n - 1 = 2 and the interval to the one-sample one, 2 +- 4.3027 / sqrt(3)
    assert stats.welch([1.0, 2.0, 3.0], [0.0, 0.0, 0.0]).ci95 == pytest.approx((2 - 2.4842, 2 + 2.4842), abs=1e-3)
    assert stats.welch([10.0, 10.1, 9.9], [0.0, 0.1, -0.1]).verdict(2.0) == stats.DIFFERENT
    assert stats.welch([1.0], [0.0, 0.5]).verdict(5.0) == stats.UNDETERMINED  # one value a side tells nothing


def test_seeds_for_power_by_hand():
    # the smallest n with t(0.95, n-1) + t(0.90, n-1) <= margin sqrt(n) / sd; at sd 1, margin 1: n = 10 gives
    # 1.8331 + 1.3830 = 3.216 > 3.162, n = 11 gives 1.8125 + 1.3722 = 3.185 <= 3.317
    assert stats.seeds_for_power(1.0, 1.0) == 11
    assert stats.seeds_for_power(2.0, 2.0) == 11  # only sd / margin matters
    assert stats.seeds_for_power(0.0, 1.0) == 2
    assert stats.seeds_for_power(50.0, 1.0, most=100) == 101  # beyond reach


# --- the plans ----------------------------------------------------------------------------------------------------
def committed() -> list[dict]:
    return summary.load(RECORDS)


@pytest.mark.parametrize("name", summary.REFERENCES)
def test_every_row_has_a_plan_recomputed_from_its_pilot_records(name):
    """The plan written in plans.py is the rule applied to the pilot's records: nothing in it was tuned after."""
    import importlib
    module = importlib.import_module(f"parity.{name}")
    records = committed()
    for row in module.ROWS:
        if (module.NAME, row) in plans.PENDING:  # its pilot has not run: no plan yet (the next test)
            continue
        plan = plans.PLANS[(module.NAME, row)]
        pilot = summary.compare(summary.row_records(records, module, row), set(plan.pilot_seeds))
        assert pilot["paired"].n == plan.pilot, row
        assert round(pilot["paired"].sd, 2) == pytest.approx(plan.pilot_sd), row
        seconds = sum(sum(s) / len(s) for s in pilot["seconds"].values())
        assert round(seconds) == plan.pair_seconds, row
        upper_from = plan.pilot if plan.upper_sd else None
        assert plans.planned(plan.pilot_sd, plan.pair_seconds, plan.cpu_hours, upper_from) == (plan.needed, plan.n), row
        assert not set(plan.seeds) & set(plan.pilot_seeds)


def test_the_sd_upper_bound_is_the_chi_square_bound():
    """At 3 pilot seeds and 80%, the bound is sd sqrt(2 / chi2_0.2(2)), chi2_0.2(2) = -2 ln 0.8 (2 degrees of freedom:
    an exponential); a larger pilot tightens it towards the sd; a plan sized from it needs more seeds."""
    import math
    assert plans.sd_upper_bound(1.0, 3) == pytest.approx(math.sqrt(2 / (-2 * math.log(0.8))))
    assert 1.0 < plans.sd_upper_bound(1.0, 30) < plans.sd_upper_bound(1.0, 10) < plans.sd_upper_bound(1.0, 3)
    assert plans.planned(0.5, 60, upper_from=3)[0] > plans.planned(0.5, 60)[0]


def test_a_row_without_a_plan_is_refused_in_one_line():
    with pytest.raises(SystemExit, match="no seed plan: add one to scripts/parity/plans.py"):
        plans.seeds("toy", "m_1")


def test_every_row_has_a_plan_or_waits_on_its_pilot_and_says_so(toy, monkeypatch):
    for module in summary.modules():
        for row in module.ROWS:
            assert ((module.NAME, row) in plans.PLANS) != ((module.NAME, row) in plans.PENDING), row
    monkeypatch.delitem(plans.PLANS, ("toy", "m_1"))
    monkeypatch.setitem(plans.PENDING, ("toy", "m_1"), "a new cut")
    with pytest.raises(SystemExit, match="no seed plan yet .a new cut.: its pilot must run first"):
        plans.seeds("toy", "m_1")
    assert plans.seeds("toy", "m_1", pilot=True) == plans.PILOT_SEEDS
    text = summary.page(toy, "m_1", pilot_records())
    assert "pilot only: different | no plan yet (a new cut); pilot 3 |" in row_line(text)
    assert "No seed plan yet: a new cut. Pilot, seeds 0-2: reference 82.00 ± 2.00 (n=3)" in text


def test_seeds_resume_a_plan_but_never_leave_it():
    from parity import common
    assert common.only((0, 1, 2), None, "m_1") == (0, 1, 2)
    assert common.only((0, 1, 2), [2, 1], "m_1") == (1, 2)  # the plan's order, whatever the order asked
    with pytest.raises(SystemExit, match="--seeds 3 5 is not among row m_1's planned seeds 0 1 2"):
        common.only((0, 1, 2), [1, 3, 5], "m_1")


def test_the_per_task_decisions_are_set_side_by_side_over_the_seeds():
    def record(side, seed, ratios, grew, accs):
        phases = [{"task": t, "goal": 0.9 + 0.01 * seed, "start": 1.0, "multiplier": 1.0 + g, "ratio": r,
                   "refit": "kept", "grew": g} for t, (r, g) in enumerate(zip(ratios, grew))]
        return {"side": side, "seed": seed, "phases": phases, "matrix": [[accs[0]], accs]}
    records = [record("reference", 0, [0.6, 0.9], [0.0, 0.5], [0.95, 0.80]),
               record("reference", 1, [0.8, 0.9], [0.0, 0.5], [0.93, 0.84]),
               record("cl-bench", 0, [0.6, 0.9], [0.0, 0.0], [0.95, 0.82]),
               record("cl-bench", 1, [0.6, 0.9], [0.0, 0.0], [0.91, 0.82])]
    from parity import cgate, cpg
    lines = summary.phase_lines(cpg, records)
    assert "over seeds [0, 1] / [0, 1] (a value with ×n: n seeds chose it; goal: the mean; (p): " in lines[0]
    assert lines[2] == "| task | goal | width kept | sparsity kept | refit | final test acc % | cl-bench lower |"
    # 2 seeds a side: a differing tally's exact p is at best 1/3 (of the 6 relabellings, 2 lie as far apart)
    assert lines[4] == ("| 0 | 0.905 / 0.905 | 1.0 / 1.0 | 0.6 ×1, 0.8 ×1 / 0.6 (p 1.00) | kept / kept | 94.0 / 93.0 "
                        "| 1/2 (p 1.00) |")
    assert lines[5] == ("| 1 | 0.905 / 0.905 | 1.5 / 1.0 (p 0.33) | 0.9 / 0.9 | kept / kept | 82.0 / 82.0 "
                        "| 1/2 (p 1.00) |")
    assert summary.phase_lines(cpg, records[:2]) == []  # one side without phases: nothing to set beside
    assert summary.phase_lines(summary, records) == []  # a module that names no decisions: none rendered
    # The refit's scores: a column once a record holds them, averaged; "–" on a side whose records do not
    for r, gain in zip(records[2:], (0.02, -0.01)):
        r["phases"][1]["refit_gain"] = gain
    lines = summary.phase_lines(cpg, records)
    assert lines[2].startswith("| task | goal | width kept | sparsity kept | refit | refit's best − compacted |")
    assert "| kept / kept | – / – | 94.0" in lines[4] and "| kept / kept | – / +0.005 | 82.0" in lines[5]
    for r, frozen in zip(records, ([129, 264], [147, 266], [199, 287], [212, 294])):  # gated: averaged counts
        r["phases"] = [{"task": t, "frozen": n} for t, n in enumerate(frozen)]
    lines = summary.phase_lines(cgate, records)
    assert "(kernels frozen after it: the mean; cl-bench lower: " in lines[0]  # no tally here: no ×n, no (p)
    assert lines[2] == "| task | kernels frozen after it | final test acc % | cl-bench lower |"
    assert lines[4:6] == ["| 0 | 138.0 / 205.5 | 94.0 / 93.0 | 1/2 (p 1.00) |",
                          "| 1 | 265.0 / 290.5 | 82.0 / 82.0 | 1/2 (p 1.00) |"]


def test_make_parity_runs_the_plan_not_chosen_seeds():
    def runner_line(*extra):
        out = subprocess.run(["make", "-n", "parity-cpg", "REF=/src/CPG", "DATA=/data", "ROWS=cpg pae", *extra],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.replace("\\\n", " ")
        return next(line for line in out.splitlines() if line.startswith(".venv/bin/python scripts/parity/cpg.py"))
    line = runner_line()
    assert "--ref /src/CPG" in line and "--data-root /data" in line and "--rows cpg pae" in line
    assert "--seeds" not in line and "--pilot" not in line and "--diagnostic" not in line
    assert "--pilot" in runner_line("PILOT=1")
    chosen = runner_line("PARITY_SEEDS=1 2", "RESUME=1").split()  # seeds among the planned ones (common.only)
    assert chosen[chosen.index("--seeds"):][:3] == ["--seeds", "1", "2"] and "--resume" in chosen
    assert "--diagnostic cifar_stem" in runner_line("DIAG=cifar_stem")
    missing = subprocess.run(["make", "parity-hat"], cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode != 0 and "pass REF=DIR" in missing.stdout + missing.stderr
    # refused before .venv is built: a checkout installed without make would otherwise build one first (minutes)
    order = subprocess.run(["make", "-n", "parity-hat", "VENV_STAMP=/nonexistent/stamp"], cwd=ROOT,
                           capture_output=True, text=True).stdout
    assert order.index('test -n ""') < order.index("-m venv")  # (under make test, make -n adds Entering lines)


# --- the document, on toy records ---------------------------------------------------------------------------------
TOY_PLAN = plans.Plan(pilot=3, pilot_sd=1.0, pair_seconds=30, needed=11, n=4, after_look=True)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(plans.PLANS, ("toy", "m_1"), TOY_PLAN)
    diag = Diagnostic("m_1", "cl-bench", (0, 1, 2), ("method.x=1",), what="another option")
    return SimpleNamespace(NAME="toy", REPO="someone/toy", PINNED="0123456789abcdef", SOURCE="authors",
                           TORCH="Written for torch 1.0.", DATA="MNIST/raw", DIAGNOSTICS={"other": diag},
                           PATCHES=[Patch("main.py", "a", "b", "runs on the CPU", ENVIRONMENT),
                                    Patch("train.py", "c", "d", "saves below the bar", LEARNING)],
                           ROWS={"m_1": Row("M", "toy setting", ("method=m",), ("--m",))})


def record(side, seed, ra, seconds=10.0, provenance=None, diagnostic=""):
    full = {key: "x" for key in PROVENANCE_KEYS} | {"clbench_dirty": False}
    return vars(Record("toy", "m_1", side, seed, ra, [[ra]], seconds, "c0ffee" * 4, "cmd",
                       full if provenance is None else provenance, diagnostic))


def pilot_records():
    return [*(record("reference", s, ra, 20.0) for s, ra in enumerate((0.80, 0.82, 0.84))),
            *(record("cl-bench", s, ra, provenance={}) for s, ra in enumerate((0.70, 0.73, 0.74)))]


def flat(text):
    """A page's text with its wrapping undone (each run of whitespace one space)."""
    return " ".join(text.split())


def row_line(text):
    """A row page's figures (its two-column table) as the cells of one line, in the table's order."""
    lines = text.splitlines()
    table = itertools.takewhile(bool, lines[lines.index("| | |") + 2:])
    return "| " + " | ".join(line[2:-2].split(" | ", 1)[1] for line in table) + " |"


def test_a_pilot_row_shows_both_sides_the_paired_difference_and_says_it_is_a_pilot(toy):
    line = row_line(summary.page(toy, "m_1", pilot_records()))
    # differences -10, -9, -10: mean -9.667, sd 0.5774; t(0.975, 2) = 4.3027: half 1.4343
    assert "82.00 ± 2.00 (n=3)" in line and "72.33 ± 2.08 (n=3)" in line
    assert "-9.67 [-11.10, -8.23]" in line
    assert "pilot only, extended after a look: different" in line
    assert "plan 4, capped (80% power needs 11): 0 run; pilot 3" in line
    assert "| 20 / 10 |" in line and "3 without provenance" in line


def test_a_plan_run_in_full_gives_the_verdict_and_the_pilot_is_reported_apart(toy):
    plan = [record(side, 100 + i, ra) for i in range(4) for side, ra in (("reference", 0.80 + i / 1000),
                                                                         ("cl-bench", 0.80 + i / 1000 + 0.001))]
    text = summary.page(toy, "m_1", pilot_records() + plan)
    line = row_line(text)
    assert "+0.10 [+0.10, +0.10]" in line and "**equivalent**" in line and "plan 4, capped" in line
    assert "4 run" in line and "| complete; reference torch x; cl-bench torch x |" in line
    assert "Pilot, seeds 0-2 (extended after a look: not a 95% interval)" in text
    assert "paired -9.67 [-11.10, -8.23]" in text
    partial = row_line(summary.page(toy, "m_1", pilot_records() + plan[:-2]))
    assert "pilot only" in partial and "3 run;" in partial  # a plan cut short never decides the row
    one_sided = row_line(summary.page(toy, "m_1", pilot_records() + plan[:-1]))
    assert "pilot only" in one_sided and "3 run, 1 on the reference side only;" in one_sided


def test_a_plan_sized_from_the_sd_bound_says_so(toy, monkeypatch):
    assert "upper bound (" not in summary.page(toy, "m_1", pilot_records())  # TOY_PLAN: sized from the sd itself
    monkeypatch.setitem(plans.PLANS, ("toy", "m_1"), plans.Plan(pilot=3, pilot_sd=1.0, pair_seconds=30, needed=11,
                                                                n=4, upper_sd=True))
    text = summary.page(toy, "m_1", pilot_records())
    assert f"4 fresh seeds from 100, sized from the sd's 80% upper bound ({plans.sd_upper_bound(1.0, 3):.2f})" in text


def test_an_undetermined_verdict_whose_interval_excludes_zero_gives_its_direction(toy):
    # pilot differences -10, -9, -10 with the margin widened to 20: TOST cannot decide, the 95% interval
    # [-11.10, -8.23] excludes 0, so the row says which side is lower
    text = row_line(summary.page(toy, "m_1", pilot_records()))
    assert "different" in text and "margin not shown" not in text  # outside +-1: no direction clause needed
    p = stats.paired({0: 1.0, 1: 2.0, 2: 1.5}, {0: 0.0, 1: 0.0, 2: 0.0})  # +1.5 [+0.26, +2.74]
    assert p.verdict(1.0) == stats.UNDETERMINED and p.direction() == "higher"
    assert summary.verdict_text(p) == "undetermined: cl-bench higher, margin not shown"
    wide = stats.paired({0: 1.0, 1: -2.0, 2: 1.5}, {0: 0.0, 1: 0.0, 2: 0.0})  # the interval spans 0
    assert wide.direction() == "" and summary.verdict_text(wide) == stats.UNDETERMINED


def test_cpus_per_side_pairs_across_models_and_seconds_per_cpu(toy):
    def on(cpu, rec):
        rec["provenance"] = dict(rec["provenance"], cpu=cpu)
        return rec
    records = [on("Intel(R) Xeon(R) Processor", record("reference", s, 0.8, 20.0)) for s in range(3)]
    records += [on("AMD EPYC" if s == 2 else "Intel(R) Xeon(R) Processor", record("cl-bench", s, 0.8, 10.0 + 20 * s))
                for s in range(3)]
    line = row_line(summary.page(toy, "m_1", records))
    assert "| Xeon / EPYC ×1, Xeon ×2; 1 pair across CPUs |" in line
    assert "| 20 / 50 (EPYC), 20 (Xeon) |" in line  # cl-bench: 10 and 30 s on the Xeon, 50 on the EPYC
    overview = summary.document([toy], records)  # the overview's CPU column: the seeds its verdict rests on
    assert "| Xeon / EPYC ×1, Xeon ×2; 1 pair across CPUs | pilot only, extended" in overview
    unrecorded = [record(side, 0, 0.8, provenance={}) for side in summary.SIDES]
    assert "| ? / ? | 2 without provenance |" in row_line(summary.page(toy, "m_1", unrecorded))


def test_a_row_reconfigured_after_a_look_says_so_with_its_before_numbers(toy, monkeypatch):
    monkeypatch.setitem(summary.LOOKS, "toy/m_1", {"commit": "abc1234", "changed": "a dropout option taken",
                                                   "seen": "a gap", "before": "other"})
    text = summary.page(toy, "m_1", pilot_records())
    assert "pilot only, extended after a look, reconfigured after a look: different" in row_line(text)
    assert ("Reconfigured after a look (abc1234):\n\n- changed: a dropout option taken\n- after: a gap\n"
            "- before-numbers: diagnostic `other`\n- Only its plan's fresh seeds can confirm the change") in text
    plan = [record(side, 100 + i, 0.8) for i in range(4) for side in summary.SIDES]
    assert "decide the verdict" in summary.page(toy, "m_1", pilot_records() + plan)


def test_every_look_names_a_row_and_its_before_numbers_are_records():
    rows = {f"{m.NAME}/{name}": m for m in summary.modules() for name in m.ROWS}
    records = summary.load(RECORDS)
    for key, look in summary.LOOKS.items():
        assert key in rows and {"commit", "changed", "seen"} <= set(look)
        if look.get("before"):
            assert look["before"] in rows[key].DIAGNOSTICS
            assert any(r.get("diagnostic") == look["before"] for r in records)


def test_decision_frequencies_by_exact_permutation_and_final_accuracies_by_sign_test():
    # 3 seeds a side, all "a" against all "b": of the 20 relabellings only the two that keep the groups whole lie as
    # far apart, so p = 2/20; identical tallies give 1
    assert summary.permutation_p(["a"] * 3, ["b"] * 3) == pytest.approx(0.1)
    assert summary.permutation_p([0.6, 0.9], [0.9, 0.6]) == 1.0
    # 5 of 5 pairs one way: 2 / 2^5; 4 of 8: every split at least as uneven, p = 1
    assert summary.sign_p(5, 5) == pytest.approx(0.0625) and summary.sign_p(0, 5) == pytest.approx(0.0625)
    assert summary.sign_p(4, 8) == 1.0


def test_dirty_trees_are_flagged(toy):
    dirty = {key: "x" for key in PROVENANCE_KEYS} | {"clbench_dirty": True}
    records = [*(record("reference", s, 0.8) for s in range(3)), *(record("cl-bench", s, 0.8, provenance=dirty)
                                                                  for s in range(3))]
    assert "3 from a dirty tree" in row_line(summary.page(toy, "m_1", records))


def test_a_diagnostic_renders_under_its_row_against_the_other_sides_same_seeds(toy):
    diag = [record("cl-bench", s, ra, diagnostic="other") for s, ra in enumerate((0.82, 0.84, 0.86))]
    text = summary.page(toy, "m_1", pilot_records() + diag)
    line = flat(text).split("- Diagnostic `other`", 1)[1]
    assert "(another option; cl-bench changed, seeds 0-2)" in line
    assert "cl-bench 84.00 ± 2.00 (n=3) against the row's reference 82.00 ± 2.00 (n=3)" in line
    assert "+2.00 [+2.00, +2.00], different" in line
    assert "make parity-toy REF=DIR DATA=DATA_ROOT DIAG=other" in summary.reference_page(toy, [])
    assert row_line(text).count("(n=3)") == 2  # the diagnostic stays out of the row


def test_patches_are_listed_by_class_and_sources_named(toy, monkeypatch):
    text = summary.reference_page(toy, [])
    assert "- environment: `main.py`: runs on the CPU" in text
    assert "- control flow/learning: `train.py`: saves below the bar" in text
    overview = summary.document([toy], [])
    assert ("| [toy/m_1](parity/toy_m_1.md) | M | [someone/toy](parity/toy.md) | authors | 0 | – | not run "
            "| – | pilot only, extended after a look, capped |") in overview
    monkeypatch.setattr(toy, "ROWS", {"m_1": Row("M", "toy setting", ("method=m",), differs="another memory")})
    assert "| not the same algorithm | 0 |" in summary.document([toy], [])
    line = row_line(summary.page(toy, "m_1", []))
    assert "| not run | not run | – | not run |" in line and line.endswith("| – / – | – |")
    with pytest.raises(ValueError, match="kind 'cpu' is not one of"):
        Patch("main.py", "a", "b", "why", "cpu")


def test_records_accumulate_newer_runs_replace_older(tmp_path):
    committed_json = tmp_path / "parity.json"
    committed_json.write_text(json.dumps({"runs": [record("reference", 0, 0.5), record("reference", 1, 0.6)],
                                          "diagnostics": []}))
    save(Record(**record("reference", 0, 0.7)), tmp_path / "records")
    save(Record(**record("cl-bench", 0, 0.9, diagnostic="other")), tmp_path / "records")
    rows = summary.merged(tmp_path / "records", committed_json)
    assert [(r["seed"], r["ra"], r["diagnostic"]) for r in rows] == [(0, 0.7, ""), (1, 0.6, ""), (0, 0.9, "other")]
    assert [len(v) for v in summary.sections(rows).values()] == [2, 1]


def test_a_second_runner_in_the_same_work_folder_is_refused(tmp_path):
    first = hold(tmp_path / "cpg", "cpg")
    with pytest.raises(SystemExit, match="another parity run of cpg is using .*--work DIR"):
        hold(tmp_path / "cpg", "cpg")
    hold(tmp_path / "hat", "hat").close()  # another reference's folder is free
    first.close()
    hold(tmp_path / "cpg", "cpg").close()  # free again once the first has ended


# --- the committed document ---------------------------------------------------------------------------------------
def test_docs_parity_md_its_pages_and_plot_are_what_its_records_make():
    modules, records = summary.modules(), committed()
    assert DOC.read_text() == summary.document(modules, records)
    pages, folder = summary.pages(modules, records), DOC.parent / summary.PAGES
    assert sorted(p.name for p in folder.glob("*.md")) == sorted(pages)
    assert [name for name, text in pages.items() if (folder / name).read_text() != text] == []
    assert (DOC.parent / summary.PLOT).is_file()
    long = [(path.name, i) for path in (DOC, *folder.glob("*.md"))
            for i, line in enumerate(path.read_text().splitlines(), 1) if len(line) > 400]
    assert long == []


def test_the_summary_writes_the_document_its_pages_and_the_plot(toy, tmp_path):
    (tmp_path / summary.PAGES).mkdir()
    (tmp_path / summary.PAGES / "gone_row.md").write_text("a row no module has now")
    summary.write([toy], pilot_records(), tmp_path / "parity.md")
    assert sorted(p.name for p in (tmp_path / summary.PAGES).iterdir()) == ["toy.md", "toy_m_1.md"]
    assert "](parity/toy_m_1.md)" in (tmp_path / "parity.md").read_text()
    assert (tmp_path / summary.PLOT).read_bytes().startswith(b"\x89PNG")


def test_findings_render_on_their_rows_pages_and_their_titles_in_the_document(toy, tmp_path, monkeypatch):
    from parity import common
    (tmp_path / "toy.md").write_text("# toy\n\n## findings: all\n\n- **Every row.** Said once.\n\n"
                                     "## findings: m_1\n\n- **First.** Its text,\n  wrapped.\n"
                                     + "".join(f"- Plain {i}: text.\n" for i in range(3)) +
                                     "\n## note: m_1\n\nA note\nin two lines\n")
    monkeypatch.setattr(common, "FINDINGS", tmp_path)
    assert summary.findings(toy)["m_1"][0] == "**First.** Its text, wrapped."
    text = summary.document([toy], pilot_records())
    assert "Every row ([toy.md](parity/toy.md)): Every row." in text
    assert "(M): First; Plain 0; Plain 1; 1 more on its page." in text
    page = summary.page(toy, "m_1", pilot_records())
    assert "- **First.** Its text, wrapped.\n- Plain 0: text." in page and "Every row" not in page
    assert "- **Every row.** Said once." in summary.reference_page(toy, [])
    rows, _ = common.annotated("toy", toy.ROWS, {}, tmp_path)
    assert rows["m_1"].note == "A note in two lines"
    (tmp_path / "toy.md").write_text("## note: m_2\n\nno such row\n")
    with pytest.raises(ValueError, match="names what toy does not define: note: m_2"):
        common.annotated("toy", toy.ROWS, {}, tmp_path)
    (tmp_path / "toy.md").write_text("## notes m_1\n")
    with pytest.raises(ValueError, match="is not `## KIND: NAMES`"):
        common.texts("toy", tmp_path)


NUMBER = re.compile(r"(?<![\w.])[+-]?\d+\.\d{2,3}(?![\d])")


def figures(module, records: list[dict]) -> set[str]:
    """Every number the document can quote from a reference's records, as it prints them: each run's RA in points,
    and each mean, sd and interval bound the summary renders for its rows, pilots and diagnostics (not per-task
    accuracies: at two places they would cover nearly every number below 1, so a test of them could not fail)."""
    mine = [r for r in records if r["reference"] == module.NAME]
    rendered = [line for name in module.ROWS for line in summary.figure_lines(module, name, mine)]
    return {f"{100 * r['ra']:.2f}" for r in mine} | {n.lstrip("+-") for n in NUMBER.findall("\n".join(rendered))}


def quoted(module) -> list[str]:
    prose = [*(f for found in summary.findings(module).values() for f in found),
             *(r.note for r in module.ROWS.values()), *(r.differs for r in module.ROWS.values())]
    return [n.lstrip("+-") for text in prose for n in NUMBER.findall(text)]


@pytest.mark.parametrize("name", summary.REFERENCES)
def test_every_number_the_findings_quote_is_in_a_record(name):
    """A figure in the prose (two or three decimals) is one the records give: no number without its runs."""
    import importlib
    module = importlib.import_module(f"parity.{name}")
    known = figures(module, committed())
    assert [n for n in quoted(module) if n not in known] == []


def test_committed_records_are_sections_of_runs_and_diagnostics():
    data = json.loads(RECORDS.read_text())
    assert set(data) == {"runs", "diagnostics"}
    assert all(not r.get("diagnostic") for r in data["runs"]) and all(r["diagnostic"] for r in data["diagnostics"])


@pytest.mark.parametrize("name", summary.REFERENCES)
def test_every_rows_overrides_compose_and_validate(name):
    """A misspelt override in a row or a diagnostic fails here, in seconds, not after the reference's hour."""
    import importlib

    from cl_bench import config
    config.register()
    module = importlib.import_module(f"parity.{name}")
    assert module.ROWS and len(module.PINNED) == 40 and module.SOURCE in summary.SOURCES
    for row in module.ROWS.values():
        config.validate(config.compose([*row.clbench, "seed=0"]))
    for diag in getattr(module, "DIAGNOSTICS", {}).values():
        config.validate(config.compose([*module.ROWS[diag.row].clbench, *diag.clbench, "seed=0"]))


# --- prose stays out of the harness's Python ----------------------------------------------------------------------
def string_literals(path: Path) -> list[str]:
    """Every string literal of a Python file as written (an f-string whole: one STRING token before Python 3.12,
    FSTRING_START .. FSTRING_END after)."""
    text = path.read_text()
    lines = [0, *itertools.accumulate(len(line) for line in text.splitlines(keepends=True))]
    offset = lambda position: lines[position[0] - 1] + position[1]  # noqa: E731
    found, starts = [], []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        name = tokenize.tok_name[token.type]
        if name == "STRING" and not starts:
            found.append(token.string)
        elif name == "FSTRING_START":
            starts.append(token.start)
        elif name == "FSTRING_END":
            start = starts.pop()
            if not starts:
                found.append(text[offset(start):offset(token.end)])
    return found


def string_share(paths) -> tuple[int, int]:
    """Characters in string literals and in all, over the files: how much of the code is text."""
    paths = list(paths)
    return sum(len(s) for p in paths for s in string_literals(p)), sum(len(p.read_text()) for p in paths)


def test_prose_stays_out_of_the_harness_python():
    """Findings, notes, patches, accounts and fixed wording live in scripts/parity/'s Markdown and YAML: no literal
    there runs to a paragraph, and literals stay under a third of the code (58%, then 35.7%, before they moved out to
    findings/, patches/ and wording.yaml: 32.3%; docstrings, messages, overrides and command lines stay)."""
    paths = sorted((ROOT / "scripts" / "parity").glob("*.py"))
    strings, total = string_share(paths)
    assert strings / total < 0.33
    assert [(p.name, s[:60]) for p in paths for s in string_literals(p) if len(s) > 500] == []
