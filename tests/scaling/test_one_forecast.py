"""One forecast, everywhere (scalerl.scaling.spec): the same run gives the same `A`, interval and
first-half figures from `scalerl fit`, the `fit.json` of `scalerl train` (`launch.final_fit`), the
live forecast written into metrics.jsonl (`evaluate.forecast_row`, as the training loop calls it)
and the study report (`study.report.fit_run`)."""

import json

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.evaluate import forecast_row
from scalerl.launch import final_fit
from scalerl.scaling.fit import ruler
from scalerl.scaling.spec import SPEC
from scalerl.study.report import fit_run

A, B, C_MID, R0 = 0.6, 1.5, 1e12, 0.1


def _curve(n: int = 16, seed: int = 3):
    rng = np.random.default_rng(seed)
    x = np.concatenate([[0.0], np.geomspace(2e11, 1e13, n - 1)])
    y = np.full(n, R0)
    y[1:] = R0 + (A - R0) / (1 + (C_MID / x[1:]) ** B) + rng.normal(0, 0.01, n - 1)
    return x, y


def _write_run(run, x, y) -> dict:
    """metrics.jsonl as the training loop writes it: each evaluation row gets the live forecast
    over the rows already written and itself (only the last one is needed here)."""
    run.mkdir()
    rows = [
        {"step": i, "kind": "eval", "compute/flops": float(c), "val/pass_rate": float(v)}
        for i, (c, v) in enumerate(zip(x, y))
    ]
    with open(run / "metrics.jsonl", "w") as f:
        for r in rows[:-1]:
            f.write(json.dumps(r) + "\n")
    last = {**rows[-1], **forecast_row(run, rows[-1], 0.1)}
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps(last) + "\n")
    return last


def test_fit_json_live_row_scalerl_fit_and_study_report_agree(tmp_path, capsys):
    x, y = _curve()
    run = tmp_path / "run"
    live = _write_run(run, x, y)
    saved = final_fit(run, 0.1)
    fit_json = json.loads((run / "fit.json").read_text())
    assert main(["fit", str(run), "--x", "compute/flops", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    report = fit_run("cfg", 0, run, "compute/flops", 0.1, n_bootstrap=SPEC.n_bootstrap)  # ablate's default

    a = {
        "fit.json": (fit_json["A"], *fit_json["ci"]["A"]),
        "scalerl fit": (cli["A"], *cli["ci"]["A"]),
        "live": (live["forecast/A"], live["forecast/A_lo"], live["forecast/A_hi"]),
        "study report": (report.fit.A, *report.fit.ci["A"]),
    }
    for where, got in a.items():
        assert got == pytest.approx(a["fit.json"], abs=1e-9), where
    assert abs(saved["A"] - A) < 0.03  # and the fit finds the curve it was given
    assert a["fit.json"][1] < a["fit.json"][0] < a["fit.json"][2]

    halves = {"fit.json": fit_json["first_half_fit"], "scalerl fit": cli["first_half_fit"], "study report": report.half}
    for where, h in halves.items():
        for k in ("predicted", "error", "baseline_last_error", "baseline_best_error", "baseline_ruler_error"):
            assert h[k] == pytest.approx(fit_json["first_half_fit"][k], abs=1e-9), (where, k)
            assert live[f"forecast/first_half_{k}"] == pytest.approx(h[k], abs=1e-9), (where, k)
    # the figures themselves, worked out here: the end, the last first-half evaluation, the ruler
    end = y[-3:].mean()
    half = x <= x[-1] / 2
    h = fit_json["first_half_fit"]
    assert h["measured"] == pytest.approx(end)
    assert h["baseline_last_error"] == pytest.approx(y[half][-1] - end)
    (x1, x2), (y1, y2) = np.log(x[half][-2:]), y[half][-2:]
    line = y2 + (y2 - y1) / (x2 - x1) * (np.log(x[-3:]) - x2)
    assert h["baseline_ruler_error"] == pytest.approx(np.clip(line.mean(), 0, 1) - end)


def test_ruler_is_a_line_in_log_compute():
    # through (10, 0.2) and (100, 0.4): +0.2 per decade, so 0.6 at 1000 and 0.8 at 10,000
    assert ruler([0, 10, 100], [0.0, 0.2, 0.4], [1000]) == pytest.approx(0.6)
    assert ruler([10, 100], [0.2, 0.4], [1000, 10000]) == pytest.approx(0.7)  # the mean over the points
    assert ruler([10, 100], [0.2, 0.9], [1e6]) == 1.0  # clipped to a pass rate
    assert np.isnan(ruler([0, 10], [0.0, 0.2], [100]))  # one point past 0: no line


def _seeds(n_seeds: int = 3, n: int = 14, stretch: tuple = (1.0, 1.04, 0.97)):
    """`n_seeds` noisy runs of one sigmoid, each at its own compute (runs of one configuration
    never spend exactly the same compute), each starting with a step-0 evaluation."""
    runs = []
    for k in range(n_seeds):
        rng = np.random.default_rng(10 + k)
        x = np.concatenate([[0.0], np.geomspace(1e11, 1.2e13, n - 1) * stretch[k]])
        y = np.full(n, R0 + rng.normal(0, 0.01))
        y[1:] = R0 + (A - R0) / (1 + (C_MID / x[1:]) ** B) + rng.normal(0, 0.01, n - 1)
        runs.append((x, y))
    return runs


def _study_config(runs, finished: bool = True, frac: float = 0.1, subsets: dict | None = None):
    from scalerl.study.report import RunFit, fit_config

    fits = [RunFit("cfg", k, x, y, finished, subsets=subsets or {}) for k, (x, y) in enumerate(runs)]
    return fit_config("cfg", "", fits, frac, SPEC.n_bootstrap)


def test_the_study_pools_seeds_as_the_specification_and_scalerl_fit_do(tmp_path, capsys):
    from scipy.optimize import curve_fit

    from scalerl.scaling.spec import spec_fit_pooled

    runs = _seeds()
    study = _study_config(runs).fit
    # by hand: the window starts at the first pooled point at or past a tenth of the largest compute;
    # R0 is the mean of the step-0 evaluations; Eq. 1 by scipy's least squares on the pooled points
    x, y = np.concatenate([r[0] for r in runs]), np.concatenate([r[1] for r in runs])
    inside = x >= 0.1 * x.max()
    r0 = y[x == 0].mean()
    eq1 = lambda c, a, b, log_cm: r0 + (a - r0) / (1 + np.exp(b * (log_cm - np.log(c))))  # noqa: E731
    (a, b, log_cm), _ = curve_fit(eq1, x[inside], y[inside], p0=(0.5, 1.0, np.log(5e11)))
    assert study.window[0] == x[inside].min() and study.n_points == inside.sum()
    assert study.R0 == pytest.approx(r0, abs=1e-12)
    assert (study.A, study.B, study.C_mid) == pytest.approx((a, b, np.exp(log_cm)), rel=2e-3)
    assert study.grid_check is not None  # the specification's grid check ran
    start = 0.1 * x.max()  # each seed fitted in the pooled window
    assert [f.window[0] for f in study.seed_fits] == [xk[xk >= start].min() for xk, _ in runs]

    spec = spec_fit_pooled(runs)  # the specification itself, on the same points
    assert (study.A, *study.ci["A"]) == pytest.approx((spec.A, *spec.ci["A"]), abs=1e-12)
    assert study.seed_spread()["std"] == pytest.approx(spec.seed_spread()["std"], abs=1e-12)

    paths = []  # and `scalerl fit --seeds-of-one` on the runs
    for k, (xk, yk) in enumerate(runs):
        run = tmp_path / f"seed{k}"
        run.mkdir()
        (run / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"step": i, "compute/flops": float(c), "val/pass_rate": float(v)}) + "\n"
                for i, (c, v) in enumerate(zip(xk, yk))
            )
        )
        paths.append(str(run))
    assert main(["fit", *paths, "--seeds-of-one", "--x", "compute/flops", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert (cli["A"], *cli["ci"]["A"]) == pytest.approx((study.A, *study.ci["A"]), abs=1e-9)
    assert cli["seeds"]["std"]["A"] == pytest.approx(study.seed_spread()["std"]["A"], abs=1e-9)
    assert cli["window"][0] == study.window[0]


def test_the_study_window_is_the_specifications_not_its_own():
    """One window for all seeds, over all their points: seeds of unequal length (unfinished runs,
    reported while none has finished) each fitted from a tenth of the longest one's compute, not of
    their own; and a run or subset too short for that window moved back to keep five evaluations,
    as `scalerl fit` moves it, rather than left unfitted."""
    runs = _seeds()
    runs[1] = (runs[1][0][:13], runs[1][1][:13])  # stopped early: 0.1 of its own compute is lower
    start = 0.1 * max(x.max() for x, _ in runs)
    fit = _study_config(runs, finished=False).fit
    first = [x[x >= start].min() for x, _ in runs]
    assert fit.window[0] == min(first)
    assert [f.window[0] for f in fit.seed_fits] == first  # each seed in the pooled window, not its own
    assert runs[1][0][runs[1][0] > 0][0] < 0.1 * runs[1][0].max() < first[1]  # its own would start earlier

    x = np.concatenate([[0.0], 5e10 * 2.0 ** np.arange(7)])  # 7 evaluations past step 0: a tenth leaves 4
    y = R0 + (A - R0) / (1 + (C_MID / np.maximum(x, 1)) ** B) + np.random.default_rng(5).normal(0, 0.005, 8)
    assert (x >= 0.1 * x[-1]).sum() == 4
    c = _study_config([(x, y)], subsets={"rung": y.copy()})
    assert isinstance(c.subset_fits["rung"], type(c.fit)), c.subset_fits["rung"]
    assert c.subset_fits["rung"].window[0] == x[-5] and c.subset_fits["rung"].A == pytest.approx(c.fit.A)
    assert c.fit.window[0] == x[-5] and "to keep 5 evaluations" in c.fit.warnings[0]
