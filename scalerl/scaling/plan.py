"""Plan the next unit of compute: which configuration to spend a budget on, from their fitted curves.

    configs, skipped = fit_configs(find_configs(paths), opts)
    out = plan(configs, budget, skipped)          # the `scalerl plan --json` object
    print("\\n".join(plan_lines(out)))

A configuration is one run directory, or the seeds `seed<N>/` of one folder pooled with `fit_seeds`
(a study's results folder `<dir>/<config>/seed<N>/` gives one configuration per `<config>`). At the
budget C every configuration's fitted curve is read off with its 90% bootstrap interval (and, with
several seeds, the standard deviation of the per-seed fits' predictions); the best and the runner-up
are compared against the seed margin; each pair's curves are searched for crossings; each curve's
value and gain at 2x and 10x C are given with intervals.

Departures from the paper:
1. The paper compares recipes by their ceilings A (Section 3, margin +-0.02). A plan compares the
   curves at the budget: the difference of the fitted values there, judged against the larger of
   0.02 and either side's measured seed std of that value (as `scalerl.study.verdicts.compare`
   judges A).
2. Crossings are found on the point estimates of the curves (sign changes of their difference on
   a log grid, refined by `brentq`); their uncertainty is not given.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.optimize import brentq

from scalerl.errors import ScaleRLError
from scalerl.scaling.calibrate import table
from scalerl.scaling.fit import CI_LEVEL, FitResult, _curve_of, find_fall
from scalerl.scaling.forecast import Options, finite_json, fit_pooled, fit_series, read
from scalerl.scaling.identify import identify
from scalerl.scaling.report import MULTIPLES, SEED_MARGIN, gain_between, num
from scalerl.scaling.sources import Series

METRICS = "metrics.jsonl"
DONE = "done.json"  # what the study runner writes into a finished run (scalerl.study.runner.DONE_FILE)
SEED_DIR = re.compile(r"seed\d+")
CROSS_HI = 100.0  # crossings are searched up to this multiple of the budget
EXTRAPOLATION = 10.0  # a budget beyond this multiple of the largest compute measured is flagged
ALL_PAIRS_UP_TO = 4  # with this many configurations or fewer, every pair's crossing is given
GRID = 2000  # log-spaced points on which crossings are bracketed


@dataclass
class Config:
    """One configuration to plan over: its runs, their points, the fit (None when skipped)."""

    name: str
    paths: list[Path]
    runs: dict[Path, Series] = field(default_factory=dict)  # the runs fitted, by path
    fit: FitResult | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def x_max(self) -> float:
        return max(float(s.x.max()) for s in self.runs.values())


# ---------------------------------------------------------------- finding the runs
def _is_run(p: Path) -> bool:
    return (p / METRICS).is_file()


def _seeds(p: Path) -> list[Path]:
    return sorted(
        (c for c in p.iterdir() if c.is_dir() and SEED_DIR.fullmatch(c.name) and _is_run(c)),
        key=lambda c: int(c.name[4:]),
    )


def _configs_in(p: Path) -> list[Config]:
    """The configurations `p` holds: itself (a run, or seed folders), or one per child folder."""
    if p.is_file() or _is_run(p):
        return [Config(p.stem if p.is_file() else p.name, [p])]
    if _seeds(p):
        return [Config(p.name, _seeds(p))]
    out = []
    for child in sorted(c for c in p.iterdir() if c.is_dir()):
        if _is_run(child):
            out.append(Config(child.name, [child]))
        elif _seeds(child):
            out.append(Config(child.name, _seeds(child)))
    return out


def find_configs(paths: Sequence[str | Path]) -> list[Config]:
    """The configurations under `paths`: a run directory (`metrics.jsonl`) or a metrics file is one;
    a folder of `seed<N>/` runs is one (its seeds pooled); a folder of those (a study's results) or
    of run directories gives one per child. Names that clash are replaced by the paths as given.
    Raises ScaleRLError naming the path where nothing is found."""
    configs = []
    for p in map(Path, paths):
        if not p.exists():
            raise ScaleRLError(f"{p}: no such file or directory")
        found = _configs_in(p)
        if not found:
            raise ScaleRLError(
                f"{p}: no runs found: expected a run directory ({METRICS}), a configuration "
                f"folder (seed<N>/{METRICS}) or a study's results folder (<config>/seed<N>/{METRICS})"
            )
        configs += found
    names = [c.name for c in configs]
    for c in configs:
        if names.count(c.name) > 1:
            c.name = str(c.paths[0].parent if len(c.paths) > 1 else c.paths[0])
    return configs


# ---------------------------------------------------------------- fitting
def _finished(c: Config) -> list[Path]:
    """The seeds to fit: the finished ones (`done.json`) when some are, else all; left-out ones noted."""
    done = [p for p in c.paths if (p / DONE).is_file()]
    if len(c.paths) < 2 or not done or len(done) == len(c.paths):
        return c.paths
    c.notes.append(
        f"left out {len(c.paths) - len(done)} unfinished seed(s) (no {DONE}): "
        + ", ".join(p.name for p in c.paths if p not in done)
    )
    return done


def fit_config(c: Config, o: Options) -> str | None:
    """Read and fit `c` in place (`fit_series`, or `fit_pooled` over its seeds: the project's window
    and fall warnings); returns why it cannot be used, or None."""
    errors = []
    for p in _finished(c):
        try:
            c.runs[p] = read(p, o)
        except ScaleRLError as exc:
            errors.append(str(exc))
    c.notes += [f"left out a seed: {e}" for e in errors] if c.runs else []
    if not c.runs:
        return errors[0]
    series = list(c.runs.values())
    try:
        c.fit = fit_series(series[0], o) if len(series) == 1 else fit_pooled(series, o)
    except ScaleRLError as exc:
        return str(exc)
    return None


def fit_configs(configs: Sequence[Config], o: Options) -> tuple[list[Config], list[dict]]:
    """(the configurations with a fit, [{name, path, reason}] for the others). Raises ScaleRLError
    when none has a usable fit."""
    usable, skipped = [], []
    for c in configs:
        reason = fit_config(c, o)
        if reason is None:
            usable.append(c)
        else:
            skipped.append(
                {"name": c.name, "path": str(c.paths[0].parent if len(c.paths) > 1 else c.paths[0]), "reason": reason}
            )
    if not usable:
        raise ScaleRLError(
            "no configuration has a usable fit: " + "; ".join(f"{s['path']}: {s['reason']}" for s in skipped)
        )
    return usable, skipped


# ---------------------------------------------------------------- reading the curves
def seed_std(f: FitResult, C: float) -> float | None:
    """Standard deviation (ddof=1) of the per-seed fits' predictions at C; None with one run."""
    if len(f.seed_fits) < 2:
        return None
    return float(np.std([float(s.predict([C])[0]) for s in f.seed_fits], ddof=1))


def at(f: FitResult, C: float) -> dict:
    """The fitted value at C, its bootstrap interval and its seed std."""
    lo, hi = f.predict_interval([C])
    return {
        "compute": C,
        "value": float(f.predict([C])[0]),
        "lo": float(lo[0]),
        "hi": float(hi[0]),
        "seed_std": seed_std(f, C),
    }


def gains(f: FitResult, C: float) -> dict:
    """Value and gain at each multiple of C (2x, 10x), with intervals and the seed std of the value."""
    out = {}
    for m in MULTIPLES:
        g = gain_between(f, C, m * C)
        out[f"{m}x"] = {**g, "seed_std": seed_std(f, m * C)}
    return out


def crossings(a: FitResult, b: FitResult, lo: float, hi: float) -> list[dict]:
    """Where the curves of `a` and `b` cross in [lo, hi]: sign changes of a - b on a log grid,
    refined by `brentq` on log compute. Each: {compute, ahead_after: 'a' or 'b'}."""
    u = np.linspace(math.log(lo), math.log(hi), GRID)
    d = a.predict(np.exp(u)) - b.predict(np.exp(u))
    out = []
    for i in np.flatnonzero(np.sign(d[:-1]) * np.sign(d[1:]) < 0):
        root = brentq(lambda v: float(a.predict([math.exp(v)])[0] - b.predict([math.exp(v)])[0]), u[i], u[i + 1])
        out.append({"compute": math.exp(root), "ahead_after": "a" if d[i + 1] > 0 else "b"})
    return out


def difference(best: FitResult, other: FitResult, C: float) -> dict:
    """best - other at C, the 90% interval over paired bootstrap replicas (the fits are independent),
    and the seed margin: the larger of SEED_MARGIN and either side's seed std there."""
    n = min(len(best.boot), len(other.boot))
    diffs = np.array([_curve_of(best.model, p).predict(np.array([C]))[0] for p in best.boot[:n]]) - np.array(
        [_curve_of(other.model, p).predict(np.array([C]))[0] for p in other.boot[:n]]
    )
    q = 100 * (1 - CI_LEVEL) / 2
    value = float(best.predict([C])[0] - other.predict([C])[0])
    stds = [s for s in (seed_std(best, C), seed_std(other, C)) if s is not None]
    margin = max([SEED_MARGIN, *stds])
    return {
        "value": value,
        "lo": float(np.percentile(diffs, q)),
        "hi": float(np.percentile(diffs, 100 - q)),
        "margin": margin,
        "clear": bool(value > margin),
    }


def flags(c: Config, C: float) -> dict:
    """Why the fit of `c` may not be trusted at C: A on the edge of its range, runs that fell after
    their peak (`find_fall`), a budget beyond EXTRAPOLATION x the largest compute measured."""
    fell = [str(p) for p, s in c.runs.items() if (find_fall(s.y) or {}).get("fell")]
    ident = _identified(c)
    return {
        "a_on_edge": c.fit.a_on_edge,
        "fell": fell,
        "extrapolation": C > EXTRAPOLATION * c.x_max,
        "budget_over_measured": C / c.x_max,
        "not_identified": not ident["identified"],
        "A_lower_bound": None if ident["identified"] else ident["lower_bound"],
        "unidentified_beyond_measured": C > c.x_max and not ident["identified"],
    }


def _identified(c: Config) -> dict:
    """Whether the runs of `c` bound its ceiling (`scalerl.scaling.identify`, on all their points)."""
    if c.fit.model != "sigmoid":
        return {"identified": False, "lower_bound": None}
    x = np.concatenate([s.x for s in c.runs.values()])
    y = np.concatenate([s.y for s in c.runs.values()])
    return identify(c.fit, x, y, rule=table()["rule"])


# ---------------------------------------------------------------- the plan
def _entry(c: Config, C: float) -> dict:
    f = c.fit
    return {
        "name": c.name,
        "paths": [str(p) for p in c.runs],
        "seeds": len(c.runs),
        "x_max": c.x_max,
        "window": list(f.window),
        "A": f.A,
        "A_interval": list(f.ci["A"]) if "A" in f.ci else None,
        "B": f.B,
        "C_mid": f.C_mid,
        "R0": f.R0,
        "at_budget": at(f, C),
        "gains": gains(f, C),
        "flags": flags(c, C),
        "warnings": c.notes + list(f.warnings),
    }


def _pairs(ranked: list[Config], lo: float, hi: float) -> list[dict]:
    """Crossings of the best with each other, or of every pair with ALL_PAIRS_UP_TO or fewer."""
    pairs = (
        itertools.combinations(ranked, 2) if len(ranked) <= ALL_PAIRS_UP_TO else ((ranked[0], c) for c in ranked[1:])
    )
    out = []
    for a, b in pairs:
        found = crossings(a.fit, b.fit, lo, hi)
        out.append(
            {
                "a": a.name,
                "b": b.name,
                "range": [lo, hi],
                "crossings": [
                    {"compute": x["compute"], "ahead_after": a.name if x["ahead_after"] == "a" else b.name}
                    for x in found
                ],
            }
        )
    return out


def plan(
    configs: Sequence[Config],
    budget: float,
    skipped: Sequence[dict] = (),
    x_name: str = "compute",
    y_name: str = "metric",
) -> dict:
    """The plan at `budget` over fitted `configs` (see the module docstring); finite JSON."""
    check_budget(budget)
    ranked = sorted(configs, key=lambda c: -float(c.fit.predict([budget])[0]))
    lo, hi = min(c.fit.window[0] for c in ranked), CROSS_HI * budget
    out = {
        "x": x_name,
        "y": y_name,
        "budget": budget,
        "level": CI_LEVEL,
        "configs": [_entry(c, budget) for c in ranked],
        "best": ranked[0].name,
        "runner_up": ranked[1].name if len(ranked) > 1 else None,
        "difference": difference(ranked[0].fit, ranked[1].fit, budget) if len(ranked) > 1 else None,
        "crossing_range": [lo, hi],
        "crossings": _pairs(ranked, lo, hi) if lo < hi else [],
        "best_at": {f"{m}x": max(ranked, key=lambda c: float(c.fit.predict([m * budget])[0])).name for m in MULTIPLES},
        "skipped": list(skipped),
    }
    out["recommendation"] = recommendation(out)
    return finite_json(out)


def check_budget(budget: float) -> None:
    if not (math.isfinite(budget) and budget > 0):
        raise ScaleRLError(f"--budget {budget:g}: expected a positive, finite compute")


def _next_crossing(p: dict) -> dict | None:
    """The lowest crossing above the budget after which another configuration is ahead of the best."""
    later = [
        {"other": x["ahead_after"], "compute": x["compute"]}
        for pair in p["crossings"]
        if p["best"] in (pair["a"], pair["b"])
        for x in pair["crossings"]
        if x["compute"] > p["budget"] and x["ahead_after"] != p["best"]
    ]
    return min(later, key=lambda x: x["compute"]) if later else None


def recommendation(p: dict) -> str:
    """The plan in one line."""
    best, C = p["best"], p["budget"]
    text = f"at C = {num(C)}, {best} is best ({p['configs'][0]['at_budget']['value']:.3f})"
    d = p["difference"]
    if d is not None:
        side = "beyond" if d["clear"] else "within"
        text = (
            f"at C = {num(C)}, {best} is ahead of {p['runner_up']} by {d['value']:.3f} ({side} the seed "
            f"margin {d['margin']:.3f}" + ("" if d["clear"] else ": the choice is within noise") + ")"
        )
    cross = _next_crossing(p)
    if cross is not None:
        text += f"; its curve crosses {cross['other']} at C = {num(cross['compute'])}"
        if p["best_at"]["10x"] != best:
            text += f": with 10x the budget, {p['best_at']['10x']} would be ahead"
    elif len(p["configs"]) > 1:
        text += f"; no other curve overtakes it up to {num(p['crossing_range'][1])}"
    warned = [c["name"] for c in p["configs"] if _untrusted(c["flags"])]
    if best in warned:
        text += f" (but the fit of {best} is flagged: read its warnings)"
    unbound = [c["name"] for c in p["configs"][:2] if c["flags"]["unidentified_beyond_measured"]]
    if unbound:
        text += (
            f"; beyond the compute measured, this ranking rests on a ceiling the data do not bound "
            f"({', '.join(unbound)}: not identified), so it is not a forecast: run them further and plan again"
        )
    return text


def _untrusted(f: dict) -> bool:
    return bool(f["a_on_edge"] or f["fell"] or f["extrapolation"] or f["unidentified_beyond_measured"])


# ---------------------------------------------------------------- in words
def _band(e: dict) -> str:
    seeds = f", seed std {e['seed_std']:.3f}" if e.get("seed_std") is not None else ""
    return f"{e['value']:.3f} ({e['lo']:.3f} .. {e['hi']:.3f}{seeds})"


def _flag_words(f: dict) -> list[str]:
    out = []
    if f["a_on_edge"]:
        out.append("A on the edge of its range (the ceiling is not pinned down)")
    if f["not_identified"]:
        lb = f["A_lower_bound"]
        out.append(
            "ceiling not identified"
            + (f" (A >= {lb:.3f})" if lb is not None else "")
            + ": the data do not bound it; a value beyond the compute measured is not a forecast"
        )
    if f["fell"]:
        out.append(f"fell after its peak: {', '.join(f['fell'])}")
    if f["extrapolation"]:
        out.append(f"the budget is {f['budget_over_measured']:.0f}x the largest compute measured: an extrapolation")
    return out


def plan_lines(p: dict) -> list[str]:
    """The plan in plain words (the human output of `scalerl plan`)."""
    lines = [f"plan at {p['x']} = {num(p['budget'])} ({p['y']}, {p['level']:.0%} intervals), best first:"]
    for c in p["configs"]:
        g2, g10 = c["gains"]["2x"], c["gains"]["10x"]
        lines.append(
            f"  {c['name']} ({c['seeds']} run{'s' if c['seeds'] > 1 else ''}): {_band(c['at_budget'])}; "
            f"2x {g2['value']:.3f} (gain {g2['gain']:+.3f}, {g2['lo']:+.3f} .. {g2['hi']:+.3f}); "
            f"10x {g10['value']:.3f} (gain {g10['gain']:+.3f}, {g10['lo']:+.3f} .. {g10['hi']:+.3f})"
        )
        lines += [f"    flag: {w}" for w in _flag_words(c["flags"])]
    d = p["difference"]
    if d is not None:
        lines.append(
            f"  {p['best']} - {p['runner_up']} at the budget: {d['value']:+.3f} ({d['lo']:+.3f} .. "
            f"{d['hi']:+.3f}); seed margin {d['margin']:.3f}: {'clear' if d['clear'] else 'within noise'}"
        )
    lo, hi = p["crossing_range"]
    for pair in p["crossings"]:
        where = "; ".join(f"at {num(x['compute'])} ({x['ahead_after']} ahead after)" for x in pair["crossings"])
        lines.append(
            f"  {pair['a']} x {pair['b']}: "
            + (f"cross {where}" if where else f"do not cross in [{num(lo)}, {num(hi)}]")
        )
    lines += [f"  skipped {s['name']} ({s['path']}): {s['reason']}" for s in p["skipped"]]
    lines.append(f"  => {p['recommendation']}")
    return lines
