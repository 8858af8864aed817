"""`scalerl train` end to end: resolve the config, open the run directory, train, fit, print.

The final fit uses the run's own validation curve (x = `FIT_X`, the analytic FLOPs, y =
`val/pass_rate` from metrics.jsonl), skipping the first `eval.fit_min_frac` of the compute
(the early window), and writes `fit.json` + `fit.png`. `fit.json` also holds the hold-out check
(`scalerl.scaling.first_half_prediction`, the frozen method of docs/forecasting.md): a sigmoid
fitted on the first half of the compute only, how far its prediction of the mean of the last three
evaluations landed from the measured mean, and the same for two naive predictors (the last and
the best first-half evaluation); and `fall` (`scalerl.scaling.find_fall`): whether the curve fell after its peak,
which no sigmoid describes (then a warning says so).
"""

from __future__ import annotations

import json
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from scalerl.errors import ScaleRLError
from scalerl.run.metrics import METRICS_FILE

MIN_FIT_EVALS = 6  # the step-0 evaluation only sets R0; the fit needs 5 more


def final_fit(run_dir: Path, fit_min_frac: float) -> dict:
    """Fit the sigmoid to the run's validation curve; write fit.json and fit.png."""
    from scalerl.run.compute import FIT_X, FIT_X_LABEL
    from scalerl.scaling import fall_warning, find_fall, plot_fits, read_metrics
    from scalerl.scaling.forecast import finite_json
    from scalerl.scaling.outlook import first_half_check, outlook
    from scalerl.scaling.readers import read_column_at
    from scalerl.scaling.spec import spec_fit

    x, y, warns = read_metrics(Path(run_dir) / METRICS_FILE, FIT_X, "val/pass_rate")
    warns = list(warns)
    if len(x) < MIN_FIT_EVALS:
        raise ScaleRLError(
            f"{run_dir}: only {len(x)} evaluations in {METRICS_FILE}; the fit needs at least "
            f"{MIN_FIT_EVALS} (raise eval.count or run.max_steps)"
        )
    fit = spec_fit(x, y, fit_min_frac, warns)  # the one forecast specification (scalerl.scaling.spec)
    look = outlook(x, y, fit)
    out = fit.to_dict()
    out.update(look.to_dict())
    c = float(x[-1])
    out["predictions"] = look.predictions([2 * c, 10 * c])
    out["fall"] = find_fall(y, read_column_at(Path(run_dir) / METRICS_FILE, FIT_X, "val/pass_rate_se", x))
    fell = fall_warning(out["fall"], x)
    out["warnings"] = list(out.get("warnings", [])) + list(warns) + ([fell] if fell else [])
    out["x"] = FIT_X
    out["final"] = {
        "compute": c,
        "pass_rate": float(y[-1]),
        "start_pass_rate": float(y[0]),
        "end_pass_rate": float(y[-3:].mean()),
    }
    half_fit = first_half_check(x, y)  # the default forecast from the first half, its interval and baselines
    if half_fit is not None:
        out["first_half_fit"] = half_fit
    out = finite_json(out)
    (Path(run_dir) / "fit.json").write_text(json.dumps(out, indent=1))
    plot_fits(
        [("validation pass rate", x, y, fit)],
        Path(run_dir) / "fit.png",
        xlabel=FIT_X_LABEL,
        ylabel="validation pass rate (mean@k)",
    )
    out["_fit"] = fit
    return out


def print_fit(out: dict) -> None:
    from scalerl.scaling.report import first_half_line

    fit = out["_fit"]
    lo, hi = fit.ci.get("A", (float("nan"), float("nan")))
    a = (
        f"A = {fit.A:.3f} [{lo:.3f}, {hi:.3f}] (90% bootstrap)"
        if out["identified"]
        else f"A not identified (the fitted {fit.A:.3f} is not bound by the data)"
    )
    print(f"sigmoid fit: {a}, B = {fit.B:.2f}, C_mid = {fit.C_mid:.4g} FLOPs")
    print(f"  {out['ceiling']['text']}")
    print(f"  ({out['identification']['reason']})")
    c = out["final"]["compute"]
    for p in out["predictions"]:
        print(
            f"  forecast at {p['x'] / c:.0f}x this compute ({p['x']:.3g} FLOPs): pass rate {p['y']:.3f} "
            f"(calibrated 90% interval {p['lo']:.3f} .. {p['hi']:.3f}"
            + ("; beyond the calibrated horizons)" if p["beyond_calibration"] else ")")
        )
    f = out["final"]
    print(f"  measured: {f['start_pass_rate']:.3f} -> {f['end_pass_rate']:.3f} (mean of the last three evaluations)")
    h = out.get("first_half_fit", {})
    if "predicted" in h:
        print(first_half_line(h))
    for w in out["warnings"]:
        print(f"  warning: {w}")


def run_training(
    recipe: str | None = None,
    config_file: str | None = None,
    overrides: list[str] = (),
    run_dir: str | None = None,
    max_steps: int | None = None,
    resume: bool = False,
    progress: bool = True,
    restart: bool = False,
) -> int:
    from scalerl.configure import profile_line
    from scalerl.loop import train
    from scalerl.run.rundir import has_rows
    from scalerl.session import open_run

    with (
        open_run(recipe, config_file, list(overrides), run_dir, max_steps, resume, restart) as run,
        terminate_as_interrupt(),
    ):
        print(f"run directory: {run.path}")
        if (line := profile_line(run.cfg)) is not None:
            print(line)
        try:
            train(run.cfg, run.path, resume=run.resume, progress=progress)
        except Exception as exc:  # said on the error's line: a run that recorded rows keeps them
            if has_rows(run.path):
                exc.add_note(f"what the run wrote is kept in {run.path} (continue it: --resume --run-dir {run.path})")
            raise
        fit_run(run.path, run.cfg.eval.fit_min_frac)
    return 0


@contextmanager
def terminate_as_interrupt():
    """While training, SIGTERM (`kill`, a scheduler's stop) ends the run as Ctrl-C does: the loop's
    `finally` stops the generator process and multiprocessing unlinks its semaphores, where the
    default action would kill the trainer at once and leave them to the resource tracker ("leaked
    semaphore objects"). The previous handler comes back afterwards. Only the main thread may set it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def fit_run(path: Path, fit_min_frac: float) -> None:
    """The final fit of a trained run; when it cannot be made, fit.json says why (the training still succeeded)."""
    from scalerl.scaling import read_metrics

    try:
        from scalerl.run.compute import FIT_X

        n_evals = len(read_metrics(path / METRICS_FILE, FIT_X, "val/pass_rate")[0])
        if n_evals < MIN_FIT_EVALS:
            raise ScaleRLError(
                f"{n_evals} evaluations: too few for the sigmoid fit (needs {MIN_FIT_EVALS}; raise "
                "eval.count or run.max_steps)"
            )
        out = final_fit(path, fit_min_frac)
    except ScaleRLError as exc:
        (path / "fit.json").write_text(json.dumps({"fitted": False, "reason": str(exc)}, indent=1))
        print(f"no fit: {exc}. Metrics: {path / METRICS_FILE}; reason recorded in {path / 'fit.json'}")
        return
    print_fit(out)
    print(f"metrics: {path / METRICS_FILE}  fit: {path / 'fit.json'}, {path / 'fit.png'}")
