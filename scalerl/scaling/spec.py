"""One forecast specification for every place that fits a run's curve: `scalerl fit`, the
`fit.json` of `scalerl train`, the live forecast in metrics.jsonl (`forecast/*`) and the study
report. The same run gives the same `A`, interval and first-half figures from all four
(tests/scaling/test_one_forecast.py).

The specification (docs/forecasting.md, "One forecast, everywhere"):
- the window: the first `fit_min_frac` (0.1) of the run's compute so far is left out, moved
  earlier only to keep five evaluations in the window (`window_start`);
- R0: the measured start (the mean at the smallest compute), not fitted;
- the fit: the fast least-squares fit checked against the paper's grid (the lower squared error
  of the two is kept);
- the intervals: residual bootstrap, 200 replicas, seed 0, 90% percentile intervals;
- the first-half check: the frozen method (`first_half_check`), whatever the options above;
- seeds pooled (`spec_fit_pooled`, the study's per-configuration fits and `scalerl fit --seeds-of-one`):
  one window for every seed, the rule above over all their points together (`spec_window`), then
  one fit of all the points (its intervals) plus one fit per seed in the same window for the seed
  spread (`fit_seeds`), each by the rules above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from scalerl.errors import ScaleRLError
from scalerl.scaling.fit import FitResult, fit_curve, fit_seeds, window_start


@dataclass(frozen=True)
class ForecastSpec:
    fit_min_frac: float = 0.1
    n_bootstrap: int = 200
    seed: int = 0
    check_grid: bool = True
    fit_r0: bool = False
    method: str = "fast"


SPEC = ForecastSpec()


def spec_window(x, fit_min_frac: float = SPEC.fit_min_frac, warns: list | None = None) -> float | None:
    """The start of the window of the points `x` (in any order; several seeds' points together when
    pooled): the first `fit_min_frac` of their compute left out, moved earlier only to keep five
    evaluations (`window_start`); None with `fit_min_frac` 0 or no points. A moved start is noted in `warns`."""
    x = np.sort(np.asarray(x, dtype=float).ravel(), kind="stable")
    return window_start(x, fit_min_frac, warns) if fit_min_frac > 0 and x.size else None


def _options(spec: ForecastSpec) -> dict:
    return dict(
        model="sigmoid",
        fit_r0=spec.fit_r0,
        n_bootstrap=spec.n_bootstrap,
        seed=spec.seed,
        method=spec.method,
        check_grid=spec.check_grid,
    )


def spec_fit(
    x, y, fit_min_frac: float = SPEC.fit_min_frac, warns: list | None = None, spec: ForecastSpec = SPEC
) -> FitResult:
    """The sigmoid fit of (`x`, `y`) by the specification (`fit_min_frac`: the run's own setting,
    `eval.fit_min_frac`); a moved window start is noted in `warns`."""
    return fit_curve(x, y, fit_min=spec_window(x, fit_min_frac, warns), **_options(spec))


def spec_fit_pooled(
    runs: Sequence[tuple], fit_min_frac: float = SPEC.fit_min_frac, warns: list | None = None, spec: ForecastSpec = SPEC
) -> FitResult:
    """Several seeds of one configuration, (x, y) each, by the specification: one window over all
    their points (`spec_window`), one fit of all of them (its intervals) and one per seed in that
    window (`FitResult.seed_spread`). One run alone is `spec_fit` of it."""
    if not runs:
        raise ScaleRLError("a pooled fit needs at least one run")
    if len(runs) == 1:
        return spec_fit(*runs[0], fit_min_frac, warns, spec)
    start = spec_window(np.concatenate([np.asarray(x, dtype=float).ravel() for x, _ in runs]), fit_min_frac, warns)
    return fit_seeds(runs, fit_min=start, **_options(spec))
