"""Curve models and fits against hand-worked values and synthetic curves of known parameters."""

import math

import numpy as np
import pytest

from scalerl.errors import ScaleRLError
from scalerl.scaling import PowerLaw, Sigmoid, first_half_prediction, fit_curve, fit_seeds, linearise, sigmoid
from scaling_helpers import synthetic

# (A, B, C_mid, R0, final compute, spacing): paper Table 1 and the corners of its range
TABLE1 = [
    (0.610, 1.92, 2542, 0.40, 16000, 100),  # ScaleRL 8B
    (0.645, 1.89, 11272, 0.45, 50000, 250),  # 32k generation length
    (0.645, 1.70, 10909, 0.35, 50000, 200),  # batch 2048
    (0.710, 1.65, 4242, 0.50, 25000, 150),  # 17Bx16 MoE
    (0.580, 1.10, 1600, 0.30, 16000, 100),  # low corner
    (0.680, 2.40, 6000, 0.45, 30000, 150),  # steep
]


def test_sigmoid_hand_values():
    # at C = C_mid half the gain: 0.4 + 0.2 / 2; at C = 2 C_mid with B = 2: 0.4 + 0.2 / (1 + 1/4)
    assert sigmoid(1000.0, 0.6, 2.0, 1000.0, 0.4) == pytest.approx(0.5)
    assert Sigmoid(0.6, 2.0, 1000.0, 0.4).predict(2000.0) == pytest.approx(0.4 + 0.2 / 1.25)
    assert sigmoid(0.0, 0.6, 2.0, 1000.0, 0.4) == pytest.approx(0.4)
    assert sigmoid(1e12, 0.6, 2.0, 1000.0, 0.4) == pytest.approx(0.6)
    # power law A - D / C^B with D = (A - R0) C_mid^B approaches the sigmoid for C >> C_mid
    D = 0.2 * 1000.0**2
    assert PowerLaw(0.6, 2.0, D).predict(1e5) == pytest.approx(0.6 - D / 1e10)
    assert sigmoid(1e5, 0.6, 2.0, 1000.0, 0.4) == pytest.approx(0.6 - D / 1e10, abs=1e-8)


def test_linearised_view_is_a_line_of_slope_minus_b():
    C = np.array([500.0, 1000.0, 4000.0])
    lin = linearise(sigmoid(C, 0.6, 1.5, 1000.0, 0.4), 0.6, 0.4)
    np.testing.assert_allclose(lin, 1.5 * (math.log(1000.0) - np.log(C)), atol=1e-9)
    assert np.isnan(linearise(np.array([0.65, 0.3]), 0.6, 0.4)).all()  # above A, below R0


@pytest.mark.parametrize("A,B,C_mid,R0,final,dx", TABLE1)
def test_forecast_from_half_the_run_across_table1(A, B, C_mid, R0, final, dx):
    truth_final = R0 + (A - R0) / (1 + (C_mid / final) ** B)
    for seed in range(3):
        x, y = synthetic(A, B, C_mid, R0, final, dx, seed)
        fit = fit_curve(x, y, fit_min=1500, fit_max=final / 2, n_bootstrap=0)
        assert abs(fit.predict(final) - truth_final) <= 0.015, (seed, fit)
        assert abs(fit.A - A) <= 0.02, (seed, fit)
        assert fit.R0 == pytest.approx(y[0])  # R0 fixed to the measured start
        assert fit.n_points == int(((x >= 1500) & (x <= final / 2)).sum())


@pytest.mark.parametrize("A,B,C_mid,R0,final,dx", TABLE1)
def test_power_law_overestimates_the_ceiling(A, B, C_mid, R0, final, dx):
    x, y = synthetic(A, B, C_mid, R0, final, dx, seed=0)
    power = fit_curve(x, y, model="powerlaw", fit_min=1500, fit_max=final / 2, n_bootstrap=0)
    sig = fit_curve(x, y, fit_min=1500, fit_max=final / 2, n_bootstrap=0)
    assert power.A > A + 0.03 and power.A > sig.A + 0.03


def test_fast_agrees_with_the_paper_grid():
    x, y = synthetic(0.61, 1.92, 2542, 0.40, 16000, 200, seed=3)
    fast = fit_curve(x, y, fit_min=1500, n_bootstrap=0)
    grid = fit_curve(x, y, fit_min=1500, n_bootstrap=0, method="grid")
    assert grid.A in np.round(np.arange(0.0, 1.0001, 0.005), 3) or abs(grid.A * 200 - round(grid.A * 200)) < 1e-9
    C = np.array([8000.0, 16000.0, 32000.0])
    np.testing.assert_allclose(fast.predict(C), grid.predict(C), atol=0.002)
    # the continuous optimum is at least as good as the best grid point
    assert fast.rmse <= grid.rmse + 1e-12


def test_fit_r0_recovers_the_start():
    x, y = synthetic(0.65, 1.8, 3000, 0.35, 20000, 100, seed=1, noise=0.005)
    y[0] = 0.9  # a wrong first measurement: with fit_r0 it must not matter
    fit = fit_curve(x, y, fit_min=300, fit_r0=True, n_bootstrap=0)
    assert fit.R0 == pytest.approx(0.35, abs=0.02)
    assert fit.A == pytest.approx(0.65, abs=0.01)


def test_first_half_check_fits_from_the_whole_runs_window_start():
    # the paper's predictability check: fit the first half of the compute, starting where the
    # whole run's fit starts (20% of the final compute here), predict the mean of the last 3
    x, y = synthetic(0.61, 1.92, 2542, 0.40, 16000, 400, seed=2)
    truth_end = np.mean(0.40 + 0.21 / (1 + (2542 / x[-3:]) ** 1.92))
    h = first_half_prediction(x, y, 0.2)
    assert h["window_from"] == pytest.approx(0.2 * 16000)
    assert h["points"] == int((x <= 8000).sum()) and h["half_frac"] == pytest.approx(8000 / 16000)
    assert h["measured"] == pytest.approx(np.mean(y[-3:]))
    assert h["error"] == pytest.approx(h["predicted"] - h["measured"])
    assert abs(h["predicted"] - truth_end) <= 0.02
    # R0 fixed at the measured start (the frozen method, the paper's Eq. 1 use): the step-0 evaluation
    # moves the forecast; with R0 fitted (a departure) it lies outside the window and cannot
    y_off = y.copy()
    y_off[0] = 0.0
    fitted = first_half_prediction(x, y, 0.2, fit_r0=True)
    assert first_half_prediction(x, y_off, 0.2, fit_r0=True)["predicted"] == pytest.approx(
        fitted["predicted"], abs=1e-9
    )
    fixed, fixed_off = (first_half_prediction(x, v, 0.2) for v in (y, y_off))
    assert abs(fixed_off["predicted"] - fixed["predicted"]) > 0.002  # 0.004 with this seed


def test_first_half_window_moves_back_to_keep_five_points():
    x = np.array([0.0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 40, 80, 160])
    y = 0.1 + 0.5 * x / (x + 10)
    h = first_half_prediction(x, y, 0.2)  # 20% of 160 = 32: only 40 and 80 in the first half
    assert h["window_from"] == 9.0  # the fifth-last positive evaluation of the first half


def test_bootstrap_intervals_bracket_estimates():
    x, y = synthetic(0.61, 1.92, 2542, 0.40, 16000, 100, seed=0)
    fit = fit_curve(x, y, fit_min=1500, fit_max=8000, n_bootstrap=60, seed=1)
    for name in ("A", "B", "C_mid"):
        lo, hi = fit.ci[name]
        assert lo < getattr(fit, name) < hi
    lo, hi = fit.predict_interval([4000.0, 16000.0, 64000.0])
    assert (lo < hi).all()
    assert (hi - lo)[0] < (hi - lo)[2]  # wider as the forecast reaches further
    d = fit.to_dict([16000.0])
    assert d["predictions"][0]["lo"] == pytest.approx(lo[1]) and d["predictions"][0]["x"] == 16000.0
    assert set(d) >= {"model", "A", "B", "C_mid", "R0", "rmse", "n_points", "ci", "predictions", "warnings"}


def test_seed_spread_is_the_spread_of_per_seed_fits():
    runs = [synthetic(0.61, 1.92, 2542, 0.40, 16000, 100, seed=s) for s in range(3)]
    pooled = fit_seeds(runs, fit_min=1500, n_bootstrap=20)
    alone = [fit_curve(x, y, fit_min=1500, n_bootstrap=0).A for x, y in runs]
    assert pooled.seed_spread()["std"]["A"] == pytest.approx(np.std(alone, ddof=1))
    assert pooled.n_points == sum(int((x >= 1500).sum()) for x, _ in runs)
    assert pooled.to_dict([16000.0])["predictions"][0]["seed_std"] >= 0


def test_window_before_c_mid_warns():
    x, y = synthetic(0.65, 1.9, 11272, 0.45, 50000, 250, seed=0)
    fit = fit_curve(x, y, fit_min=1500, fit_max=4000, n_bootstrap=0)
    assert any("before C_mid" in w for w in fit.warnings)


def test_wide_ceiling_interval_warns():
    # a window that ends at half of C_mid: the point fit looks confident, the bootstrap does not
    x, y = synthetic(0.65, 1.9, 11272, 0.45, 50000, 250, seed=0)
    fit = fit_curve(x, y, fit_min=1500, fit_max=6000, n_bootstrap=40)
    assert fit.ci["A"][1] - fit.ci["A"][0] > 0.06
    assert any("interval of A" in w and "poorly determined" in w for w in fit.warnings)


def test_ceiling_on_the_edge_warns():
    x = np.linspace(100, 2000, 40)
    y = 0.2 + 0.3 * x / 2000  # still rising linearly: no ceiling in sight
    fit = fit_curve(x, y, n_bootstrap=0, a_range=(0.45, 0.60))
    assert any("A = 0.600 is on the edge" in w for w in fit.warnings)


def test_midpoint_on_the_edge_warns():
    x, y = synthetic(0.61, 1.92, 2542, 0.40, 16000, 100, seed=0)
    fit = fit_curve(x, y, fit_min=1500, n_bootstrap=0, c_mid_range=(100.0, 1000.0))  # truth 2542 outside
    assert fit.C_mid == pytest.approx(1000.0, rel=1e-3)
    assert any("C_mid = 1000 is on the edge" in w for w in fit.warnings)
    clean = fit_curve(x, y, fit_min=1500, n_bootstrap=0)
    assert not any("edge" in w for w in clean.warnings)


def test_few_points_warn_and_too_few_fail():
    x, y = synthetic(0.61, 1.92, 2542, 0.40, 16000, 1000, seed=0)
    fit = fit_curve(x, y, fit_min=1500, fit_max=8000, n_bootstrap=0)  # 7 points
    assert fit.n_points == 7 and any("only 7 points" in w for w in fit.warnings)
    with pytest.raises(ScaleRLError, match="only 3 points in the fit window"):
        fit_curve(x, y, fit_min=1500, fit_max=4000, n_bootstrap=0)


@pytest.mark.parametrize(
    "x,y,msg",
    [
        ([1, 2, 3, 4, 5, 6], [0.5] * 6, "constant"),
        ([1, 2, 3, 4, 5, 6], [0.1, 0.2, 0.3, 1.4, 0.5, 0.6], "in \\[0, 1\\]"),
        ([-1, 2, 3, 4, 5, 6], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "compute must be positive"),
        ([0, 0, 0, 0, 0, 0], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "compute must be positive"),
    ],
)
def test_bad_data_raise(x, y, msg):
    with pytest.raises(ScaleRLError, match=msg):
        fit_curve(x, y, n_bootstrap=0)
