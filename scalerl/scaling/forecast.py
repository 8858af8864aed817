"""One forecast of one run, as `scalerl fit` and `scalerl watch` make it: read the run (a framework
preset, derived compute), leave out the early window, fit with the grid check, add the verdict.

    opts = Options(preset="trl", compute=Compute("wall", devices=1))
    series = read(path, opts); fit = fit_series(series, opts); out = forecast_dict(series, fit, opts)

Departures from the paper:
1. The early window. The paper leaves out its first ~1.5k GPU-hours of ~16k (about a tenth) as an
   early transient. Here the first `fit_min_frac` (default 0.1) of the run's compute is left out,
   unless that leaves fewer than 5 evaluations (`window_start`); `fit_min` sets it in compute units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from scalerl.errors import ScaleRLError
from scalerl.scaling.fit import FitResult, fall_warning, find_fall, fit_curve, fit_seeds
from scalerl.scaling.outlook import compute_for as outlook_compute_for
from scalerl.scaling.outlook import first_half_check as half_check
from scalerl.scaling.outlook import outlook
from scalerl.scaling.outlook import stop_decision as outlook_stop
from scalerl.scaling.outlook import verdict as outlook_verdict
from scalerl.scaling.report import SEED_MARGIN, verdict
from scalerl.scaling.sources import Compute, Series, read_run
from scalerl.scaling.spec import SPEC, spec_window
from scalerl.scaling.stop import compute_for, stop_decision

FIT_MIN_FRAC = SPEC.fit_min_frac


@dataclass(frozen=True)
class Options:
    y: str | None = None
    x: str | None = None
    preset: str | None = None
    compute: Compute | None = None
    reward_to_pass: bool = False
    fit_min: float | None = None
    fit_max: float | None = None
    fit_min_frac: float = FIT_MIN_FRAC
    model: str = "sigmoid"
    fit_r0: bool = SPEC.fit_r0  # the defaults are the one forecast specification (scalerl.scaling.spec)
    method: str = SPEC.method
    n_bootstrap: int = SPEC.n_bootstrap
    seed: int = SPEC.seed
    a_range: tuple[float, float] | None = None
    check_grid: bool = SPEC.check_grid
    predict: tuple[float, ...] = ()
    targets: tuple[float, ...] = ()  # --target: the compute at which the run reaches these values
    budget: float | None = None  # --budget: the gain left from here to this compute, and the stop rule
    stop_below: float = SEED_MARGIN  # --stop-when: the stop rule's threshold on the gain's upper end

    def check(self) -> None:
        """One-line errors for values that cannot make sense (before any file is read)."""
        if self.budget is not None and not (math.isfinite(self.budget) and self.budget > 0):
            raise ScaleRLError(f"--budget {self.budget:g}: expected a positive, finite compute")
        if not (math.isfinite(self.stop_below) and self.stop_below > 0):
            raise ScaleRLError(f"--stop-when {self.stop_below:g}: expected a positive gain (e.g. 0.02)")
        for t in self.targets:
            if not math.isfinite(t) or (self.model == "sigmoid" and not 0 < t <= 1):
                raise ScaleRLError(f"--target {t:g}: expected a pass rate in (0, 1]")
        for c in self.predict:
            if not (math.isfinite(c) and c > 0):
                raise ScaleRLError(f"--predict {c:g}: expected a positive, finite compute")
        if self.n_bootstrap < 1:
            raise ScaleRLError(f"--bootstrap {self.n_bootstrap}: expected at least 1 replica")
        if not (0 <= self.fit_min_frac < 1):
            raise ScaleRLError(f"--fit-min-frac {self.fit_min_frac:g}: expected a fraction in [0, 1)")
        for name in ("fit_min", "fit_max"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ScaleRLError(f"--{name.replace('_', '-')} {v:g}: expected a finite compute >= 0")
        if self.a_range is not None:
            lo, hi = self.a_range
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ScaleRLError(f"--a-range {lo:g} {hi:g}: expected finite LO < HI")
            if self.model == "sigmoid" and not (0 <= lo and hi <= 1):
                raise ScaleRLError(f"--a-range {lo:g} {hi:g}: the sigmoid's ceiling is a pass rate, in [0, 1]")
        if self.compute is not None:
            self.compute.check()


def read(path: str | Path, o: Options) -> Series:
    return read_run(path, y=o.y, x=o.x, preset=o.preset, compute=o.compute, reward_to_pass=o.reward_to_pass)


def _kwargs(o: Options, fit_min: float | None) -> dict:
    return dict(
        model=o.model,
        fit_min=fit_min,
        fit_max=o.fit_max,
        fit_r0=o.fit_r0,
        n_bootstrap=o.n_bootstrap,
        seed=o.seed,
        method=o.method,
        a_range=o.a_range,
        check_grid=o.check_grid,
    )


def _fit_min(x: np.ndarray, o: Options, warns: list[str]) -> float | None:
    """`--fit-min`, else the specification's window (`spec_window`; seeds pooled: over all their points)."""
    return o.fit_min if o.fit_min is not None else spec_window(x, o.fit_min_frac, warns)


def fit_series(s: Series, o: Options) -> FitResult:
    """Fit one run; its read warnings come first among the fit's."""
    warns = list(s.warnings)
    fit = fit_curve(s.x, s.y, **_kwargs(o, _fit_min(s.x, o, warns)))
    fit.warnings[:0] = warns
    fell = fall_warning(find_fall(s.y), s.x)
    if fell:
        fit.warnings.append(fell)
    return fit


def fit_pooled(runs: Sequence[Series], o: Options) -> FitResult:
    """Seeds of one configuration: `fit_seeds` over all of them, one window for all."""
    warns = [w for s in runs for w in s.warnings]
    fit = fit_seeds([(s.x, s.y) for s in runs], **_kwargs(o, _fit_min(np.concatenate([s.x for s in runs]), o, warns)))
    fit.warnings[:0] = warns
    for i, s in enumerate(runs):
        fell = fall_warning(find_fall(s.y), s.x)
        if fell:
            fit.warnings.append(f"seed {i + 1} of {len(runs)}: {fell}")
    return fit


def forecast_dict(s: Series, fit: FitResult, o: Options) -> dict:
    """The `--json` object of one run: the fit, how compute was derived, the window, whether the
    ceiling is identified (`identified`, `ceiling`, `identification`: scalerl.scaling.identify),
    the point forecasts with their calibrated 90% intervals (`predictions`), whether the curve fell
    after its peak (`find_fall`, None with too few evaluations), the verdict, and the first-half
    check with its naive baselines (`scalerl.scaling.outlook.first_half_check`; None where the
    first half holds too few evaluations)."""
    out = fit.to_dict()
    out["x"], out["y"] = s.x_name, s.y_name
    out["compute"] = dict(s.how)
    out["window"] = list(fit.window)
    fall = find_fall(s.y)
    out["fall"] = fall
    order = np.argsort(s.x, kind="stable")
    look = outlook(s.x, s.y, fit) if fit.model == "sigmoid" else None
    if look is None:
        out["identified"] = False
        out["ceiling"] = {
            "identified": False,
            "A": None,
            "text": "the power law's ceiling is not identified by "
            "scalerl (the identification and the calibrated interval are the sigmoid's)",
        }
        out["predictions"] = fit.to_dict(o.predict)["predictions"]
    else:
        out.update(look.to_dict())
        out["predictions"] = look.predictions(o.predict)
    out["first_half_fit"] = half_check(s.x[order], s.y[order])
    positive = s.x > 0
    if positive.any() and look is not None:
        last = int(np.flatnonzero(positive)[-1])
        out["verdict"] = outlook_verdict(look, float(s.x[last]), float(s.y[last]), SEED_MARGIN, fall=fall)
        if o.budget is not None:
            out["budget"] = outlook_stop(look, float(s.x[last]), o.budget, o.stop_below)
    elif positive.any():
        last = int(np.flatnonzero(positive)[-1])
        out["verdict"] = verdict(fit, float(s.x[last]), float(s.y[last]), fall=fall)
        if o.budget is not None:
            out["budget"] = stop_decision(fit, float(s.x[last]), o.budget, o.stop_below)
    if o.targets:
        out["targets"] = [outlook_compute_for(look, t) if look is not None else compute_for(fit, t) for t in o.targets]
    return finite_json(out)


def finite_json(value):
    """`value` with every non-finite float replaced by None (JSON has no NaN or Infinity)."""
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
