"""The study report's files: report.md (its sections, the tables of `scalerl.study.tables`),
report.json (`report_dict`) and the plots of the fitted curves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from scalerl.scaling import FitResult, plot_fits
from scalerl.scaling.power import ALPHA, POWER
from scalerl.study.fits import (
    AT_COMPUTE_WINDOW,
    END_EVALS,
    SUBSET_BOOTSTRAP,
    Y_COLUMN,
    ConfigFit,
    sort_key,
    subset_ceiling,
)
from scalerl.study.runner import RunSpec
from scalerl.study.tables import (
    controls_markdown,
    paper_markdown,
    predictability_markdown,
    provenance_markdown,
    subsets_markdown,
    table_markdown,
)
from scalerl.study.verdicts import (
    PAPER_MARGIN,
    against_paper,
    compare,
    controls_summary,
    predictability_summary,
    provenance,
)

FIT_NOTE = (
    "Every fit is the one forecast specification's (`scalerl.scaling.spec`, the fit of `scalerl fit`): the "
    "first `eval.fit_min_frac` of the compute left out, moved earlier only to keep five evaluations; `R0` "
    "the measured start; the fast fit checked against the paper's grid; 90% residual-bootstrap intervals. "
    "A configuration's seeds are pooled in one window over all their points (`spec_fit_pooled`, as "
    "`scalerl fit --seeds-of-one`), with one fit per seed in that window for the seed std."
)
POWER_NOTE = (
    f"`detectable`: the smallest difference the two sides' seeds can detect (`scalerl.scaling.power`: a "
    f"two-sided two-sample t-test at alpha {ALPHA} with power {POWER}, from the seed standard deviations "
    "of each side, pooled: (t_{1-alpha/2} + t_{power}) x s_pooled x sqrt(1/n_base + 1/n_config), "
    "n_base + n_config - 2 degrees of freedom); the margin rule above calls a difference at about one seed "
    'std, well below it. Under "Against the paper", a claim about A is "not powered" when the detectable '
    "difference exceeds the paper's effect for it (for a claim of no difference, the paper's +-0.02)."
)


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
    out = {
        "base": base,
        "x": x_col,
        "y": Y_COLUMN,
        "margin": PAPER_MARGIN,
        "predictability": predictability_summary(configs),
        "controls": controls_summary(configs, base),
        "configs": [],
    }
    for c in sorted(configs, key=sort_key):
        entry = {
            "name": c.name,
            "swaps": c.swaps,
            "notes": c.notes,
            "error": c.error,
            "fit": c.fit.to_dict() if c.fit is not None else None,
            "A_on_edge": c.a_on_edge(),
            "A_subsets": subset_ceiling(c),
            "end_pass_rate": _stats(c.finals()),
            "at_base_compute": _at_dict(c, by_name[base].final_compute() if base in by_name else None),
            "vs_base": compare(by_name[base], c) if base in by_name and c.name != base else None,
            "trunk_dtype": c.trunk_dtype,
            "paper": paper.get(c.name),
            "runs": [
                {
                    "seed": r.seed,
                    "finished": r.finished,
                    "failed": r.failed,
                    "evals": len(r.y),
                    "final_compute": float(r.x[-1]) if len(r.x) else None,
                    "final_pass_rate": float(r.y[-1]) if len(r.y) else None,
                    "A": r.fit.A if r.fit else None,
                    "B": r.fit.B if r.fit else None,
                    "C_mid": r.fit.C_mid if r.fit else None,
                    "end_pass_rate": float(r.y[-END_EVALS:].mean()) if len(r.y) else None,
                    "A_ci": list(r.fit.ci["A"]) if r.fit and "A" in r.fit.ci else None,
                    "first_half": r.half,
                    "prediction_error": r.prediction_error,
                    "first_half_per_subset": r.half_subsets,
                    "fall": r.fall,
                    "error": r.error,
                }
                for r in c.runs
            ],
            "fell": sum(r.fell for r in c.runs),
            "subsets": {
                n: (f.to_dict() if isinstance(f, FitResult) else {"error": f}) for n, f in c.subset_fits.items()
            },
        }
        out["configs"].append(entry)
    return out


def _plot_groups(configs: Sequence[ConfigFit], base: str) -> dict[str, set[str]]:
    """Recipes compared with the base, and the base's leave-one-out variants (each with the base)."""
    groups: dict[str, set[str]] = {}
    for c in configs:
        if c.name != base:
            groups.setdefault("recipes" if c.swaps.startswith("recipe ") else "leave_one_out", {base}).add(c.name)
    return groups


def _write_plots(study_dir: Path, configs: Sequence[ConfigFit], base: str, x_col: str) -> tuple[list, dict]:
    """fits.png and fits_linearised.png of every fitted configuration, and one pair per group of the
    paper's two figures (recipes, Fig. 2; leave-one-out, Fig. 7) when the study has both."""
    plotted = [
        (c.name, np.concatenate([r.x for r in c.runs]), np.concatenate([r.y for r in c.runs]), c.fit)
        for c in sorted(configs, key=sort_key)
        if c.fit is not None
    ]
    if plotted:
        plot_fits(plotted, study_dir / "fits.png", study_dir / "fits_linearised.png", xlabel=x_col, ylabel=Y_COLUMN)
    groups = _plot_groups(configs, base)
    groups = groups if len(groups) > 1 else {}
    for group, names in groups.items():
        part = [p for p in plotted if p[0] in names]
        if part:
            plot_fits(
                part,
                study_dir / f"fits_{group}.png",
                study_dir / f"fits_{group}_linearised.png",
                xlabel=x_col,
                ylabel=Y_COLUMN,
            )
    return plotted, groups


def write_report(
    study_dir: Path,
    configs: Sequence[ConfigFit],
    base: str,
    x_col: str,
    variants_md: str,
    command: str = "",
    specs: Sequence[RunSpec] = (),
) -> dict:
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
    md += _fits_section(configs, base, x_col)
    if data["controls"] is not None:
        md += [
            "## Controls: does the study detect what exists, and only that?",
            "",
            controls_markdown(data["controls"]),
            "",
        ]
    md += _paper_and_subsets(configs, paper)
    md += [
        "## Predictability: a fit on the first half of the compute vs the mean of the last three evaluations",
        "",
        predictability_markdown(configs),
        "",
    ]
    if data["provenance"]["models"]:
        md += [
            "## Provenance: the weights each run started from, and the code",
            "",
            provenance_markdown(data["provenance"]),
            "",
        ]
    if plotted:
        md += ["## Plots", "", "![fitted curves](fits.png)", "", "![linearised view](fits_linearised.png)", ""]
        for group in groups:
            md += [
                f"![{group}: fitted curves](fits_{group}.png)",
                "",
                f"![{group}: linearised view](fits_{group}_linearised.png)",
                "",
            ]
    (study_dir / "report.md").write_text("\n".join(md))
    return data


def _fits_section(configs: Sequence[ConfigFit], base: str, x_col: str) -> list[str]:
    return [
        f"## Fits (x = `{x_col}`, y = `{Y_COLUMN}`), sorted by A then B",
        "",
        table_markdown(configs, base),
        "",
        FIT_NOTE,
        "",
        f"Margin: a difference in A counts when it exceeds the larger of +-{PAPER_MARGIN} (paper) and the "
        "measured seed std of A of either side; B is judged against the measured seed std of B only. "
        f"`end pass rate` is the mean (+- seed std) over finished runs of their last {END_EVALS} evaluations' "
        "mean, judged like A; `at base compute` is the same at equal compute: each finished run's mean pass rate "
        f"over its evaluations in [{AT_COMPUTE_WINDOW} C, C], C = the base's mean final compute. "
        "Neither needs a fit: they are the comparisons to trust when A is on the edge of its range (the "
        "curve has not bent enough to pin its ceiling).",
        "",
        POWER_NOTE,
        "",
    ]


def _paper_and_subsets(configs: Sequence[ConfigFit], paper: dict[str, dict]) -> list[str]:
    md = []
    if paper:
        md += [
            "## Against the paper",
            "",
            "Each configuration's difference from its reference, judged against the paper's finding "
            "(`scalerl/study/paper.py`): agrees (the paper's direction beyond the seed margin; for a claim "
            "of no difference, within it), disagrees, not powered (the seeds cannot detect a difference the "
            "size of the paper's), or not measurable / not testable here (and why).",
            "",
            paper_markdown(paper),
            "",
        ]
    subsets = subsets_markdown(sorted(configs, key=sort_key))
    if subsets:
        md += [
            "## Per subset: each rung or domain fitted on its own",
            "",
            f"Eq. 1 fitted to each `{Y_COLUMN}/<subset>` curve as the whole curve is (the same specification, "
            f"seeds pooled, {SUBSET_BOOTSTRAP} bootstrap replicas at most); `end`: the mean over finished runs of "
            f"the subset's last {END_EVALS} evaluations. A subset whose end is near 1 is learnt; one still far "
            "below its fitted `A`, or with `A` on the edge, was still rising when the runs ended.",
            "",
            subsets,
            "",
        ]
    return md
