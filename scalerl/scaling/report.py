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


def summary(label: str, f: FitResult, predict: Sequence[float] = (), x_name: str = "compute",
            y_name: str = "metric") -> str:
    """What a user needs to read off one fit, in plain words."""
    lines = [f"{label}: {f.model} fit of {y_name} against {x_name}, {f.n_points} points in the fit "
             f"window {num(f.window[0])} .. {num(f.window[1])} ({f.method} method)"]
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
    head = f"{'run':<{width}}  {'A':>6}  {'A 90% interval':>15}  {'B':>5}  {'C_mid':>9}  {'RMSE':>7}  {'n':>4}  warnings"
    out = [head, "-" * len(head)]
    for label, f in ordered:
        ci = f"{f.ci['A'][0]:.3f}..{f.ci['A'][1]:.3f}" if "A" in f.ci else "-"
        c_mid = num(f.C_mid) if f.C_mid is not None else "-"
        out.append(f"{label:<{width}}  {f.A:6.3f}  {ci:>15}  {f.B:5.2f}  {c_mid:>9}  {f.rmse:7.4f}  "
                   f"{f.n_points:4d}  {len(f.warnings)}")
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
    out = {"compute": c_now, "measured": y_now, "fitted": fitted, "ceiling": f.A,
           "ceiling_interval": list(f.ci["A"]) if "A" in f.ci else None, "remaining": f.A - fitted,
           "margin": margin, "gains": {f"{m}x": gain_between(f, c_now, m * c_now) for m in MULTIPLES}}
    k = _multiple_for(f, c_now, margin)
    out["multiple_for_margin"] = k
    g2, g10 = out["gains"]["2x"], out["gains"]["10x"]
    lo, hi = f.ci.get("A", (f.A, f.A))
    if fall and fall["fell"]:
        text = (f"the run fell after its peak ({fall['peak']:.3f} -> {fall['end']:.3f}): the fit does not describe it "
                "and more compute on this recipe will not pay until the instability is found and fixed")
    elif f.a_on_edge or hi - lo > WIDE_A:
        text = (f"the ceiling is not pinned down yet (A {f.A:.3f}, interval {lo:.3f} .. {hi:.3f}): keep the run "
                "going and refit before deciding")
    elif out["remaining"] < margin or k is None:
        text = (f"the remaining gain ({out['remaining']:+.3f} to the ceiling) is below the seed margin {margin}: "
                f"more compute will not pay (10x the compute: {_signed(g10)})")
    elif k <= 2:
        text = f"more compute pays: 2x the compute is expected to gain {_signed(g2)}"
    else:
        text = (f"a gain of {margin} (the seed margin) needs about {k:.1f}x the current compute; 2x gains "
                f"{_signed(g2)}, 10x {_signed(g10)}: continue only if that is worth the cost")
    out["recommendation"] = text
    return out


def verdict_lines(v: dict, x_name: str = "compute") -> list[str]:
    """The verdict in plain words (the human output of `scalerl fit` and `scalerl watch`)."""
    ci = v["ceiling_interval"]
    lines = [f"  verdict at {x_name} = {num(v['compute'])}: measured {v['measured']:.3f}, fitted {v['fitted']:.3f}; "
             f"ceiling {v['ceiling']:.3f}" + (f" ({ci[0]:.3f} .. {ci[1]:.3f})" if ci else "")]
    for name, g in v["gains"].items():
        lines.append(f"    {name} the compute ({num(g['compute'])}): {g['value']:.3f}, gain {_signed(g)}")
    lines.append(f"    => {v['recommendation']}")
    return lines


def first_half_line(h: dict) -> str:
    """One line on the first-half check (`first_half_prediction`) with its three baselines."""
    beat = "the fit beat the last and the best" if h["beat_baselines"] else "the fit did not beat both the last and the best"
    ruler = f", the ruler {h['baseline_ruler_error']:+.3f}" if h.get("baseline_ruler_error") is not None else ""
    return (f"  first half of the compute (frozen method) predicted the end (mean of the last three evaluations, "
            f"{h['measured']:.3f}) as {h['predicted']:.3f}: error {h['error']:+.3f}; the last first-half evaluation "
            f"{h['baseline_last_error']:+.3f}, the best {h['baseline_best_error']:+.3f}{ruler} ({beat}); the second half "
            f"still gained {h['left']:+.3f} from the value at half the compute")
