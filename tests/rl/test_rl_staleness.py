import math

import pytest
import torch

from scalerl.rl.staleness import StalenessBound, k3, kappa, kl_sums, next_bound


def test_k3_is_the_kl_of_two_categoricals_in_expectation():
    """E_{y ~ p}[exp(l) - 1 - l] with l = log q(y) - log p(y) is KL(p || q), computed here by hand."""
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.4, 0.4, 0.2])
    exact = float((p * (p / q).log()).sum())
    estimate = float((p * k3((q / p).log())).sum())
    assert estimate == pytest.approx(exact, abs=1e-7)
    assert float(k3(torch.tensor(0.0))) == 0.0 and float(k3(torch.tensor(-3.0))) > 0


def test_kl_sums_counts_masked_tokens_and_stale_ones():
    lr = torch.tensor([[0.1, -0.2, 0.3], [0.0, 0.5, 9.0]])
    stale = torch.tensor([[0, 1, 2], [3, 0, 1]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # the last token not trained
    kl = [math.expm1(x) - x for x in (0.1, -0.2, 0.3, 0.0, 0.5)]
    total, n, stale_kl, s2 = kl_sums(lr, stale, mask)
    assert total == pytest.approx(sum(kl), rel=1e-6) and n == 5
    assert stale_kl == pytest.approx(kl[1] + kl[2] + kl[3], rel=1e-6)
    assert s2 == 1 + 4 + 9


def test_next_bound_grows_one_step_falls_at_once_and_stays_in_1_to_k():
    assert next_bound(1, 8, None, 0.01) == 2  # nothing stale measured: grow by one
    assert next_bound(8, 8, None, 0.01) == 8
    assert next_bound(3, 8, 1e-9, 0.01) == 4  # KL fits any staleness: still one a step
    assert next_bound(8, 8, 0.01 / 4, 0.01) == 2  # kappa * 2**2 = max_kl: s = 2 fits, 3 does not
    assert next_bound(8, 8, 0.01 / 9 * 1.001, 0.01) == 2
    assert next_bound(5, 8, 1.0, 0.01) == 1  # never below 1
    assert kappa(0.5, 0.0) is None and kappa(0.5, 2.0) == 0.25
    b = StalenessBound(4, 0.01)
    assert [b.update({}) for _ in range(5)] == [2, 3, 4, 4, 4]
    assert b.update({"pipeline/kl_per_version2": 0.01}) == 1
