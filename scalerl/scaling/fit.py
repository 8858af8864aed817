"""Fit a compute-performance curve and forecast it, with bootstrap intervals.

The paper's procedure (appendix A.5-A.7, docs/design.md, "The maths"): drop the points below `fit_min`
(and above `fit_max`), fix `R0` to the measured start, grid over `A` and `C_mid`, fit `B` by least
squares at every grid point, keep the lowest sum of squared residuals (`method="grid"`).

Departures from the paper:
1. Search ranges (A.7). The paper's A grid is 0.450..0.800 step 0.005; here it runs from
   `max(y in window) - 0.1` (rounded down to the step) to 1.0, step 0.005, so the ceiling of any
   pass-rate curve lies inside it (a metric outside [0, 1], power law only: up to max + 10 x range).
   C_mid: 100 values log-spaced from the window start / 10 to
   100x the window end (the paper: "over the compute range"). Both can be set; a winner on the
   edge of either range is a warning.
2. B at each grid point: a bounded 1-D least-squares search (golden section over log B in
   [0.05, 20]), vectorised over the grid.
3. The default `method="fast"` runs the same procedure on a coarse grid (A step 0.025,
   16 C_mid values) and refines its three best points with SciPy's bounded `least_squares`
   over (A, log B, log C_mid[, R0]). `benchmarks/fit_speed.py` shows it agrees with the grid.
4. `R0` (when not fitted) is the mean metric at the smallest compute among all points given,
   before the window cut. Rows at compute 0 (the evaluation before training) only set R0: they
   never enter the fit window (log compute).
5. Uncertainty is not in the paper (which compares three seeds, +-0.02 on A): a residual
   bootstrap (residuals centred and inflated by sqrt(n / (n - p))), each replica refitted by
   `least_squares` warm-started at the point estimate, with R0 perturbed by the mean of as
   many resampled residuals as points it was measured from. Intervals are percentile intervals
   of the fitted *curve* (the truth), not of a new noisy observation.
6. The power law `A - D / C**B` is fitted over the same A range with `D` solved in closed form
   (linear least squares) for every (A, B).
7. `check_grid=True` (what `scalerl fit` and `scalerl watch` use) also runs the paper's grid and
   refines its winner the same way; the lower squared error of the two is kept. Where the paper's
   grid and the kept fit still differ by more than `AGREE_A` (0.01) on `A`, a warning gives both
   values and says which to trust: the kept fit is the least-squares optimum, the grid's A is
   moved along a flat valley of the error by its coarse C_mid steps, and the gap itself says the
   data do not pin the ceiling down to 0.01 (read the interval of A).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit

from scalerl.errors import ScaleRLError
from scalerl.scaling.curves import PowerLaw, Sigmoid

Model = Literal["sigmoid", "powerlaw"]
Method = Literal["fast", "grid"]

A_STEP = 0.005
N_C_MID = 100
B_BOUNDS = (0.05, 20.0)
MIN_POINTS = 5
MIN_DISTINCT_X = 3
FEW_POINTS = 10
CI_LEVEL = 0.9
AGREE_A = 0.01  # the fast fit and the paper's grid must agree this closely on A, or a warning says so
WIDE_A = 0.06  # an A interval wider than this is flagged (the paper calls +-0.02 a difference)
_CHUNK = 2_000_000  # grid points x data points evaluated at once (memory ~16 MB per array)


def window_start(
    x, frac: float, warns: list | None = None, points: int = MIN_POINTS, total: float | None = None
) -> float:
    """Start of a fit window that leaves out the first `frac` of the compute (of `total`, default
    the last of `x`), but never so much that fewer than `points` evaluations of non-zero compute
    remain in it (when there are that many at all: with fewer, the fit's own error says so). A
    moved start is noted in `warns`."""
    x = np.asarray(x, dtype=float)
    start = frac * float(x[-1] if total is None else total)
    positive = x[x > 0]
    if (positive >= start).sum() < points <= len(positive):
        start = float(positive[-points])
        if warns is not None:
            warns.append(
                f"the fit window starts at {start:.4g} instead of {frac} of the compute, to keep "
                f"{points} evaluations in it (evaluate more often to avoid this)"
            )
    return start


@dataclass
class FitResult:
    """One fitted curve. `ci` holds 90% bootstrap intervals; `boot` the replicas' parameters."""

    model: str
    A: float
    B: float
    C_mid: float | None
    R0: float | None
    rmse: float
    n_points: int
    ci: dict[str, tuple[float, float]]
    warnings: list[str]
    window: tuple[float, float]
    method: str = "fast"
    D: float | None = None
    boot: np.ndarray = field(default_factory=lambda: np.empty((0, 4)), repr=False)
    seed_fits: list["FitResult"] = field(default_factory=list, repr=False)
    a_on_edge: bool = False  # A at an end of its search range: the data do not pin the ceiling down
    grid_check: dict | None = None  # with check_grid: the paper's grid winner and whether it agrees on A

    def curve(self) -> Sigmoid | PowerLaw:
        if self.model == "sigmoid":
            return Sigmoid(self.A, self.B, self.C_mid, self.R0)
        return PowerLaw(self.A, self.B, self.D)

    def predict(self, C) -> np.ndarray:
        return self.curve().predict(np.asarray(C, dtype=float))

    def predict_interval(self, C, level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray]:
        """Bootstrap percentile interval of the fitted curve at compute `C`."""
        if len(self.boot) == 0:
            raise ScaleRLError("no bootstrap replicas: fit with n_bootstrap > 0 for intervals")
        C = np.atleast_1d(np.asarray(C, dtype=float))
        curves = np.stack([_curve_of(self.model, p).predict(C) for p in self.boot])  # (n_boot, len C)
        q = 100 * (1 - level) / 2
        return np.percentile(curves, q, axis=0), np.percentile(curves, 100 - q, axis=0)

    def seed_spread(self) -> dict | None:
        """Across-seed spread (standard deviation, ddof=1) of each parameter, when fitted per seed."""
        if not self.seed_fits:
            return None
        names = ["A", "B", "C_mid"] if self.model == "sigmoid" else ["A", "B", "D"]
        values = {n: [getattr(f, n) for f in self.seed_fits] for n in names}
        return {
            "n_seeds": len(self.seed_fits),
            "values": values,
            "std": {n: float(np.std(v, ddof=1)) for n, v in values.items()},
        }

    def to_dict(self, predict: Sequence[float] = ()) -> dict:
        """The `scalerl fit --json` object."""
        names = ["A", "B", "C_mid"] if self.model == "sigmoid" else ["A", "B", "D"]
        out = {
            "model": self.model,
            "A": self.A,
            "B": self.B,
            "C_mid": self.C_mid,
            "R0": self.R0,
            "rmse": self.rmse,
            "n_points": self.n_points,
            "ci": {n: list(self.ci[n]) if n in self.ci else None for n in names},
            "predictions": self._predictions(predict),
            "warnings": list(self.warnings),
        }
        if self.model == "powerlaw":
            out["D"] = self.D
        if self.grid_check is not None:
            out["grid_check"] = dict(self.grid_check)
        spread = self.seed_spread()
        if spread is not None:
            out["seeds"] = spread
        return out

    def _predictions(self, predict: Sequence[float]) -> list[dict]:
        C = np.asarray(list(predict), dtype=float)
        if C.size == 0:
            return []
        y = self.predict(C)
        lo, hi = self.predict_interval(C) if len(self.boot) else ([None] * C.size,) * 2
        rows = []
        for i, c in enumerate(C):
            row = {
                "x": float(c),
                "y": float(y[i]),
                "lo": None if lo[i] is None else float(lo[i]),
                "hi": None if hi[i] is None else float(hi[i]),
            }
            if self.seed_fits:
                row["seed_std"] = float(np.std([f.predict(c) for f in self.seed_fits], ddof=1))
            rows.append(row)
        return rows


def _curve_of(model: str, p: np.ndarray) -> Sigmoid | PowerLaw:
    return Sigmoid(*p[:4]) if model == "sigmoid" else PowerLaw(*p[:3])


# ---------------------------------------------------------------- inputs and diagnostics
@dataclass(frozen=True)
class _Data:
    x: np.ndarray  # compute in the window, > 0, sorted
    y: np.ndarray
    r0: float  # measured start
    n_r0: int  # points R0 was measured from


def _prepare(x, y, model: str, fit_min: float | None, fit_max: float | None) -> _Data:
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ScaleRLError(f"x and y differ in length ({x.size} vs {y.size})")
    if x.size == 0:
        raise ScaleRLError("no data points")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ScaleRLError("x and y must be finite numbers")
    if (x < 0).any():
        raise ScaleRLError(f"compute must be positive (0 is accepted as the starting point); got {x[x < 0][0]:g}")
    if not (x > 0).any():
        raise ScaleRLError("compute must be positive: every compute value is 0")
    if model == "sigmoid" and ((y < 0).any() or (y > 1).any()):
        bad = y[(y < 0) | (y > 1)][0]
        raise ScaleRLError(
            f"the sigmoid models a pass rate in [0, 1]; got metric value {bad:g} "
            "(use --model powerlaw for an unbounded metric)"
        )
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    start = x == x[0]
    keep = x > 0
    if fit_min is not None:
        keep &= x >= fit_min
    if fit_max is not None:
        keep &= x <= fit_max
    xw, yw = x[keep], y[keep]
    window = f"[{'-' if fit_min is None else f'{fit_min:.4g}'}, {'-' if fit_max is None else f'{fit_max:.4g}'}]"
    if xw.size < MIN_POINTS:
        raise ScaleRLError(
            f"only {xw.size} points in the fit window {window} (need at least {MIN_POINTS}); "
            "lower --fit-min / raise --fit-max or evaluate more often"
        )
    if np.unique(xw).size < MIN_DISTINCT_X:
        raise ScaleRLError(
            f"only {np.unique(xw).size} distinct compute value(s) among the {xw.size} points in the "
            f"fit window {window}: a curve needs at least {MIN_DISTINCT_X} (is the compute column "
            "the right one?)"
        )
    if np.ptp(yw) == 0:
        raise ScaleRLError(f"the metric is constant ({yw[0]:g}) over the fit window {window}: nothing to fit")
    return _Data(xw, yw, float(y[start].mean()), int(start.sum()))


def _ranges(d: _Data, a_range, c_mid_range) -> tuple[tuple[float, float], tuple[float, float]]:
    if a_range is None:  # a pass rate's ceiling is at most 1; other metrics get room above their max
        is_rate = d.y.min() >= 0 and d.y.max() <= 1
        a_lo = np.floor((d.y.max() - 0.1) / A_STEP) * A_STEP
        a_range = (max(0.0, a_lo), 1.0) if is_rate else (a_lo, d.y.max() + 10 * np.ptp(d.y))
    if c_mid_range is None:
        c_mid_range = (d.x[0] / 10, d.x[-1] * 100)
    if not (a_range[0] < a_range[1] and 0 < c_mid_range[0] < c_mid_range[1]):
        raise ScaleRLError(f"bad search range: A {a_range}, C_mid {c_mid_range} (need lo < hi, C_mid > 0)")
    return (float(a_range[0]), float(a_range[1])), (float(c_mid_range[0]), float(c_mid_range[1]))


def _diagnose(res: FitResult, d: _Data, a_rng, c_rng) -> list[str]:
    w = []
    if d.x.size < FEW_POINTS:
        w.append(
            f"only {d.x.size} points in the fit window; the fit is poorly constrained "
            f"({FEW_POINTS} or more recommended)"
        )
    if res.a_on_edge:
        w.append(
            f"A = {res.A:.3f} is on the edge of its search range [{a_rng[0]:.3f}, {a_rng[1]:.3f}]: "
            "the data do not pin the ceiling down"
        )
    if "A" in res.ci and res.ci["A"][1] - res.ci["A"][0] > WIDE_A:
        lo, hi = res.ci["A"]
        w.append(
            f"the {CI_LEVEL:.0%} interval of A ({lo:.3f} .. {hi:.3f}) is wider than {WIDE_A}: "
            "the ceiling is poorly determined by this window; extend it before trusting a forecast"
        )
    if min(abs(np.log(res.B / B_BOUNDS[0])), abs(np.log(res.B / B_BOUNDS[1]))) < 1e-3:
        w.append(f"B = {res.B:.3g} is on the edge of its search range {B_BOUNDS}")
    if res.model == "sigmoid":
        half_step = np.log(c_rng[1] / c_rng[0]) / (N_C_MID - 1) / 2
        if min(abs(np.log(res.C_mid / c_rng[0])), abs(np.log(res.C_mid / c_rng[1]))) < half_step:
            w.append(
                f"C_mid = {res.C_mid:.4g} is on the edge of its search range "
                f"[{c_rng[0]:.4g}, {c_rng[1]:.4g}]: the data do not pin the midpoint down"
            )
        if d.x[-1] < res.C_mid:
            w.append(
                f"the fit window ends at C = {d.x[-1]:.4g}, before C_mid = {res.C_mid:.4g}: the curve "
                "has not reached half its gain, so the ceiling A is poorly determined"
            )
    return w


# ---------------------------------------------------------------- the grid over (A, C_mid)
def _sse_sigmoid(logc, y, A, logcm, r0) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """SSE as a function of log B, for G grid points at once: returns (sse (G,), R0 (G,))."""

    def f(u: np.ndarray):
        s = expit(np.exp(u)[:, None] * (logc[None, :] - logcm[:, None]))  # (G, n)
        if r0 is None:  # R = R0 (1 - s) + A s: R0 by linear least squares
            t = 1.0 - s
            r = ((y - A[:, None] * s) * t).sum(1) / np.maximum((t * t).sum(1), 1e-300)
        else:
            r = np.full(len(A), r0)
        pred = r[:, None] + (A - r)[:, None] * s
        return ((y - pred) ** 2).sum(1), r

    return f


def _sse_power(logc, y, A) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """SSE of `A - D C^-B` as a function of log B, D by linear least squares: (sse (G,), D (G,))."""

    def f(u: np.ndarray):
        v = np.exp(-np.exp(u)[:, None] * logc[None, :])  # (G, n) = C^-B
        D = ((A[:, None] - y) * v).sum(1) / np.maximum((v * v).sum(1), 1e-300)
        return ((y - A[:, None] + D[:, None] * v) ** 2).sum(1), D

    return f


def _golden_logb(make_sse, G: int, n_iter: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimise each grid point's SSE over log B in B_BOUNDS by golden section: (log B, sse, aux)."""
    inv_phi = (np.sqrt(5) - 1) / 2
    lo, hi = np.full(G, np.log(B_BOUNDS[0])), np.full(G, np.log(B_BOUNDS[1]))
    c, d = hi - inv_phi * (hi - lo), lo + inv_phi * (hi - lo)
    fc, fd = make_sse(c)[0], make_sse(d)[0]
    for _ in range(n_iter):
        left = fc < fd  # the minimum lies in [lo, d]
        hi, lo = np.where(left, d, hi), np.where(left, lo, c)
        new = np.where(left, hi - inv_phi * (hi - lo), lo + inv_phi * (hi - lo))
        f_new = make_sse(new)[0]
        c, d, fc, fd = (
            np.where(left, new, d),
            np.where(left, c, new),
            np.where(left, f_new, fd),
            np.where(left, fc, f_new),
        )
    u = (lo + hi) / 2
    sse, aux = make_sse(u)
    return u, sse, aux


def _grid(model: str, d: _Data, a_values, c_values, fit_r0: bool, n_iter: int) -> np.ndarray:
    """Every (A, C_mid) grid point with its best B; returns the grid points' parameter rows
    sorted by SSE: (G, 5) columns A, B, C_mid, R0, sse (power law: A, B, D, nan, sse)."""
    logc = np.log(d.x)
    if model == "sigmoid":
        A, logcm = (g.ravel() for g in np.meshgrid(a_values, np.log(c_values), indexing="ij"))
    else:
        A, logcm = np.asarray(a_values, dtype=float), np.zeros(len(a_values))
    rows = []
    step = max(1, _CHUNK // d.x.size)
    for i in range(0, A.size, step):  # chunks of grid points bound the memory
        a, lcm = A[i : i + step], logcm[i : i + step]
        make = (
            _sse_sigmoid(logc, d.y, a, lcm, None if fit_r0 else d.r0)
            if model == "sigmoid"
            else _sse_power(logc, d.y, a)
        )
        u, sse, aux = _golden_logb(make, a.size, n_iter)
        if model == "sigmoid":
            rows.append(np.column_stack([a, np.exp(u), np.exp(lcm), aux, sse]))
        else:
            rows.append(np.column_stack([a, np.exp(u), aux, np.full(a.size, np.nan), sse]))
    table = np.concatenate(rows)
    return table[np.argsort(table[:, -1], kind="stable")]


# ---------------------------------------------------------------- bounded least-squares refinement
def _refine(model: str, d: _Data, start: np.ndarray, a_rng, c_rng, fit_r0: bool, r0: float) -> np.ndarray:
    """`least_squares` from `start` (A, B, C_mid, R0 | A, B, D); returns the same layout + sse."""
    logc = np.log(d.x)
    if model == "sigmoid":
        lo = [a_rng[0], np.log(B_BOUNDS[0]), np.log(c_rng[0])] + ([0.0] if fit_r0 else [])
        hi = [a_rng[1], np.log(B_BOUNDS[1]), np.log(c_rng[1])] + ([1.0] if fit_r0 else [])
        p0 = [start[0], np.log(start[1]), np.log(start[2])] + ([start[3]] if fit_r0 else [])

        def unpack(p):
            return p[0], np.exp(p[1]), np.exp(p[2]), (p[3] if fit_r0 else r0)

        def resid(p):
            a, b, cm, r = unpack(p)
            return r + (a - r) * expit(b * (logc - np.log(cm))) - d.y
    else:
        lo, hi = [a_rng[0], np.log(B_BOUNDS[0])], [a_rng[1], np.log(B_BOUNDS[1])]
        p0 = [start[0], np.log(start[1])]

        def unpack(p):
            v = np.exp(-np.exp(p[1]) * logc)
            return p[0], np.exp(p[1]), float(((p[0] - d.y) * v).sum() / max((v * v).sum(), 1e-300))

        def resid(p):
            a, b, D = unpack(p)
            return a - D * np.exp(-b * logc) - d.y

    lo, hi = np.asarray(lo), np.asarray(hi)
    p0 = np.clip(np.asarray(p0, dtype=float), lo + 1e-9 * (hi - lo), hi - 1e-9 * (hi - lo))
    sol = least_squares(resid, p0, bounds=(lo, hi), x_scale="jac")
    return np.array([*unpack(sol.x), float((sol.fun**2).sum())])


def _point_estimate(model, d, a_rng, c_rng, fit_r0, method: str) -> np.ndarray:
    if method == "grid":
        a_values = np.arange(a_rng[0], a_rng[1] + A_STEP / 2, A_STEP)
        c_values = np.geomspace(*c_rng, N_C_MID)
        return _grid(model, d, a_values, c_values, fit_r0, n_iter=40)[0]
    if method != "fast":
        raise ScaleRLError(f"unknown fit method {method!r} (expected 'fast' or 'grid')")
    a_values = np.linspace(*a_rng, max(3, int(round((a_rng[1] - a_rng[0]) / 0.025)) + 1))
    c_values = np.geomspace(*c_rng, 16)
    starts = _grid(model, d, a_values, c_values, fit_r0, n_iter=20)[:3]
    fits = [_refine(model, d, s, a_rng, c_rng, fit_r0, d.r0) for s in starts]
    return min(fits, key=lambda f: f[-1])


def _check_grid(model, d, est, a_rng, c_rng, fit_r0) -> tuple[np.ndarray, dict, list[str]]:
    """Run the paper's grid beside the fast fit; keep the lower-error of the fast fit and the grid
    winner refined; say whether the grid's A agrees within AGREE_A (departure 7)."""
    grid = _point_estimate(model, d, a_rng, c_rng, fit_r0, "grid")
    from_grid = _refine(model, d, grid, a_rng, c_rng, fit_r0, d.r0)
    if from_grid[-1] < est[-1]:
        est = from_grid
    gap = abs(float(est[0]) - float(grid[0]))
    check = {
        "A": float(grid[0]),
        "B": float(grid[1]),
        "sse": float(grid[-1]),
        "sse_fit": float(est[-1]),
        "agrees": bool(gap <= AGREE_A),
    }
    if model == "sigmoid":
        check["C_mid"] = float(grid[2])
    warns = []
    if not check["agrees"]:
        warns.append(
            f"the paper's grid procedure gives A = {grid[0]:.3f}, this fit A = {est[0]:.3f} (apart by "
            f"{gap:.3f} > {AGREE_A}): trust this fit, which has the lower squared error (the grid's "
            "coarse C_mid steps move its A along a flat valley), and read the gap as the ceiling "
            "not being pinned down to 0.01 by these points: use the interval of A"
        )
    return est, check, warns


def _bootstrap(model, d, est, a_rng, c_rng, fit_r0, n_boot: int, rng) -> np.ndarray:
    pred = _curve_of(model, est).predict(d.x)
    resid = d.y - pred
    n_par = 3 + (fit_r0 and model == "sigmoid")
    resid = (resid - resid.mean()) * np.sqrt(d.x.size / max(d.x.size - n_par, 1))
    reps = []
    for _ in range(n_boot):
        y_star = pred + rng.choice(resid, d.x.size)
        r0_star = d.r0 + rng.choice(resid, d.n_r0).mean()
        d_star = _Data(d.x, y_star, r0_star, d.n_r0)
        reps.append(_refine(model, d_star, est, a_rng, c_rng, fit_r0, r0_star)[:-1])
    n_col = 4 if model == "sigmoid" else 3
    return np.array(reps).reshape(n_boot, n_col)


def fit_curve(
    x,
    y,
    model: Model = "sigmoid",
    fit_min: float | None = None,
    fit_max: float | None = None,
    fit_r0: bool = False,
    n_bootstrap: int = 200,
    seed: int = 0,
    *,
    method: Method = "fast",
    a_range: tuple[float, float] | None = None,
    c_mid_range: tuple[float, float] | None = None,
    check_grid: bool = False,
) -> FitResult:
    """Fit `model` to (compute `x`, metric `y`) over [fit_min, fit_max]; see the module docstring.
    `check_grid`: also run the paper's grid and warn where it disagrees on A (departure 7)."""
    if model not in ("sigmoid", "powerlaw"):
        raise ScaleRLError(f"unknown model {model!r} (expected 'sigmoid' or 'powerlaw')")
    if fit_r0 and model != "sigmoid":
        raise ScaleRLError("fit_r0 (--fit-r0) applies to the sigmoid only; the power law has no R0")
    d = _prepare(x, y, model, fit_min, fit_max)
    a_rng, c_rng = _ranges(d, a_range, c_mid_range)
    est = _point_estimate(model, d, a_rng, c_rng, fit_r0, method)
    check, check_warns = None, []
    if check_grid and method == "fast":
        est, check, check_warns = _check_grid(model, d, est, a_rng, c_rng, fit_r0)
    boot = _bootstrap(model, d, est, a_rng, c_rng, fit_r0, n_bootstrap, np.random.default_rng(seed))
    names = ["A", "B", "C_mid", "R0"] if model == "sigmoid" else ["A", "B", "D"]
    q = 100 * (1 - CI_LEVEL) / 2
    ci = {
        n: (float(np.percentile(boot[:, i], q)), float(np.percentile(boot[:, i], 100 - q)))
        for i, n in enumerate(names)
        if len(boot) and not (n == "R0" and not fit_r0)
    }
    res = FitResult(
        model=model,
        A=float(est[0]),
        B=float(est[1]),
        C_mid=float(est[2]) if model == "sigmoid" else None,
        R0=float(est[3]) if model == "sigmoid" else None,
        D=float(est[2]) if model == "powerlaw" else None,
        rmse=float(np.sqrt(est[-1] / d.x.size)),
        n_points=int(d.x.size),
        ci=ci,
        warnings=[],
        window=(float(d.x[0]), float(d.x[-1])),
        method=method,
        boot=boot,
        a_on_edge=bool(min(abs(est[0] - a_rng[0]), abs(est[0] - a_rng[1])) < A_STEP / 2),
        grid_check=check,
    )
    res.warnings.extend(_diagnose(res, d, a_rng, c_rng) + check_warns)
    return res


def fit_seeds(runs: Sequence[tuple[np.ndarray, np.ndarray]], model: Model = "sigmoid", **kwargs) -> FitResult:
    """Several seeds of one configuration: one fit of all their points together (its bootstrap
    intervals), plus a fit per seed whose spread `FitResult.seed_spread()` reports."""
    if len(runs) < 2:
        raise ScaleRLError(f"fit_seeds needs at least 2 runs, got {len(runs)}")
    per_seed = [fit_curve(x, y, model, **{**kwargs, "n_bootstrap": 0}) for x, y in runs]
    x_all = np.concatenate([np.asarray(x, dtype=float) for x, _ in runs])
    y_all = np.concatenate([np.asarray(y, dtype=float) for _, y in runs])
    pooled = fit_curve(x_all, y_all, model, **kwargs)
    pooled.seed_fits = per_seed
    return pooled


TAIL_EVALS = 3  # the end of a run is the mean of its last three evaluations (one is too noisy)
FALL_SHARE = 0.1  # a curve "fell" when its end gave back at least this share of its gain
FALL_SE_MULT = 3.0  # ... and, where each evaluation's standard error is known, more than 3 of them


def find_fall(y, se=None, window: int = TAIL_EVALS, share: float = FALL_SHARE) -> dict | None:
    """Did the curve fall after its peak? A sigmoid only rises, so the fit of a run that collapsed
    describes neither its peak nor its end, and nothing forecasts a collapse that has not started.

    `y` in compute order; `se`, optionally, each evaluation's standard error. The peak is the best
    mean of `window` consecutive evaluations, the end the mean of the last `window`; the curve fell
    when peak - end is at least `share` of its gain (peak - first evaluation) and, with `se`, more
    than FALL_SE_MULT standard errors of that difference. In the 51 runs of the committed study
    (docs/study.md) drop / gain split into 0.00-0.06 (the 45 runs that stayed up) and 0.17-1.09
    (the six that collapsed); 0.1 sits between the two.

    Returns None with fewer than 2 `window` evaluations (no peak apart from the end), else
    {fell, peak, peak_index (the peak window's last evaluation), end, drop, gain}."""
    y = np.asarray(y, dtype=float)
    if window < 1 or y.size < 2 * window:
        return None
    means = np.convolve(y, np.ones(window) / window, "valid")
    i = int(np.argmax(means))
    peak, end = float(means[i]), float(means[-1])
    drop, gain = peak - end, peak - float(y[0])
    fell = gain > 0 and drop >= share * gain
    if fell and se is not None:
        se = np.asarray(se, dtype=float)
        noise = np.sqrt(np.mean(se[i : i + window] ** 2) / window + np.mean(se[-window:] ** 2) / window)
        fell = bool(np.isfinite(noise)) and drop > FALL_SE_MULT * noise
    return {"fell": bool(fell), "peak": peak, "peak_index": i + window - 1, "end": end, "drop": drop, "gain": gain}


def fall_warning(f: dict | None, x=None) -> str | None:
    """The one-line warning about a fall (None when the curve did not fall)."""
    if not f or not f["fell"]:
        return None
    at = f" (at {x[f['peak_index']]:.4g})" if x is not None else ""
    return (
        f"the curve fell after its peak: {f['peak']:.3f}{at} -> {f['end']:.3f} at the end, a drop of "
        f"{f['drop']:.3f} against a gain of {f['gain']:.3f} from its start; "
        "a sigmoid does not describe a falling run, so its "
        "ceiling and forecast do not hold (look for the instability in the training metrics: lengths, "
        "truncation, gradient norm, staleness)"
    )


FIRST_HALF_WINDOW = 0.1  # the frozen method's window starts at this share of the final compute (docs/forecasting.md)


def ruler(x, y, at) -> float:
    """The ruler baseline: the straight line through the last two evaluations of (`x`, `y`) with
    distinct compute > 0, against log compute, evaluated at the computes `at` (their mean),
    clipped to [0, 1] (a pass rate cannot leave it). NaN with fewer than two such evaluations."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = x > 0
    x, y = x[keep], y[keep]
    if x.size < 2 or x[-1] == x[-2]:
        return float("nan")
    slope = (y[-1] - y[-2]) / (np.log(x[-1]) - np.log(x[-2]))
    line = y[-1] + slope * (np.log(np.asarray(at, dtype=float)) - np.log(x[-1]))
    return float(np.clip(np.mean(line), 0.0, 1.0))


def _fitted_mean_interval(fit: FitResult, at: np.ndarray, level: float) -> list[float]:
    """The bootstrap interval of the fitted curve's mean over the computes `at`."""
    means = np.array([_curve_of(fit.model, p).predict(at).mean() for p in fit.boot])
    q = 100 * (1 - level) / 2
    return [float(np.percentile(means, q)), float(np.percentile(means, 100 - q))]


def first_half_prediction(
    x,
    y,
    frac: float = FIRST_HALF_WINDOW,
    tail: int = TAIL_EVALS,
    fit_r0: bool = False,
    cut: float = 0.5,
    n_bootstrap: int = 0,
    level: float = CI_LEVEL,
    model: Model = "sigmoid",
) -> dict:
    """The paper's predictability check on one run, frozen on 2026-11-24 (docs/forecasting.md,
    "The first-half check"): Eq. 1 with R0 fixed at the run's starting pass rate (the evaluation at
    the smallest compute), A, B and C_mid fitted to the evaluations in the first half of the compute
    (x <= x[-1] / 2) from `frac` of the final compute on (the paper leaves out its first 1.5k of
    16k GPU-hours in its leave-one-out study: a tenth), moved earlier only to keep `MIN_POINTS`
    evaluations in the window; then extrapolated to the last `tail` evaluations and compared with
    their mean. `fit_r0=True` (R0 fitted too) is a departure from the frozen method, kept for
    comparison only. `cut` (default 0.5) moves the end of the fitted part to x <= cut * x[-1]
    (benchmarks/forecast_real.py forecasts from 30%, 50% and 70%); the method is the same.
    `n_bootstrap` > 0 adds `interval`, the `level` bootstrap interval of the predicted end (the
    fitted curve's mean over the last `tail` computes), and `covered` (the measured end inside it).
    `model="powerlaw"` fits the power law over the same window instead (a baseline, not the method).

    Beside the fit, three naive predictors of the end that use the same first-half evaluations only:
    the last one (`baseline_last`), the best one (`baseline_best`) and the ruler (`baseline_ruler`,
    `ruler`: a line through the last two against log compute, extrapolated to the end). The fit
    earns its keep where its error is smaller than the last's and the best's (`beat_baselines`, the
    frozen definition) and the ruler's (`beat_ruler`). `at_half` is the pass rate interpolated at
    the cut (half the final compute) and `left` = measured - at_half: what the second half still
    had to forecast (with `left_share` = left / (measured - start)).

    Returns {A, B, C_mid, R0, points, half_frac, window_from, predicted, measured, error,
    baseline_last, baseline_last_error, baseline_best, baseline_best_error, baseline_ruler,
    baseline_ruler_error, beat_baselines, beat_ruler, start, at_half, left, left_share, method, cut}
    (+ interval, covered): errors are predicted - measured.
    Raises ScaleRLError when the first half holds too few points for a fit."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    half = x <= x[-1] * cut
    start = window_start(x[half], frac, total=x[-1])
    fit = fit_curve(x[half], y[half], model, fit_min=start, fit_r0=fit_r0, n_bootstrap=n_bootstrap, seed=0)
    end = slice(-min(tail, len(x)), None)
    frozen = not fit_r0 and frac == FIRST_HALF_WINDOW and model == "sigmoid"
    method = "frozen" if frozen else f"departure (model={model}, fit_r0={fit_r0}, window from {frac} of the compute)"
    out = _first_half_row(x, y, half, end, fit, start, cut, method)
    if n_bootstrap > 0:
        out["interval"] = _fitted_mean_interval(fit, x[end], level)
        out["covered"] = bool(out["interval"][0] <= out["measured"] <= out["interval"][1])
    return out


def _first_half_row(
    x: np.ndarray, y: np.ndarray, half: np.ndarray, end: slice, fit: FitResult, start: float, cut: float, method: str
) -> dict:
    """`first_half_prediction`'s result but the interval: the fit of the first half (`half`) against the mean
    of the evaluations `end`, the three naive baselines, and what the second half still had to forecast."""
    predicted, measured = float(np.mean(fit.predict(x[end]))), float(np.mean(y[end]))
    last, best, rule = float(y[half][-1]), float(np.max(y[half])), ruler(x[half], y[half], x[end])
    error = predicted - measured
    r_start = float(np.mean(y[x == x.min()]))
    at_half = float(np.interp(x[-1] * cut, x, y))
    gain = measured - r_start
    return {
        "A": fit.A,
        "B": fit.B,
        "C_mid": fit.C_mid,
        "R0": fit.R0,
        "points": int(half.sum()),
        "half_frac": float(x[half][-1] / x[-1]),
        "window_from": start,
        "predicted": predicted,
        "measured": measured,
        "error": error,
        "baseline_last": last,
        "baseline_last_error": last - measured,
        "baseline_best": best,
        "baseline_best_error": best - measured,
        "baseline_ruler": rule,
        "baseline_ruler_error": rule - measured,
        "beat_baselines": bool(abs(error) < min(abs(last - measured), abs(best - measured))),
        "beat_ruler": bool(abs(error) < abs(rule - measured)),
        "start": r_start,
        "at_half": at_half,
        "left": measured - at_half,
        "left_share": (measured - at_half) / gain if gain > 0 else None,
        "cut": cut,
        "method": method,
    }


def subset_first_half_prediction(x, subsets: dict[str, np.ndarray], tail: int = TAIL_EVALS) -> dict:
    """A departure from the frozen method, exploratory (written 2026-11-26 before the axes study's
    last 8 runs finished, `benchmarks/subset_forecast.py`; docs/study.md): where the pass rate is
    the mean of subsets held in equal shares (a ladder's rungs) learnt at different compute, one
    sigmoid fitted to the first half bends with the early subsets and under-predicts the end. Here
    each subset's own curve gets the frozen method's first-half fit (`first_half_prediction`); a
    subset whose fit fails (a flat curve: never passing, or learnt before the window) is predicted
    by its last first-half evaluation; the forecast is their mean.

    Returns {predicted, subsets: {name: {predicted, fitted}}}; `fitted` False where the fallback
    was used."""
    x = np.asarray(x, dtype=float)
    if not subsets:
        raise ScaleRLError("subset_first_half_prediction: no subsets")
    half = x <= x[-1] / 2
    each = {}
    for name, y in sorted(subsets.items()):
        y = np.asarray(y, dtype=float)
        try:
            each[name] = {"predicted": first_half_prediction(x, y, tail=tail)["predicted"], "fitted": True}
        except ScaleRLError:
            each[name] = {"predicted": float(y[half][-1]), "fitted": False}
    return {"predicted": float(np.mean([v["predicted"] for v in each.values()])), "subsets": each}


def first_half_check(x, y) -> dict | None:
    """`first_half_prediction(x, y)` (the frozen method) where the first half of the compute holds
    `MIN_POINTS` evaluations past compute 0; None where it does not (nothing to check), and
    {"error_reason": ...} where the fit itself fails."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size == 0 or ((x <= x[-1] / 2) & (x > 0)).sum() < MIN_POINTS:
        return None
    try:
        return first_half_prediction(x, y)
    except ScaleRLError as exc:
        return {"error_reason": str(exc)}
