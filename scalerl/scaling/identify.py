"""Does the data bound the ceiling? The identification of `A` behind every forecast
(docs/forecasting.md, "What a forecast can and cannot tell").

Two measurements of one fitted sigmoid, and the rule that joins them:
- `profile_a`: the profile-likelihood interval of `A`. For each `A` on a walk of `A_STEP` out
  of the fitted value (at most `PROFILE_REACH` each way), `B` and `C_mid` (and `R0` where fitted)
  are refitted with `A` held; the interval is the set where n ln(SSE(A) / SSE_min) stays within
  the chi-square(1) 90% point (2.706): Gaussian noise of unknown variance. `hi` is None where no
  `A` up to `PROFILE_REACH` above the fit (or 1.0) is excluded: the data do not bound the ceiling
  from above.
- `tail_rise`: what the last third of the window's evaluations (at least `TAIL_MIN`) still gain
  per doubling of compute, as the upper end of a one-sided 95% interval of an ordinary
  least-squares slope against ln compute. A curve whose first plateau is followed by a slow
  second rise shows it here once the rise has started inside the window; one that starts after
  the last evaluation cannot be seen by any method that reads the curve alone.
- `identified` (the rule `RULE`, chosen on the development half of benchmarks/forecast_real.py
  among the candidates written down there before it ran): the profile interval is bounded above
  and at most `ID_WIDTH` wide, and the tail gains less than `ID_RISE` per doubling.

Not identified: `A` is reported as a lower bound (`lower_bound`: the profile interval's lower end)
with what more compute would settle it (`settle`), and no verdict rests on the fitted ceiling.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from scalerl.scaling.fit import FitResult, _Data, _prepare, _ranges, _refine

A_STEP = 0.005
PROFILE_REACH = 0.1
LR_90 = float(stats.chi2.ppf(0.9, 1))  # 2.706
TAIL_MIN = 4
ID_WIDTH = 0.04   # +-0.02, the paper's margin between recipes
ID_RISE = 0.02    # gain per doubling of compute still visible in the window's tail
RULES = ("profile", "profile+midpoint", "profile+tail")
RULE = "profile+tail"


def _data(fit: FitResult, x, y) -> _Data:
    lo, hi = fit.window
    return _prepare(x, y, "sigmoid", lo, hi)


def profile_a(fit: FitResult, x, y, fit_r0: bool = False) -> dict:
    """The profile-likelihood 90% interval of `A` of the sigmoid `fit` of (`x`, `y`) (its window):
    {lo, hi (None: not bounded above within PROFILE_REACH or 1.0), width (None when hi is)}."""
    if fit.model != "sigmoid":
        return {"lo": None, "hi": None, "width": None}
    d = _data(fit, x, y)
    _, c_rng = _ranges(d, None, None)
    start = np.array([fit.A, fit.B, fit.C_mid, fit.R0 if fit.R0 is not None else d.r0])
    sse_min = max(fit.rmse ** 2 * d.x.size, 1e-300)
    ends = {}
    for sign in (+1, -1):
        ends[sign], sse_min = _walk(d, start, c_rng, fit_r0, sign, sse_min)
    lo, hi = ends[-1], ends[+1]
    return {"lo": lo, "hi": hi, "width": None if hi is None or lo is None else hi - lo}


def _walk(d: _Data, start, c_rng, fit_r0: bool, sign: int, sse_min: float) -> tuple[float | None, float]:
    """Step `A` away from the fit until the likelihood ratio leaves the 90% region: the last `A`
    inside it, or None when the walk reached its limit first (upwards: not bounded)."""
    a0 = float(start[0])
    limit = min(1.0, a0 + PROFILE_REACH) if sign > 0 else max(0.0, a0 - PROFILE_REACH)
    p, inside = start.copy(), a0
    for k in range(1, int(round(PROFILE_REACH / A_STEP)) + 1):
        a = a0 + sign * k * A_STEP
        if (sign > 0 and a > limit + 1e-12) or (sign < 0 and a < limit - 1e-12):
            break
        p = _refine("sigmoid", d, np.array([a, p[1], p[2], p[3]]), (a - 1e-9, a + 1e-9), c_rng, fit_r0, d.r0)
        sse = float(p[-1])
        sse_min = min(sse_min, sse)
        if d.x.size * math.log(max(sse, 1e-300) / sse_min) > LR_90:
            return inside, sse_min
        inside = a
    if sign < 0:
        return inside, sse_min
    return None, sse_min


def tail_rise(fit: FitResult, x, y) -> dict:
    """The gain per doubling of compute over the last third of the window's evaluations (at least
    TAIL_MIN): {points, per_doubling, upper (one-sided 95%)}; upper None with too few points."""
    d = _data(fit, x, y)
    k = max(TAIL_MIN, d.x.size // 3)
    lx, ty = np.log(d.x[-k:]), d.y[-k:]
    if k < TAIL_MIN or np.ptp(lx) == 0:
        return {"points": int(k), "per_doubling": None, "upper": None}
    res = stats.linregress(lx, ty)
    t = float(stats.t.ppf(0.95, k - 2))
    return {"points": int(k), "per_doubling": float(res.slope * math.log(2)),
            "upper": float((res.slope + t * res.stderr) * math.log(2))}


def identify(fit: FitResult, x, y, fit_r0: bool = False, rule: str = RULE) -> dict:
    """Whether the data bound the ceiling of `fit` (see the module docstring), with the reason in
    words: {identified, rule, profile, tail, passed_midpoint, lower_bound, reason}."""
    if rule not in RULES:
        raise ValueError(f"unknown identification rule {rule!r} (expected one of {RULES})")
    prof = profile_a(fit, x, y, fit_r0)
    tail = tail_rise(fit, x, y)
    passed = bool(fit.C_mid is not None and fit.window[1] >= fit.C_mid)
    bounded = prof["width"] is not None and prof["width"] <= ID_WIDTH + 1e-9
    checks = {"profile": bounded, "profile+midpoint": bounded and passed,
              "profile+tail": bounded and tail["upper"] is not None and tail["upper"] < ID_RISE}
    ok = bool(checks[rule])
    return {"identified": ok, "rule": rule, "profile": prof, "tail": tail, "passed_midpoint": passed,
            "lower_bound": prof["lo"], "reason": _reason(ok, prof, tail, passed)}


def _reason(ok: bool, prof: dict, tail: dict, passed: bool) -> str:
    if prof["hi"] is None:
        why = (f"the data do not bound A from above (its profile interval runs from {prof['lo']:.3f} past "
               f"{min(1.0, prof['lo'] + PROFILE_REACH):.3f})" if prof["lo"] is not None else "no profile")
    elif prof["width"] > ID_WIDTH:
        why = f"A's profile interval {prof['lo']:.3f} .. {prof['hi']:.3f} is wider than {ID_WIDTH}"
    elif tail["upper"] is None or tail["upper"] >= ID_RISE:
        up = "unknown" if tail["upper"] is None else f"up to {tail['upper']:+.3f}"
        why = f"the last {tail['points']} evaluations still rise ({up} per doubling of compute)"
    else:
        why = f"A's profile interval {prof['lo']:.3f} .. {prof['hi']:.3f} and a flat tail"
    mid = "" if passed else "; the window ends before the fitted midpoint"
    return ("identified: " if ok else "not identified: ") + why + mid


def settle_text(ident: dict, x_last: float) -> str:
    """What more compute would settle an unidentified ceiling, in words."""
    if ident["identified"]:
        return ""
    lb = ident["lower_bound"]
    bound = f"A >= {lb:.3f}" if lb is not None else "A unknown"
    return (f"{bound} (a lower bound); the ceiling is settled once the curve flattens inside the window: "
            f"evaluate on to at least {2 * x_last:.4g} (2x the compute so far) and refit")
