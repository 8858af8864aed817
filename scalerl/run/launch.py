"""`scalerl train` end to end: resolve the config, open the run directory, train, fit, print.

The final fit uses the run's own validation curve (x = `compute/device_hours`, y =
`val/pass_rate` from metrics.jsonl), skipping the first `eval.fit_min_frac` of the compute
(the early window), and writes `fit.json` + `fit.png`. `fit.json` also holds a hold-out check:
a sigmoid fitted on the first half of the compute only, and how far its prediction of the last
evaluation landed from the measured value.
"""

from __future__ import annotations

import json
from pathlib import Path

from scalerl.errors import ScaleRLError
from scalerl.run.metrics import METRICS_FILE

MIN_FIT_EVALS = 6  # the step-0 evaluation only sets R0; the fit needs 5 more


def final_fit(run_dir: Path, fit_min_frac: float) -> dict:
    """Fit the sigmoid to the run's validation curve; write fit.json and fit.png."""
    from scalerl.scaling import fit_curve, plot_fits, read_metrics, window_start
    from scalerl.scaling.fit import MIN_POINTS

    x, y, warns = read_metrics(Path(run_dir) / METRICS_FILE, "compute/device_hours", "val/pass_rate")
    warns = list(warns)
    if len(x) < MIN_FIT_EVALS:
        raise ScaleRLError(f"{run_dir}: only {len(x)} evaluations in {METRICS_FILE}; the fit needs at least "
                           f"{MIN_FIT_EVALS} (raise run.max_steps or lower eval.every)")
    fit = fit_curve(x, y, model="sigmoid", fit_min=window_start(x, fit_min_frac, warns))
    half = x <= x[-1] / 2
    out = fit.to_dict()
    out["warnings"] = list(out.get("warnings", [])) + list(warns)
    out["final"] = {"compute": float(x[-1]), "pass_rate": float(y[-1]), "start_pass_rate": float(y[0])}
    if (half & (x > 0)).sum() >= MIN_POINTS:
        half_fit = fit_curve(x[half], y[half], model="sigmoid", fit_min=window_start(x[half], fit_min_frac))
        predicted = float(half_fit.predict([x[-1]])[0])
        out["first_half_fit"] = {"A": half_fit.A, "B": half_fit.B, "C_mid": half_fit.C_mid,
                                 "predicted_final": predicted, "error": predicted - float(y[-1])}
    (Path(run_dir) / "fit.json").write_text(json.dumps(out, indent=1))
    plot_fits([("validation pass rate", x, y, fit)], Path(run_dir) / "fit.png", xlabel="compute (device-hours)",
              ylabel="validation pass rate (mean@k)")
    out["_fit"] = fit
    return out


def print_fit(out: dict) -> None:
    fit = out["_fit"]
    lo, hi = fit.ci.get("A", (float("nan"), float("nan")))
    print(f"sigmoid fit: A = {fit.A:.3f} [{lo:.3f}, {hi:.3f}], B = {fit.B:.2f}, C_mid = {fit.C_mid:.4g} device-hours")
    c = out["final"]["compute"]
    for mult in (2, 10):
        print(f"  forecast at {mult}x this compute ({mult * c:.3g} device-hours): pass rate {float(fit.predict([mult * c])[0]):.3f}")
    print(f"  measured: {out['final']['start_pass_rate']:.3f} -> {out['final']['pass_rate']:.3f}")
    if "first_half_fit" in out:
        h = out["first_half_fit"]
        print(f"  fit on the first half of the compute predicted the final pass rate as {h['predicted_final']:.3f} "
              f"(error {h['error']:+.3f})")
    for w in out["warnings"]:
        print(f"  warning: {w}")


def run_training(recipe: str | None = None, config_file: str | None = None, overrides: list[str] = (),
                 run_dir: str | None = None, max_steps: int | None = None, resume: bool = False,
                 progress: bool = True, restart: bool = False) -> int:
    from scalerl.loop import train
    from scalerl.run.session import open_run

    with open_run(recipe, config_file, list(overrides), run_dir, max_steps, resume, restart) as run:
        print(f"run directory: {run.path}")
        train(run.cfg, run.path, resume=run.resume, progress=progress)
        fit_run(run.path, run.cfg.eval.fit_min_frac)
    return 0


def fit_run(path: Path, fit_min_frac: float) -> None:
    """The final fit of a trained run; when it cannot be made, fit.json says why (the training still succeeded)."""
    from scalerl.scaling import read_metrics

    try:
        n_evals = len(read_metrics(path / METRICS_FILE, "compute/device_hours", "val/pass_rate")[0])
        if n_evals < MIN_FIT_EVALS:
            raise ScaleRLError(f"{n_evals} evaluations: too few for the sigmoid fit (needs {MIN_FIT_EVALS}; lower "
                               "eval.every or raise run.max_steps)")
        out = final_fit(path, fit_min_frac)
    except ScaleRLError as exc:
        (path / "fit.json").write_text(json.dumps({"fitted": False, "reason": str(exc)}, indent=1))
        print(f"no fit: {exc}. Metrics: {path / METRICS_FILE}; reason recorded in {path / 'fit.json'}")
        return
    print_fit(out)
    print(f"metrics: {path / METRICS_FILE}  fit: {path / 'fit.json'}, {path / 'fit.png'}")
