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
    rows = [{"step": i, "kind": "eval", "compute/flops": float(c), "val/pass_rate": float(v)}
            for i, (c, v) in enumerate(zip(x, y))]
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
    report = fit_run("cfg", 0, run, "compute/flops", 0.1, n_bootstrap=SPEC.n_bootstrap)   # ablate's default

    a = {"fit.json": (fit_json["A"], *fit_json["ci"]["A"]), "scalerl fit": (cli["A"], *cli["ci"]["A"]),
         "live": (live["forecast/A"], live["forecast/A_lo"], live["forecast/A_hi"]),
         "study report": (report.fit.A, *report.fit.ci["A"])}
    for where, got in a.items():
        assert got == pytest.approx(a["fit.json"], abs=1e-9), where
    assert abs(saved["A"] - A) < 0.03          # and the fit finds the curve it was given
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
    assert ruler([10, 100], [0.2, 0.4], [1000, 10000]) == pytest.approx(0.7)    # the mean over the points
    assert ruler([10, 100], [0.2, 0.9], [1e6]) == 1.0                            # clipped to a pass rate
    assert np.isnan(ruler([0, 10], [0.0, 0.2], [100]))                            # one point past 0: no line
