"""Paired comparisons of two methods (or two codebases) run on the same seeds, and the equivalence verdict.

One arithmetic serves docs/parity.md and `cl-bench report --rank`: the difference is taken seed by seed (the same
seed writes the same split for both sides), its mean gets Student's t interval on n - 1 degrees of freedom, and
two one-sided tests (TOST) at a margin decide between "equivalent", "different" and "undetermined":

- equivalent: the 90% interval lies inside (-margin, +margin), i.e. both one-sided tests reject at 5%;
- different: the 95% interval lies wholly outside [-margin, +margin] (the gap is larger than the margin);
- undetermined: neither; more seeds would be needed to tell.

Values are in whatever unit the caller uses (points of RA in both callers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

EQUIVALENT, DIFFERENT, UNDETERMINED = "equivalent", "different", "undetermined"
POWER = 0.8  # the seed plans' target: 80% power to call a truly equal pair equivalent
ALPHA = 0.05  # each one-sided test's level (the 90% interval); the 95% interval for "different"


def t_quantile(p: float, df: float) -> float:
    from scipy.stats import t  # scipy is a dependency (scikit-learn's, and SVHN's .mat reader)
    return float(t.ppf(p, df))


def mean_sd(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    n = len(values)
    mean = sum(values) / n
    return mean, (math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0)


@dataclass(frozen=True)
class Paired:
    """The seed-by-seed difference a - b: its mean, sd, n, and the 90% and 95% intervals of the mean."""

    mean: float
    sd: float
    n: int
    ci90: tuple[float, float]
    ci95: tuple[float, float]

    def verdict(self, margin: float) -> str:
        if self.n < 2:
            return UNDETERMINED
        if -margin < self.ci90[0] and self.ci90[1] < margin:
            return EQUIVALENT
        if self.ci95[0] > margin or self.ci95[1] < -margin:
            return DIFFERENT
        return UNDETERMINED

    def direction(self) -> str:
        """"higher" or "lower" where the 95% interval excludes 0, else "": an undetermined verdict can still tell
        which side is above, though not whether by more than the margin."""
        if self.n < 2:
            return ""
        return "higher" if self.ci95[0] > 0 else "lower" if self.ci95[1] < 0 else ""


def interval(mean: float, sd: float, n: int, level: float) -> tuple[float, float]:
    """The two-sided `level` interval of a mean over n values of sample sd `sd` (NaN for a single value)."""
    if n < 2:
        return math.nan, math.nan
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


def paired(a: dict[int, float], b: dict[int, float]) -> Paired:
    """a - b over the seeds both have (each a mapping seed -> value); seeds only one side has are left out."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return Paired(math.nan, math.nan, 0, (math.nan, math.nan), (math.nan, math.nan))
    mean, sd = mean_sd([a[s] - b[s] for s in seeds])
    return Paired(mean, sd, len(seeds), interval(mean, sd, len(seeds), 1 - 2 * ALPHA),
                  interval(mean, sd, len(seeds), 1 - ALPHA))


def welch(a: list[float], b: list[float]) -> Paired:
    """mean(a) - mean(b) for two unpaired samples (runs whose seeds draw different random streams, such as the
    same seeds on a CPU and on a GPU): Welch's interval on the Welch-Satterthwaite degrees of freedom. Its sd holds
    the difference's standard error, and its n the smaller sample's size, so that a side with one value leaves the
    verdict undetermined."""
    (ma, sa), (mb, sb) = mean_sd(a), mean_sd(b)
    n = min(len(a), len(b))
    if n < 2:
        return Paired(ma - mb, math.nan, n, (math.nan, math.nan), (math.nan, math.nan))
    va, vb = sa**2 / len(a), sb**2 / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else float(n - 1)

    def ci(level: float) -> tuple[float, float]:
        half = t_quantile(0.5 + level / 2, df) * se
        return ma - mb - half, ma - mb + half
    return Paired(ma - mb, se, n, ci(1 - 2 * ALPHA), ci(1 - ALPHA))


def seeds_for_power(sd: float, margin: float, power: float = POWER, most: int = 1000) -> int:
    """The fewest paired seeds at which TOST calls a pair whose true difference is 0 equivalent with the given
    power, for a paired sd of `sd`: the smallest n with t(1-alpha, n-1) + t(1-(1-power)/2, n-1) <= margin sqrt(n)
    / sd (the usual sample size for equivalence of means at a true difference of 0). `most` + 1 when even `most`
    seeds are not enough."""
    if sd == 0:
        return 2
    beta_half = (1 - power) / 2
    for n in range(2, most + 1):
        if t_quantile(1 - ALPHA, n - 1) + t_quantile(1 - beta_half, n - 1) <= margin * math.sqrt(n) / sd:
            return n
    return most + 1
