"""The study report's markdown tables: configurations, controls, the paper's findings, per subset,
predictability, provenance (`scalerl.study.render` puts them in report.md)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from scalerl.scaling import FitResult
from scalerl.study.fits import END_EVALS, ConfigFit, RunFit, sort_key, subset_ceiling
from scalerl.study.paper import DOES_NOT_ACT, NOT_POWERED, TASK_SETS_CEILING
from scalerl.study.variants import CONTROL_AGAIN, CONTROL_BASE
from scalerl.study.verdicts import PAPER_MARGIN, compare, predictability_summary


def table_markdown(configs: Sequence[ConfigFit], base: str) -> str:
    """The main table, sorted by A then B: fits with 90% intervals, seed spread, verdict."""
    by_name = {c.name: c for c in configs}
    base_c = by_name[base].final_compute() if base in by_name else None
    head = (
        "| config | swaps | A | A 90% | A seed std | B | B 90% | B seed std | C_mid | C_mid 90% | seeds "
        "| end pass rate | at base compute | vs base |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in sorted(configs, key=sort_key):
        fell = sum(r.fell for r in c.runs)
        n = f"{len(c.runs)}" + (f" ({fell} fell)" if fell else "")
        if c.fit is None:
            lines.append(
                f"| {c.name} | {c.swaps} | no fit: {c.error} | | | | | | | | {n} | {_final(c)} | {_at(c, base_c)} | |"
            )
            continue
        f = c.fit
        if c.name == base:
            verdict = "base"
        else:
            d = compare(by_name[base], c) if base in by_name else {"judged": False}
            verdict = _verdict(d)
        edge = " (edge)" if c.a_on_edge() else ""
        lines.append(
            f"| {c.name} | {c.swaps} | {f.A:.3f}{edge} | {_ci(f, 'A', '.3f')} | {_spread(c, 'A', '.3f')} "
            f"| {f.B:.2f} | {_ci(f, 'B', '.2f')} | {_spread(c, 'B', '.2f')} | {f.C_mid:.4g} "
            f"| {_ci(f, 'C_mid', '.3g')} | {n} | {_final(c)} | {_at(c, base_c)} | {verdict} |"
        )
    return "\n".join(lines)


def _ci(fit: FitResult, name: str, fmt: str) -> str:
    if name not in fit.ci:
        return "-"
    lo, hi = fit.ci[name]
    return f"{lo:{fmt}}..{hi:{fmt}}"


def _spread(c: ConfigFit, param: str, fmt: str) -> str:
    s = c.spread(param)
    return "-" if s is None else f"{s:{fmt}}"


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
        a = (
            f"A {d['dA']:+.3f} ({'beyond' if d['A_differs'] else 'within'} +-{d['margin_A']:.3f}"
            f"{_mdd(d.get('detectable_A'))})"
        )
    if d["B_differs"] is None:
        b = f"B {d['dB']:+.2f} (no seed spread)"
    else:
        b = (
            f"B {d['dB']:+.2f} ({'beyond' if d['B_differs'] else 'within'} +-{d['margin_B']:.2f}"
            f"{_mdd(d.get('detectable_B'), '.2f')})"
        )
    if "dEnd" not in d:
        return f"{a}; {b}"
    fin = (
        f"end {d['dEnd']:+.3f} ({'beyond' if d['end_differs'] else 'within'} +-{d['margin_end']:.3f}"
        f"{_mdd(d.get('detectable_end'))})"
    )
    if "dAtBase" in d:
        fin += (
            f"; at base compute {d['dAtBase']:+.3f} "
            f"({'beyond' if d['at_base_differs'] else 'within'} +-{d['margin_at_base']:.3f}"
            f"{_mdd(d.get('detectable_at_base'))})"
        )
    return f"{a}; {b}; {fin}"


def _a_cell(d: dict) -> str:
    if not d.get("judged"):
        return "not judged"
    return f"{d['dA']:+.3f} (margin +-{d['margin_A']:.3f}{_mdd(d.get('detectable_A'))})"


def _end_cell(d: dict) -> str:
    if "dEnd" not in d:
        return "-"
    return f"{d['dEnd']:+.3f} (margin +-{d['margin_end']:.3f}{_mdd(d.get('detectable_end'))})"


def controls_markdown(s: dict) -> str:
    lines = [
        "| control | what it changes | expected | A: measured vs base | detected (A) | end pass rate vs base "
        "| detected (end) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, p in s["positive"].items():
        lines.append(
            f"| {name} (positive) | {p['swaps']} | A {p['expect']} | {_a_cell(p)} | {_yes_no(p['detected'])} "
            f"| {_end_cell(p)} | {_yes_no(p['end_detected'])} |"
        )
    g = s.get("graded")
    if g is not None:
        for st in g["steps"]:
            lines.append(
                f"| {st['higher']} vs {st['lower']} (graded) | the next thinking budget up | A higher "
                f"| {_a_cell(st)} | {_yes_no(st['up'])} | - | - |"
            )
    n = s["negative"]
    if n is not None:
        lines.append(
            f"| {CONTROL_AGAIN} (negative) | nothing: the base under other seeds | no difference "
            f"| {_a_cell(n)} | {_differs(n['differs'])} | {_end_cell(n)} | {_differs(n['end_differs'])} |"
        )
    fp = s["false_positive"]
    if g is not None:
        order = " < ".join(g["order"])
        ordered = "ordered" if g["ordered"] else "not judged" if g["ordered"] is None else "**not ordered**"
        lines += ["", f"Graded controls, A expected {order}: {ordered}."]
    if fp is not None:
        rate_a = "-" if fp["rate_A"] is None else f"{fp['rate_A']:.0%}"
        lines += [
            "",
            f'False-positive rate of the "differs" verdict over the {fp["splits"]} splits of the '
            f"{fp['runs']} runs of `{CONTROL_BASE}` and `{CONTROL_AGAIN}` into two groups of "
            f"{fp['runs'] // 2}: "
            f"in A {fp['differs_A']} of {fp['judged_A']} judged ({rate_a}); in the end pass rate "
            f"{fp['differs_end']} of {fp['splits']} ({fp['rate_end']:.0%}).",
        ]
    return "\n".join(lines)


def _yes_no(detected: bool | None) -> str:
    return "not judged (no fit, or A on the edge)" if detected is None else "yes" if detected else "**no**"


def _differs(differs: bool | None) -> str:
    return (
        "not judged (no fit, or A on the edge)"
        if differs is None
        else "**differs**"
        if differs
        else "no difference (correct)"
    )


def paper_markdown(rows: dict[str, dict]) -> str:
    lines = [
        "| config | against | paper | its finding | A: verdict | A: measured | B: verdict | B: measured | overall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        a, b = r.get("A", ("-", "no claim")), r.get("B", ("-", "no claim"))
        lines.append(
            f"| {name} | {r['against']} | {r['figure']} | {r['claim']} | {a[0]} | {a[1]} | {b[0]} | {b[1]} "
            f"| **{r['overall']}** |"
        )
    counts = {
        v: sum(r["overall"] == v for r in rows.values())
        for v in ("agrees", "disagrees", TASK_SETS_CEILING, DOES_NOT_ACT, NOT_POWERED, "not measurable here")
    }
    lines += [
        "",
        ", ".join(f"{n} {v}" for v, n in counts.items() if n or v not in (TASK_SETS_CEILING, DOES_NOT_ACT, NOT_POWERED))
        + f" (of {len(rows)}).",
    ]
    acts = {name: r["activity"] for name, r in rows.items() if "activity" in r}
    if acts:
        word = {True: "acts", False: "does not act", None: "not settled"}
        lines += [
            "",
            "Does the swapped component act on this testbed? From the runs' own metrics "
            "(the variant's own check, `scalerl.study.activity`); a row whose component does not act is not "
            "judged on the paper's claim:",
            "",
        ]
        lines += [f"- **{name}**: {word[a['acts']]}: {a['evidence']}" for name, a in acts.items()]
    sides = {name: r["side_effect"] for name, r in rows.items() if "side_effect" in r}
    if sides:
        lines += [
            "",
            "What else the swap changed (`scalerl.study.activity.staleness_side_effect`): a verdict on "
            "such a row is about the two changes together, not the component alone:",
            "",
        ]
        lines += [f"- **{name}**: {text}" for name, text in sides.items()]
    return "\n".join(lines)


def subsets_markdown(configs: Sequence[ConfigFit]) -> str:
    """Per configuration, each subset's fitted ceiling and efficiency beside its end pass rate: where
    a configuration's `A` comes from (which rungs or domains it learnt)."""
    names = sorted({n for c in configs for n in c.subset_fits})
    if not names:
        return ""
    lines = [
        "| config | "
        + " | ".join(f"{n}: A [90%], B, end" for n in names)
        + " | sum of ceilings [90%] | A (one sigmoid) |",
        "|---|" + "---|" * (len(names) + 2),
    ]
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


PREDICTABILITY_HEAD = (
    f"| config | seed | run | evals | start | at half compute | end (mean of last {END_EVALS}) | A [90%] | "
    "predicted end from the first half | first-half fit's A | first half (points, compute) | error | within 0.02 | "
    "baseline: last first-half eval, error | baseline: best first-half eval, error | "
    "baseline: ruler (line of the last two against log compute), error | fit beat both | "
    "fell after its peak | per-subset forecast (exploratory), error | first half identified A | "
    "calibrated 90% interval of the end (covers) | baseline: mean of the last three first-half evals, error |"
)


def predictability_markdown(configs: Sequence[ConfigFit]) -> str:
    lines = [PREDICTABILITY_HEAD, "|" + "---|" * 22]
    lines += [_predictability_row(c, r) for c in configs for r in c.runs]
    s = predictability_summary(configs)
    if s is not None:
        lines += ["", _predictability_summary_line(s)]
    return "\n".join(lines)


def _predictability_row(c: ConfigFit, r: RunFit) -> str:
    start = f"{r.y[0]:.3f}" if len(r.y) else "-"
    end = f"{r.y[-END_EVALS:].mean():.3f}" if len(r.y) else "-"
    state = "finished" if r.finished else f"failed: {r.failed}" if r.failed else "unfinished"
    a = "-"
    if r.fit is not None:
        lo, hi = r.fit.ci.get("A", (float("nan"), float("nan")))
        a = f"{r.fit.A:.3f} [{lo:.3f}, {hi:.3f}]"
    fell = "-" if r.fall is None else f"yes: {r.fall['peak']:.3f} -> {r.fall['end']:.3f}" if r.fell else "no"
    if r.half is None:
        return (
            f"| {c.name} | {r.seed} | {state} | {len(r.y)} | {start} | | {end} | {a} | {r.error} "
            f"| | | | | | | | | {fell} | | | | |"
        )
    h = r.half
    return (
        f"| {c.name} | {r.seed} | {state} | {len(r.y)} | {start} | {h['at_half']:.3f} | {end} | {a} "
        f"| {h['predicted']:.3f} | {h['A']:.3f} | {h['points']}, {h['half_frac']:.0%} | {h['error']:+.3f} "
        f"| {'yes' if abs(h['error']) <= PAPER_MARGIN else 'no'} "
        f"| {h['baseline_last']:.3f}, {h['baseline_last_error']:+.3f} "
        f"| {h['baseline_best']:.3f}, {h['baseline_best_error']:+.3f} "
        f"| {h['baseline_ruler']:.3f}, {h['baseline_ruler_error']:+.3f} "
        f"| {'yes' if h['beat_baselines'] else 'no'} | {fell} "
        f"| {subset_cell(r.half_subsets)} | {_ident_cell(h)} | {_interval_cell(h)} | {_last3_cell(h)} |"
    )


def _predictability_summary_line(s: dict) -> str:
    m = PAPER_MARGIN
    line = (
        f"{s['runs']} runs (the default forecast): mean |error| {s['mean_abs_error']:.3f}, largest "
        f"{s['max_abs_error']:.3f}, mean signed error {s['mean_error']:+.3f}; {s['within']} of {s['runs']} "
        f"within {m}. Baselines on the same runs: the last first-half evaluation, mean |error| "
        f"{s['baseline_last_mean_abs_error']:.3f} ({s['baseline_last_within']} within {m}); the "
        f"best first-half evaluation, mean |error| {s['baseline_best_mean_abs_error']:.3f} "
        f"({s['baseline_best_within']} within {m}); the ruler (the line through the last two "
        f"first-half evaluations against log compute), mean |error| {s['baseline_ruler_mean_abs_error']:.3f} "
        f"({s['baseline_ruler_within']} within {m}); the fit beat the last and the best on "
        f"{s['beat_baselines']} of {s['runs']}. The second half gained {s['mean_left']:+.3f} on average from the "
        f"value at half the compute. The calibrated 90% interval covered the end on {s['covered']} of "
        f"{s['runs']}; the first half identified the ceiling on {s['identified']} of {s['runs']}."
    )
    if s["under"]:
        line += (
            f" {s['under']} of {s['runs']} were under-predicted; on {s['under_bent_early']} of those the "
            "first-half fit's A is below the whole run's: the curve was still rising where the first half's "
            "sigmoid had already bent (a slower part of the gain, e.g. a harder subset, still to come)."
        )
    if s["subset_runs"]:
        line += (
            f" The per-subset forecast (exploratory: each rung's own first-half fit, averaged; "
            f"`subset_first_half_prediction`), on the {s['subset_runs']} run"
            f"{'s' if s['subset_runs'] != 1 else ''} whose subsets are the validation set in near-equal "
            f"shares: mean |error| {s['subset_mean_abs_error']:.3f} (the frozen "
            f"method on the same runs: {s['subset_frozen_mean_abs_error']:.3f}), {s['subset_within']} "
            f"within {m}."
        )
    if s["fell"]:
        line += (
            f" {s['fell']} of them fell after their peak (gave back at least a tenth of their gain: "
            f"`find_fall`), which no sigmoid forecasts; of the {s['runs_standing']} others, "
            f"{s['within_standing']} within {m}."
        )
    return line


def _ident_cell(h: dict) -> str:
    return "-" if "identified" not in h else "yes" if h["identified"] else "no"


def _interval_cell(h: dict) -> str:
    if not h.get("interval"):
        return "-"
    lo, hi = h["interval"]
    return f"{lo:.3f} .. {hi:.3f} ({'yes' if h['covered'] else 'no'})"


def _last3_cell(h: dict) -> str:
    return "-" if "baseline_last3" not in h else f"{h['baseline_last3']:.3f}, {h['baseline_last3_error']:+.3f}"


def subset_cell(h: dict | None) -> str:
    if h is None:
        return "-"
    fallback = [n for n, v in h["subsets"].items() if not v["fitted"]]
    note = f" ({', '.join(fallback)}: last first-half eval)" if fallback else ""
    return f"{h['predicted']:.3f}, {h['error']:+.3f}{note}"


def provenance_markdown(p: dict) -> str:
    lines = ["| model | build (weights SHA-256) | runs |", "|---|---|---|"]
    for model, builds in sorted(p["models"].items()):
        for build, runs in sorted(builds.items()):
            lines.append(f"| {model} | {build} | {len(runs)}: {', '.join(runs)} |")
    lines += ["", "Code: " + "; ".join(f"`{c}` ({len(r)} runs)" for c, r in sorted(p["code"].items()))]
    if p["mixed_builds"]:
        lines += [
            "",
            f"**Runs of {', '.join(p['mixed_builds'])} started from different builds of the model: they "
            "did not start from the same weights, so differences between them are not the configurations' "
            "alone.**",
        ]
    return "\n".join(lines)
