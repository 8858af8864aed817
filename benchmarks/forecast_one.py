"""One forecast of one curve at one cut, for every candidate and baseline of
benchmarks/forecast_real.py (its docstring is the method)."""

from __future__ import annotations

import numpy as np

from scalerl.errors import ScaleRLError
from scalerl.scaling.calibrate import scale
from scalerl.scaling.fit import MIN_POINTS, _fitted_mean_interval, first_half_prediction, fit_curve, ruler, window_start
from scalerl.scaling.identify import RULES, identify, rule_checks
from scalerl.scaling.report import SEED_MARGIN as MARGIN


def stratum(end: float, last3: float) -> str:
    left = end - last3
    return "rising" if left > MARGIN else "fell" if left < -MARGIN else "flat"


def _fit(xc, yc, model="sigmoid", fit_r0=False, n_bootstrap=0):
    start = window_start(xc, 0.1)
    return fit_curve(xc, yc, model, fit_min=start, fit_r0=fit_r0, n_bootstrap=n_bootstrap, seed=0)


def _idents(fit, xc, yc, fit_r0: bool) -> dict:
    """Every identification rule on one fit (one profile, one tail), and what they rest on."""
    base = identify(fit, xc, yc, fit_r0, rule=RULES[0])
    prof, tail = base["profile"], base["tail"]
    return {
        **rule_checks(prof, tail, base["passed_midpoint"]),
        "profile_lo": prof["lo"],
        "profile_hi": prof["hi"],
        "tail_upper": tail["upper"],
    }


def forecast_one(x, y, cut: float, n_bootstrap: int) -> dict | None:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = x <= cut * x[-1]
    xc, yc = x[keep], y[keep]
    if (xc > 0).sum() < MIN_POINTS:
        return None
    at = x[-3:]
    end = float(y[-3:].mean())
    h = float(np.log(at.mean() / xc[-1]))
    last3 = float(yc[-3:].mean())
    sig = _fit(xc, yc, n_bootstrap=n_bootstrap)
    r0 = _fit(xc, yc, fit_r0=True)
    pred = {"sigmoid": float(sig.predict(at).mean()), "sigmoid_r0": float(r0.predict(at).mean())}
    pred["blend"], pred["blend_r0"] = (pred["sigmoid"] + last3) / 2, (pred["sigmoid_r0"] + last3) / 2
    pred["frozen"] = first_half_prediction(x, y, cut=cut)["predicted"]
    try:
        pl = _fit(xc, yc, "powerlaw")
        pred["powerlaw"] = float(np.clip(pl.predict(at).mean(), 0, 1))
    except ScaleRLError:
        pl, pred["powerlaw"] = None, float("nan")
    pred.update(last=float(yc[-1]), last3=last3, best=float(yc.max()), ruler=ruler(xc, yc, at))
    s_sig = float(scale(sig, xc[-1], at.mean())[0])
    s_r0 = float(scale(r0, xc[-1], at.mean())[0])
    scales = {
        "frozen": s_sig,
        "sigmoid": s_sig,
        "blend": s_sig,
        "sigmoid_r0": s_r0,
        "blend_r0": s_r0,
        "powerlaw": float(scale(pl, xc[-1], at.mean())[0]) if pl is not None else float("nan"),
    }
    boot = _fitted_mean_interval(sig, at, 0.9) if n_bootstrap else [float("nan")] * 2
    return {
        "cut": cut,
        "h": h,
        "end": end,
        "stratum": stratum(end, last3),
        "n_window": sig.n_points,
        "pred": pred,
        "scale": scales,
        "ident": {"sigmoid": _idents(sig, xc, yc, False), "sigmoid_r0": _idents(r0, xc, yc, True)},
        "boot": boot,
        "A": {"sigmoid": sig.A, "sigmoid_r0": r0.A},
        "x_cut": float(xc[-1]),
    }
