"""The study report: fits per configuration, predictability per run, differences from the base.

For every run: a sigmoid fitted to its validation curve (x = compute, y = `val/pass_rate`),
and the predictability check (`scalerl.scaling.first_half_prediction`, the frozen method of
docs/forecasting.md): a sigmoid fitted on the evaluations in the first half of its compute, whose
prediction of the mean of the last three evaluations is compared with the measured mean (the
paper's standard: within 0.02), beside two naive predictors from the same evaluations (the last
and the best first-half evaluation). For every configuration: one fit of all its seeds' points
(`scalerl.scaling.fit_seeds`, which also fits each seed to measure the spread of A, B, C_mid),
or the single run's fit. Rows are sorted as the paper's tables are: by A, then B, best first.

A configuration differs from the base when |A - A_base| exceeds the seed margin: the larger
of the paper's +-0.02 and the measured across-seed standard deviation of A of either side.
B differences are judged against the measured seed spread of B only (the paper gives no
fixed margin for B); with one seed they are shown, not judged.

Departures from the paper:
1. The paper fits after an early-transient cutoff of ~1.5k GPU-hours; here the first
   `eval.fit_min_frac` of each run's compute is left out of its fit (as `scalerl train` does).
2. The paper measures its +-0.02 from three seeds of the 8B run; here the spread is measured
   on the study's own seeds when there are at least two.
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
from scalerl.scaling.readers import read_column_at
from scalerl.scaling.outlook import first_half_check as outlook_half_check
from scalerl.scaling import (FitResult, find_fall, fit_curve, fit_seeds, plot_fits, read_metrics,
                             subset_first_half_prediction,
                             window_start)
from scalerl.scaling.power import ALPHA, POWER, detectable_difference
from scalerl.scaling.spec import SPEC, spec_fit
from scalerl.study.activity import judge_activity, staleness_side_effect, summarise_activity
from scalerl.study.paper import DOES_NOT_ACT, FINDINGS, NOT_POWERED, TASK_SETS_CEILING, judge
from scalerl.study.runner import ACTIVITY_FILE, DONE_FILE, RunSpec, failure, is_done
from scalerl.study.variants import CONTROL_AGAIN, CONTROL_BASE, CONTROL_ORDER, CONTROLS, Variant

PAPER_MARGIN = 0.02
SUBSET_BOOTSTRAP = 100  # bootstrap replicas of each per-subset fit (at most the study's own)
END_EVALS = 3  # the end pass rate averages this many last evaluations
AT_COMPUTE_WINDOW = 0.75  # the pass rate at compute C averages the evaluations in [0.75 C, C]
Y_COLUMN = "val/pass_rate"
POWER_NOTE = (f"`detectable`: the smallest difference the two sides' seeds can detect (`scalerl.scaling.power`: a "
              f"two-sided two-sample t-test at alpha {ALPHA} with power {POWER}, from the seed standard deviations "
              "of each side, pooled: (t_{1-alpha/2} + t_{power}) x s_pooled x sqrt(1/n_base + 1/n_config), "
              "n_base + n_config - 2 degrees of freedom); the margin rule above calls a difference at about one seed std, "
              "well below it. Under \"Against the paper\", a claim about A is \"not powered\" when the detectable "
              "difference exceeds the paper's effect for it (for a claim of no difference, the paper's +-0.02).")
PARTITION_RESIDUAL = 0.002    # subsets are a partition when shares reproduce the pass rate within this
SHARE_TOLERANCE = 0.05        # ... and in near-equal shares when each share is within this of 1/K


@dataclass
class RunFit:
    name: str
    seed: int
    x: np.ndarray
    y: np.ndarray
    finished: bool
    failed: str | None = None              # the training error that stopped the run
    fit: FitResult | None = None
    half: dict | None = None               # first_half_check: predicted / measured end, error, baselines
    error: str | None = None               # why a fit could not be made
    fall: dict | None = None               # find_fall: did the curve fall after its peak (None: too few evals)
    subsets: dict[str, np.ndarray] = field(default_factory=dict)   # val/pass_rate/<subset> at each x
    half_subsets: dict | None = None       # subset_first_half_prediction (exploratory), where the subsets
                                           # are the validation set in equal shares (`equal_share_subsets`)
    activity: dict | None = None           # read_activity: what says whether a swapped component acted

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
    trunk_dtype: str = "fp32"              # what its runs' trunk computed in (run_trunk_dtype)
    frac: float = 0.1                      # the share of the compute its fit leaves out (eval.fit_min_frac)
    subset_fits: dict[str, FitResult | str] = field(default_factory=dict)   # per subset: its fit, or why none
    variant: Variant | None = None         # what it runs (its activity check), where it came from a study's plan

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
    run = RunFit(name, seed, x, y, is_done(path), failure(path), subsets=read_subsets(path / "metrics.jsonl", x_col, x),
                 activity=read_activity(path))
    run.fall = find_fall(y, read_column_at(path / "metrics.jsonl", x_col, Y_COLUMN + "_se", x))
    try:
        # the one forecast specification (scalerl.scaling.spec), with the study's replica count
        run.fit = spec_fit(x, y, frac, spec=replace(SPEC, n_bootstrap=n_bootstrap))
    except ScaleRLError as exc:  # too few points or a flat curve: reported in the table, not fatal
        run.error = str(exc)
    half = outlook_half_check(x, y)   # the default forecast, its calibrated interval and identification
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
    tie = 100.0                                  # the row that holds the shares' sum at 1
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
            names.update(k[len(Y_COLUMN) + 1:] for k, v in row.items()
                         if k.startswith(Y_COLUMN + "/") and isinstance(v, (int, float)))
    out = {}
    for name in sorted(names):
        values = read_column_at(metrics, x_col, f"{Y_COLUMN}/{name}", x)
        if values is not None:
            out[name] = values
    return out


def task_cap(configs: Sequence[ConfigFit]) -> str | None:
    """Why the task sets the ceiling of every run of the study: the subsets no run ever passes."""
    runs = [r for c in configs for r in c.runs if len(r.y)]
    if not runs:
        return None
    never = frozenset.intersection(*(r.never_passing for r in runs))
    if not never:
        return None
    return (f"validation subset(s) {', '.join(sorted(never))} never passed in any evaluation of any of the "
            f"{len(runs)} runs: every configuration meets the ceiling those items set")


def fit_config(name: str, swaps: str, runs: list[RunFit], frac: float, n_bootstrap: int,
               trunk_dtype: str = "fp32", variant: Variant | None = None) -> ConfigFit:
    cfg = ConfigFit(name, swaps, runs, trunk_dtype=trunk_dtype, frac=frac, variant=variant)
    finished = [r for r in runs if r.finished and len(r.x)]
    usable = finished or [r for r in runs if len(r.x)]  # unfinished seeds only while none has finished
    try:
        if len(usable) >= 2:
            fit_min = frac * max(float(r.x[-1]) for r in usable)
            cfg.fit = fit_seeds([(r.x, r.y) for r in usable], "sigmoid", fit_min=fit_min, n_bootstrap=n_bootstrap)
        elif usable:
            r = usable[0]
            cfg.fit = fit_curve(r.x, r.y, "sigmoid", fit_min=window_start(r.x, frac), n_bootstrap=n_bootstrap)
        else:
            cfg.error = "no evaluations yet"
    except ScaleRLError as exc:
        cfg.error = str(exc)
    cfg.subset_fits = fit_subsets(usable, frac, min(n_bootstrap, SUBSET_BOOTSTRAP))
    return cfg


def fit_subsets(runs: Sequence[RunFit], frac: float, n_bootstrap: int) -> dict[str, FitResult | str]:
    """Eq. 1 fitted to each subset's curve (a rung, a domain) over the configuration's runs, as the
    whole curve is: the same window, seeds pooled; a subset that never passed gets the reason."""
    names = sorted(set().union(*(r.subsets for r in runs))) if runs else []
    out: dict[str, FitResult | str] = {}
    for name in names:
        curves = [(r.x, r.subsets[name]) for r in runs if name in r.subsets]
        if not any((y > 0).any() for _, y in curves):
            out[name] = "never passed"
            continue
        try:
            fit_min = frac * max(float(x[-1]) for x, _ in curves)
            out[name] = (fit_seeds(curves, "sigmoid", fit_min=fit_min, n_bootstrap=n_bootstrap) if len(curves) >= 2
                         else fit_curve(*curves[0], "sigmoid", fit_min=fit_min, n_bootstrap=n_bootstrap))
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
    for name, f in sorted(c.subset_fits.items()):
        if f == "never passed":
            a.append(0.0), lo.append(0.0), hi.append(0.0)
        elif isinstance(f, FitResult):
            b = f.ci.get("A", (f.A, f.A)) if f.ci else (f.A, f.A)
            a.append(f.A), lo.append(float(b[0])), hi.append(float(b[1]))
        else:
            return None
    return {"A": float(np.mean(a)), "lo": float(np.mean(lo)), "hi": float(np.mean(hi)), "subsets": len(a)}


def subsets_markdown(configs: Sequence[ConfigFit]) -> str:
    """Per configuration, each subset's fitted ceiling and efficiency beside its end pass rate: where
    a configuration's `A` comes from (which rungs or domains it learnt)."""
    names = sorted({n for c in configs for n in c.subset_fits})
    if not names:
        return ""
    lines = ["| config | " + " | ".join(f"{n}: A [90%], B, end" for n in names) + " | sum of ceilings [90%] | A (one sigmoid) |",
             "|---|" + "---|" * (len(names) + 2)]
    for c in configs:
        cells = []
        for n in names:
            f = c.subset_fits.get(n)
            ends = [float(r.subsets[n][-END_EVALS:].mean()) for r in c.runs if r.finished and n in r.subsets]
            end = f"{np.mean(ends):.3f}" if ends else "-"
            if isinstance(f, FitResult):
                lo, hi = f.ci.get("A", (float("nan"), float("nan"))) if f.ci else (float("nan"), float("nan"))
                edge = " (edge)" if f.a_on_edge else ""
                cells.append(f"{f.A:.3f} [{lo:.3f}, {hi:.3f}]{edge}, {f.B:.2f}, {end}")
            else:
                cells.append(f"{f or 'no evaluations'}, end {end}")
        sc = subset_ceiling(c)
        cells.append("-" if sc is None else f"{sc['A']:.3f} [{sc['lo']:.3f}, {sc['hi']:.3f}]")
        cells.append("-" if c.fit is None else f"{c.fit.A:.3f}")
        lines.append(f"| {c.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sort_key(c: ConfigFit) -> tuple:
    """The paper's order: by A, then B, best first; configurations without a fit last."""
    return (c.fit is None, -(c.fit.A if c.fit else 0.0), -(c.fit.B if c.fit else 0.0), c.name)


def compare(base: ConfigFit, other: ConfigFit) -> dict:
    """Differences of `other` from `base` in A and B, judged against the seed margin."""
    if base.fit is None or other.fit is None:
        return {"judged": False, "why": "no fit"}
    spreads_a = [s for s in (base.spread("A"), other.spread("A")) if s is not None]
    spreads_b = [s for s in (base.spread("B"), other.spread("B")) if s is not None]
    margin_a = max([PAPER_MARGIN, *spreads_a])
    d_a, d_b = other.fit.A - base.fit.A, other.fit.B - base.fit.B
    edge = base.a_on_edge() or other.a_on_edge()  # a ceiling the data do not pin down is not compared
    out = {"judged": True, "dA": d_a, "margin_A": margin_a, "A_differs": None if edge else abs(d_a) > margin_a,
           "dB": d_b, "margin_B": max(spreads_b) if spreads_b else None}
    out["B_differs"] = None if out["margin_B"] is None else abs(d_b) > out["margin_B"]
    for param in ("A", "B"):   # the smallest difference these seeds detect (scalerl.scaling.power)
        sides = [(c.spread(param), c.seeds()) for c in (base, other)]
        out[f"detectable_{param}"] = (None if any(s is None for s, _ in sides)
                                      else detectable_difference(sides[0][0], sides[0][1], sides[1][0], sides[1][1]))
    C = base.final_compute()
    at = (lambda c: c.at_compute(C)) if C is not None else (lambda c: np.empty(0))
    for key, margin, differs, values in (("dEnd", "margin_end", "end_differs", ConfigFit.finals),
                                         ("dAtBase", "margin_at_base", "at_base_differs", at)):
        mdd = margin.replace("margin", "detectable")
        vb, vo = values(base), values(other)
        if len(vb) and len(vo):  # judged like A: the larger of the paper's margin and either side's seed std
            out[key] = float(vo.mean() - vb.mean())
            out[margin] = max([PAPER_MARGIN, *(float(np.std(v, ddof=1)) for v in (vb, vo) if len(v) >= 2)])
            out[differs] = abs(out[key]) > out[margin]
            out[mdd] = (detectable_difference(float(np.std(vb, ddof=1)), len(vb),
                                              float(np.std(vo, ddof=1)), len(vo))
                        if len(vb) >= 2 and len(vo) >= 2 else None)
    return out


def fit_study(specs: Sequence[RunSpec], x_col: str = FIT_X,
              n_bootstrap: int = SPEC.n_bootstrap) -> list[ConfigFit]:
    """Fit every run with a metrics file, then every configuration, in plan order."""
    configs: dict[str, ConfigFit] = {}
    for spec in specs:
        c = configs.setdefault(spec.variant.name, ConfigFit(spec.variant.name, spec.variant.swaps, []))
        c.notes = list(dict.fromkeys(c.notes + spec.notes))
        if not c.runs:  # a configuration's seeds share their precision: taken from its first run
            c.trunk_dtype = run_trunk_dtype(spec)
        if (spec.run_dir / "metrics.jsonl").is_file():
            c.runs.append(fit_run(spec.variant.name, spec.seed, spec.run_dir, x_col,
                                  spec.cfg.eval.fit_min_frac, n_bootstrap))
        elif failure(spec.run_dir) is not None:  # failed before its first evaluation: still reported
            c.runs.append(RunFit(spec.variant.name, spec.seed, np.empty(0), np.empty(0), False,
                                 failure(spec.run_dir), error="no evaluations"))
    frac = specs[0].cfg.eval.fit_min_frac if specs else 0.1
    variants = {s.variant.name: s.variant for s in specs}
    return [fit_config(c.name, c.swaps, c.runs, frac, n_bootstrap, c.trunk_dtype, variants[c.name])
            for c in configs.values()]


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


def _ci(fit: FitResult, name: str, fmt: str) -> str:
    if name not in fit.ci:
        return "-"
    lo, hi = fit.ci[name]
    return f"{lo:{fmt}}..{hi:{fmt}}"


def _spread(c: ConfigFit, param: str, fmt: str) -> str:
    s = c.spread(param)
    return "-" if s is None else f"{s:{fmt}}"


def table_markdown(configs: Sequence[ConfigFit], base: str) -> str:
    """The main table, sorted by A then B: fits with 90% intervals, seed spread, verdict."""
    by_name = {c.name: c for c in configs}
    base_c = by_name[base].final_compute() if base in by_name else None
    head = ("| config | swaps | A | A 90% | A seed std | B | B 90% | B seed std | C_mid | C_mid 90% | seeds "
            "| end pass rate | at base compute | vs base |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in sorted(configs, key=sort_key):
        fell = sum(r.fell for r in c.runs)
        n = f"{len(c.runs)}" + (f" ({fell} fell)" if fell else "")
        if c.fit is None:
            lines.append(f"| {c.name} | {c.swaps} | no fit: {c.error} | | | | | | | | {n} | {_final(c)} "
                         f"| {_at(c, base_c)} | |")
            continue
        f = c.fit
        if c.name == base:
            verdict = "base"
        else:
            d = compare(by_name[base], c) if base in by_name else {"judged": False}
            verdict = _verdict(d)
        edge = " (edge)" if c.a_on_edge() else ""
        lines.append(f"| {c.name} | {c.swaps} | {f.A:.3f}{edge} | {_ci(f, 'A', '.3f')} | {_spread(c, 'A', '.3f')} "
                     f"| {f.B:.2f} | {_ci(f, 'B', '.2f')} | {_spread(c, 'B', '.2f')} | {f.C_mid:.4g} "
                     f"| {_ci(f, 'C_mid', '.3g')} | {n} | {_final(c)} | {_at(c, base_c)} | {verdict} |")
    return "\n".join(lines)


def _mean_std(v: np.ndarray) -> str:
    if not len(v):
        return "-"
    return f"{v.mean():.3f}" + (f" +- {np.std(v, ddof=1):.3f}" if len(v) >= 2 else "")


def _final(c: ConfigFit) -> str:
    return _mean_std(c.finals())


def _at(c: ConfigFit, C: float | None) -> str:
    return _mean_std(c.at_compute(C) if C is not None else np.empty(0))


def _mdd(value: float | None, fmt: str = ".3f") -> str:
    return "" if value is None else f"; detectable {value:{fmt}}"


def _verdict(d: dict) -> str:
    if not d.get("judged"):
        return "not judged (no base fit)"
    if d["A_differs"] is None:
        a = f"A {d['dA']:+.3f} (not judged: A on the edge{_mdd(d.get('detectable_A'))})"
    else:
        a = (f"A {d['dA']:+.3f} ({'beyond' if d['A_differs'] else 'within'} +-{d['margin_A']:.3f}"
             f"{_mdd(d.get('detectable_A'))})")
    if d["B_differs"] is None:
        b = f"B {d['dB']:+.2f} (no seed spread)"
    else:
        b = (f"B {d['dB']:+.2f} ({'beyond' if d['B_differs'] else 'within'} +-{d['margin_B']:.2f}"
             f"{_mdd(d.get('detectable_B'), '.2f')})")
    if "dEnd" not in d:
        return f"{a}; {b}"
    fin = (f"end {d['dEnd']:+.3f} ({'beyond' if d['end_differs'] else 'within'} +-{d['margin_end']:.3f}"
           f"{_mdd(d.get('detectable_end'))})")
    if "dAtBase" in d:
        fin += (f"; at base compute {d['dAtBase']:+.3f} "
                f"({'beyond' if d['at_base_differs'] else 'within'} +-{d['margin_at_base']:.3f}"
                f"{_mdd(d.get('detectable_at_base'))})")
    return f"{a}; {b}; {fin}"


def against_paper(configs: Sequence[ConfigFit], base: str, x_col: str = FIT_X) -> dict[str, dict]:
    """For every configuration the paper has a finding about (`scalerl.study.paper.FINDINGS`):
    that finding, the reference it is measured against, and `judge`'s verdicts on fits against `x_col`."""
    by_name = {c.name: c for c in configs}
    cap = task_cap(configs)
    out = {}
    for c in configs:
        f = FINDINGS.get(c.name)
        if f is None or c.name == base:
            continue
        ref = f.against or base
        missing = [x for x in (ref, c.name) if x not in by_name or by_name[x].fit is None]
        if missing:
            d = {"judged": False, "why": "; ".join(
                f"{x}: {by_name[x].error if x in by_name else 'not in the study'}" for x in missing)}
        else:
            d = compare(by_name[ref], c)
        row = {"figure": f.figure, "claim": f.claim, "against": ref, **judge(d, f, c.trunk_dtype, x_col, cap)}
        if ref in by_name:
            ref_act, act_runs = ([r.activity for r in by_name[ref].runs if r.activity],
                                 [r.activity for r in c.runs if r.activity])
            act = judge_activity(c.variant.acts if c.variant else None, ref_act, act_runs)
            side = None if c.variant is None or c.variant.sets_pipeline else staleness_side_effect(ref_act, act_runs)
            if side is not None:
                row["side_effect"] = side
            if act is not None:
                row["activity"] = act
                if act["acts"] is False:
                    row["overall"] = DOES_NOT_ACT
        out[c.name] = row
    return out


def paper_markdown(rows: dict[str, dict]) -> str:
    lines = ["| config | against | paper | its finding | A: verdict | A: measured | B: verdict | B: measured | overall |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        a, b = r.get("A", ("-", "no claim")), r.get("B", ("-", "no claim"))
        lines.append(f"| {name} | {r['against']} | {r['figure']} | {r['claim']} | {a[0]} | {a[1]} | {b[0]} | {b[1]} "
                     f"| **{r['overall']}** |")
    counts = {v: sum(r["overall"] == v for r in rows.values())
              for v in ("agrees", "disagrees", TASK_SETS_CEILING, DOES_NOT_ACT, NOT_POWERED, "not measurable here")}
    lines += ["", ", ".join(f"{n} {v}" for v, n in counts.items()
                            if n or v not in (TASK_SETS_CEILING, DOES_NOT_ACT, NOT_POWERED))
              + f" (of {len(rows)})."]
    acts = {name: r["activity"] for name, r in rows.items() if "activity" in r}
    if acts:
        word = {True: "acts", False: "does not act", None: "not settled"}
        lines += ["", "Does the swapped component act on this testbed? From the runs' own metrics "
                  "(the variant's own check, `scalerl.study.activity`); a row whose component does not act is not "
                  "judged on the paper's claim:", ""]
        lines += [f"- **{name}**: {word[a['acts']]}: {a['evidence']}" for name, a in acts.items()]
    sides = {name: r["side_effect"] for name, r in rows.items() if "side_effect" in r}
    if sides:
        lines += ["", "What else the swap changed (`scalerl.study.activity.staleness_side_effect`): a verdict on such a "
                  "row is about the two changes together, not the component alone:", ""]
        lines += [f"- **{name}**: {text}" for name, text in sides.items()]
    return "\n".join(lines)


def predictability_markdown(configs: Sequence[ConfigFit]) -> str:
    lines = [f"| config | seed | run | evals | start | at half compute | end (mean of last {END_EVALS}) | A [90%] | "
             "predicted end from the first half | first-half fit's A | first half (points, compute) | error | within 0.02 | "
             "baseline: last first-half eval, error | baseline: best first-half eval, error | "
             "baseline: ruler (line of the last two against log compute), error | fit beat both | "
             "fell after its peak | per-subset forecast (exploratory), error | first half identified A | "
             "calibrated 90% interval of the end (covers) | baseline: mean of the last three first-half evals, error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in configs:
        for r in c.runs:
            start = f"{r.y[0]:.3f}" if len(r.y) else "-"
            end = f"{r.y[-END_EVALS:].mean():.3f}" if len(r.y) else "-"
            state = "finished" if r.finished else f"failed: {r.failed}" if r.failed else "unfinished"
            a = "-"
            if r.fit is not None:
                lo, hi = r.fit.ci.get("A", (float("nan"), float("nan")))
                a = f"{r.fit.A:.3f} [{lo:.3f}, {hi:.3f}]"
            fell = "-" if r.fall is None else f"yes: {r.fall['peak']:.3f} -> {r.fall['end']:.3f}" if r.fell else "no"
            if r.half is None:
                lines.append(f"| {c.name} | {r.seed} | {state} | {len(r.y)} | {start} | | {end} | {a} | {r.error} "
                             f"| | | | | | | | | {fell} | | | | |")
                continue
            h = r.half
            lines.append(f"| {c.name} | {r.seed} | {state} | {len(r.y)} | {start} | {h['at_half']:.3f} | {end} | {a} "
                         f"| {h['predicted']:.3f} | {h['A']:.3f} | {h['points']}, {h['half_frac']:.0%} | {h['error']:+.3f} "
                         f"| {'yes' if abs(h['error']) <= PAPER_MARGIN else 'no'} "
                         f"| {h['baseline_last']:.3f}, {h['baseline_last_error']:+.3f} "
                         f"| {h['baseline_best']:.3f}, {h['baseline_best_error']:+.3f} "
                         f"| {h['baseline_ruler']:.3f}, {h['baseline_ruler_error']:+.3f} "
                         f"| {'yes' if h['beat_baselines'] else 'no'} | {fell} "
                         f"| {subset_cell(r.half_subsets)} | {_ident_cell(h)} | {_interval_cell(h)} "
                         f"| {_last3_cell(h)} |")
    s = predictability_summary(configs)
    if s is not None:
        lines += ["", f"{s['runs']} runs (the default forecast): mean |error| {s['mean_abs_error']:.3f}, largest "
                      f"{s['max_abs_error']:.3f}, mean signed error {s['mean_error']:+.3f}; {s['within']} of {s['runs']} "
                      f"within {PAPER_MARGIN}. Baselines on the same runs: the last first-half evaluation, mean |error| "
                      f"{s['baseline_last_mean_abs_error']:.3f} ({s['baseline_last_within']} within {PAPER_MARGIN}); the "
                      f"best first-half evaluation, mean |error| {s['baseline_best_mean_abs_error']:.3f} "
                      f"({s['baseline_best_within']} within {PAPER_MARGIN}); the ruler (the line through the last two "
                      f"first-half evaluations against log compute), mean |error| {s['baseline_ruler_mean_abs_error']:.3f} "
                      f"({s['baseline_ruler_within']} within {PAPER_MARGIN}); the fit beat the last and the best on {s['beat_baselines']} "
                      f"of {s['runs']}. The second half gained {s['mean_left']:+.3f} on average from the value at half "
                      f"the compute. The calibrated 90% interval covered the end on {s['covered']} of {s['runs']}; the "
                      f"first half identified the ceiling on {s['identified']} of {s['runs']}."]
        if s["under"]:
            lines[-1] += (f" {s['under']} of {s['runs']} were under-predicted; on {s['under_bent_early']} of those the "
                          "first-half fit's A is below the whole run's: the curve was still rising where the first half's "
                          "sigmoid had already bent (a slower part of the gain, e.g. a harder subset, still to come).")
        if s["subset_runs"]:
            lines[-1] += (f" The per-subset forecast (exploratory: each rung's own first-half fit, averaged; "
                          f"`subset_first_half_prediction`), on the {s['subset_runs']} run"
                          f"{'s' if s['subset_runs'] != 1 else ''} whose subsets are the validation set in near-equal "
                          f"shares: mean |error| {s['subset_mean_abs_error']:.3f} (the frozen "
                          f"method on the same runs: {s['subset_frozen_mean_abs_error']:.3f}), {s['subset_within']} "
                          f"within {PAPER_MARGIN}.")
        if s["fell"]:
            lines[-1] += (f" {s['fell']} of them fell after their peak (gave back at least a tenth of their gain: "
                          f"`find_fall`), which no sigmoid forecasts; of the {s['runs_standing']} others, "
                          f"{s['within_standing']} within {PAPER_MARGIN}.")
    return "\n".join(lines)


def _ident_cell(h: dict) -> str:
    return "-" if "identified" not in h else "yes" if h["identified"] else "no"


def _interval_cell(h: dict) -> str:
    if not h.get("interval"):
        return "-"
    lo, hi = h["interval"]
    return f"{lo:.3f} .. {hi:.3f} ({'yes' if h['covered'] else 'no'})"


def _last3_cell(h: dict) -> str:
    return "-" if "baseline_last3" not in h else f"{h['baseline_last3']:.3f}, {h['baseline_last3_error']:+.3f}"


def predictability_summary(configs: Sequence[ConfigFit]) -> dict | None:
    """How well first-half fits predicted the end of the run, over every run that has a prediction;
    `fell`, `runs_standing`, `within_standing`: how many of them fell after their peak, and the
    share within the margin among the others."""
    runs = [r for c in configs for r in c.runs if r.half is not None]
    if not runs:
        return None
    errs = np.array([r.prediction_error for r in runs])
    last = np.array([r.half["baseline_last_error"] for r in runs])
    best = np.array([r.half["baseline_best_error"] for r in runs])
    ruler = np.array([r.half["baseline_ruler_error"] for r in runs])
    standing = np.array([not r.fell for r in runs])
    ok = np.abs(errs) <= PAPER_MARGIN
    under = [r for r in runs if r.prediction_error < -PAPER_MARGIN]
    return {"runs": int(errs.size), "mean_abs_error": float(np.abs(errs).mean()),
            "max_abs_error": float(np.abs(errs).max()), "mean_error": float(errs.mean()),
            "within": int(ok.sum()), "fell": int((~standing).sum()), "runs_standing": int(standing.sum()),
            "under": len(under), "under_bent_early": sum(r.fit is not None and r.half["A"] < r.fit.A for r in under),
            "within_standing": int((ok & standing).sum()),
            "baseline_last_mean_abs_error": float(np.abs(last).mean()),
            "baseline_last_within": int((np.abs(last) <= PAPER_MARGIN).sum()),
            "baseline_best_mean_abs_error": float(np.abs(best).mean()),
            "baseline_best_within": int((np.abs(best) <= PAPER_MARGIN).sum()),
            "baseline_ruler_mean_abs_error": float(np.nanmean(np.abs(ruler))),
            "baseline_ruler_within": int((np.abs(ruler) <= PAPER_MARGIN).sum()),
            "beat_baselines": int(sum(r.half["beat_baselines"] for r in runs)),
            "mean_left": float(np.mean([r.half["left"] for r in runs])),
            "covered": int(sum(bool(r.half.get("covered")) for r in runs)),
            "identified": int(sum(bool(r.half.get("identified")) for r in runs)),
            **subset_summary([r for r in runs if r.half_subsets is not None])}


def subset_cell(h: dict | None) -> str:
    if h is None:
        return "-"
    fallback = [n for n, v in h["subsets"].items() if not v["fitted"]]
    note = f" ({', '.join(fallback)}: last first-half eval)" if fallback else ""
    return f"{h['predicted']:.3f}, {h['error']:+.3f}{note}"


def subset_summary(runs: list[RunFit]) -> dict:
    """The exploratory per-subset forecast over the runs that have one, beside the frozen method's
    error on the same runs."""
    if not runs:
        return {"subset_runs": 0}
    errs = np.array([r.half_subsets["error"] for r in runs])
    return {"subset_runs": len(runs), "subset_mean_abs_error": float(np.abs(errs).mean()),
            "subset_within": int((np.abs(errs) <= PAPER_MARGIN).sum()),
            "subset_frozen_mean_abs_error": float(np.mean([abs(r.prediction_error) for r in runs]))}


def controls_summary(configs: Sequence[ConfigFit], base: str = CONTROL_BASE) -> dict | None:
    """The controls of the instrument (`scalerl ablate --controls`), judged as every configuration is
    (`compare`: A beyond the larger of the paper's margin and either side's seed std):
    - each positive control (`CONTROLS`) is `detected` when A differs from the base beyond the margin
      in the expected direction;
    - `graded`: each step of `CONTROL_ORDER` (lowest expected A first) judged the same way, and
      `ordered` when every step differs upward;
    - the negative control (`base-again`, the base under other seeds) must not differ;
    - `false_positive`: over every split of the base's and base-again's finished runs into two
      halves of equal size (the 10 splits of 6 seeds into 3 + 3), the share the study calls
      different in A (and, model-free, in the end pass rate).
    None when the study has no controls."""
    by_name = {c.name: c for c in configs}
    if base not in by_name or not ({n for n, *_ in CONTROLS} | {CONTROL_AGAIN}) & set(by_name):
        return None
    b = by_name[base]
    out: dict = {"positive": {}, "negative": None, "false_positive": None}
    for name, swaps, _, expect in CONTROLS:
        if name in by_name:
            d = compare(b, by_name[name])
            sign = 1 if expect == "higher" else -1
            detected = None if d.get("A_differs") is None else bool(d["A_differs"]) and sign * d["dA"] > 0
            end = None if "end_differs" not in d else bool(d["end_differs"]) and sign * d["dEnd"] > 0
            out["positive"][name] = {"swaps": swaps, "expect": expect, "detected": detected,
                                     "end_detected": end, **d}
    out["graded"] = graded_controls(by_name)
    if CONTROL_AGAIN in by_name:
        d = compare(b, by_name[CONTROL_AGAIN])
        out["negative"] = {**d, "differs": d.get("A_differs"), "end_differs": d.get("end_differs")}
        out["false_positive"] = split_false_positives(b, by_name[CONTROL_AGAIN])
    return out


def graded_controls(by_name: dict[str, ConfigFit]) -> dict | None:
    """Each step of `CONTROL_ORDER` present in the study, lower to higher expected A, compared as any
    two configurations; `ordered` when every step differs in the expected direction (None when a
    step could not be judged). None with fewer than three of the graded configurations."""
    present = [n for n in CONTROL_ORDER if n in by_name]
    if len(present) < 3:
        return None
    steps = []
    for lo, hi in zip(present, present[1:]):
        d = compare(by_name[lo], by_name[hi])
        up = None if d.get("A_differs") is None else bool(d["A_differs"]) and d["dA"] > 0
        steps.append({"lower": lo, "higher": hi, "up": up, **d})
    ups = [s["up"] for s in steps]
    return {"order": present, "steps": steps, "ordered": None if None in ups else all(ups)}


def split_false_positives(a: ConfigFit, b: ConfigFit) -> dict | None:
    """How often `compare` calls two groups of runs of one configuration different: every split of
    the finished runs of `a` and `b` into two equal halves (each split once), fitted and compared as
    two configurations. None with fewer than 4 runs or an odd number."""
    from itertools import combinations

    runs = [r for r in (*a.runs, *b.runs) if r.finished and len(r.x)]
    if len(runs) < 4 or len(runs) % 2:
        return None
    n, splits, differs_a, differs_end, judged = len(runs), 0, 0, 0, 0
    for left in combinations(range(n), n // 2):
        if 0 not in left:  # each split once: the first run is always on the left
            continue
        right = [i for i in range(n) if i not in left]
        ca = fit_config("split-a", "", [runs[i] for i in left], a.frac, 0)
        cb = fit_config("split-b", "", [runs[i] for i in right], a.frac, 0)
        d = compare(ca, cb)
        splits += 1
        if d.get("A_differs") is not None:
            judged += 1
            differs_a += bool(d["A_differs"])
        differs_end += bool(d.get("end_differs"))
    return {"runs": n, "splits": splits, "judged_A": judged, "differs_A": differs_a,
            "rate_A": differs_a / judged if judged else None, "differs_end": differs_end,
            "rate_end": differs_end / splits}


def _yes_no(detected: bool | None) -> str:
    return "not judged (no fit, or A on the edge)" if detected is None else "yes" if detected else "**no**"


def _differs(differs: bool | None) -> str:
    return "not judged (no fit, or A on the edge)" if differs is None else "**differs**" if differs else \
        "no difference (correct)"


def controls_markdown(s: dict) -> str:
    lines = ["| control | what it changes | expected | A: measured vs base | detected (A) | end pass rate vs base "
             "| detected (end) |", "|---|---|---|---|---|---|---|"]
    for name, p in s["positive"].items():
        a = (f"{p['dA']:+.3f} (margin +-{p['margin_A']:.3f}{_mdd(p.get('detectable_A'))})" if p.get("judged")
             else "not judged")
        end = f"{p['dEnd']:+.3f} (margin +-{p['margin_end']:.3f}{_mdd(p.get('detectable_end'))})" if "dEnd" in p else "-"
        lines.append(f"| {name} (positive) | {p['swaps']} | A {p['expect']} | {a} | {_yes_no(p['detected'])} "
                     f"| {end} | {_yes_no(p['end_detected'])} |")
    g = s.get("graded")
    if g is not None:
        for st in g["steps"]:
            a = (f"{st['dA']:+.3f} (margin +-{st['margin_A']:.3f}{_mdd(st.get('detectable_A'))})"
                 if st.get("judged") else "not judged")
            lines.append(f"| {st['higher']} vs {st['lower']} (graded) | the next thinking budget up | A higher | {a} "
                         f"| {_yes_no(st['up'])} | - | - |")
    n = s["negative"]
    if n is not None:
        a = (f"{n['dA']:+.3f} (margin +-{n['margin_A']:.3f}{_mdd(n.get('detectable_A'))})" if n.get("judged")
             else "not judged")
        end = f"{n['dEnd']:+.3f} (margin +-{n['margin_end']:.3f}{_mdd(n.get('detectable_end'))})" if "dEnd" in n else "-"
        lines.append(f"| {CONTROL_AGAIN} (negative) | nothing: the base under other seeds | no difference | {a} | "
                     f"{_differs(n['differs'])} | {end} | {_differs(n['end_differs'])} |")
    fp = s["false_positive"]
    if g is not None:
        order = " < ".join(g["order"])
        lines += ["", f"Graded controls, A expected {order}: "
                      + ("ordered" if g["ordered"] else "not judged" if g["ordered"] is None else "**not ordered**") + "."]
    if fp is not None:
        rate_a = "-" if fp["rate_A"] is None else f"{fp['rate_A']:.0%}"
        lines += ["", f"False-positive rate of the \"differs\" verdict over the {fp['splits']} splits of the "
                      f"{fp['runs']} runs of `{CONTROL_BASE}` and `{CONTROL_AGAIN}` into two groups of {fp['runs'] // 2}: "
                      f"in A {fp['differs_A']} of {fp['judged_A']} judged ({rate_a}); in the end pass rate "
                      f"{fp['differs_end']} of {fp['splits']} ({fp['rate_end']:.0%})."]
    return "\n".join(lines)


def _stats(v: np.ndarray) -> dict | None:
    if not len(v):
        return None
    return {"mean": float(v.mean()), "std": float(np.std(v, ddof=1)) if len(v) >= 2 else None}


def _at_dict(c: ConfigFit, C: float | None) -> dict | None:
    v = c.at_compute(C) if C is not None else np.empty(0)
    return None if not len(v) else {"compute": C, **_stats(v), "runs": len(v)}


def report_dict(configs: Sequence[ConfigFit], base: str, x_col: str, paper: dict[str, dict] | None = None) -> dict:
    """`paper`: `against_paper(configs, base)` when the caller has it already."""
    by_name = {c.name: c for c in configs}
    paper = against_paper(configs, base, x_col) if paper is None else paper
    out = {"base": base, "x": x_col, "y": Y_COLUMN, "margin": PAPER_MARGIN,
           "predictability": predictability_summary(configs), "controls": controls_summary(configs, base),
           "configs": []}
    for c in sorted(configs, key=sort_key):
        entry = {"name": c.name, "swaps": c.swaps, "notes": c.notes, "error": c.error,
                 "fit": c.fit.to_dict() if c.fit is not None else None, "A_on_edge": c.a_on_edge(),
                 "A_subsets": subset_ceiling(c),
                 "end_pass_rate": _stats(c.finals()),
                 "at_base_compute": _at_dict(c, by_name[base].final_compute() if base in by_name else None),
                 "vs_base": compare(by_name[base], c) if base in by_name and c.name != base else None,
                 "trunk_dtype": c.trunk_dtype, "paper": paper.get(c.name),
                 "runs": [{"seed": r.seed, "finished": r.finished, "failed": r.failed, "evals": len(r.y),
                           "final_compute": float(r.x[-1]) if len(r.x) else None,
                           "final_pass_rate": float(r.y[-1]) if len(r.y) else None,
                           "A": r.fit.A if r.fit else None, "B": r.fit.B if r.fit else None,
                           "C_mid": r.fit.C_mid if r.fit else None,
                           "end_pass_rate": float(r.y[-END_EVALS:].mean()) if len(r.y) else None,
                           "A_ci": list(r.fit.ci["A"]) if r.fit and "A" in r.fit.ci else None,
                           "first_half": r.half, "prediction_error": r.prediction_error,
                           "first_half_per_subset": r.half_subsets,
                           "fall": r.fall, "error": r.error} for r in c.runs],
                 "fell": sum(r.fell for r in c.runs),
                 "subsets": {n: (f.to_dict() if isinstance(f, FitResult) else {"error": f})
                             for n, f in c.subset_fits.items()}}
        out["configs"].append(entry)
    return out


def _plot_groups(configs: Sequence[ConfigFit], base: str) -> dict[str, set[str]]:
    """Recipes compared with the base, and the base's leave-one-out variants (each with the base)."""
    groups: dict[str, set[str]] = {}
    for c in configs:
        if c.name != base:
            groups.setdefault("recipes" if c.swaps.startswith("recipe ") else "leave_one_out", {base}).add(c.name)
    return groups


def provenance(specs: Sequence[RunSpec]) -> dict:
    """What the finished runs started from and ran: per model name, the builds of its weights with the
    runs of each (`model_build` in done.json; 'not recorded' for runs from before it was), and the code
    versions. More than one build of a model means runs that did not start from the same model."""
    models: dict[str, dict[str, list[str]]] = {}
    code: dict[str, list[str]] = {}
    for spec in specs:
        done = spec.run_dir / DONE_FILE
        if not done.is_file():
            continue
        rec = json.loads(done.read_text())
        run = f"{spec.variant.name}/seed{spec.seed}"
        build = rec.get("model_build") or "not recorded"
        models.setdefault(spec.cfg.model.name, {}).setdefault(build, []).append(run)
        code.setdefault(rec.get("code") or "not recorded", []).append(run)
    mixed = sorted(m for m, builds in models.items() if len([b for b in builds if b != "not recorded"]) > 1)
    return {"models": models, "code": code, "mixed_builds": mixed}


def provenance_markdown(p: dict) -> str:
    lines = ["| model | build (weights SHA-256) | runs |", "|---|---|---|"]
    for model, builds in sorted(p["models"].items()):
        for build, runs in sorted(builds.items()):
            lines.append(f"| {model} | {build} | {len(runs)}: {', '.join(runs)} |")
    lines += ["", "Code: " + "; ".join(f"`{c}` ({len(r)} runs)" for c, r in sorted(p["code"].items()))]
    if p["mixed_builds"]:
        lines += ["", f"**Runs of {', '.join(p['mixed_builds'])} started from different builds of the model: they "
                  "did not start from the same weights, so differences between them are not the configurations' "
                  "alone.**"]
    return "\n".join(lines)


def _write_plots(study_dir: Path, configs: Sequence[ConfigFit], base: str, x_col: str) -> tuple[list, dict]:
    """fits.png and fits_linearised.png of every fitted configuration, and one pair per group of the
    paper's two figures (recipes, Fig. 2; leave-one-out, Fig. 7) when the study has both."""
    plotted = [(c.name, np.concatenate([r.x for r in c.runs]), np.concatenate([r.y for r in c.runs]), c.fit)
               for c in sorted(configs, key=sort_key) if c.fit is not None]
    if plotted:
        plot_fits(plotted, study_dir / "fits.png", study_dir / "fits_linearised.png", xlabel=x_col,
                  ylabel=Y_COLUMN)
    groups = _plot_groups(configs, base)
    groups = groups if len(groups) > 1 else {}
    for group, names in groups.items():
        part = [p for p in plotted if p[0] in names]
        if part:
            plot_fits(part, study_dir / f"fits_{group}.png", study_dir / f"fits_{group}_linearised.png",
                      xlabel=x_col, ylabel=Y_COLUMN)
    return plotted, groups


def write_report(study_dir: Path, configs: Sequence[ConfigFit], base: str, x_col: str,
                 variants_md: str, command: str = "", specs: Sequence[RunSpec] = ()) -> dict:
    """report.md, report.json, fits.png and fits_linearised.png in `study_dir`."""
    study_dir = Path(study_dir)
    paper = against_paper(configs, base, x_col)
    data = report_dict(configs, base, x_col, paper)
    data["provenance"] = provenance(specs)
    (study_dir / "report.json").write_text(json.dumps(data, indent=1))
    plotted, groups = _write_plots(study_dir, configs, base, x_col)
    notes = sorted({n for c in configs for n in c.notes})
    md = [f"# Study report (base: {base})", ""]
    if command:
        md += ["Regenerate with:", "", "```", command, "```", ""]
    md += ["## Configurations", "", variants_md, ""]
    md += [f"- {n}" for n in notes] + ([""] if notes else [])
    md += [f"## Fits (x = `{x_col}`, y = `{Y_COLUMN}`), sorted by A then B", "",
           table_markdown(configs, base), "",
           f"Margin: a difference in A counts when it exceeds the larger of +-{PAPER_MARGIN} (paper) and the "
           "measured seed std of A of either side; B is judged against the measured seed std of B only. "
           f"`end pass rate` is the mean (+- seed std) over finished runs of their last {END_EVALS} evaluations' mean, "
           "judged like A; `at base compute` is the same at equal compute: each finished run's mean pass rate "
           f"over its evaluations in [{AT_COMPUTE_WINDOW} C, C], C = the base's mean final compute. "
           "Neither needs a fit: they are the comparisons to trust when A is on the edge of its range (the "
           "curve has not bent enough to pin its ceiling).", "",
           POWER_NOTE, ""]
    if data["controls"] is not None:
        md += ["## Controls: does the study detect what exists, and only that?", "",
               controls_markdown(data["controls"]), ""]
    if paper:
        md += ["## Against the paper", "",
               "Each configuration's difference from its reference, judged against the paper's finding "
               "(`scalerl/study/paper.py`): agrees (the paper's direction beyond the seed margin; for a claim "
               "of no difference, within it), disagrees, not powered (the seeds cannot detect a difference the size "
               "of the paper's), or not measurable / not testable here (and why).", "",
               paper_markdown(paper), ""]
    subsets = subsets_markdown(sorted(configs, key=sort_key))
    if subsets:
        md += ["## Per subset: each rung or domain fitted on its own", "",
               f"Eq. 1 fitted to each `{Y_COLUMN}/<subset>` curve as the whole curve is (the same window, seeds "
               f"pooled, {SUBSET_BOOTSTRAP} bootstrap replicas at most); `end`: the mean over finished runs of the "
               f"subset's last {END_EVALS} evaluations. A subset whose end is near 1 is learnt; one still far "
               "below its fitted `A`, or with `A` on the edge, was still rising when the runs ended.", "",
               subsets, ""]
    md += ["## Predictability: a fit on the first half of the compute vs the mean of the last three evaluations", "",
           predictability_markdown(configs), ""]
    if data["provenance"]["models"]:
        md += ["## Provenance: the weights each run started from, and the code", "",
               provenance_markdown(data["provenance"]), ""]
    if plotted:
        md += ["## Plots", "", "![fitted curves](fits.png)", "", "![linearised view](fits_linearised.png)", ""]
        for group in groups:
            md += [f"![{group}: fitted curves](fits_{group}.png)", "",
                   f"![{group}: linearised view](fits_{group}_linearised.png)", ""]
    (study_dir / "report.md").write_text("\n".join(md))
    return data
