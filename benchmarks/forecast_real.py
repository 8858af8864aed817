"""Forecasts of real RL runs nobody here made, against naive baselines (docs/forecasting.md,
"Forecasts of real runs").

    python benchmarks/forecast_real.py [FOLDER] [--cuts 0.3 0.5 0.7] [--train] [--markdown] [--json FILE]

FOLDER (default ../shared/real-curves beside the repository) holds curves as CSV files: a first
`#` line naming the source, then `x,y` (x the training step or compute, y a pass rate in [0, 1]).
`TRAIN_*` files (training-batch rewards, not held-out evaluations) are skipped unless `--train`.

The method, written down before the first run of this script (2026-11-27):
- each curve is forecast from the evaluations with x <= cut * x_last, for cut = 0.3, 0.5, 0.7;
- the end is the mean of the last three evaluations; every error is forecast - end;
- the forecast is the frozen method of the first-half check (`first_half_prediction`, with the
  cut in place of 1/2: R0 the measured start, the window from a tenth of the final x, moved
  earlier only to keep five evaluations, the fast least-squares fit), its 90% interval the
  residual bootstrap of `scalerl fit` (200 replicas, seed 0) of the fitted curve's mean over the
  last three x; `covered` when the end lies inside it;
- baselines from the same evaluations only: the last one, the best one, the ruler (the line
  through the last two against log x, extrapolated to the last three x, clipped to [0, 1]) and
  the power law `A - D / x**B` fitted over the same window (with its own bootstrap interval);
- per cut and overall: the curves with a forecast, mean |error|, the number within 0.02 (the
  paper's margin) and, for the two fitted models, the 90%-interval coverage. A cut with fewer
  than five evaluations past x = 0 has no fit (counted; its baselines are left out too, so every
  column of a row is over the same curves).
No other method was tried on these curves before this table was written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from scalerl.errors import ScaleRLError
from scalerl.scaling.fit import first_half_prediction

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parent.parent / "shared" / "real-curves"
MARGIN = 0.02
BOOTSTRAP = 200
PREDICTORS = ("fit", "last", "best", "ruler", "powerlaw")


def read_curve(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A curve file: `#` lines, a header `x,y`, then numbers; sorted by x."""
    rows = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    if not rows or rows[0].replace(" ", "").lower() != "x,y":
        raise ScaleRLError(f"{path}: expected a header line 'x,y' after the '#' lines")
    try:
        xy = np.array([[float(v) for v in ln.split(",")] for ln in rows[1:]])
    except ValueError as exc:
        raise ScaleRLError(f"{path}: a row is not two numbers 'x,y' ({exc})") from exc
    if xy.ndim != 2 or xy.shape[1] != 2:
        raise ScaleRLError(f"{path}: expected two columns x,y in every row")
    order = np.argsort(xy[:, 0], kind="stable")
    return xy[order, 0], xy[order, 1]


def forecast(x: np.ndarray, y: np.ndarray, cut: float) -> dict | None:
    """Every predictor's error at one cut, or None where the fit cannot be made."""
    try:
        h = first_half_prediction(x, y, cut=cut, n_bootstrap=BOOTSTRAP)
    except ScaleRLError:
        return None
    row = {"measured": h["measured"], "fit": h["error"], "fit_covered": h["covered"],
           "last": h["baseline_last_error"], "best": h["baseline_best_error"], "ruler": h["baseline_ruler_error"],
           "left": h["left"], "A": h["A"]}
    try:
        p = first_half_prediction(x, y, cut=cut, n_bootstrap=BOOTSTRAP, model="powerlaw")
        row["powerlaw"], row["powerlaw_covered"] = p["error"], p["covered"]
    except ScaleRLError:
        row["powerlaw"], row["powerlaw_covered"] = float("nan"), False
    return row


def summarise(rows: list[dict]) -> dict:
    out = {"curves": len(rows)}
    for k in PREDICTORS:
        e = np.array([r[k] for r in rows], dtype=float)
        ok = np.isfinite(e)
        out[k] = {"mean_abs_error": float(np.abs(e[ok]).mean()) if ok.any() else None,
                  "within": int((np.abs(e[ok]) <= MARGIN).sum()), "n": int(ok.sum())}
        if rows and f"{k}_covered" in rows[0]:
            out[k]["covered"] = int(sum(bool(r[f"{k}_covered"]) for r in rows))
    return out


def _cell(s: dict, k: str) -> str:
    v = s[k]
    if v["mean_abs_error"] is None:
        return "-"
    cov = f", {v['covered']} in 90%" if "covered" in v else ""
    return f"{v['mean_abs_error']:.3f} ({v['within']}/{v['n']}{cov})"


def tables(per_curve: dict, cuts: list[float]) -> list[str]:
    lines = ["| cut | curves | fit (frozen) | last | best | ruler | power law |", "|---|---|---|---|---|---|---|"]
    everything = []
    for c in cuts:
        rows = [r[c] for r in per_curve.values() if r.get(c)]
        everything += rows
        if rows:
            s = summarise(rows)
            lines.append(f"| {c:.0%} | {s['curves']} of {len(per_curve)} | " + " | ".join(_cell(s, k) for k in PREDICTORS) + " |")
    if everything:
        s = summarise(everything)
        lines.append(f"| all | {s['curves']} | " + " | ".join(_cell(s, k) for k in PREDICTORS) + " |")
    lines += ["", "| curve | cut | end | left | fit | in 90% | last | best | ruler | power law |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for name, by_cut in per_curve.items():
        for c in cuts:
            r = by_cut.get(c)
            if r is None:
                lines.append(f"| {name} | {c:.0%} | | | no fit (fewer than 5 evaluations) | | | | | |")
                continue
            errs = " | ".join(f"{r[k]:+.3f}" if np.isfinite(r[k]) else "-" for k in ("last", "best", "ruler", "powerlaw"))
            lines.append(f"| {name} | {c:.0%} | {r['measured']:.3f} | {r['left']:+.3f} | {r['fit']:+.3f} | "
                         f"{'yes' if r['fit_covered'] else 'no'} | {errs} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, nargs="?", default=DEFAULT)
    ap.add_argument("--cuts", type=float, nargs="+", default=[0.3, 0.5, 0.7])
    ap.add_argument("--train", action="store_true", help="include TRAIN_* curves (training-batch rewards)")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure here")
    args = ap.parse_args(argv)
    files = curve_files(args.folder, args.train)
    per_curve = {}
    for f in files:
        x, y = read_curve(f)
        per_curve[f.stem] = {c: forecast(x, y, c) for c in args.cuts}
        print(f"{f.stem}: done", file=sys.stderr, flush=True)
    print("\n".join(tables(per_curve, args.cuts)))
    if args.json:
        args.json.write_text(json.dumps({k: {str(c): r for c, r in v.items()} for k, v in per_curve.items()}, indent=1))
    return 0


def curve_files(folder: Path, train: bool) -> list[Path]:
    """The curve files of `folder`, TRAIN_* (training-batch rewards) only with `train`."""
    files = sorted(f for f in folder.glob("*.csv") if train or not f.name.startswith("TRAIN_"))
    if not files:
        raise ScaleRLError(f"{folder}: no curve files (*.csv) found")
    return files


def run(main_fn, name: str) -> None:
    """Run a benchmark's main; a ScaleRLError is its one-line error."""
    try:
        sys.exit(main_fn())
    except ScaleRLError as exc:
        sys.exit(f"{name}: {exc}")


if __name__ == "__main__":
    run(main, "forecast_real")
