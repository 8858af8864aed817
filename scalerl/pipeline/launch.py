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
from scalerl.run.rundir import CONFIG_FILE, create_run_dir, default_run_dir, open_run_dir

MIN_FIT_EVALS = 6  # the step-0 evaluation only sets R0; the fit needs 5 more


def resolve_config(recipe: str | None, config_file: str | None, overrides: list[str], run_dir: Path | None,
                   resume: bool, max_steps: int | None) -> Config:
    from scalerl.config import load_config

    if resume:
        if run_dir is None:
            raise ScaleRLError("--resume needs --run-dir DIR (the run to continue)")
        if config_file is not None:
            raise ScaleRLError("--resume continues the run with its own config.yaml; drop --config "
                               "(use --set KEY=VALUE or --max-steps to change a field)")
        open_run_dir(run_dir)
        cfg = load_config(recipe=None, config_file=Path(run_dir) / CONFIG_FILE, overrides=tuple(overrides))
    else:
        cfg = load_config(recipe=recipe, config_file=config_file, overrides=tuple(overrides))
    if max_steps is not None:
        if max_steps < 1:
            raise ScaleRLError(f"--max-steps {max_steps}: expected a positive number of steps")
        cfg.run.max_steps = max_steps
    return cfg


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
                 progress: bool = True) -> int:
    from scalerl.config import dump_config
    from scalerl.pipeline.train import train
    from scalerl.scaling import read_metrics

    path = Path(run_dir) if run_dir else None
    cfg = resolve_config(recipe, config_file, list(overrides), path, resume, max_steps)
    if resume and path is not None:  # --set / --max-steps on resume: record what the run now follows
        (path / CONFIG_FILE).write_text(dump_config(cfg))
    else:
        path = create_run_dir(path or default_run_dir(cfg.recipe), dump_config(cfg))
    print(f"run directory: {path}")
    train(cfg, path, resume=resume, progress=progress)
    n_evals = len(read_metrics(path / METRICS_FILE, "compute/device_hours", "val/pass_rate")[0])
    if n_evals < MIN_FIT_EVALS:
        print(f"{n_evals} evaluations: too few for the sigmoid fit (needs {MIN_FIT_EVALS}; lower eval.every "
              f"or raise run.max_steps). Metrics: {path / METRICS_FILE}")
        return 0
    out = final_fit(path, cfg.eval.fit_min_frac)
    print_fit(out)
    print(f"metrics: {path / METRICS_FILE}  fit: {path / 'fit.json'}, {path / 'fit.png'}")
    return 0
