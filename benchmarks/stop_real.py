"""The stop rule evaluated as if live on real RL runs, beside a patience rule on the raw metric
(docs/forecasting.md, "Stop when more compute will not pay").

    python benchmarks/stop_real.py [FOLDER] [--threshold 0.02] [--patience 5] [--train]

FOLDER: curve files as for benchmarks/forecast_real.py (default ../shared/real-curves).

The method, written down before the first run of this script (2026-11-27):
- the budget of each run is its last x (the run as its authors ran it); x is compute up to a factor;
- at every evaluation k, with only the evaluations up to k, the curve is refitted by the one
  forecast specification (`scalerl.scaling.spec`, as the live forecast of `scalerl train` and
  `scalerl watch`), from the first evaluation at which five evaluations past x = 0 exist;
- the stop rule (`scalerl.scaling.stop.stop_decision`): stop at the first k where the upper end of
  the 90% interval of the gain from x_k to the budget is below the threshold (0.02);
- the patience rule (`patience_stop`): stop at the first k at which none of the last 5
  evaluations beat the best before them (transformers' EarlyStoppingCallback, threshold 0);
- for each: compute saved = 1 - x_stop / x_last; the pass rate at the stop = the mean of the last
  three evaluations up to it (as the end is the mean of the last three); lost = end - that (a
  negative loss: the run was better at the stop than at its end). A rule that never fires saves
  nothing and loses nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from forecast_real import DEFAULT, read_curve
from scalerl.errors import ScaleRLError
from scalerl.scaling.fit import MIN_POINTS
from scalerl.scaling.spec import spec_fit
from scalerl.scaling.stop import patience_stop, stop_decision

TAIL = 3


def rule_stop(x: np.ndarray, y: np.ndarray, threshold: float) -> tuple[int | None, dict | None]:
    """The first evaluation at which the stop rule fires (and its decision), or (None, None)."""
    for k in range(len(x) - 1):
        if (x[:k + 1] > 0).sum() < MIN_POINTS:
            continue
        try:
            fit = spec_fit(x[:k + 1], y[:k + 1])
        except ScaleRLError:
            continue          # a flat start: no forecast yet, as live
        d = stop_decision(fit, float(x[k]), float(x[-1]), threshold)
        if d["stop"]:
            return k, d
    return None, None


def outcome(x: np.ndarray, y: np.ndarray, k: int | None) -> dict:
    end = float(y[-TAIL:].mean())
    if k is None:
        return {"at": None, "saved": 0.0, "lost": 0.0, "end": end}
    at = float(y[max(0, k + 1 - TAIL):k + 1].mean())
    return {"at": float(x[k]), "saved": 1 - float(x[k]) / float(x[-1]), "lost": end - at, "end": end}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, nargs="?", default=DEFAULT)
    ap.add_argument("--threshold", type=float, default=0.02)
    ap.add_argument("--patience", type=int, default=5)
    ap.add_argument("--train", action="store_true", help="include TRAIN_* curves")
    args = ap.parse_args(argv)
    files = sorted(f for f in args.folder.glob("*.csv") if args.train or not f.name.startswith("TRAIN_"))
    if not files:
        raise ScaleRLError(f"{args.folder}: no curve files (*.csv) found")
    lines = [f"| curve | evals | end | stop rule: stops at x (share) | saved | lost | patience {args.patience}: "
             "stops at x | saved | lost |", "|---|---|---|---|---|---|---|---|---|"]
    totals = {"rule": [], "patience": []}
    for f in files:
        x, y = read_curve(f)
        k, _ = rule_stop(x, y, args.threshold)
        r, p = outcome(x, y, k), outcome(x, y, patience_stop(y, args.patience))
        totals["rule"].append(r)
        totals["patience"].append(p)
        cells = []
        for o in (r, p):
            where = "never" if o["at"] is None else f"{o['at']:g} ({o['at'] / x[-1]:.0%})"
            cells.append(f"{where} | {o['saved']:.0%} | {o['lost']:+.3f}")
        lines.append(f"| {f.stem} | {len(x)} | {r['end']:.3f} | " + " | ".join(cells) + " |")
        print(f"{f.stem}: done", file=sys.stderr, flush=True)
    summary = []
    for name, outs in totals.items():
        saved = np.mean([o["saved"] for o in outs])
        lost = np.array([o["lost"] for o in outs])
        summary.append(f"| {name} | {sum(o['at'] is not None for o in outs)} of {len(outs)} | {saved:.0%} | "
                       f"{lost.mean():+.3f} | {lost.max():+.3f} | {int((lost > 0.02).sum())} |")
    print("\n".join(lines))
    print("\n| rule | stopped | mean compute saved | mean pass rate lost | largest loss | runs losing more than 0.02 |\n"
          "|---|---|---|---|---|---|\n" + "\n".join(summary))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ScaleRLError as exc:
        sys.exit(f"stop_real: {exc}")
