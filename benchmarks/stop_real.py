"""The stop rule played forward as if live on real RL runs, beside a patience rule on the raw metric
(docs/forecasting.md, "Stop when more compute will not pay").

    python benchmarks/stop_real.py [--side test|dev|all] [--threshold 0.02] [--patience 5] [--workers 2]

The curves and the development/test split are benchmarks/forecast_real.py's (real curves of other
groups and the project's committed runs, whole sources to one side).

The method, written down (2026-11-28) before this script first ran:
- the budget of each run is its last x (the run as its authors ran it);
- the rule is checked at the first evaluation past each twentieth of the budget (2/20 .. 19/20),
  as a user looks at a run now and then; with only the evaluations up to there, the curve is fitted
  as forecast_real's candidates are (the window of `scalerl fit`, the fast fit), and the outlook
  (`scalerl.scaling.outlook`: the default point forecast, the identification, the calibrated
  interval of the shipped calibration.json) gives the gain from the level now (the mean of the last
  three evaluations) to the budget;
- `rule` (`scalerl.scaling.outlook.stop_decision`): stop at the first check where the ceiling is
  identified and the upper end of the calibrated 90% interval of that gain is below the threshold;
- `patience` (`patience_stop`): stop at the first evaluation at which none of the last 5 beat the
  best before them (transformers' EarlyStoppingCallback, threshold 0);
- for each: compute saved = 1 - x_stop / x_last; the pass rate at the stop = the mean of the last
  three evaluations up to it; lost = end - that (negative: the run was better at the stop). A rule
  that never fires saves nothing and loses nothing.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from forecast_real import DEFAULT, STUDIES, Curve, committed_curves, real_curves, run

from scalerl.errors import ScaleRLError
from scalerl.scaling.fit import MIN_POINTS, fit_curve, window_start
from scalerl.scaling.outlook import outlook, stop_decision
from scalerl.scaling.stop import patience_stop

TAIL = 3


def checks(x: np.ndarray) -> list[int]:
    """The evaluation index of each check: the first evaluation past j/20 of the budget."""
    out = []
    for j in range(2, 20):
        k = int(np.searchsorted(x, j / 20 * x[-1], side="left"))
        if k < len(x) - 1 and (not out or k > out[-1]):
            out.append(k)
    return out


def rule_stop(x: np.ndarray, y: np.ndarray, threshold: float) -> int | None:
    for k in checks(x):
        xk, yk = x[: k + 1], y[: k + 1]
        if (xk > 0).sum() < MIN_POINTS:
            continue
        try:
            fit = fit_curve(xk, yk, fit_min=window_start(xk, 0.1), n_bootstrap=0, seed=0)
        except ScaleRLError:
            continue  # a flat start: no forecast yet, as live
        if stop_decision(outlook(xk, yk, fit), float(xk[-1]), float(x[-1]), threshold)["stop"]:
            return k
    return None


def outcome(x: np.ndarray, y: np.ndarray, k: int | None) -> dict:
    end = float(y[-TAIL:].mean())
    if k is None:
        return {"at": None, "saved": 0.0, "lost": 0.0, "end": end}
    at = float(y[max(0, k + 1 - TAIL) : k + 1].mean())
    return {"at": float(x[k]), "saved": 1 - float(x[k]) / float(x[-1]), "lost": end - at, "end": end}


def play(args: tuple[Curve, float, int]) -> dict:
    c, threshold, patience = args
    return {
        "name": c.name,
        "domain": c.domain,
        "side": c.side,
        "rule": outcome(c.x, c.y, rule_stop(c.x, c.y, threshold)),
        "patience": outcome(c.x, c.y, patience_stop(c.y, patience)),
    }


def summary(rows: list[dict]) -> list[str]:
    lines = [
        "| runs | rule | stopped | mean compute saved | mean pass rate lost | largest loss | losing more than 0.02 |",
        "|---|---|---|---|---|---|---|",
    ]
    for dom in ("real", "committed", "all"):
        sel = [r for r in rows if dom == "all" or r["domain"] == dom]
        for name in ("rule", "patience"):
            got = [r[name] for r in sel]
            if not got:
                continue
            lost = np.array([o["lost"] for o in got])
            lines.append(
                f"| {dom} ({len(got)}) | {name} | {sum(o['at'] is not None for o in got)} | "
                f"{np.mean([o['saved'] for o in got]):.0%} | {lost.mean():+.3f} | {lost.max():+.3f} | "
                f"{int((lost > 0.02).sum())} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", type=str, default=str(DEFAULT))
    ap.add_argument("--studies", type=str, default=str(STUDIES))
    ap.add_argument("--side", choices=("test", "dev", "all"), default="test")
    ap.add_argument("--threshold", type=float, default=0.02)
    ap.add_argument("--patience", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    curves = [
        c
        for c in real_curves(Path(args.real)) + committed_curves(Path(args.studies))
        if args.side == "all" or c.side == args.side
    ]
    tasks = [(c, args.threshold, args.patience) for c in curves]
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        rows = list(pool.map(play, tasks, chunksize=2))
    print(f"## Stop rules played forward: {args.side} half, threshold {args.threshold}, patience {args.patience}\n")
    print("\n".join(summary(rows)))
    print(
        "\n| run | domain | end | rule: stops at (share) | lost | patience: stops at (share) | lost |\n"
        "|---|---|---|---|---|---|---|"
    )
    for r in rows:
        cells = []
        for name in ("rule", "patience"):
            o = r[name]
            cells.append(("never" if o["at"] is None else f"{1 - o['saved']:.0%}") + f" | {o['lost']:+.3f}")
        print(f"| {r['name']} | {r['domain']} | {r['rule']['end']:.3f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    run(main, "stop_real")
