"""The study's fits: every run's curve, every configuration's seeds pooled, every subset's curve.

For every run: a sigmoid fitted to its validation curve (x = compute, y = `val/pass_rate`) by the
one forecast specification (`scalerl.scaling.spec`: the window, the grid check and the bounds of
`scalerl fit`), and the predictability check (`scalerl.scaling.outlook.first_half_check`: the
frozen method of docs/forecasting.md, its prediction of the mean of the last three evaluations
beside naive predictors from the same evaluations). For every configuration: its seeds pooled by
the same specification (`spec_fit_pooled`: one window over all their points, one fit of all of
them plus one per seed for the spread of A, B, C_mid), or its single run's fit; the same for each
validation subset (a rung, a domain). Rows are sorted as the paper's tables are: by A, then B.

Departure from the paper: the paper fits after an early-transient cutoff of ~1.5k GPU-hours; here
the first `eval.fit_min_frac` of the compute is left out (as `scalerl train` and `scalerl fit` do).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.optimize import nnls

from scalerl.errors import ScaleRLError
from scalerl.run.compute import FIT_X
from scalerl.run.metrics import read_rows
from scalerl.scaling import FitResult, find_fall, read_metrics, subset_first_half_prediction
from scalerl.scaling.outlook import first_half_check as outlook_half_check
from scalerl.scaling.readers import read_column_at
from scalerl.scaling.spec import SPEC, spec_fit, spec_fit_pooled
from scalerl.study.activity import summarise_activity
from scalerl.study.runner import ACTIVITY_FILE, DONE_FILE, RunSpec, failure, is_done
from scalerl.study.variants import Variant

SUBSET_BOOTSTRAP = 100  # bootstrap replicas of each per-subset fit (at most the study's own)
END_EVALS = 3  # the end pass rate averages this many last evaluations
AT_COMPUTE_WINDOW = 0.75  # the pass rate at compute C averages the evaluations in [0.75 C, C]
Y_COLUMN = "val/pass_rate"
PARTITION_RESIDUAL = 0.002  # subsets are a partition when shares reproduce the pass rate within this
SHARE_TOLERANCE = 0.05  # ... and in near-equal shares when each share is within this of 1/K


@dataclass
class RunFit:
    name: str
    seed: int
    x: np.ndarray
    y: np.ndarray
    finished: bool
    failed: str | None = None  # the training error that stopped the run
    fit: FitResult | None = None
    half: dict | None = None  # first_half_check: predicted / measured end, error, baselines
    error: str | None = None  # why a fit could not be made
    fall: dict | None = None  # find_fall: did the curve fall after its peak (None: too few evals)
    subsets: dict[str, np.ndarray] = field(default_factory=dict)  # val/pass_rate/<subset> at each x
    half_subsets: dict | None = None  # subset_first_half_prediction (exploratory), where the subsets
    # are the validation set in equal shares (`equal_share_subsets`)
    activity: dict | None = None  # read_activity: what says whether a swapped component acted

    @property
    def never_passing(self) -> frozenset[str]:
        """The validation subsets (rungs, domains) at 0 in every evaluation."""
        return frozenset(k for k, v in self.subsets.items() if not (v > 0).any())

    @property
    def fell(self) -> bool:
        return bool(self.fall and self.fall["fell"])

    @property
    def prediction_error(self) -> float | None:
        return self.half["error"] if self.half and "error" in self.half else None


@dataclass
class ConfigFit:
    name: str
    swaps: str
    runs: list[RunFit]
    fit: FitResult | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    trunk_dtype: str = "fp32"  # what its runs' trunk computed in (run_trunk_dtype)
    frac: float = SPEC.fit_min_frac  # the share of the compute its fit leaves out (eval.fit_min_frac)
    subset_fits: dict[str, FitResult | str] = field(default_factory=dict)  # per subset: its fit, or why none
    variant: Variant | None = None  # what it runs (its activity check), where it came from a study's plan

    def spread(self, param: str) -> float | None:
        s = self.fit.seed_spread() if self.fit is not None else None
        return None if s is None else s["std"][param]

    def seeds(self) -> int:
        """How many per-seed fits the seed spread is measured on (1: a single run's fit, no spread)."""
        s = self.fit.seed_spread() if self.fit is not None else None
        return 1 if s is None else int(s["n_seeds"])

    def finals(self) -> np.ndarray:
        """Each finished run's end pass rate (mean of its last END_EVALS evaluations): the
        model-free comparison, less noisy than one evaluation."""
        return np.array([float(r.y[-END_EVALS:].mean()) for r in self.runs if r.finished and len(r.y)])

    def at_compute(self, C: float) -> np.ndarray:
        """Each finished run's pass rate at compute C (mean of its evaluations in [0.75 C, C]):
        the model-free comparison at equal compute; runs with no evaluation there are left out."""
        out = []
        for r in self.runs:
            inside = (r.x >= AT_COMPUTE_WINDOW * C) & (r.x <= C * (1 + 1e-9))
            if r.finished and inside.any():
                out.append(float(r.y[inside].mean()))
        return np.array(out)

    def final_compute(self) -> float | None:
        xs = [float(r.x[-1]) for r in self.runs if r.finished and len(r.x)]
        return float(np.mean(xs)) if xs else None

    def a_on_edge(self) -> bool:
        return self.fit is not None and self.fit.a_on_edge


def fit_run(name: str, seed: int, path: Path, x_col: str, frac: float, n_bootstrap: int) -> RunFit:
    """The run's own fit and its first-half prediction of the final evaluation."""
    try:
        x, y, _ = read_metrics(path / "metrics.jsonl", x_col, Y_COLUMN)
    except ScaleRLError as exc:  # e.g. a run interrupted before its first evaluation
        return RunFit(name, seed, np.empty(0), np.empty(0), is_done(path), failure(path), error=str(exc))
    run = RunFit(
        name,
        seed,
        x,
        y,
        is_done(path),
        failure(path),
        subsets=read_subsets(path / "metrics.jsonl", x_col, x),
        activity=read_activity(path),
    )
    run.fall = find_fall(y, read_column_at(path / "metrics.jsonl", x_col, Y_COLUMN + "_se", x))
    try:
        # the one forecast specification (scalerl.scaling.spec), with the study's replica count
        run.fit = spec_fit(x, y, frac, spec=replace(SPEC, n_bootstrap=n_bootstrap))
    except ScaleRLError as exc:  # too few points or a flat curve: reported in the table, not fatal
        run.error = str(exc)
    half = outlook_half_check(x, y)  # the default forecast, its calibrated interval and identification
    if half is not None and "error_reason" in half:
        run.error = run.error or half["error_reason"]
    else:
        run.half = half
    parts = equal_share_subsets(y, run.subsets)
    if run.half is not None and parts:
        got = subset_first_half_prediction(x, parts)
        run.half_subsets = {**got, "error": got["predicted"] - run.half["measured"]}
    return run


def read_activity(run_dir: Path) -> dict | None:
    """The run's `summarise_activity`: kept in `ACTIVITY_FILE` when the run is a study's small form
    (scalerl.study.runner.archive_run), else read from its metrics (of a small form without that
    file: only its last training row, which the activity checks know)."""
    kept = run_dir / ACTIVITY_FILE
    if kept.is_file():
        return json.loads(kept.read_text())
    return summarise_activity(read_rows(run_dir / "metrics.jsonl"))


def equal_share_subsets(y: np.ndarray, subsets: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The run's subsets when they split the validation set in near-equal shares, as a ladder's rungs
    do (each prompt's rung is drawn at random, so the shares are about, not exactly, 1/K): the shares
    estimated from the curves (non-negative least squares, summing to 1) reproduce the pass rate
    within `PARTITION_RESIDUAL` at every evaluation and each is within `SHARE_TOLERANCE` of 1/K.
    None otherwise (no subsets; overlapping ones, such as a mixed task's domains beside its rungs)."""
    if len(subsets) < 2:
        return None
    S = np.stack(list(subsets.values()), axis=1)
    tie = 100.0  # the row that holds the shares' sum at 1
    shares, _ = nnls(np.vstack([S, np.full((1, S.shape[1]), tie)]), np.append(y, tie))
    if float(np.max(np.abs(S @ shares - y))) > PARTITION_RESIDUAL:
        return None
    return subsets if bool(np.all(np.abs(shares - 1 / len(subsets)) <= SHARE_TOLERANCE)) else None


def read_subsets(metrics: Path, x_col: str, x: np.ndarray) -> dict[str, np.ndarray]:
    """Each `val/pass_rate/<subset>` column (a rung of a ladder, a domain of a mix) at the run's
    evaluations `x`; a subset not logged at every one of them is left out."""
    names: set[str] = set()
    with open(metrics) as f:
        for line in f:
            row = json.loads(line) if line.strip() else {}
            names.update(
                k[len(Y_COLUMN) + 1 :]
                for k, v in row.items()
                if k.startswith(Y_COLUMN + "/") and isinstance(v, (int, float))
            )
    out = {}
    for name in sorted(names):
        values = read_column_at(metrics, x_col, f"{Y_COLUMN}/{name}", x)
        if values is not None:
            out[name] = values
    return out


def pooled_fit(curves: Sequence[tuple[np.ndarray, np.ndarray]], frac: float, n_bootstrap: int) -> FitResult:
    """The fit of one configuration's curves (each seed's (x, y)) by the one forecast specification,
    `scalerl.scaling.spec.spec_fit_pooled`: one window over all their points, the seeds pooled (one
    curve: its own fit), the grid check; `n_bootstrap` replicas. A moved window start is a warning."""
    warns: list[str] = []
    fit = spec_fit_pooled(curves, frac, warns, replace(SPEC, n_bootstrap=n_bootstrap))
    fit.warnings[:0] = warns
    return fit


def fit_config(
    name: str,
    swaps: str,
    runs: list[RunFit],
    frac: float,
    n_bootstrap: int,
    trunk_dtype: str = "fp32",
    variant: Variant | None = None,
    subsets: bool = True,
) -> ConfigFit:
    """The configuration's fit (`pooled_fit`) of its finished runs (unfinished ones only while none
    has finished) and, with `subsets`, each subset's (`fit_subsets`)."""
    cfg = ConfigFit(name, swaps, runs, trunk_dtype=trunk_dtype, frac=frac, variant=variant)
    finished = [r for r in runs if r.finished and len(r.x)]
    usable = finished or [r for r in runs if len(r.x)]
    if not usable:
        cfg.error = "no evaluations yet"
    else:
        try:
            cfg.fit = pooled_fit([(r.x, r.y) for r in usable], frac, n_bootstrap)
        except ScaleRLError as exc:
            cfg.error = str(exc)
    if subsets:
        cfg.subset_fits = fit_subsets(usable, frac, min(n_bootstrap, SUBSET_BOOTSTRAP))
    return cfg


def fit_subsets(runs: Sequence[RunFit], frac: float, n_bootstrap: int) -> dict[str, FitResult | str]:
    """Eq. 1 fitted to each subset's curve (a rung, a domain) over the configuration's runs, as the
    whole curve is (`pooled_fit`); a subset that never passed gets the reason."""
    names = sorted(set().union(*(r.subsets for r in runs))) if runs else []
    out: dict[str, FitResult | str] = {}
    for name in names:
        curves = [(r.x, r.subsets[name]) for r in runs if name in r.subsets]
        if not any((y > 0).any() for _, y in curves):
            out[name] = "never passed"
            continue
        try:
            out[name] = pooled_fit(curves, frac, n_bootstrap)
        except ScaleRLError as exc:
            out[name] = str(exc)
    return out


def subset_ceiling(c: ConfigFit) -> dict | None:
    """The configuration's ceiling as the sum of its subsets' ceilings (issue 47 item 4): where the
    validation set is subsets in equal shares (a ladder's rungs, `equal_share_subsets`), the pass rate
    is their mean, so its ceiling is the mean of each subset's fitted `A` (a subset that never passed
    counts 0). Chosen because the rungs are learnt at very different compute: one sigmoid through
    their mean bends with the early rungs and its `A` is not the ceiling of any of them. `lo`/`hi`:
    the means of the subsets' 90% bounds (as if the subsets moved together: the wider interval).
    None where the subsets are not equal shares of every run's pass rate or a subset has no fit."""
    runs = [r for r in c.runs if len(r.y)]
    if not c.subset_fits or not runs or any(equal_share_subsets(r.y, r.subsets) is None for r in runs):
        return None
    a, lo, hi = [], [], []
    for _, f in sorted(c.subset_fits.items()):
        if f == "never passed":
            a.append(0.0), lo.append(0.0), hi.append(0.0)
        elif isinstance(f, FitResult):
            b = f.ci.get("A", (f.A, f.A)) if f.ci else (f.A, f.A)
            a.append(f.A), lo.append(float(b[0])), hi.append(float(b[1]))
        else:
            return None
    return {"A": float(np.mean(a)), "lo": float(np.mean(lo)), "hi": float(np.mean(hi)), "subsets": len(a)}


def sort_key(c: ConfigFit) -> tuple:
    """The paper's order: by A, then B, best first; configurations without a fit last."""
    return (c.fit is None, -(c.fit.A if c.fit else 0.0), -(c.fit.B if c.fit else 0.0), c.name)


def fit_study(specs: Sequence[RunSpec], x_col: str = FIT_X, n_bootstrap: int = SPEC.n_bootstrap) -> list[ConfigFit]:
    """Fit every run with a metrics file, then every configuration, in plan order."""
    configs: dict[str, ConfigFit] = {}
    for spec in specs:
        c = configs.setdefault(spec.variant.name, ConfigFit(spec.variant.name, spec.variant.swaps, []))
        c.notes = list(dict.fromkeys(c.notes + spec.notes))
        if not c.runs:  # a configuration's seeds share their precision: taken from its first run
            c.trunk_dtype = run_trunk_dtype(spec)
        if (spec.run_dir / "metrics.jsonl").is_file():
            c.runs.append(
                fit_run(spec.variant.name, spec.seed, spec.run_dir, x_col, spec.cfg.eval.fit_min_frac, n_bootstrap)
            )
        elif failure(spec.run_dir) is not None:  # failed before its first evaluation: still reported
            c.runs.append(
                RunFit(
                    spec.variant.name,
                    spec.seed,
                    np.empty(0),
                    np.empty(0),
                    False,
                    failure(spec.run_dir),
                    error="no evaluations",
                )
            )
    frac = specs[0].cfg.eval.fit_min_frac if specs else SPEC.fit_min_frac
    variants = {s.variant.name: s.variant for s in specs}
    return [
        fit_config(c.name, c.swaps, c.runs, frac, n_bootstrap, c.trunk_dtype, variants[c.name])
        for c in configs.values()
    ]


def run_trunk_dtype(spec: RunSpec) -> str:
    """What the run's trunk computed in: as its done.json recorded it (resolved where it trained),
    else its config's `model.compute_dtype`, 'auto' resolved on this machine."""
    done = spec.run_dir / DONE_FILE
    if done.is_file():
        recorded = json.loads(done.read_text()).get("compute_dtype")
        if recorded is not None:
            return str(recorded)
    from scalerl.models import compute_dtype

    return compute_dtype(spec.cfg.model)
