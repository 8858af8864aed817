"""A run that falls after its peak: `find_fall` on hand-made curves (expected values worked out
by hand below), and what the fit, the verdict, `scalerl train`'s final fit and the study report
say about such a run."""

import json

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.launch import final_fit
from scalerl.scaling import find_fall
from scalerl.study import fit_study, plan_runs, plan_variants, write_report
from scalerl.study.runner import DONE_FILE

# 3-evaluation means: 0.300, 0.4533, 0.5367, 0.5533, 0.5033, 0.4167, 0.3167; the peak is the 4th
# (evaluations 3-5), the end the last; drop 0.5533 - 0.3167 = 0.2367 of a gain 0.5533 - 0.10 = 0.4533
FALLING = [0.10, 0.30, 0.50, 0.55, 0.56, 0.55, 0.40, 0.30, 0.25]


def test_a_curve_that_gives_back_its_gain_fell():
    f = find_fall(FALLING)
    assert f["fell"] is True and f["peak_index"] == 5
    assert f["peak"] == pytest.approx(1.66 / 3) and f["end"] == pytest.approx(0.95 / 3)
    assert f["drop"] == pytest.approx(0.71 / 3) and f["gain"] == pytest.approx(1.66 / 3 - 0.10)


def test_the_threshold_is_a_tenth_of_the_gain():
    # means 0.667, 1.0, 0.97 / 0.96, 0.94 / 0.92, 0.91 / 0.88: peak 1.0, gain 1.0, drop 0.09 / 0.12
    assert find_fall([0, 1, 1, 1, 0.91, 0.91, 0.91])["fell"] is False
    assert find_fall([0, 1, 1, 1, 0.88, 0.88, 0.88])["fell"] is True
    rising = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]  # the peak is the end: no drop
    assert find_fall(rising) == {
        "fell": False,
        "peak": pytest.approx(0.6),
        "peak_index": 6,
        "end": pytest.approx(0.6),
        "drop": pytest.approx(0.0),
        "gain": pytest.approx(0.5),
    }
    assert find_fall([0.5, 0.4, 0.3, 0.2, 0.1, 0.0])["fell"] is False  # never rose: nothing to give back
    assert find_fall(FALLING[:5]) is None  # no peak apart from the end


def test_a_drop_within_the_evaluations_noise_is_not_a_fall():
    # the noise of the difference of two 3-evaluation means: sqrt(se^2 / 3 + se^2 / 3)
    assert find_fall(FALLING, se=np.full(9, 0.05))["fell"] is True  # 3 x 0.0408 = 0.122 < 0.237
    assert find_fall(FALLING, se=np.full(9, 0.10))["fell"] is False  # 3 x 0.0816 = 0.245 > 0.237


def _collapse(falls=True, n=24):
    """A sigmoid in compute (A 0.6, B 1.5, C_mid 1e12, R0 0.1) that collapses in its last quarter."""
    x = np.concatenate([[0.0], np.geomspace(5e10, 1.6e13, n - 1)])
    y = np.where(x > 0, 0.1 + 0.5 / (1 + (1e12 / np.maximum(x, 1)) ** 1.5), 0.1)
    if falls:
        y[-6:] = [0.5, 0.4, 0.3, 0.25, 0.2, 0.2]
    return x, y


def _write(path, x, y, se=None):
    rows = [
        {"step": i, "kind": "eval", "compute/flops": float(c), "val/pass_rate": float(v)}
        | ({"val/pass_rate_se": se} if se is not None else {})
        for i, (c, v) in enumerate(zip(x, y))
    ]
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_scalerl_fit_warns_and_its_verdict_says_more_compute_will_not_pay(tmp_path, capsys):
    x, y = _collapse()
    _write(tmp_path / "run", x, y)
    f = tmp_path / "run" / "metrics.jsonl"
    assert main(["fit", str(f), "--x", "compute/flops", "--y", "val/pass_rate", "--bootstrap", "20"]) == 0
    out = capsys.readouterr().out
    peak = np.convolve(y, np.ones(3) / 3, "valid").max()
    assert f"warning: the curve fell after its peak: {peak:.3f}" in out and "-> 0.217 at the end" in out
    assert "=> the run fell after its peak" in out and "will not pay" in out
    assert main(["fit", str(f), "--x", "compute/flops", "--y", "val/pass_rate", "--bootstrap", "20", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fall"]["fell"] is True and d["fall"]["end"] == pytest.approx(0.65 / 3)
    assert d["verdict"]["recommendation"].startswith("the run fell after its peak")


def test_train_final_fit_records_the_fall(tmp_path):
    x, y = _collapse()
    _write(tmp_path / "run", x, y, se=0.005)
    out = final_fit(tmp_path / "run", 0.1)
    saved = json.loads((tmp_path / "run" / "fit.json").read_text())
    assert saved["fall"]["fell"] is True and saved["fall"]["drop"] == pytest.approx(out["fall"]["drop"])
    assert any(w.startswith("the curve fell after its peak") for w in saved["warnings"])
    x, y = _collapse(falls=False)  # the same run, staying up
    _write(tmp_path / "up", x, y, se=0.005)
    saved = final_fit(tmp_path / "up", 0.1)
    assert saved["fall"]["fell"] is False and not any("fell" in w for w in saved["warnings"])


def test_the_study_report_counts_falls_apart_in_its_predictability(tmp_path):
    variants = [v for v in plan_variants("scalerl", leave_one_out=True) if v.name in ("scalerl", "token-agg")]
    specs = plan_runs(variants, 2, tmp_path)
    for s in specs:
        x, y = _collapse(falls=(s.variant.name, s.seed) == ("token-agg", 1))
        _write(s.run_dir, x, y, se=0.005)
        (s.run_dir / DONE_FILE).write_text("{}")
    data = write_report(tmp_path, fit_study(specs, n_bootstrap=5), "scalerl", "compute/flops", "table")
    runs = {(c["name"], r["seed"]): r for c in data["configs"] for r in c["runs"]}
    assert [k for k, r in runs.items() if r["fall"]["fell"]] == [("token-agg", 1)]
    assert {c["name"]: c["fell"] for c in data["configs"]} == {"scalerl": 0, "token-agg": 1}
    p = data["predictability"]
    standing = [r["prediction_error"] for k, r in runs.items() if k != ("token-agg", 1)]
    assert (p["runs"], p["fell"], p["runs_standing"]) == (4, 1, 3)
    assert p["within_standing"] == sum(abs(e) <= 0.02 for e in standing)
    assert runs[("token-agg", 1)]["prediction_error"] > 0.2  # the first half cannot see the collapse
    md = (tmp_path / "report.md").read_text()
    assert "| 2 (1 fell) |" in md and "| yes: " in md and "1 of them fell after their peak" in md


def test_the_live_forecast_logs_a_fall_from_six_evaluations_on():
    from scalerl.evaluate import live_forecast

    curve = [(float(i), y) for i, y in enumerate(FALLING)]
    assert "forecast/fell" not in live_forecast(curve[:5], 0.1)
    row = live_forecast(curve, 0.1)
    assert row["forecast/fell"] == 1 and row["forecast/peak"] == pytest.approx(1.66 / 3)
    assert live_forecast(curve, 0.1, se=[0.1] * 9)["forecast/fell"] == 0  # within the noise (above)
    assert live_forecast(curve[:6], 0.1)["forecast/fell"] == 0  # still at its peak
