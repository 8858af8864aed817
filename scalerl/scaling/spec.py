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
- the first-half check: the frozen method (`first_half_check`), whatever the options above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalerl.scaling.fit import FitResult, fit_curve, window_start


@dataclass(frozen=True)
class ForecastSpec:
    fit_min_frac: float = 0.1
    n_bootstrap: int = 200
    seed: int = 0
    check_grid: bool = True
    fit_r0: bool = False
    method: str = "fast"


SPEC = ForecastSpec()


def spec_fit(x, y, fit_min_frac: float = SPEC.fit_min_frac, warns: list | None = None,
             spec: ForecastSpec = SPEC) -> FitResult:
    """The sigmoid fit of (`x`, `y`) by the specification (`fit_min_frac`: the run's own setting,
    `eval.fit_min_frac`); a moved window start is noted in `warns`."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    order = np.argsort(x, kind="stable")
    fit_min = window_start(x[order], fit_min_frac, warns) if fit_min_frac > 0 and x.size else None
    return fit_curve(x, y, "sigmoid", fit_min=fit_min, fit_r0=spec.fit_r0, n_bootstrap=spec.n_bootstrap,
                     seed=spec.seed, method=spec.method, check_grid=spec.check_grid)
