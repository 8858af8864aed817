"""The calibrated 90% interval of a forecast (docs/forecasting.md, "Intervals that cover").

The bootstrap of the fitted curve (`FitResult.predict_interval`) says how well the points pin the
*curve* down, not how far the run will land from it: on real runs it covered the end about half
the time. The interval here is a normalised split-conformal one, calibrated on the development
half of `benchmarks/forecast_real.py` (real runs of other groups and the project's own runs):

    s(C)  = sqrt(rmse^2 (1/3 + 1/n) + (g h)^2),  h = max(0, ln(C / C_last))
    band  = forecast(C) + [q_lo, q_hi] * s(C)

`rmse` is the fit's residual RMSE over its `n` window points (the curve's own noise and misfit;
1/3: the end is the mean of three evaluations), `g` the fitted curve's slope per unit ln compute at
the last evaluation (how fast it still moves), `h` how far the forecast reaches past the data.
`q_lo`, `q_hi` are the 5% and 95% conformal quantiles of (end - forecast) / s on the development
half, per group: identified or not (`scalerl.scaling.identify`) x the horizon's bin (`BINS`).
The table ships as `calibration.json` beside this file; `python benchmarks/forecast_real.py
--calibrate` remakes it and `--check-calibration` checks the shipped one against a fresh run.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.special import expit

from scalerl.errors import ScaleRLError
from scalerl.scaling.fit import FitResult

TABLE = Path(__file__).with_name("calibration.json")
BINS = (0.5, 1.0)  # horizon bins in ln compute: [0, 0.5), [0.5, 1.0), [1.0, ...)
LEVEL = 0.9
MIN_SCALE = 0.002


def slope(fit: FitResult, C: float) -> float:
    """d forecast / d ln C of the fitted curve at compute `C`."""
    if fit.model == "sigmoid":
        s = float(expit(fit.B * (math.log(C) - math.log(fit.C_mid))))
        return (fit.A - fit.R0) * fit.B * s * (1 - s)
    return float(fit.D * fit.B * C ** (-fit.B))


def scale(fit: FitResult, c_last: float, C) -> np.ndarray:
    """The scale `s` of the forecast at compute(s) `C` from data ending at `c_last`."""
    C = np.atleast_1d(np.asarray(C, dtype=float))
    h = np.maximum(0.0, np.log(C / c_last))
    g = slope(fit, c_last)
    s = np.sqrt(fit.rmse**2 * (1 / 3 + 1 / max(fit.n_points, 1)) + (g * h) ** 2)
    return np.maximum(s, MIN_SCALE)


def horizon_bin(h: float) -> int:
    return int(np.searchsorted(BINS, h, side="right"))


def group_key(identified: bool, h: float) -> str:
    return f"{'identified' if identified else 'not-identified'}/h{horizon_bin(h)}"


def conformal_quantiles(z, w=None, level: float = LEVEL) -> tuple[float, float]:
    """The lower and upper split-conformal quantiles of the scores `z` (weights `w`, default equal)
    for a two-sided `level` interval: the weighted empirical (1 - level)/2 and (1 + level)/2
    quantiles, each pushed outwards by one point's weight (the finite-sample correction)."""
    z = np.asarray(z, dtype=float)
    w = np.ones_like(z) if w is None else np.asarray(w, dtype=float)
    if z.size == 0:
        raise ScaleRLError("conformal_quantiles: no scores")
    order = np.argsort(z, kind="stable")
    z, w = z[order], w[order] / w.sum()
    cum = np.cumsum(w)
    a = (1 - level) / 2
    lo_i = max(0, int(np.searchsorted(cum, a - w.mean(), side="left")))
    hi_i = min(z.size - 1, int(np.searchsorted(cum, 1 - a + w.mean(), side="left")))
    return float(z[lo_i]), float(z[hi_i])


@lru_cache(maxsize=1)
def table() -> dict:
    """The shipped calibration table (`calibration.json`)."""
    try:
        return json.loads(TABLE.read_text())
    except (OSError, ValueError) as exc:
        raise ScaleRLError(
            f"{TABLE}: cannot read the forecast calibration ({exc}); reinstall scalerl or "
            "run `python benchmarks/forecast_real.py --calibrate`"
        ) from exc


def quantiles(identified: bool, h: float, tab: dict | None = None) -> tuple[float, float]:
    tab = table() if tab is None else tab
    g = tab["groups"].get(group_key(identified, h))
    if g is None:
        raise ScaleRLError(f"{TABLE}: no calibration for group {group_key(identified, h)!r}")
    return float(g["lo"]), float(g["hi"])


def band(point, fit: FitResult, c_last: float, C, identified: bool, tab: dict | None = None) -> dict:
    """The calibrated interval around the point forecast(s) `point` at compute(s) `C`:
    {lo, hi, scale, beyond (True where ln(C / c_last) is past the calibrated horizons)}."""
    tab = table() if tab is None else tab
    C = np.atleast_1d(np.asarray(C, dtype=float))
    point = np.broadcast_to(np.asarray(point, dtype=float), C.shape)
    s = scale(fit, c_last, C)
    h = np.maximum(0.0, np.log(C / c_last))
    q = np.array([quantiles(identified, float(v), tab) for v in h])
    lo = np.clip(point + q[:, 0] * s, 0.0, 1.0)
    hi = np.clip(point + q[:, 1] * s, 0.0, 1.0)
    return {"lo": lo, "hi": hi, "scale": s, "beyond": h > float(tab.get("h_max", BINS[-1]))}
