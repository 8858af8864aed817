"""Studies: recipe comparisons and leave-one-out ablations of ScaleRL (paper Figs. 2 and 7).

    plan_variants -> plan_runs -> run_study (resumable) -> fit_study (fits) -> write_report (verdicts, render)

`scalerl ablate` wraps `ablate(...)`; see docs/study.md.
"""

from scalerl.study.fits import ConfigFit, RunFit, fit_study
from scalerl.study.render import write_report
from scalerl.study.runner import RunSpec, budget_overrides, plan_runs, run_study
from scalerl.study.study import ablate
from scalerl.study.variants import LEAVE_ONE_OUT, RECIPES, Variant, plan_variants, variants_table

__all__ = [
    "ConfigFit",
    "LEAVE_ONE_OUT",
    "RECIPES",
    "RunFit",
    "RunSpec",
    "Variant",
    "ablate",
    "budget_overrides",
    "fit_study",
    "plan_runs",
    "plan_variants",
    "run_study",
    "variants_table",
    "write_report",
]
