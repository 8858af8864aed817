"""Time one fit of 1,000 points: the paper's full grid procedure vs the default (fast) method.

    .venv/bin/python benchmarks/fit_speed.py [--repeats 3] [--points 1000]

Data: the paper's 8B ScaleRL curve (Table 1: A 0.610, B 1.92, C_mid 2542, R0 0.40) at 1,000
evenly spaced computes from 0 to 16,000 GPU-hours, Gaussian noise 0.01, fitted from 1,500 on.
Both methods are timed in this one run (best of --repeats, no bootstrap) and their predictions
printed side by side. Also timed: what `scalerl fit` runs by default (the fast fit checked against
the paper's grid, `check_grid=True`) on a run of typical length (--run-points, default 60
evaluations).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from scalerl.scaling import fit_curve, sigmoid


def best_time(fn, repeats: int):
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-points", type=int, default=60)
    args = ap.parse_args()
    truth = dict(A=0.610, B=1.92, C_mid=2542.0, R0=0.40)
    x = np.linspace(0, 16000, args.points)
    y = sigmoid(x, **truth) + np.random.default_rng(args.seed).normal(0, 0.01, x.size)
    t_grid, grid = best_time(lambda: fit_curve(x, y, fit_min=1500, n_bootstrap=0, method="grid"), args.repeats)
    t_fast, fast = best_time(lambda: fit_curve(x, y, fit_min=1500, n_bootstrap=0, method="fast"), args.repeats)
    t_boot, _ = best_time(lambda: fit_curve(x, y, fit_min=1500, n_bootstrap=200), 1)

    print(f"{args.points} points ({grid.n_points} in the window 1,500..16,000), best of {args.repeats}")
    print(f"{'':14}{'grid (paper)':>14}{'fast (default)':>16}{'|diff|':>9}")
    print(f"{'time [s]':14}{t_grid:14.3f}{t_fast:16.4f}   speed-up {t_grid / t_fast:.0f}x")
    for name in ("A", "B", "C_mid"):
        g, f = getattr(grid, name), getattr(fast, name)
        print(f"{name:14}{g:14.4f}{f:16.4f}{abs(g - f):9.4f}")
    print(f"{'rmse':14}{grid.rmse:14.5f}{fast.rmse:16.5f}")
    worst = 0.0
    for c in (4000.0, 8000.0, 16000.0, 32000.0, 64000.0):
        g, f = float(grid.predict(c)), float(fast.predict(c))
        worst = max(worst, abs(g - f))
        print(
            f"{'R(' + f'{c:,.0f}' + ')':14}{g:14.4f}{f:16.4f}{abs(g - f):9.4f}   truth {float(sigmoid(c, **truth)):.4f}"
        )
    print(f"fast with 200 bootstrap replicas: {t_boot:.3f} s")
    xr = np.linspace(0, 16000, args.run_points)
    yr = sigmoid(xr, **truth) + np.random.default_rng(args.seed).normal(0, 0.01, xr.size)
    t_check, checked = best_time(lambda: fit_curve(xr, yr, fit_min=1500, n_bootstrap=0, check_grid=True), args.repeats)
    t_plain, _ = best_time(lambda: fit_curve(xr, yr, fit_min=1500, n_bootstrap=0), args.repeats)
    print(
        f"{args.run_points} evaluations: fast {t_plain:.3f} s, fast checked against the grid (scalerl fit's "
        f"default) {t_check:.3f} s; grid A {checked.grid_check['A']:.3f} vs fit A {checked.A:.3f}"
    )
    ok = t_grid / t_fast >= 10 and worst <= 0.002
    print(
        f"{'PASS' if ok else 'FAIL'}: speed-up {t_grid / t_fast:.0f}x (>= 10x), "
        f"largest prediction difference {worst:.4f} (<= 0.002)"
    )


if __name__ == "__main__":
    main()
