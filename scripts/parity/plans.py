"""Each parity row's seed plan, fixed before its runs, and the rule that made it.

Its account: scripts/parity/README.md, section plans.py.
"""
from __future__ import annotations

from dataclasses import dataclass

MARGIN = 1.0  # points of RA: the equivalence margin of every row
MIN_SEEDS = 3
CPU_HOURS = 6.0
# The learning cut's rows (cpg_learn, pae_learn, packnet_learn, gated_learn): a seed there costs 1-3 CPU-hours, so
# CPU_HOURS would cap each plan below the power it needs and leave the row without a verdict. Three times CPU_HOURS,
# decided on 2026-12-05 before any plan seed of cpg_learn, pae_learn or gated_learn ran (packnet_learn's plan, 3
# seeds, is under the cap either way).
LEARN_CPU_HOURS = 18.0
FIRST_SEED = 100
SD_CONFIDENCE = 0.8  # upper_sd plans: the pilot sd's one-sided upper confidence bound at this level


@dataclass(frozen=True)
class Plan:
    pilot: int  # the pilot's seeds: 0 .. pilot - 1, both sides
    pilot_sd: float  # the pilot's paired sd (cl-bench - reference), points, to 2 decimals
    pair_seconds: int  # the pilot's mean seconds of one seed, both sides together
    needed: int  # seeds for 80% power at +-MARGIN with that sd (cl_bench.stats.seeds_for_power)
    n: int  # the plan: max(needed, MIN_SEEDS), capped at cpu_hours
    after_look: bool = False  # the pilot was extended after a look at its results
    cpu_hours: float = CPU_HOURS  # the cap's budget: CPU_HOURS, or LEARN_CPU_HOURS for the learning cut's rows
    upper_sd: bool = False  # sized from the pilot sd's SD_CONFIDENCE upper bound (plans fixed from 2026-12-05 on)

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(range(FIRST_SEED, FIRST_SEED + self.n))

    @property
    def pilot_seeds(self) -> tuple[int, ...]:
        return tuple(range(self.pilot))

    @property
    def capped(self) -> bool:
        return self.n < self.needed


def planned(sd: float, pair_seconds: float, cpu_hours: float = CPU_HOURS,
            upper_from: int | None = None) -> tuple[int, int]:
    """(needed, n) for a pilot's paired sd and seconds a seed: the rule above; with upper_from (the pilot's seeds),
    sized from the sd's upper confidence bound (sd_upper_bound)."""
    from cl_bench.stats import seeds_for_power
    needed = seeds_for_power(sd if upper_from is None else sd_upper_bound(sd, upper_from), MARGIN)
    return needed, min(max(needed, MIN_SEEDS), int(cpu_hours * 3600 // pair_seconds))


def sd_upper_bound(sd: float, pilot: int, confidence: float = SD_CONFIDENCE) -> float:
    """The one-sided upper confidence bound of a normal sd estimated from `pilot` paired seeds: sd sqrt((k - 1) /
    chi2_{1 - confidence}(k - 1)). For three seeds at 0.8, 2.12 times the estimate."""
    from scipy.stats import chi2
    return sd * (((pilot - 1) / chi2.ppf(1 - confidence, pilot - 1)) ** 0.5)


# Fixed on 2026-12-04 from the 332 pilot runs in docs/parity.json (commit ba63915), before any plan seed ran.
PLANS: dict[tuple[str, str], Plan] = {
    ("cpg", "cpg"): Plan(pilot=8, pilot_sd=3.3, pair_seconds=1536, needed=95, n=14, after_look=True),
    ("cpg", "packnet"): Plan(pilot=8, pilot_sd=1.57, pair_seconds=576, needed=23, n=23, after_look=True),
    ("cpg", "pae"): Plan(pilot=8, pilot_sd=1.44, pair_seconds=899, needed=20, n=20, after_look=True),
    ("mammoth", "agem_200"): Plan(pilot=6, pilot_sd=4.22, pair_seconds=191, needed=155, n=113, after_look=True),
    ("mammoth", "agem_500"): Plan(pilot=6, pilot_sd=2.94, pair_seconds=63, needed=76, n=76, after_look=True),
    ("mammoth", "der_200"): Plan(pilot=3, pilot_sd=0.84, pair_seconds=40, needed=8, n=8),
    ("mammoth", "der_500"): Plan(pilot=3, pilot_sd=1.31, pair_seconds=64, needed=17, n=17),
    ("mammoth", "derpp_200"): Plan(pilot=12, pilot_sd=1.86, pair_seconds=141, needed=32, n=32, after_look=True),
    ("mammoth", "derpp_500"): Plan(pilot=3, pilot_sd=1.21, pair_seconds=58, needed=15, n=15),
    ("mammoth", "er_200"): Plan(pilot=24, pilot_sd=1.91, pair_seconds=57, needed=33, n=33, after_look=True),
    ("mammoth", "er_500"): Plan(pilot=24, pilot_sd=2.85, pair_seconds=33, needed=72, n=72, after_look=True),
    ("mammoth", "er_ace_200"): Plan(pilot=6, pilot_sd=2.01, pair_seconds=162, needed=37, n=37, after_look=True),
    ("mammoth", "er_ace_500"): Plan(pilot=3, pilot_sd=1.96, pair_seconds=52, needed=35, n=35),
    ("mammoth", "gdumb_200"): Plan(pilot=6, pilot_sd=1.05, pair_seconds=79, needed=12, n=12, after_look=True),
    ("mammoth", "gdumb_500"): Plan(pilot=6, pilot_sd=0.94, pair_seconds=170, needed=10, n=10, after_look=True),
    ("mammoth", "icarl_200"): Plan(pilot=3, pilot_sd=0.77, pair_seconds=36, needed=7, n=7),
    ("mammoth", "icarl_500"): Plan(pilot=10, pilot_sd=0.93, pair_seconds=110, needed=10, n=10, after_look=True),
    ("hat", "hat_mnist2"): Plan(pilot=3, pilot_sd=0.07, pair_seconds=1687, needed=2, n=3),
    ("hat", "hat_pmnist"): Plan(pilot=3, pilot_sd=0.33, pair_seconds=1139, needed=3, n=3),
    ("lamaml", "agem_permutations"): Plan(pilot=3, pilot_sd=3.84, pair_seconds=583, needed=128, n=37),
    ("lamaml", "agem_rotations"): Plan(pilot=3, pilot_sd=4.03, pair_seconds=614, needed=141, n=35),
    ("lamaml", "er_permutations"): Plan(pilot=3, pilot_sd=1.07, pair_seconds=85, needed=12, n=12),
    ("lamaml", "er_rotations"): Plan(pilot=3, pilot_sd=2.76, pair_seconds=43, needed=67, n=67),
    ("lamaml", "lamaml_permutations"): Plan(pilot=3, pilot_sd=1.09, pair_seconds=1483, needed=12, n=12),
    ("lamaml", "lamaml_rotations"): Plan(pilot=3, pilot_sd=3.29, pair_seconds=255, needed=95, n=84),
    ("cgate", "gated_task"): Plan(pilot=3, pilot_sd=3.03, pair_seconds=1224, needed=81, n=17),
    # Fixed on 2026-12-04 from cpg_learn's pilot (seeds 0-2, docs/parity.json): its mean pair of 11,488 s (seeds 1
    # and 2 resumed; their seconds include a cut-short run's under a load of four jobs on two cores) left one seed
    # under CPU_HOURS; under LEARN_CPU_HOURS (2026-12-05, before any plan seed ran) the 5 that 80% power needs.
    ("cpg", "cpg_learn"): Plan(pilot=3, pilot_sd=0.51, pair_seconds=11488, needed=5, n=5, cpu_hours=LEARN_CPU_HOURS),
    # Fixed on 2026-12-05 from packnet_learn's pilot (seeds 0-2, docs/parity.json), before any plan seed ran: its mean
    # pair of 3,782 s (seed 0's cl-bench side includes 1,549 s stopped while the suite was timed) caps nothing.
    ("cpg", "packnet_learn"): Plan(pilot=3, pilot_sd=0.15, pair_seconds=3782, needed=2, n=3,
                                   cpu_hours=LEARN_CPU_HOURS),
    # Fixed on 2026-12-05 from pae_learn's pilot (seeds 0-2, docs/parity.json), before any plan seed ran: the sd's
    # upper bound (0.61) needs 6 seeds; at the pilot's mean pair of 10,185 s (the reference's side 5,531 to 7,990 s,
    # seed 0's including about 3,470 s stopped while the suite was timed) 6 fit under LEARN_CPU_HOURS.
    ("cpg", "pae_learn"): Plan(pilot=3, pilot_sd=0.29, pair_seconds=10185, needed=6, n=6, cpu_hours=LEARN_CPU_HOURS,
                               upper_sd=True),
    # Fixed on 2026-12-05 from gated_learn's pilot (seeds 0-2, docs/parity.json), before any plan seed ran: the sd's
    # upper bound (2.03) needs 38 seeds; LEARN_CPU_HOURS at the pilot's mean pair of 10,482 s (cgate's side 6,845 to
    # 8,929 s, each beside other runs) caps the plan at 6, so the row says it is capped.
    ("cgate", "gated_learn"): Plan(pilot=3, pilot_sd=0.96, pair_seconds=10482, needed=38, n=6,
                                   cpu_hours=LEARN_CPU_HOURS, upper_sd=True),
}


# Rows whose pilot has not run yet, and why: no plan can be fixed for them, so only their pilot (PILOT_SEEDS) runs.
PILOT_SEEDS = (0, 1, 2)
PENDING: dict[tuple[str, str], str] = {}


def seeds(reference: str, row: str, pilot: bool = False) -> tuple[int, ...]:
    """The seeds `make parity-NAME` runs for a row: its plan's (or, with pilot, its pilot's); a pending row has
    only its pilot, PILOT_SEEDS."""
    plan = PLANS.get((reference, row))
    if plan is None and (reference, row) in PENDING:
        if pilot:
            return PILOT_SEEDS
        raise SystemExit(f"row {reference}/{row} has no seed plan yet ({PENDING[(reference, row)]}): its pilot "
                         "must run first (--pilot, PILOT=1: seeds 0-2), then its plan goes into plans.py")
    if plan is None:
        raise SystemExit(f"row {reference}/{row} has no seed plan: add one to scripts/parity/plans.py from a pilot "
                         "(its rule is in that file's docstring)")
    return plan.pilot_seeds if pilot else plan.seeds
