"""Answers a user asks of a fitted curve: the compute at which the run reaches a pass rate (with an
interval, or "not before the ceiling"), the gain left from here to a budget, and whether to stop.

The stop rule: stop when the upper end of the 90% interval of the gain from the current compute to
the budget is below `threshold` (default 0.02, the paper's margin between recipes: a gain below it
is within what another seed would give). `benchmarks/stop_real.py` evaluates it as if live on real
runs beside a patience rule on the raw metric (docs/forecasting.md, "Stop when more compute will
not pay").
"""

from __future__ import annotations

import numpy as np

from scalerl.scaling.fit import CI_LEVEL, FitResult
from scalerl.scaling.report import SEED_MARGIN, gain_between, num


def _reach(model: str, p: np.ndarray, target: float) -> float:
    """The compute at which the curve with parameters `p` reaches `target`: 0 where it starts at or
    above it, inf where its ceiling is at or below it."""
    if model == "sigmoid":
        A, B, C_mid, R0 = p[:4]
        if target <= R0:
            return 0.0
        if target >= A:
            return float("inf")
        s = (target - R0) / (A - R0)
        return float(C_mid * (s / (1 - s)) ** (1 / B))
    A, B, D = p[:3]
    if target >= A:
        return float("inf")
    return float((D / (A - target)) ** (1 / B)) if D > 0 else 0.0


def _params(f: FitResult) -> np.ndarray:
    if f.model == "sigmoid":
        return np.array([f.A, f.B, f.C_mid, f.R0])
    return np.array([f.A, f.B, f.D])


def compute_for(f: FitResult, target: float, level: float = CI_LEVEL) -> dict:
    """The compute at which the fitted curve reaches `target`, with the `level` interval over the
    bootstrap replicas (`hi` None: not reached before the ceiling by more than (1 - level) / 2 of
    them). {target, compute (None: not before the ceiling), lo, hi, reached_share, text}."""
    c = _reach(f.model, _params(f), target)
    out = {"target": target, "compute": c if np.isfinite(c) else None, "lo": None, "hi": None, "reached_share": None}
    if len(f.boot):
        reps = np.array([_reach(f.model, p, target) for p in f.boot])
        q = (1 - level) / 2
        lo, hi = (float(np.quantile(reps, v, method="inverted_cdf")) for v in (q, 1 - q))
        out.update(
            lo=lo if np.isfinite(lo) else None,
            hi=hi if np.isfinite(hi) else None,
            reached_share=float(np.isfinite(reps).mean()),
        )
    out["text"] = _reach_text(f, out, level)
    return out


def _reach_text(f: FitResult, r: dict, level: float) -> str:
    t = r["target"]
    if r["compute"] is None:
        lo, hi = f.ci.get("A", (f.A, f.A))
        return f"{t:.3f} is not reached before the ceiling: A = {f.A:.3f} ({lo:.3f} .. {hi:.3f})" + (
            f"; {r['reached_share']:.0%} of the bootstrap replicas reach it" if r["reached_share"] else ""
        )
    if r["reached_share"] is None:
        return f"{t:.3f} at compute {num(r['compute'])}"
    lo = num(r["lo"]) if r["lo"] is not None else "not before the ceiling"
    hi = num(r["hi"]) if r["hi"] is not None else "not before the ceiling"
    return f"{t:.3f} at compute {num(r['compute'])} ({level:.0%} interval {lo} .. {hi})"


def stop_decision(f: FitResult, c_now: float, budget: float, threshold: float = SEED_MARGIN) -> dict:
    """The gain from `c_now` to `budget` (value, gain and its interval, `gain_between`) and the
    stop rule: stop when the upper end of the gain's interval is below `threshold`. Without
    bootstrap replicas the point estimate of the gain stands in for the upper end."""
    g = gain_between(f, c_now, max(budget, c_now))
    upper = g["hi"] if g["hi"] is not None else g["gain"]
    stop = bool(upper < threshold)
    band = "" if g["hi"] is None else f" (90% interval {g['lo']:+.3f} .. {g['hi']:+.3f})"
    text = f"from {num(c_now)} to the budget {num(budget)}: gain {g['gain']:+.3f}{band}, value {g['value']:.3f}; " + (
        f"stop: even the upper end {upper:+.3f} is below {threshold}"
        if stop
        else f"go on: the upper end {upper:+.3f} is not below {threshold}"
    )
    return {**g, "budget": budget, "threshold": threshold, "upper": upper, "stop": stop, "text": text}


def patience_stop(y, patience: int = 5, min_delta: float = 0.0) -> int | None:
    """The index of the evaluation at which a patience rule on the raw metric stops: the first at
    which none of the last `patience` evaluations beat the best before them by more than
    `min_delta` (transformers' EarlyStoppingCallback, with patience counted in evaluations).
    None where it never stops."""
    y = np.asarray(y, dtype=float)
    best, since = -np.inf, 0
    for i, v in enumerate(y):
        if v > best + min_delta:
            best, since = v, 0
        else:
            since += 1
            if since >= patience:
                return i
    return None
