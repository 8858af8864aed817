"""`ablate(...)`: plan, run (resumably) and report a study in one call; `scalerl ablate` wraps it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Callable, Sequence

from scalerl.run.compute import FIT_X
from scalerl.scaling.spec import SPEC
from scalerl.study.fits import fit_study
from scalerl.study.render import write_report
from scalerl.study.runner import RunSpec, failure, plan_runs, restore_archived, run_study, write_plan
from scalerl.study.variants import CONTROL_BASE, plan_variants, variants_table


def ablate(
    out: str | Path,
    base: str = "scalerl",
    leave_one_out: bool = False,
    recipes: Sequence[str] = (),
    k_sweep: bool = False,
    precision: bool = False,
    controls: bool = False,
    axes: bool = False,
    seeds: int = 1,
    budget: str | None = None,
    overrides: Sequence[str] = (),
    only: Sequence[str] = (),
    x_col: str = FIT_X,
    n_bootstrap: int = SPEC.n_bootstrap,
    report_only: bool = False,
    train_fn: Callable | None = None,
    progress: bool = False,
    command: str = "",
    log: Callable[[str], None] = print,
    jobs: int = 1,
    results: str | Path | None = None,
) -> dict:
    """Run every (configuration, seed) not finished yet, then fit them and write the report.

    `only` restricts the runs trained this time to the named configurations; the report covers
    them and every other configuration that has runs, and leaves out the rest of the plan (they
    were not asked for: listing them as "no evaluations yet" would count them as not measurable).
    `results`: a folder where every finished run is also kept in small form, and from which finished
    runs are taken (scalerl.study.runner; commit it to carry a long study across machines). Returns
    the report.json object.
    """
    from scalerl.errors import ScaleRLError

    variants = plan_variants(base, leave_one_out, tuple(recipes), k_sweep, precision, controls, seeds, axes)
    unknown = set(only) - {v.name for v in variants}
    if unknown:
        raise ScaleRLError(
            f"--only {', '.join(sorted(unknown))}: not a configuration of this study "
            f"({', '.join(v.name for v in variants)})"
        )
    specs = drop_no_ops(plan_runs(variants, seeds, Path(out), overrides, budget), base, log)
    write_plan(Path(out), specs, base, overrides, budget)
    _run_or_restore(specs, only, report_only, results, train_fn, progress, log, jobs)
    if only:
        specs = _reported(specs, variants, only, log)
    configs = fit_study(specs, x_col, n_bootstrap)
    planned = {s.variant.name for s in specs}
    base = variants[0].name  # `base` for the controls and the axes alone, else the base recipe
    report = write_report(
        Path(out), configs, base, x_col, variants_table([v for v in variants if v.name in planned]), command, specs
    )
    log(f"report: {Path(out) / 'report.md'}  {Path(out) / 'report.json'}  plots: {Path(out) / 'fits.png'}")
    return report


def _run_or_restore(specs, only, report_only, results, train_fn, progress, log, jobs) -> None:
    """Train every run not finished yet (those of `only` alone when given), or, for the report of a study kept in
    `results`, take its finished runs from there."""
    if report_only and results is not None:  # the report of a study kept in `results` (a fresh checkout),
        # as its runs were configured: a default changed since does not stop the report of a finished study
        restored = sum(restore_archived(s, Path(results), check=False) for s in specs)
        log(f"{restored} finished runs taken from {results} (reported with the configs they ran with)")
    if not report_only:
        todo = [s for s in specs if not only or s.variant.name in only]
        counts = run_study(todo, train_fn, progress, log, jobs, None if results is None else Path(results))
        log(
            f"runs: {counts['started']} started, {counts['resumed']} resumed, {counts['skipped']} already finished, "
            f"{counts['failed']} failed"
        )


def _reported(specs: list, variants: list, only: Sequence[str], log: Callable[[str], None]) -> list:
    """Under `--only`: the runs of the base, of the configurations asked for, and of any other that has runs."""
    ran = {variants[0].name} | {s.variant.name for s in specs if s.variant.name in only or has_run(s.run_dir)}
    planned = {s.variant.name for s in specs}
    left_out = [v.name for v in variants if v.name in planned - ran]
    if left_out:
        log(f"not in the report (not in --only, no runs): {', '.join(left_out)}")
    return [s for s in specs if s.variant.name in ran]


def has_run(run_dir: Path) -> bool:
    """Whether a run left anything to report: metrics, or a recorded failure."""
    return (Path(run_dir) / "metrics.jsonl").is_file() or failure(Path(run_dir)) is not None


def drop_no_ops(specs: list[RunSpec], base: str, log: Callable[[str], None]) -> list[RunSpec]:
    """Leave out variants whose config is the base's (e.g. `no-npr` of a base without the curriculum)."""

    def key(spec: RunSpec) -> tuple:
        d = spec.cfg.model_dump(mode="json")
        d.pop("recipe")
        return spec.seed, json.dumps(d, sort_keys=True)

    base_keys = {key(s) for s in specs if s.variant.name in (base, CONTROL_BASE)}
    same = {s.variant.name for s in specs if s.variant.name not in (base, CONTROL_BASE) and key(s) in base_keys}
    for name in sorted(same):
        log(f"{name}: the same config as the base {base!r} (nothing to swap), left out")
    return [s for s in specs if s.variant.name not in same]


def command_line(argv: Sequence[str]) -> str:
    """The shell command that regenerates a study (for the report)."""
    return "scalerl " + " ".join(shlex.quote(a) for a in argv)
