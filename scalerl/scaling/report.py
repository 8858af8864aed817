"""Plain-words summaries of fits, the comparison table of several runs (paper Fig. 2 legend), and
the verdict on one run in progress: is more compute worth it?

The verdict's margin is the paper's: two recipes are called different when their ceilings differ
by more than 0.02 (Section 3, about +-0.015 run-to-run on A across seeds), so a gain below 0.02 is
within what another seed of the same run would give.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from scalerl.scaling.fit import CI_LEVEL, WIDE_A, FitResult, _curve_of

SEED_MARGIN = 0.02
MULTIPLES = (2, 10)


def num(v: float) -> str:
    """Compute-like numbers: 16,000 rather than 1.6e+04; small ones with 4 significant digits."""
    return f"{v:,.0f}" if 1000 <= abs(v) < 1e9 else f"{v:.4g}"


def _ci(f: FitResult, name: str, fmt: str) -> str:
    if name not in f.ci:
        return ""
    lo, hi = f.ci[name]
    if fmt == "num":
        return f"  ({CI_LEVEL:.0%} interval {num(lo)} .. {num(hi)})"
    return f"  ({CI_LEVEL:.0%} interval {lo:{fmt}} .. {hi:{fmt}})"


def summary(
    label: str,
    f: FitResult,
    predict: Sequence[float] = (),
    x_name: str = "compute",
    y_name: str = "metric",
    ceiling: dict | None = None,
) -> str:
    """What a user needs to read off one fit, in plain words. `ceiling`: the outlook's
    (`scalerl.scaling.outlook.Outlook.ceiling`); an unidentified ceiling is shown as a lower bound."""
    lines = [
        f"{label}: {f.model} fit of {y_name} against {x_name}, {f.n_points} points in the fit "
        f"window {num(f.window[0])} .. {num(f.window[1])} ({f.method} method)"
    ]
    if ceiling is not None and not ceiling["identified"]:
        lb = ceiling.get("lower_bound")
        bound = f"at least {lb:.3f}" if lb is not None else "unknown"
        lines.append(f"  ceiling A        not identified: {bound} (the fitted {f.A:.3f} is not bound by the data)")
    else:
        lines.append(f"  ceiling A        {f.A:.3f}{_ci(f, 'A', '.3f')}   the value the curve tends to")
    lines.append(f"  efficiency B     {f.B:.2f}{_ci(f, 'B', '.2f')}   larger = reaches the ceiling faster")
    if f.model == "sigmoid":
        lines.append(f"  midpoint C_mid   {num(f.C_mid)}{_ci(f, 'C_mid', 'num')}   {x_name} at half of the gain")
        r0_how = "fitted" if "R0" in f.ci else "measured start"
        lines.append(f"  start R0         {f.R0:.3f} ({r0_how})")
    else:
        lines.append(f"  scale D          {num(f.D)}{_ci(f, 'D', 'num')}")
    lines.append(f"  residual RMSE    {f.rmse:.4f}")
    spread = f.seed_spread()
    if spread:
        std = ", ".join(f"{k} {v:.3g}" for k, v in spread["std"].items())
        lines.append(f"  across {spread['n_seeds']} seeds (one fit each): std {std}")
    for p in f.to_dict(predict)["predictions"]:
        band = "" if p["lo"] is None else f"  ({CI_LEVEL:.0%} interval {p['lo']:.3f} .. {p['hi']:.3f})"
        seeds = f", seed std {p['seed_std']:.3f}" if "seed_std" in p else ""
        lines.append(f"  forecast at {x_name} = {num(p['x'])}: {y_name} = {p['y']:.3f}{band}{seeds}")
    lines += [f"  warning: {w}" for w in f.warnings] or ["  no warnings"]
    return "\n".join(lines)


def comparison_table(rows: Sequence[tuple[str, FitResult]]) -> str:
    """One line per run, sorted by A (ceiling) then B (efficiency), best first."""
    ordered = sorted(rows, key=lambda r: (-r[1].A, -r[1].B))
    width = max(len("run"), *(len(label) for label, _ in ordered))
    head = (
        f"{'run':<{width}}  {'A':>6}  {'A 90% interval':>15}  {'B':>5}  {'C_mid':>9}  {'RMSE':>7}  {'n':>4}  warnings"
    )
    out = [head, "-" * len(head)]
    for label, f in ordered:
        ci = f"{f.ci['A'][0]:.3f}..{f.ci['A'][1]:.3f}" if "A" in f.ci else "-"
        c_mid = num(f.C_mid) if f.C_mid is not None else "-"
        out.append(
            f"{label:<{width}}  {f.A:6.3f}  {ci:>15}  {f.B:5.2f}  {c_mid:>9}  {f.rmse:7.4f}  "
            f"{f.n_points:4d}  {len(f.warnings)}"
        )
    return "\n".join(out)


def gain_between(f: FitResult, c_now: float, c_then: float) -> dict:
    """Predicted value at c_then and gain from c_now, with the bootstrap intervals of both
    (`lo`/`hi` of the gain, `value_lo`/`value_hi` of the value; None without replicas)."""
    now, then = (float(v) for v in f.predict([c_now, c_then]))
    out = {"compute": c_then, "value": then, "gain": then - now, "lo": None, "hi": None}
    if len(f.boot):
        lo, hi = f.predict_interval([c_then])
        diffs = np.array([np.diff(_curve_of(f.model, p).predict(np.array([c_now, c_then])))[0] for p in f.boot])
        q = 100 * (1 - CI_LEVEL) / 2
        out["lo"], out["hi"] = float(np.percentile(diffs, q)), float(np.percentile(diffs, 100 - q))
        out["value_lo"], out["value_hi"] = float(lo[0]), float(hi[0])
    return out


def _multiple_for(f: FitResult, c_now: float, gain: float) -> float | None:
    """The smallest multiple of c_now (up to 1e4) at which the curve has gained `gain`, or None."""
    k = np.geomspace(1.0, 1e4, 400)
    gains = f.predict(k * c_now) - float(f.predict([c_now])[0])
    hit = np.flatnonzero(gains >= gain)
    return float(k[hit[0]]) if hit.size else None


def _signed(g: dict) -> str:
    band = "" if g["lo"] is None else f" ({g['lo']:+.3f} .. {g['hi']:+.3f})"
    return f"{g['gain']:+.3f}{band}"


def verdict(f: FitResult, c_now: float, y_now: float, margin: float = SEED_MARGIN, fall: dict | None = None) -> dict:
    """What a user with a run at compute `c_now` (measured value `y_now`) can act on. `fall`:
    `scalerl.scaling.find_fall` of the run's curve; a curve that fell overrides the fit's advice."""
    fitted = float(f.predict([c_now])[0])
    out = {
        "compute": c_now,
        "measured": y_now,
        "fitted": fitted,
        "ceiling": f.A,
        "ceiling_interval": list(f.ci["A"]) if "A" in f.ci else None,
        "remaining": f.A - fitted,
        "margin": margin,
        "gains": {f"{m}x": gain_between(f, c_now, m * c_now) for m in MULTIPLES},
    }
    k = _multiple_for(f, c_now, margin)
    out["multiple_for_margin"] = k
    g2, g10 = out["gains"]["2x"], out["gains"]["10x"]
    lo, hi = f.ci.get("A", (f.A, f.A))
    if fall and fall["fell"]:
        text = (
            f"the run fell after its peak ({fall['peak']:.3f} -> {fall['end']:.3f}): the fit does not describe it "
            "and more compute on this recipe will not pay until the instability is found and fixed"
        )
    elif f.a_on_edge or hi - lo > WIDE_A:
        text = (
            f"the ceiling is not pinned down yet (A {f.A:.3f}, interval {lo:.3f} .. {hi:.3f}): keep the run "
            "going and refit before deciding"
        )
    elif out["remaining"] < margin or k is None:
        text = (
            f"the remaining gain ({out['remaining']:+.3f} to the ceiling) is below the seed margin {margin}: "
            f"more compute will not pay (10x the compute: {_signed(g10)})"
        )
    elif k <= 2:
        text = f"more compute pays: 2x the compute is expected to gain {_signed(g2)}"
    else:
        text = (
            f"a gain of {margin} (the seed margin) needs about {k:.1f}x the current compute; 2x gains "
            f"{_signed(g2)}, 10x {_signed(g10)}: continue only if that is worth the cost"
        )
    out["recommendation"] = text
    return out


def verdict_lines(v: dict, x_name: str = "compute") -> list[str]:
    """The verdict in plain words (the human output of `scalerl fit` and `scalerl watch`)."""
    ci = v.get("ceiling_interval")
    if v.get("identified", True) and v.get("ceiling") is not None:
        ceiling = f"ceiling {v['ceiling']:.3f}" + (f" ({ci[0]:.3f} .. {ci[1]:.3f})" if ci else "")
    else:
        lb = v.get("ceiling_lower_bound")
        ceiling = "ceiling not identified" + (f" (A >= {lb:.3f})" if lb is not None else "")
    lines = [
        f"  verdict at {x_name} = {num(v['compute'])}: measured {v['measured']:.3f}, fitted {v['fitted']:.3f}; "
        + ceiling
    ]
    for name, g in v["gains"].items():
        lines.append(f"    {name} the compute ({num(g['compute'])}): {g['value']:.3f}, gain {_signed(g)}")
    lines.append(f"    => {v['recommendation']}")
    return lines


def outlook_lines(d: dict, x_name: str = "compute", y_name: str = "metric") -> list[str]:
    """Whether the ceiling is identified and the forecasts with their calibrated 90% intervals,
    from a `forecast_dict` (the human output of `scalerl fit`)."""
    lines = [f"  {d['ceiling']['text']}"]
    if d.get("identification"):
        lines.append(f"  ({d['identification']['reason']})")
    for p in d.get("predictions", []):
        band = "" if p.get("lo") is None else f"  (calibrated 90% interval {p['lo']:.3f} .. {p['hi']:.3f})"
        beyond = "; beyond the calibrated horizons" if p.get("beyond_calibration") else ""
        lines.append(f"  forecast at {x_name} = {num(p['x'])}: {y_name} = {p['y']:.3f}{band}{beyond}")
    return lines


def first_half_line(h: dict) -> str:
    """The first-half check (`scalerl.scaling.outlook.first_half_check`) with its naive baselines."""
    ruler = f", the ruler {h['baseline_ruler_error']:+.3f}" if h.get("baseline_ruler_error") is not None else ""
    last3 = (
        f", the mean of its last three {h['baseline_last3_error']:+.3f}"
        if h.get("baseline_last3_error") is not None
        else ""
    )
    band = ""
    if h.get("interval"):
        lo, hi = h["interval"]
        band = f" (calibrated 90% interval {lo:.3f} .. {hi:.3f}, {'covers' if h['covered'] else 'misses'} the end)"
    ident = ""
    if "identified" in h:
        ident = (
            "; the first half identified the ceiling"
            if h["identified"]
            else "; the first half did not identify the ceiling"
        )
    return (
        f"  first half of the compute predicted the end (mean of the last three evaluations, "
        f"{h['measured']:.3f}) as {h['predicted']:.3f}{band}: error {h['error']:+.3f}; naive predictors from the "
        f"same evaluations: the last {h['baseline_last_error']:+.3f}, the best {h['baseline_best_error']:+.3f}"
        f"{last3}{ruler}{ident}; the second half still gained {h['left']:+.3f} from the value at half the compute"
    )
