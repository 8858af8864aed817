"""The study report, in three parts: the fits (`scalerl.study.fits`: every run, every configuration's
seeds pooled, every subset, all by the one forecast specification `scalerl.scaling.spec`), the
verdicts (`scalerl.study.verdicts`: differences from the base, the paper's findings, the controls,
predictability) and the rendering (`scalerl.study.render`: report.md, report.json, the plots, with
the tables of `scalerl.study.tables`). The names are importable from here as well."""

from scalerl.study.fits import (AT_COMPUTE_WINDOW, END_EVALS, PARTITION_RESIDUAL, SHARE_TOLERANCE, SUBSET_BOOTSTRAP,
                                Y_COLUMN, ConfigFit, RunFit, equal_share_subsets, fit_config, fit_run, fit_study,
                                fit_subsets, read_activity, read_subsets, run_trunk_dtype, sort_key, subset_ceiling)
from scalerl.study.render import POWER_NOTE, report_dict, write_report
from scalerl.study.tables import (controls_markdown, paper_markdown, predictability_markdown, provenance_markdown,
                                  subset_cell, subsets_markdown, table_markdown)
from scalerl.study.verdicts import (PAPER_MARGIN, against_paper, compare, controls_summary, graded_controls,
                                    predictability_summary, provenance, split_false_positives, subset_summary,
                                    task_cap)

__all__ = ["AT_COMPUTE_WINDOW", "END_EVALS", "PAPER_MARGIN", "PARTITION_RESIDUAL", "POWER_NOTE", "SHARE_TOLERANCE",
           "SUBSET_BOOTSTRAP", "Y_COLUMN", "ConfigFit", "RunFit", "against_paper", "compare", "controls_markdown",
           "controls_summary", "equal_share_subsets", "fit_config", "fit_run", "fit_study", "fit_subsets",
           "graded_controls", "paper_markdown", "predictability_markdown", "predictability_summary", "provenance",
           "provenance_markdown", "read_activity", "read_subsets", "report_dict", "run_trunk_dtype", "sort_key",
           "split_false_positives", "subset_cell", "subset_ceiling", "subset_summary", "subsets_markdown",
           "table_markdown", "task_cap", "write_report"]
