"""Does the data bound the ceiling? The identification of `A` behind every forecast
(docs/forecasting.md, "What a forecast can and cannot tell").

Two measurements of one fitted sigmoid, and the rule that joins them:
- `profile_a`: the profile-likelihood interval of `A`. For each `A` on a walk of `A_STEP` out
  of the fitted value (at most `PROFILE_REACH` each way), `B` and `C_mid` (and `R0` where fitted)
  are refitted with `A` held (below PROFILE_REACH, down to the search range's bottom, in steps of
  `COARSE_STEP`); the interval is the set where n ln(SSE(A) / SSE_min) stays within
  the chi-square(1) 90% point (2.706): Gaussian noise of unknown variance. `hi` is None where no
  `A` up to `PROFILE_REACH` above the fit (or 1.0) is excluded: the data do not bound the ceiling
  from above.
- `tail_rise`: what the last third of the window's evaluations (at least `TAIL_MIN`) still gain
  per doubling of compute, as the upper end of a one-sided 95% interval of an ordinary
  least-squares slope against ln compute. A curve whose first plateau is followed by a slow
  second rise shows it here once the rise has started inside the window; one that starts after
  the last evaluation cannot be seen by any method that reads the curve alone.
- `identified` (the rule `RULE`, chosen on the development half of benchmarks/forecast_real.py
  among the candidates written down there before it ran, `RULES`): `profile`, the profile
  interval is bounded above and at most `ID_WIDTH` wide (the chosen one); `profile+midpoint`, and
  the window passed the fitted C_mid; `profile+tail`, and the tail gains less than `ID_RISE` per
  doubling (it marked 1% of the development half: too few to be of use).
  The interval's ends are the last `A` inside the region on the walk's grid (`A_STEP`).

Not identified: `A` is reported as a lower bound (`lower_bound`: the profile interval's lower end)
with what more compute would settle it (`settle`), and no verdict rests on the fitted ceiling.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from scalerl.scaling.fit import FitResult, _Data, _prepare, _ranges, _refine

A_STEP = 0.005
COARSE_STEP = 0.02
PROFILE_REACH = 0.1
LR_90 = float(stats.chi2.ppf(0.9, 1))  # 2.706
TAIL_MIN = 4
ID_WIDTH = 0.04  # +-0.02, the paper's margin between recipes
ID_RISE = 0.02  # gain per doubling of compute still visible in the window's tail
RULES = ("profile", "profile+midpoint", "profile+tail")
RULE = "profile"  # chosen on the development half (calibration.json names it too)


def _data(fit: FitResult, x, y) -> _Data:
    lo, hi = fit.window
    return _prepare(x, y, "sigmoid", lo, hi)


def profile_a(fit: FitResult, x, y, fit_r0: bool = False) -> dict:
    """The profile-likelihood 90% interval of `A` of the sigmoid `fit` of (`x`, `y`) (its window):
    {lo, hi (None: not bounded above within PROFILE_REACH or 1.0), width (None when hi is)}."""
    if fit.model != "sigmoid":
        return {"lo": None, "hi": None, "width": None}
    d = _data(fit, x, y)
    a_rng, c_rng = _ranges(d, None, None)
    start = np.array([fit.A, fit.B, fit.C_mid, fit.R0 if fit.R0 is not None else d.r0])
    sse_min = max(fit.rmse**2 * d.x.size, 1e-300)
    ends = {}
    for sign in (+1, -1):
        ends[sign], sse_min = _walk(d, start, a_rng, c_rng, fit_r0, sign, sse_min)
    lo, hi = ends[-1], ends[+1]
    return {"lo": lo, "hi": hi, "width": None if hi is None or lo is None else hi - lo}


def _walk(d: _Data, start, a_rng, c_rng, fit_r0: bool, sign: int, sse_min: float) -> tuple[float | None, float]:
    """Step `A` away from the fit until the likelihood ratio leaves the 90% region: the last `A`
    inside it. Upwards the walk stops at PROFILE_REACH above the fit (or 1.0) and returns None
    there (not bounded); downwards it goes on in coarser steps (COARSE_STEP) to the bottom of the
    search range, whose value it returns when nothing above it is excluded."""
    a0 = float(start[0])
    if sign > 0:
        steps = list(np.arange(1, int(round(PROFILE_REACH / A_STEP)) + 1) * A_STEP)
        limit = min(1.0, a0 + PROFILE_REACH)
    else:
        fine = list(np.arange(1, int(round(PROFILE_REACH / A_STEP)) + 1) * A_STEP)
        steps = fine + list(np.arange(PROFILE_REACH + COARSE_STEP, a0 - a_rng[0] + COARSE_STEP, COARSE_STEP))
        limit = a_rng[0]
    p, inside = start.copy(), a0
    for delta in steps:
        a = a0 + sign * float(delta)
        if (sign > 0 and a > limit + 1e-12) or (sign < 0 and a < limit - 1e-12):
            break
        p = _refine("sigmoid", d, np.array([a, p[1], p[2], p[3]]), (a - 1e-9, a + 1e-9), c_rng, fit_r0, d.r0)
        sse = float(p[-1])
        sse_min = min(sse_min, sse)
        if d.x.size * math.log(max(sse, 1e-300) / sse_min) > LR_90:
            return inside, sse_min
        inside = a
    return (None, sse_min) if sign > 0 else (max(inside, limit), sse_min)


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
    return {
        "points": int(k),
        "per_doubling": float(res.slope * math.log(2)),
        "upper": float((res.slope + t * res.stderr) * math.log(2)),
    }


def identify(fit: FitResult, x, y, fit_r0: bool = False, rule: str = RULE) -> dict:
    """Whether the data bound the ceiling of `fit` (see the module docstring), with the reason in
    words: {identified, rule, profile, tail, passed_midpoint, lower_bound, reason}."""
    if rule not in RULES:
        raise ValueError(f"unknown identification rule {rule!r} (expected one of {RULES})")
    prof = profile_a(fit, x, y, fit_r0)
    tail = tail_rise(fit, x, y)
    passed = bool(fit.C_mid is not None and fit.window[1] >= fit.C_mid)
    ok = rule_checks(prof, tail, passed)[rule]
    return {
        "identified": ok,
        "rule": rule,
        "profile": prof,
        "tail": tail,
        "passed_midpoint": passed,
        "lower_bound": prof["lo"],
        "reason": _reason(ok, prof, tail, passed, fit.A),
    }


def rule_checks(prof: dict, tail: dict, passed: bool) -> dict[str, bool]:
    """Each rule of `RULES` on one profile interval, tail and midpoint: {rule: identified}."""
    bounded = prof["width"] is not None and prof["width"] <= ID_WIDTH + 1e-9
    return {
        "profile": bounded,
        "profile+midpoint": bounded and passed,
        "profile+tail": bounded and tail["upper"] is not None and tail["upper"] < ID_RISE,
    }


def _reason(ok: bool, prof: dict, tail: dict, passed: bool, a_fit: float) -> str:
    if prof["hi"] is None:
        top = min(1.0, a_fit + PROFILE_REACH)
        why = (
            f"the data do not bound A from above (no ceiling from {prof['lo']:.3f} up to {top:.3f} is excluded)"
            if prof["lo"] is not None
            else "no profile"
        )
    elif prof["width"] > ID_WIDTH:
        why = f"A's profile interval {prof['lo']:.3f} .. {prof['hi']:.3f} is wider than {ID_WIDTH}"
    else:
        why = f"A's profile 90% interval {prof['lo']:.3f} .. {prof['hi']:.3f}"
    mid = "" if passed else "; the window ends before the fitted midpoint"
    if ok and tail["upper"] is not None and tail["upper"] >= ID_RISE:
        mid += (
            f"; but the last {tail['points']} evaluations may still rise (up to {tail['upper']:+.3f} per doubling): "
            "a slower second rise would lift the end above this ceiling"
        )
    return ("identified: " if ok else "not identified: ") + why + mid


def settle_text(ident: dict, x_last: float) -> str:
    """What more compute would settle an unidentified ceiling, in words."""
    if ident["identified"]:
        return ""
    lb = ident["lower_bound"]
    bound = f"A >= {lb:.3f}" if lb is not None else "A unknown"
    return (
        f"{bound} (a lower bound); the ceiling is settled once the curve flattens inside the window: "
        f"evaluate on to at least {2 * x_last:.4g} (2x the compute so far) and refit"
    )
