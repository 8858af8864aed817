"""The frozen first-half check (docs/forecasting.md, "The first-half check"): R0 fixed at the
measured start, the window from a tenth of the final compute, the two naive baselines taken
from the first-half evaluations only; and the controls of a study (false positives over splits)."""

import json

import numpy as np
import pytest

from scalerl.scaling import first_half_check, first_half_prediction
from scalerl.scaling.fit import FIRST_HALF_WINDOW


def eq1(c, A=0.7, B=1.8, C_mid=30.0, R0=0.05):
    c = np.asarray(c, dtype=float)
    return np.where(c > 0, R0 + (A - R0) / (1 + (C_mid / np.maximum(c, 1e-12)) ** B), R0)


X = np.array([0, 6, 8, 10, 13, 16, 21, 27, 35, 45, 58, 75, 97, 120], dtype=float)  # the default schedule's steps


def test_frozen_window_and_r0_are_the_documented_ones():
    assert FIRST_HALF_WINDOW == 0.1
    y = eq1(X)
    h = first_half_prediction(X, y)
    assert h["method"] == "frozen"
    assert h["R0"] == pytest.approx(y[0])  # fixed at the step-0 evaluation, not fitted
    assert h["window_from"] == pytest.approx(0.1 * 120)
    assert h["points"] == int((X <= 60).sum()) == 11  # first half: compute <= 60
    assert abs(h["error"]) < 0.005  # a noise-free Eq. 1 curve is extrapolated to its end
    # evaluations below the window (other than the start, which sets R0) are not fitted:
    moved = y.copy()
    moved[1:4] = [0.9, 0.0, 0.9]  # steps 6, 8, 10 < 12
    assert first_half_prediction(X, moved)["predicted"] == pytest.approx(h["predicted"], abs=1e-6)
    # ... and the start is R0: moving it moves the fit
    lower = y.copy()
    lower[0] = 0.0
    assert first_half_prediction(X, lower)["R0"] == 0.0
    # R0 fitted is a departure, named as one
    assert first_half_prediction(X, y, fit_r0=True)["method"].startswith("departure")


def test_baselines_come_from_the_first_half_only():
    rng = np.random.default_rng(3)
    y = eq1(X) + rng.normal(0, 0.01, X.size)
    h = first_half_prediction(X, y)
    first = y[X <= 60]
    end = y[-3:].mean()  # the end: the mean of the last three evaluations
    assert h["measured"] == pytest.approx(end)
    assert h["baseline_last"] == pytest.approx(first[-1]) and h["baseline_best"] == pytest.approx(first.max())
    assert h["baseline_last_error"] == pytest.approx(first[-1] - end)
    assert h["baseline_best_error"] == pytest.approx(first.max() - end)
    assert h["beat_baselines"] is bool(abs(h["error"]) < min(abs(first[-1] - end), abs(first.max() - end)))
    # the second half's evaluations other than the last three move neither the fit nor the baselines
    xs = np.array([*X[:11], 66, 70, *X[11:]])  # two more evaluations after half the compute
    ys = eq1(xs) + rng.normal(0, 0.01, xs.size)
    h1 = first_half_prediction(xs, ys)
    ys[11:13] = [0.99, 0.0]
    h2 = first_half_prediction(xs, ys)
    for k in ("predicted", "baseline_last", "baseline_best", "measured"):
        assert h2[k] == pytest.approx(h1[k])
    # what was left to forecast: the value at half the compute, interpolated between steps 58 and 75
    at_half = y[10] + (y[11] - y[10]) * (60 - 58) / (75 - 58)
    assert h["at_half"] == pytest.approx(at_half)
    assert h["left"] == pytest.approx(end - at_half)
    assert h["left_share"] == pytest.approx((end - at_half) / (end - y[0]))


def test_a_curve_still_rising_is_forecast_better_than_by_the_baselines():
    y = eq1(X, C_mid=60.0)  # half the gain still ahead at half the compute
    h = first_half_prediction(X, y)
    assert h["left"] > 0.1 and h["beat_baselines"] is True
    assert abs(h["baseline_last_error"]) > 0.1


def test_first_half_check_says_when_there_is_nothing_to_check():
    assert first_half_check(X[:4], eq1(X[:4])) is None  # 3 evaluations past 0, too few in the first half
    h = first_half_check(X, eq1(X))
    assert h is not None and "baseline_best_error" in h


def test_fit_json_carries_the_baselines(tmp_path, capsys):
    from scalerl.cli import main

    y = eq1(X, C_mid=60.0)
    path = tmp_path / "run.jsonl"
    path.write_text(
        "".join(json.dumps({"compute/flops": float(c), "val/pass_rate": float(v)}) + "\n" for c, v in zip(X, y))
    )
    assert main(["fit", str(path), "--x", "compute/flops", "--bootstrap", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    h = out["first_half_fit"]
    first = y[X <= 60]
    assert h["baseline_last_error"] == pytest.approx(first[-1] - y[-3:].mean())
    assert h["baseline_best_error"] == pytest.approx(first.max() - y[-3:].mean())
    assert "error" in h and h["R0"] == pytest.approx(y[0])
    assert main(["fit", str(path), "--x", "compute/flops", "--bootstrap", "5"]) == 0
    assert "first half of the compute predicted the end" in capsys.readouterr().out


def test_per_subset_forecast_recovers_a_curve_made_of_two_rungs_learnt_at_different_compute():
    """The exploratory per-subset forecast (`subset_first_half_prediction`): a pass rate that is the
    mean of an early rung (C_mid 12) and a late one (C_mid 50, still rising at half the compute, 60) is
    no single sigmoid; the frozen fit on the mean under-predicts its end, while each rung's own
    first-half fit, averaged, lands on the end computed here from the two curves. A rung that never
    passes cannot be fitted and is predicted by its last first-half evaluation (0)."""
    from scalerl.scaling import subset_first_half_prediction

    early, late = eq1(X, A=0.98, B=3.0, C_mid=12.0, R0=0.1), eq1(X, A=0.9, B=4.0, C_mid=50.0, R0=0.02)
    total = (early + late) / 2
    true_end = float(np.mean((early[-3:] + late[-3:]) / 2))
    frozen = first_half_prediction(X, total)
    got = subset_first_half_prediction(X, {"2x3": early, "2x7": late})
    assert frozen["error"] < -0.03  # one sigmoid bends too early
    assert got["predicted"] == pytest.approx(true_end, abs=0.01)
    assert all(v["fitted"] for v in got["subsets"].values())
    zero = np.zeros_like(X)
    got = subset_first_half_prediction(X, {"2x3": early, "2x9": zero})
    assert got["subsets"]["2x9"] == {"predicted": 0.0, "fitted": False}
    assert got["predicted"] == pytest.approx((float(np.mean(early[-3:])) + 0.0) / 2, abs=0.01)


def test_the_study_report_gives_the_per_subset_forecast_where_the_subsets_are_the_validation_set(tmp_path):
    """The report's exploratory column: runs whose rungs are the validation set in near-equal shares
    (0.52 / 0.48 here) get the per-subset forecast and its error against the end; runs whose subsets
    are not a near-equal split (shares 0.8 / 0.2) or that log none get none; the summary line counts
    the runs that have it, with the frozen method's error on the same runs beside it."""
    from scalerl.study import fit_study, plan_runs, plan_variants, write_report
    from scalerl.study.report import equal_share_subsets
    from scalerl.study.runner import DONE_FILE

    x = np.concatenate([[0.0], np.geomspace(2e11, 1.2e13, 12)])
    early = np.where(x > 0, 0.1 + 0.88 / (1 + (1.2e12 / np.maximum(x, 1)) ** 3.0), 0.1)
    late = np.where(x > 0, 0.02 + 0.88 / (1 + (5e12 / np.maximum(x, 1)) ** 4.0), 0.02)
    assert equal_share_subsets(0.52 * early + 0.48 * late, {"2x3": early, "2x7": late}) is not None
    assert equal_share_subsets(0.8 * early + 0.2 * late, {"2x3": early, "2x7": late}) is None
    assert equal_share_subsets(0.52 * early + 0.48 * late + 0.01, {"2x3": early, "2x7": late}) is None
    variants = [v for v in plan_variants("scalerl", leave_one_out=True) if v.name in ("scalerl", "token-agg")]
    specs = plan_runs(variants, 1, tmp_path)
    for s in specs:
        split = s.variant.name == "scalerl"
        y = 0.52 * early + 0.48 * late if split else 0.8 * early + 0.2 * late
        rows = [
            {
                "step": i,
                "kind": "eval",
                "compute/flops": float(c),
                "val/pass_rate": float(v),
                "val/pass_rate/2x3": float(e),
                "val/pass_rate/2x7": float(lt),
            }
            for i, (c, v, e, lt) in enumerate(zip(x, y, early, late))
        ]
        s.run_dir.mkdir(parents=True, exist_ok=True)
        (s.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (s.run_dir / DONE_FILE).write_text("{}")
    data = write_report(tmp_path, fit_study(specs, n_bootstrap=5), "scalerl", "compute/flops", "table")
    runs = {c["name"]: c["runs"][0] for c in data["configs"]}
    assert runs["token-agg"]["first_half_per_subset"] is None
    got = runs["scalerl"]["first_half_per_subset"]
    end = float(np.mean(0.52 * early[-3:] + 0.48 * late[-3:]))
    assert got["error"] == pytest.approx(got["predicted"] - end)
    assert got["predicted"] == pytest.approx(float(np.mean([early[-3:].mean(), late[-3:].mean()])), abs=0.01)
    p = data["predictability"]
    assert p["subset_runs"] == 1 and p["subset_mean_abs_error"] == pytest.approx(abs(got["error"]))
    assert p["subset_frozen_mean_abs_error"] == pytest.approx(abs(runs["scalerl"]["prediction_error"]))
    md = (tmp_path / "report.md").read_text()
    assert "on the 1 run whose subsets are the validation set in near-equal shares" in md
