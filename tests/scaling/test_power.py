"""The smallest difference a comparison of seeds can detect (`scalerl.scaling.power`), checked against
t quantiles from a printed table and against the exact power of the t-test (noncentral t)."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from scalerl.scaling.power import detectable_difference, pooled_std, power_text

# Student's t quantiles as printed in a table (two-sided 0.05 -> the 0.975 column; 0.80 column)
T975 = {2: 4.303, 4: 2.776, 8: 2.306, 14: 2.145}
T80 = {2: 1.061, 4: 0.941, 8: 0.889, 14: 0.868}


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_equal_groups_match_the_formula_worked_with_table_quantiles(n):
    s, dof = 0.026, 2 * n - 2
    by_hand = (T975[dof] + T80[dof]) * s * math.sqrt(2 / n)
    assert detectable_difference(s, n) == pytest.approx(by_hand, abs=5e-5)


def test_three_seeds_against_the_papers_effects():
    """The reviewer's figure: with 3 seeds a side and seed std 0.02-0.026 of A, the detectable
    difference is 0.06-0.08, above the paper's 0.035 (batch, thinking budget); 5 seeds bring it to 0.04-0.05."""
    assert detectable_difference(0.026, 3) == pytest.approx(3.717 * 0.026 * math.sqrt(2 / 3), abs=1e-4)  # 0.0789
    assert 0.06 < detectable_difference(0.020, 3) < detectable_difference(0.026, 3) < 0.08
    assert 0.04 < detectable_difference(0.020, 5) < detectable_difference(0.026, 5) < 0.055


def test_the_t_test_has_about_the_stated_power_at_the_detectable_difference():
    """Independent of the formula: the two-sided t-test's exact power (noncentral t) at the returned
    difference is 0.8 up to the approximation (0.77 at 2 seeds a side, 0.79 at 3, 0.80 from 5)."""
    for n_a, n_b, s_a, s_b in ((2, 2, 0.02, 0.02), (3, 3, 0.02, 0.03), (5, 5, 0.01, 0.01), (3, 6, 0.02, 0.01)):
        d = detectable_difference(s_a, n_a, s_b, n_b)
        dof = n_a + n_b - 2
        sp = math.sqrt(((n_a - 1) * s_a**2 + (n_b - 1) * s_b**2) / dof)
        nc = d / (sp * math.sqrt(1 / n_a + 1 / n_b))
        crit = stats.t.ppf(0.975, dof)
        power = stats.nct.sf(crit, dof, nc) + stats.nct.cdf(-crit, dof, nc)
        assert 0.76 < power < 0.81, (n_a, n_b, power)


def test_the_detectable_difference_in_a_simulation():
    """Seeds drawn from two normal distributions the detectable difference apart (3 a side): a t-test
    at 0.05 tells them apart in about 80% of 4,000 draws; at half that difference, far less often."""
    rng = np.random.default_rng(0)
    s, n = 0.02, 3
    d = detectable_difference(s, n)

    def share(delta):
        a = rng.normal(0.0, s, (4000, n))
        b = rng.normal(delta, s, (4000, n))
        return float(np.mean(stats.ttest_ind(a, b, axis=1).pvalue < 0.05))

    assert 0.75 < share(d) < 0.83
    assert share(d / 2) < 0.35


def test_pooled_std_and_unequal_groups():
    # ((3-1) 0.02^2 + (5-1) 0.04^2) / 6 = (0.0008 + 0.0064) / 6 = 0.0012
    assert pooled_std((0.02, 0.04), (3, 5)) == pytest.approx(math.sqrt(0.0012))
    # 3 and 7 seeds: 8 degrees of freedom, pooled variance (2 x 0.0004 + 6 x 0.0016) / 8 = 0.0013
    by_hand = (2.306 + 0.889) * math.sqrt(0.0013) * math.sqrt(1 / 3 + 1 / 7)
    assert detectable_difference(0.02, 3, 0.04, 7) == pytest.approx(by_hand, abs=1e-4)
    assert detectable_difference(0.02, 1) is None and detectable_difference(0.02, 3, 0.02, 1) is None
    with pytest.raises(ValueError):
        pooled_std((0.02,), (1,))


def test_the_line_for_seeds_of_one():
    spread = {"n_seeds": 3, "std": {"A": 0.026, "B": 0.13, "C_mid": 1.0}}
    line = power_text(spread)
    assert "3 seeds" in line and "A 0.079 (seed std 0.026)" in line and "B 0.39" in line
    assert power_text(None) is None and power_text({"n_seeds": 1, "std": {}}) is None


def _seed_run(path, A):
    """A run whose validation curve is Eq. 1 with ceiling A (B 2, C_mid 2500, R0 0.1)."""
    rows = [
        {
            "step": i,
            "kind": "eval",
            "compute/device_hours": 250.0 * i,
            "val/pass_rate": 0.1 + (A - 0.1) / (1 + (2500 / (250.0 * i)) ** 2) if i else 0.1,
        }
        for i in range(40)
    ]
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_fit_seeds_of_one_gives_the_detectable_difference(tmp_path, capsys):
    """Three seeds whose ceilings are 0.60, 0.62, 0.64: the per-seed fits recover them, so the seed std of A
    is 0.02 and another configuration of 3 seeds as spread is told apart from 3.717 x 0.02 x sqrt(2/3) = 0.061."""
    from scalerl.cli import main

    runs = [_seed_run(tmp_path / f"s{i}", A) for i, A in enumerate((0.60, 0.62, 0.64))]
    assert main(["fit", *runs, "--seeds-of-one", "--bootstrap", "5", "--no-grid-check", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["seeds"]["std"]["A"] == pytest.approx(0.02, abs=1e-3)
    assert d["detectable"]["A"] == pytest.approx(3.717 * d["seeds"]["std"]["A"] * math.sqrt(2 / 3), rel=1e-3)
    assert main(["fit", *runs, "--seeds-of-one", "--bootstrap", "5", "--no-grid-check"]) == 0
    out = capsys.readouterr().out
    assert f"A {d['detectable']['A']:.3f} (seed std {d['seeds']['std']['A']:.3f})" in out
    assert "against another configuration of 3 seeds" in out
