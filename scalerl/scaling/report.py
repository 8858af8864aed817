"""Plain-words summaries of fits, and the comparison table of several runs (paper Fig. 2 legend)."""

from __future__ import annotations

from typing import Sequence

from scalerl.scaling.fit import CI_LEVEL, FitResult


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
