"""The smallest difference a comparison of seeds can detect (the minimum detectable difference).

Two configurations of n_a and n_b seeds each are compared on a per-seed quantity (the fitted
ceiling `A`, the end pass rate) whose spread over seeds is s_a and s_b. With a two-sided
two-sample t-test at level `alpha`, the difference detected with probability `power` is

    MDD = (t_{1 - alpha/2, nu} + t_{power, nu}) * s_p * sqrt(1/n_a + 1/n_b),   nu = n_a + n_b - 2,

s_p the pooled standard deviation, sqrt(((n_a - 1) s_a^2 + (n_b - 1) s_b^2) / nu): the textbook
sample-size formula of the two-sample t-test solved for the difference (the noncentral t
approximated by a shifted central one). At alpha 0.05 and power 0.8 the
test's exact power at this difference (noncentral t) is 0.79 for 3 seeds a side and 0.80 for 5.
A comparison whose MDD exceeds the effect it is asked about cannot tell that effect from seed
noise often enough to be read either way: a study verdict calls it "not powered".
"""

from __future__ import annotations

import math
from typing import Sequence

from scipy import stats

ALPHA = 0.05
POWER = 0.8


def pooled_std(stds: Sequence[float], ns: Sequence[int]) -> float:
    """The pooled standard deviation of groups of `ns` samples with standard deviations `stds` (ddof=1)."""
    dof = sum(ns) - len(ns)
    if dof < 1:
        raise ValueError(f"pooled_std needs at least one degree of freedom, got groups of {list(ns)}")
    return math.sqrt(sum((n - 1) * s * s for s, n in zip(stds, ns)) / dof)


def detectable_difference(
    std_a: float,
    n_a: int,
    std_b: float | None = None,
    n_b: int | None = None,
    alpha: float = ALPHA,
    power: float = POWER,
) -> float | None:
    """The smallest difference between the means of two groups of seeds that a two-sided t-test at
    `alpha` detects with probability `power` (module docstring). Group b defaults to group a's size
    and spread (another configuration seeded as this one). None when a group has fewer than 2
    seeds (no measured spread)."""
    std_b = std_a if std_b is None else std_b
    n_b = n_a if n_b is None else n_b
    if n_a < 2 or n_b < 2:
        return None
    dof = n_a + n_b - 2
    k = stats.t.ppf(1 - alpha / 2, dof) + stats.t.ppf(power, dof)
    return float(k * pooled_std((std_a, std_b), (n_a, n_b)) * math.sqrt(1 / n_a + 1 / n_b))


def power_text(spread: dict | None) -> str | None:
    """One line for `scalerl fit --seeds-of-one`: from a fit's `seed_spread()`, the smallest
    difference in A and B that another configuration of as many seeds, equally spread, can be told
    apart by; None without per-seed fits."""
    if not spread or spread["n_seeds"] < 2:
        return None
    n, std = spread["n_seeds"], spread["std"]
    mdd_a, mdd_b = detectable_difference(std["A"], n), detectable_difference(std["B"], n)
    return (
        f"detectable difference against another configuration of {n} seeds as spread (two-sided t-test, "
        f"alpha {ALPHA}, power {POWER}): A {mdd_a:.3f} (seed std {std['A']:.3f}), B {mdd_b:.2f} "
        f"(seed std {std['B']:.2f})"
    )
