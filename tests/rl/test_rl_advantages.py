"""Advantages, zero-variance filtering, dynamic-sampling bookkeeping, length penalty."""

import math

import pytest
import torch

from scalerl.batching import BatchFiller, zero_variance_filter
from scalerl.config import CispoLoss, LengthPenaltyConfig
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.rl.advantages import group_advantages, unequal_rewards_mask
from scalerl.rl.length_penalty import overlong_penalty, shaped_reward
from scalerl.rl.losses import policy_loss
from scalerl.types import Completion, Group, Prompt, Score

R = torch.tensor([[1.0, -1.0, -1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, -1.0, -1.0, -1.0]])
# group-centred: row 0 mean 0; row 1 all equal; row 2 mean -0.5
CENTRED = [[1.0, -1.0, -1.0, 1.0], [0.0] * 4, [1.5, -0.5, -0.5, -0.5]]


def test_none_is_group_centred():
    assert group_advantages(R, "none").tolist() == CENTRED


def test_prompt_norm_divides_by_group_std():
    s2 = math.sqrt((1.5**2 + 3 * 0.5**2) / 4)  # population std of row 2 = sqrt(0.75)
    expected = [[1.0, -1.0, -1.0, 1.0], [0.0] * 4, [1.5 / s2, -0.5 / s2, -0.5 / s2, -0.5 / s2]]
    assert torch.allclose(group_advantages(R, "prompt"), torch.tensor(expected))


def test_batch_norm_divides_by_batch_std():
    # the 12 centred values have mean 0 and sum of squares 4 + 0 + 3 = 7
    std = math.sqrt(7 / 12)
    assert torch.allclose(group_advantages(R, "batch"), torch.tensor(CENTRED) / std)


def test_leave_one_out_baseline():
    # row 2: baseline of the first = mean(-1,-1,-1) = -1 -> 2; of the others = (1-1-1)/3 -> -1+1/3
    adv = group_advantages(R, "none", baseline="leave_one_out")
    assert adv[2].tolist() == pytest.approx([2.0, -2 / 3, -2 / 3, -2 / 3])
    assert adv[0].tolist() == pytest.approx([4 / 3, -4 / 3, -4 / 3, 4 / 3])  # 1 - (-1/3), -1 - (1/3)
    assert adv[1].tolist() == [0.0] * 4


def test_zero_std_guard_gives_exact_zeros():
    r = torch.tensor([[0.1, 0.1, 0.1], [0.3, 0.3, 0.3]])  # float means are not exactly 0.1 / 0.3
    for norm in ("batch", "prompt", "none"):
        adv = group_advantages(r, norm)
        assert adv.tolist() == [[0.0] * 3, [0.0] * 3]


def test_unequal_rewards_mask():
    assert unequal_rewards_mask(R).tolist() == [True, False, True]


@pytest.mark.parametrize(
    "bad,match",
    [
        (torch.tensor([[1.0, float("nan")]]), r"rewards: non-finite value nan at index \(0, 1\)"),
        (torch.tensor([[1.0, float("inf")]]), r"rewards: non-finite value inf"),
        (torch.tensor([1.0, 2.0]), r"rewards: expected a 2-d tensor"),
        (torch.tensor([[1.0], [2.0]]), r"at least 2 completions"),
    ],
)
def test_bad_rewards(bad, match):
    with pytest.raises(ScaleRLError, match=match):
        group_advantages(bad, "batch")


def test_unknown_norm():
    with pytest.raises(ScaleRLError, match="advantage norm 'group'"):
        group_advantages(R, "group")


# ---------------------------------------------------------------- filters
def make_group(pid, rewards):
    comps = [
        Completion(
            id=f"{pid}/{i}",
            prompt_id=pid,
            prompt_tokens=[1],
            tokens=[2, 3],
            logprobs=[-1.0, -1.0],
            versions=[0, 0],
            text="",
            finish_reason="eos",
        )
        for i in range(len(rewards))
    ]
    return Group(Prompt(pid, "q", "a"), comps, [Score(r, r is not None and r > 0) for r in rewards])


def test_zero_variance_filter_counts_dropped():
    groups = [make_group("a", [1, -1]), make_group("b", [1, 1]), make_group("c", [-1, -1]), make_group("d", [-1, 1])]
    kept, dropped = zero_variance_filter(groups)
    assert [g.prompt.id for g in kept] == ["a", "d"] and dropped == 2
    assert zero_variance_filter([make_group("b", [1, 1])]) == ([], 1)  # all filtered: empty outcome


def test_filter_rejects_unscored_and_nan():
    with pytest.raises(ScaleRLError, match=r"prompt 'x': completion 1 has reward None"):
        zero_variance_filter([make_group("x", [1, None])])
    with pytest.raises(ScaleRLError, match=r"reward nan"):
        zero_variance_filter([make_group("x", [1, float("nan")])])


def test_zero_variance_group_contributes_nothing_and_is_not_counted():
    # P=2 groups of G=2 one-token completions; group 1 has equal rewards.
    rewards = torch.tensor([[1.0, -1.0], [1.0, 1.0]])
    adv = group_advantages(rewards, "prompt").reshape(-1)  # (4,) = [1, -1, 0, 0]
    lp = torch.tensor([[-1.0], [-2.0], [-3.0], [-4.0]], requires_grad=True)
    loss, m = policy_loss(CispoLoss(), lp, lp.detach(), adv, torch.ones(4, 1), [0, 0, 1, 1])
    loss.backward()
    assert lp.grad[2:].tolist() == [[0.0], [0.0]]  # exactly zero
    # unfiltered, the dead group still counts as a prompt: -(((1*-1) + (-1*-2))/2 + 0) / 2
    assert loss.item() == pytest.approx(-((-1 + 2) / 2) / 2)
    kept, dropped = zero_variance_filter([make_group("a", [1, -1]), make_group("b", [1, 1])])
    assert dropped == 1 and len(kept) == 1
    loss_f, m_f = policy_loss(CispoLoss(), lp[:2], lp[:2].detach(), adv[:2], torch.ones(2, 1), [0, 0])
    assert loss_f.item() == pytest.approx(-(-1 + 2) / 2) and m_f["prompts"] == 1.0


def test_batch_filler_scalerl_does_not_resample():
    f = BatchFiller(target=3, zero_variance=True, dynamic_sampling=False)
    for pid, r in [("a", [1, -1]), ("b", [1, 1]), ("c", [-1, 1])]:
        f.add(make_group(pid, r))
    assert f.full and len(f.groups) == 2 and f.n_dropped == 1 and f.extra_prompts == 0 and not f.empty
    with pytest.raises(ScaleRLError, match="already full"):
        f.add(make_group("d", [1, -1]))


def test_batch_filler_all_filtered_is_empty_outcome():
    f = BatchFiller(target=2)
    f.add(make_group("a", [1, 1]))
    f.add(make_group("b", [-1, -1]))
    assert f.full and f.empty and f.metrics()["batch/empty"] == 1.0


def test_batch_filler_dynamic_sampling_counts_extra_prompts():
    f = BatchFiller(target=2, zero_variance=True, dynamic_sampling=True)
    draws = [("a", [1, 1]), ("b", [1, -1]), ("c", [-1, -1]), ("d", [-1, -1]), ("e", [-1, 1])]
    for pid, r in draws:
        f.add(make_group(pid, r))
    assert f.full and [g.prompt.id for g in f.groups] == ["b", "e"]
    assert f.n_drawn == 5 and f.extra_prompts == 3 and f.n_dropped == 3 and not f.exhausted


def test_batch_filler_dynamic_sampling_gives_up_after_max_draws():
    f = BatchFiller(target=2, dynamic_sampling=True, max_draws=3)
    for pid in "abc":
        f.add(make_group(pid, [1, 1]))
    assert f.full and f.exhausted and f.empty


def test_batch_filler_from_config():
    f = BatchFiller.from_config(load_config("dapo"))
    assert (f.target, f.zero_variance, f.dynamic_sampling) == (32, True, True)
    f = BatchFiller.from_config(load_config("grpo"))
    assert not f.zero_variance


# ---------------------------------------------------------------- length penalty (DAPO Eq. 13)
@pytest.mark.parametrize(
    "length,expected",
    [
        (0, 0.0),
        (16, 0.0),  # <= max_len - tolerance = 16: no penalty
        (17, -0.25),
        (18, -0.5),
        (19, -0.75),
        (20, -1.0),  # (16 - L) / 4
        (21, -1.0),
        (500, -1.0),  # beyond max_len: full penalty
    ],
)
def test_overlong_penalty_by_hand(length, expected):
    assert overlong_penalty(length, max_len=20, tolerance=4, penalty=1.0) == pytest.approx(expected)


def test_overlong_penalty_scale_and_zero_tolerance():
    assert overlong_penalty(18, 20, 4, penalty=0.5) == pytest.approx(-0.25)
    assert overlong_penalty(20, 20, 0) == 0.0 and overlong_penalty(21, 20, 0) == -1.0
    cfg = LengthPenaltyConfig(max_len=20, tolerance=4, penalty=1.0)
    assert shaped_reward(1.0, 18, cfg) == pytest.approx(0.5)
    assert shaped_reward(-1.0, 18, cfg, passed=False, correct_only=True) == -1.0


def test_overlong_penalty_bad_args():
    with pytest.raises(ScaleRLError, match="tolerance=30"):
        overlong_penalty(5, max_len=20, tolerance=30)
