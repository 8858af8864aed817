"""The study's verdicts: differences from the base, the paper's findings, the controls, predictability.

A configuration differs from the base when |A - A_base| exceeds the seed margin: the larger of
the paper's +-0.02 and the measured across-seed standard deviation of A of either side. B
differences are judged against the measured seed spread of B only (the paper gives no fixed
margin for B); with one seed they are shown, not judged. The end pass rate and the pass rate at
the base's compute are judged like A, without a fit. Beside each margin, the smallest difference
the two sides' seeds can detect (`scalerl.scaling.power.detectable_difference`).

Departure from the paper: the paper measures its +-0.02 from three seeds of the 8B run; here the
spread is measured on the study's own seeds when there are at least two.
"""

from __future__ import annotations

import json
from itertools import combinations
from typing import Sequence

import numpy as np

from scalerl.run.compute import FIT_X
from scalerl.scaling.power import detectable_difference
from scalerl.study.activity import judge_activity, staleness_side_effect
from scalerl.study.fits import ConfigFit, RunFit, fit_config
from scalerl.study.paper import DOES_NOT_ACT, FINDINGS, judge
from scalerl.study.runner import DONE_FILE, RunSpec
from scalerl.study.variants import CONTROL_AGAIN, CONTROL_BASE, CONTROL_ORDER, CONTROLS

PAPER_MARGIN = 0.02


def task_cap(configs: Sequence[ConfigFit]) -> str | None:
    """Why the task sets the ceiling of every run of the study: the subsets no run ever passes."""
    runs = [r for c in configs for r in c.runs if len(r.y)]
    if not runs:
        return None
    never = frozenset.intersection(*(r.never_passing for r in runs))
    if not never:
        return None
    return (
        f"validation subset(s) {', '.join(sorted(never))} never passed in any evaluation of any of the "
        f"{len(runs)} runs: every configuration meets the ceiling those items set"
    )


def compare(base: ConfigFit, other: ConfigFit) -> dict:
    """Differences of `other` from `base` in A and B, judged against the seed margin."""
    if base.fit is None or other.fit is None:
        return {"judged": False, "why": "no fit"}
    spreads_a = [s for s in (base.spread("A"), other.spread("A")) if s is not None]
    spreads_b = [s for s in (base.spread("B"), other.spread("B")) if s is not None]
    margin_a = max([PAPER_MARGIN, *spreads_a])
    d_a, d_b = other.fit.A - base.fit.A, other.fit.B - base.fit.B
    edge = base.a_on_edge() or other.a_on_edge()  # a ceiling the data do not pin down is not compared
    out = {
        "judged": True,
        "dA": d_a,
        "margin_A": margin_a,
        "A_differs": None if edge else abs(d_a) > margin_a,
        "dB": d_b,
        "margin_B": max(spreads_b) if spreads_b else None,
    }
    out["B_differs"] = None if out["margin_B"] is None else abs(d_b) > out["margin_B"]
    for param in ("A", "B"):  # the smallest difference these seeds detect (scalerl.scaling.power)
        sides = [(c.spread(param), c.seeds()) for c in (base, other)]
        out[f"detectable_{param}"] = (
            None
            if any(s is None for s, _ in sides)
            else detectable_difference(sides[0][0], sides[0][1], sides[1][0], sides[1][1])
        )
    C = base.final_compute()
    at = (lambda c: c.at_compute(C)) if C is not None else (lambda c: np.empty(0))
    for key, margin, differs, values in (
        ("dEnd", "margin_end", "end_differs", ConfigFit.finals),
        ("dAtBase", "margin_at_base", "at_base_differs", at),
    ):
        mdd = margin.replace("margin", "detectable")
        vb, vo = values(base), values(other)
        if len(vb) and len(vo):  # judged like A: the larger of the paper's margin and either side's seed std
            out[key] = float(vo.mean() - vb.mean())
            out[margin] = max([PAPER_MARGIN, *(float(np.std(v, ddof=1)) for v in (vb, vo) if len(v) >= 2)])
            out[differs] = abs(out[key]) > out[margin]
            out[mdd] = (
                detectable_difference(float(np.std(vb, ddof=1)), len(vb), float(np.std(vo, ddof=1)), len(vo))
                if len(vb) >= 2 and len(vo) >= 2
                else None
            )
    return out


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
            d = {
                "judged": False,
                "why": "; ".join(f"{x}: {by_name[x].error if x in by_name else 'not in the study'}" for x in missing),
            }
        else:
            d = compare(by_name[ref], c)
        row = {"figure": f.figure, "claim": f.claim, "against": ref, **judge(d, f, c.trunk_dtype, x_col, cap)}
        if ref in by_name:
            ref_act, act_runs = (
                [r.activity for r in by_name[ref].runs if r.activity],
                [r.activity for r in c.runs if r.activity],
            )
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
            out["positive"][name] = {"swaps": swaps, "expect": expect, "detected": detected, "end_detected": end, **d}
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
    runs = [r for r in (*a.runs, *b.runs) if r.finished and len(r.x)]
    if len(runs) < 4 or len(runs) % 2:
        return None
    n, splits, differs_a, differs_end, judged = len(runs), 0, 0, 0, 0
    for left in combinations(range(n), n // 2):
        if 0 not in left:  # each split once: the first run is always on the left
            continue
        right = [i for i in range(n) if i not in left]
        ca = fit_config("split-a", "", [runs[i] for i in left], a.frac, 0, subsets=False)
        cb = fit_config("split-b", "", [runs[i] for i in right], a.frac, 0, subsets=False)
        d = compare(ca, cb)
        splits += 1
        if d.get("A_differs") is not None:
            judged += 1
            differs_a += bool(d["A_differs"])
        differs_end += bool(d.get("end_differs"))
    return {
        "runs": n,
        "splits": splits,
        "judged_A": judged,
        "differs_A": differs_a,
        "rate_A": differs_a / judged if judged else None,
        "differs_end": differs_end,
        "rate_end": differs_end / splits,
    }


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
    return {
        "runs": int(errs.size),
        "mean_abs_error": float(np.abs(errs).mean()),
        "max_abs_error": float(np.abs(errs).max()),
        "mean_error": float(errs.mean()),
        "within": int(ok.sum()),
        "fell": int((~standing).sum()),
        "runs_standing": int(standing.sum()),
        "under": len(under),
        "under_bent_early": sum(r.fit is not None and r.half["A"] < r.fit.A for r in under),
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
        **subset_summary([r for r in runs if r.half_subsets is not None]),
    }


def subset_summary(runs: list[RunFit]) -> dict:
    """The exploratory per-subset forecast over the runs that have one, beside the frozen method's
    error on the same runs."""
    if not runs:
        return {"subset_runs": 0}
    errs = np.array([r.half_subsets["error"] for r in runs])
    return {
        "subset_runs": len(runs),
        "subset_mean_abs_error": float(np.abs(errs).mean()),
        "subset_within": int((np.abs(errs) <= PAPER_MARGIN).sum()),
        "subset_frozen_mean_abs_error": float(np.mean([abs(r.prediction_error) for r in runs])),
    }


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
