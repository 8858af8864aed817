"""Identified or not (scalerl.scaling.identify), the calibrated interval (scalerl.scaling.calibrate)
and what the user sees of both (scalerl.scaling.outlook, `scalerl fit --json`)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from scalerl.scaling.calibrate import conformal_quantiles, group_key, scale, table
from scalerl.scaling.curves import sigmoid
from scalerl.scaling.fit import fit_curve, window_start
from scalerl.scaling.identify import A_STEP, ID_WIDTH, identify, profile_a, tail_rise
from scalerl.scaling.outlook import first_half_check, outlook, stop_decision, verdict


def _curve(c_mid: float, n: int = 40, noise: float = 0.005, seed: int = 0, A: float = 0.7, B: float = 2.0):
    x = np.geomspace(1.0, 100.0, n)
    y = sigmoid(x, A, B, c_mid, 0.1) + np.random.default_rng(seed).normal(0, noise, n)
    return np.concatenate([[0.0], x]), np.clip(np.concatenate([[0.1], y]), 0, 1)


def _fit(x, y):
    return fit_curve(x, y, fit_min=window_start(x, 0.1), n_bootstrap=0)


def test_a_curve_whose_midpoint_lies_beyond_the_window_is_not_identified():
    x, y = _curve(c_mid=400.0)  # the rise has barely started at x = 100
    fit = _fit(x, y)
    ident = identify(fit, x, y)
    assert not ident["identified"]
    assert ident["profile"]["hi"] is None  # no ceiling up to the walk's reach is excluded
    # the lower bound: at least what the curve reached, well below the true ceiling (0.7)
    assert y.max() <= ident["lower_bound"] <= 0.3
    assert "not identified" in ident["reason"]
    look = outlook(x, y, fit)
    assert look.ceiling()["A"] is None and look.ceiling()["lower_bound"] == ident["lower_bound"]


def test_a_long_flat_curve_is_identified():
    x, y = _curve(c_mid=2.0, n=60)  # risen by x = 10, flat for the last decade and more
    fit = _fit(x, y)
    ident = identify(fit, x, y)
    assert ident["identified"], ident["reason"]
    lo, hi = ident["profile"]["lo"], ident["profile"]["hi"]
    assert lo - A_STEP <= 0.7 <= hi + A_STEP and hi - lo <= ID_WIDTH  # within the walk's grid step
    assert abs(ident["tail"]["per_doubling"]) < 0.01


def test_a_late_slow_rise_inside_the_window_is_seen_in_the_tail():
    """A plateau, then a second slow rise that starts inside the window: the tail sees it (the
    `profile+tail` rule does not mark it; under the chosen `profile` rule the reason says it)."""
    x = np.geomspace(1.0, 100.0, 60)
    y = sigmoid(x, 0.5, 4.0, 3.0, 0.1) + 0.15 * np.clip(np.log(x / 30.0) / np.log(100 / 30.0), 0, None)
    x, y = np.concatenate([[0.0], x]), np.concatenate([[0.1], y])
    fit = _fit(x, y)
    tail = tail_rise(fit, x, y)
    assert tail["upper"] > 0.02  # about 0.086 per doubling over the last third
    assert not identify(fit, x, y, rule="profile+tail")["identified"]
    ident = identify(fit, x, y, rule="profile")
    assert not ident["identified"] or "second rise" in ident["reason"]


def test_the_profile_interval_shrinks_with_less_noise():
    x, y1 = _curve(c_mid=3.0, noise=0.02, seed=1)
    _, y2 = _curve(c_mid=3.0, noise=0.002, seed=1)
    w1 = profile_a(_fit(x, y1), x, y1)["width"]
    w2 = profile_a(_fit(x, y2), x, y2)["width"]
    assert w2 is not None and (w1 is None or w2 < w1)


def test_conformal_quantiles_match_a_sorted_count():
    z = np.arange(1, 100, dtype=float)  # 99 scores: 1 .. 99
    lo, hi = conformal_quantiles(z)
    # weight 1/99 each; the 5% end pushed out by one point: the first index whose cumulative
    # share reaches 0.05 - 1/99 = 0.0399 is the 4th score; the upper: 0.95 + 1/99 -> the 96th
    assert (lo, hi) == (4.0, 96.0)
    lo_w, hi_w = conformal_quantiles(z, np.where(z > 50, 3.0, 1.0))  # heavier upper half: both move up
    assert lo_w > lo and hi_w >= hi


def test_the_scale_grows_with_the_horizon_and_the_slope():
    x, y = _curve(c_mid=50.0)
    fit = _fit(x, y)
    s = scale(fit, 100.0, [100.0, 200.0, 1000.0])
    assert s[0] == pytest.approx(max(fit.rmse * math.sqrt(1 / 3 + 1 / fit.n_points), 0.002))
    assert s[0] < s[1] < s[2]


def test_the_shipped_calibration_has_every_group():
    tab = table()
    for ident in (True, False):
        for h in (0.0, 0.7, 1.5):
            g = tab["groups"][group_key(ident, h)]
            assert g["lo"] < 0 < g["hi"] or g["lo"] < g["hi"]
    assert tab["rule"] in ("profile", "profile+midpoint", "profile+tail")


def test_an_unidentified_ceiling_never_says_more_compute_will_not_pay_nor_stops():
    x, y = _curve(c_mid=400.0)
    look = outlook(x, y, _fit(x, y))
    v = verdict(look, float(x[-1]), float(y[-1]))
    assert "will not pay" not in v["recommendation"] and v["ceiling"] is None
    d = stop_decision(look, float(x[-1]), 2 * float(x[-1]), threshold=10.0)  # any gain is "small"
    assert not d["stop"] and "not identified" in d["text"]


def test_the_first_half_check_reports_the_naive_baselines_and_a_calibrated_interval():
    x, y = _curve(c_mid=5.0, n=40)
    h = first_half_check(x, y)
    end = float(np.mean(y[-3:]))
    half = x <= x[-1] / 2
    assert h["measured"] == pytest.approx(end)
    assert h["baseline_last3"] == pytest.approx(float(np.mean(y[half][-3:])))
    assert h["baseline_last3_error"] == pytest.approx(h["baseline_last3"] - end)
    lo, hi = h["interval"]
    assert lo <= h["predicted"] <= hi and h["covered"] == (lo <= end <= hi)
    assert isinstance(h["identified"], bool)


def test_fit_json_says_identified_at_the_top_level(tmp_path, capsys):
    from scalerl.cli import main

    x, y = _curve(c_mid=400.0)
    f = tmp_path / "run.csv"
    f.write_text("step,reward\n" + "\n".join(f"{a},{b}" for a, b in zip(x, y)))
    fast = ["--bootstrap", "20", "--no-grid-check"]
    assert main(["fit", str(f), "--x", "step", "--y", "reward", "--json", "--predict", "200", *fast]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["identified"] is False and out["ceiling"]["A"] is None
    p = out["predictions"][0]
    assert p["lo"] <= p["y"] <= p["hi"]
    assert main(["fit", str(f), "--x", "step", "--y", "reward", *fast]) == 0
    text = capsys.readouterr().out
    assert "not identified" in text and "calibrated 90% interval" in text


def test_the_live_row_says_whether_the_ceiling_is_identified():
    from scalerl.evaluate import live_forecast

    x, y = _curve(c_mid=400.0)
    row = live_forecast(list(zip(x, y)), 0.1)
    assert row["forecast/identified"] == 0 and row["forecast/A_lower_bound"] <= 0.3
    assert row["forecast/at_2x_lo"] <= row["forecast/at_2x"] <= row["forecast/at_2x_hi"]
    x, y = _curve(c_mid=2.0, n=60)
    row = live_forecast(list(zip(x, y)), 0.1)
    assert row["forecast/identified"] == 1 and "forecast/A_lower_bound" not in row
    assert row["forecast/first_half_lo"] <= row["forecast/first_half_predicted"] <= row["forecast/first_half_hi"]


def test_the_progress_bar_shows_a_lower_bound_when_not_identified():
    from scalerl.monitor import eval_postfix

    row = {
        "val/pass_rate": 0.1,
        "forecast/A": 1.0,
        "forecast/A_lo": 0.5,
        "forecast/A_hi": 1.0,
        "forecast/identified": 0,
        "forecast/A_lower_bound": 0.18,
    }
    assert eval_postfix(row)["A"] == ">=0.18 (not identified)"
    row.update({"forecast/identified": 1})
    assert eval_postfix(row)["A"] == "1.000[0.50,1.00]"
