"""Losses and aggregations against values worked out by hand (see the comments)."""

import math
from typing import get_args

import pytest
import torch
from pydantic import ValidationError

from scalerl.config import CispoLoss, CustomLoss, GSPOLoss, LossConfig, PPOClipLoss, ReinforceLoss
from scalerl.errors import ScaleRLError
from scalerl.rl.losses import LOSSES, policy_loss

CONFIGS = {"cispo": CispoLoss, "ppo_clip": PPOClipLoss, "gspo": GSPOLoss, "reinforce": ReinforceLoss}


def loss(kind, *args, aggregation="prompt", ref_logprobs=None, **params):
    """policy_loss with the config of `kind` built from `aggregation` and `params`."""
    return policy_loss(CONFIGS[kind](aggregation=aggregation, **params), *args, ref_logprobs=ref_logprobs)


# Three completions: two of prompt 0, one of prompt 1; lengths 2, 2, 3 (7 tokens).
# Per-token trainer log-probs LP, importance ratios RHO (pi / pi_gen), advantages A.
PROMPTS = [0, 0, 1]
MASK = [[1, 1, 0], [1, 1, 0], [1, 1, 1]]
LP = [[-1.0, -2.0, 0.0], [-0.5, -1.0, 0.0], [-1.0, -1.0, -2.0]]
RHO = [[2.0, 0.5, 1.0], [8.0, 1.0, 1.0], [1.0, 1.1, 0.7]]
A = [1.0, -1.0, 0.5]


def batch(lp=LP, rho=RHO, adv=A, mask=MASK):
    logprobs = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    gen = torch.tensor(lp, dtype=torch.float64) - torch.tensor(rho, dtype=torch.float64).log()
    return logprobs, gen, torch.tensor(adv, dtype=torch.float64), torch.tensor(mask, dtype=torch.float64)


def reference_aggregate(J, how):
    """Plain-Python aggregation of per-token objectives J (list of per-completion lists)."""
    if how == "token":
        return sum(sum(r) for r in J) / sum(len(r) for r in J)
    if how == "sample":
        return sum(sum(r) / len(r) for r in J) / len(J)
    by_prompt = {}
    for p, r in zip(PROMPTS, J):
        s, n = by_prompt.get(p, (0.0, 0))
        by_prompt[p] = (s + sum(r), n + len(r))
    return sum(s / n for s, n in by_prompt.values()) / len(by_prompt)


def test_reference_aggregate_worked_by_hand():
    # CISPO terms below: rows sum to -3, 3.5, -1.75 over 2, 2, 3 tokens.
    J = [[-2.0, -1.0], [2.5, 1.0], [-0.5, -0.55, -0.7]]
    assert reference_aggregate(J, "token") == pytest.approx(-1.25 / 7)
    assert reference_aggregate(J, "sample") == pytest.approx((-1.5 + 1.75 - 1.75 / 3) / 3)
    assert reference_aggregate(J, "prompt") == pytest.approx((0.5 / 4 - 1.75 / 3) / 2)


# Per-token objectives, by hand:
HAND = {
    # sg(min(rho, 5)) * A * lp
    ("cispo", ()): [
        [2 * 1 * -1.0, 0.5 * 1 * -2.0],
        [5 * -1 * -0.5, 1 * -1 * -1.0],
        [1 * 0.5 * -1.0, 1.1 * 0.5 * -1.0, 0.7 * 0.5 * -2.0],
    ],
    # min(rho A, clip(rho, 0.8, 1.28) A)
    ("ppo_clip", (("eps_low", 0.2), ("eps_high", 0.28))): [
        [min(2.0, 1.28), min(0.5, 0.8)],
        [min(-8.0, -1.28), -1.0],
        [0.5, 0.55, min(0.35, 0.8 * 0.5)],
    ],
    # sequence ratios exp(mean log rho): 1, sqrt(8), 0.77 ** (1/3); clip(., 0.8, 1.28)
    ("gspo", (("eps_low", 0.2), ("eps_high", 0.28))): [
        [1.0, 1.0],
        [-math.sqrt(8)] * 2,
        [min(0.77 ** (1 / 3) * 0.5, 0.77 ** (1 / 3) * 0.5)] * 3,
    ],
    # A * lp
    ("reinforce", ()): [[-1.0, -2.0], [0.5, 1.0], [-0.5, -0.5, -1.0]],
}


@pytest.mark.parametrize("aggregation", ["prompt", "sample", "token"])
@pytest.mark.parametrize("kind,params", list(HAND))
def test_loss_values_by_hand(kind, params, aggregation):
    loss_v, metrics = loss(kind, *batch(), PROMPTS, aggregation=aggregation, **dict(params))
    expected = -reference_aggregate(HAND[(kind, params)], aggregation)
    assert loss_v.item() == pytest.approx(expected, rel=1e-9)
    assert metrics["loss"] == pytest.approx(expected, rel=1e-9)
    assert metrics["tokens"] == 7.0 and metrics["prompts"] == 2.0
    assert all(isinstance(v, float) for v in metrics.values())


def test_cispo_worked_values_literal():
    # token: (-3 + 3.5 - 1.75) / 7;  prompt: ((-3 + 3.5) / 4 + (-1.75) / 3) / 2
    assert loss("cispo", *batch(), PROMPTS, aggregation="token", eps_max=5)[0].item() == pytest.approx(1.25 / 7)
    assert loss("cispo", *batch(), PROMPTS, aggregation="prompt", eps_max=5)[0].item() == pytest.approx(
        0.229166666, rel=1e-6
    )


def test_metrics_by_hand():
    _, m = loss("ppo_clip", *batch(), PROMPTS, aggregation="token", eps_low=0.2, eps_high=0.28)
    ratios = [2.0, 0.5, 8.0, 1.0, 1.0, 1.1, 0.7]
    assert m["ratio_mean"] == pytest.approx(sum(ratios) / 7)
    assert m["ratio_max"] == pytest.approx(8.0)
    # only the rho=2, A=+1 token is clipped away (rho=8 has A<0: min keeps the unclipped term)
    assert m["clip_frac"] == pytest.approx(1 / 7)
    assert m["adv_abs_mean"] == pytest.approx((1 + 1 + 0.5) / 3)
    _, m = loss("cispo", *batch(), PROMPTS, aggregation="token", eps_max=5)
    assert m["clip_frac"] == pytest.approx(1 / 7)  # rho=8 > 5 is truncated


def test_ppo_k3_kl_penalty_by_hand():
    lp = torch.tensor([[-1.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.0 + math.log(2)]], dtype=torch.float64)
    adv, mask = torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64)
    value, m = loss("ppo_clip", lp, lp.detach(), adv, mask, [0], aggregation="token", kl_beta=0.1, ref_logprobs=ref)
    k3 = 2 - math.log(2) - 1  # exp(d) - d - 1 with d = log 2
    assert m["kl"] == pytest.approx(k3)
    assert value.item() == pytest.approx(-(1.0 - 0.1 * k3))


# ---------------------------------------------------------------- gradients
def grad_of(kind, aggregation="token", **params):
    lp, gen, adv, mask = batch()
    value, _ = loss(kind, lp, gen, adv, mask, PROMPTS, aggregation=aggregation, **params)
    value.backward()
    return lp.grad


def test_cispo_gradient_is_truncated_weight_times_advantage():
    g = grad_of("cispo", eps_max=5)
    # d(-J/7)/d lp = -sg(min(rho, 5)) * A / 7
    expected = [
        [-2 * 1 / 7, -0.5 * 1 / 7, 0],
        [-5 * -1 / 7, -1 * -1 / 7, 0],
        [-0.5 / 7, -1.1 * 0.5 / 7, -0.7 * 0.5 / 7],
    ]
    assert torch.allclose(g, torch.tensor(expected, dtype=torch.float64))
    assert g[1, 0] != 0  # rho = 8 > eps_max still carries (scaled) gradient


def test_ppo_clip_zero_gradient_on_clipped_positive_token():
    g = grad_of("ppo_clip", eps_low=0.2, eps_high=0.28)
    assert g[0, 0].item() == 0.0  # rho = 2 > 1.28, A = +1: exactly zero
    # unclipped tokens: d(rho A)/d lp = rho A
    assert g[0, 1].item() == pytest.approx(-0.5 * 1 / 7)
    assert g[1, 0].item() == pytest.approx(-8 * -1 / 7)  # rho = 8 with A < 0 is not clipped
    assert g[2, 2].item() == pytest.approx(-0.7 * 0.5 / 7)


def test_gspo_clips_whole_sequences():
    # row 0: token ratios 1.5 and 1.0 -> sequence ratio sqrt(1.5) = 1.22 > 1.1 with A > 0: clipped,
    #        so both tokens get zero gradient, even the one whose own ratio is 1.
    # row 1: token ratios 3 and 1/3 -> sequence ratio 1 (inside): both tokens get gradient,
    #        even the one whose own ratio (3) is far outside the window.
    lp, gen, adv, mask = batch(
        lp=[[-1.0, -1.0], [-1.0, -1.0]], rho=[[1.5, 1.0], [3.0, 1 / 3]], adv=[1.0, 1.0], mask=[[1, 1], [1, 1]]
    )
    value, m = loss("gspo", lp, gen, adv, mask, [0, 1], aggregation="sample", eps_low=0.1, eps_high=0.1)
    value.backward()
    assert lp.grad[0].tolist() == [0.0, 0.0]
    # d(-(1/2) s A)/d lp_t = -(1/2) * s * A * (1/2) with s = 1
    assert lp.grad[1].tolist() == pytest.approx([-0.25, -0.25])
    assert m["clip_frac"] == pytest.approx(0.5)


def test_reinforce_gradient_ignores_ratio():
    g = grad_of("reinforce")
    assert torch.allclose(
        g, torch.tensor([[-1 / 7, -1 / 7, 0], [1 / 7, 1 / 7, 0], [-0.5 / 7] * 3], dtype=torch.float64)
    )


# ---------------------------------------------------------------- aggregation weighting
def prompt_vs_token(long_len):
    # prompt 0: two completions of `long_len` tokens, objective +1 per token (A=+1, lp=1)
    # prompt 1: two completions of 1 token, objective -1 per token (A=-1, lp=1)
    T = long_len
    lp = [[1.0] * T, [1.0] * T, [1.0] + [0.0] * (T - 1), [1.0] + [0.0] * (T - 1)]
    mask = [[1] * T, [1] * T, [1] + [0] * (T - 1), [1] + [0] * (T - 1)]
    args = batch(lp=lp, rho=[[1.0] * T] * 4, adv=[1.0, 1.0, -1.0, -1.0], mask=mask)
    prompts = [0, 0, 1, 1]
    return (
        loss("reinforce", *args, prompts, aggregation="prompt")[0].item(),
        loss("reinforce", *args, prompts, aggregation="token")[0].item(),
    )


def test_prompt_aggregation_weighs_prompts_equally_token_does_not():
    p10, t10 = prompt_vs_token(10)
    p3, t3 = prompt_vs_token(3)
    assert p10 == 0.0 and p3 == 0.0  # mean(+1, -1) whatever the lengths
    assert t10 == pytest.approx(-(20 - 2) / 22)  # long prompt dominates
    assert t3 == pytest.approx(-(6 - 2) / 8)


def test_string_and_tensor_prompt_ids_agree():
    a = loss("cispo", *batch(), ["x", "x", "y"])[0]
    b = loss("cispo", *batch(), torch.tensor([7, 7, 3]))[0]
    assert a.item() == pytest.approx(b.item())


# ---------------------------------------------------------------- empty and bad input
def test_empty_batch_is_a_defined_zero():
    lp = torch.zeros(0, 4, requires_grad=True)
    value, m = loss("cispo", lp, torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, 4), torch.zeros(0, dtype=torch.long))
    assert value.item() == 0.0 and m["tokens"] == 0.0
    value.backward()  # no division by zero, nothing to update
    lp2 = torch.full((2, 3), float("nan"), requires_grad=True)  # all masked: NaNs ignored
    loss2, m2 = loss("ppo_clip", lp2, torch.zeros(2, 3), torch.ones(2), torch.zeros(2, 3), [0, 1])
    assert loss2.item() == 0.0 and m2["tokens"] == 0.0


def test_nan_at_masked_position_is_ignored():
    lp, gen, adv, mask = batch()
    lp.data[0, 2] = float("nan")
    gen[1, 2] = float("inf")
    value, _ = loss("cispo", lp, gen, adv, mask, PROMPTS, aggregation="token")
    assert value.item() == pytest.approx(1.25 / 7)
    value.backward()
    assert torch.isfinite(lp.grad).all()


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda a: a.__setitem__(0, a[0][:, :2]), r"gen_logprobs: expected shape \(3, 2\)"),
        (lambda a: a.__setitem__(2, a[2][:2]), r"advantages: expected shape \(3,\)"),
        (lambda a: a.__setitem__(3, a[3][:, :2]), r"mask: expected shape \(3, 3\)"),
        (lambda a: a[0].data.__setitem__((1, 0), float("nan")), r"logprobs: non-finite value nan at index \(1, 0\)"),
        (lambda a: a[1].__setitem__((2, 2), float("-inf")), r"gen_logprobs: non-finite value -inf at index \(2, 2\)"),
        (lambda a: a[2].__setitem__(1, float("inf")), r"advantages: non-finite value inf at index \(1,\)"),
    ],
)
def test_bad_inputs_name_the_value(change, match):
    args = list(batch())
    change(args)
    with pytest.raises(ScaleRLError, match=match):
        loss("cispo", *args, PROMPTS)


@pytest.mark.parametrize(
    "kind,params,match",
    [
        ("cispo", {"aggregation": "tokens"}, r"aggregation"),
        ("cispo", {"eps_max": 0.0}, r"eps_max"),
        ("cispo", {"eps_max": -1.0}, r"eps_max"),
        ("ppo_clip", {"eps_low": 1.0}, r"eps_low"),
        ("ppo_clip", {"eps_high": 0.0}, r"eps_high"),
        ("gspo", {"eps_low": -1e-3}, r"eps_low"),
        ("cispo", {"eps": 5}, r"eps"),
    ],
)
def test_a_loss_config_checks_its_own_bounds_once(kind, params, match):
    """Bounds live in the config (checked when it is built); the loss does not check them again."""
    with pytest.raises(ValidationError, match=match):
        CONFIGS[kind](**params)


def test_kl_without_reference_logprobs_is_refused():
    with pytest.raises(ScaleRLError, match=r"kl_beta = 0.1 needs ref_logprobs"):
        loss("ppo_clip", *batch(), PROMPTS, kl_beta=0.1)


def test_every_loss_config_has_its_loss_registered():
    assert set(LOSSES) == set(get_args(get_args(LossConfig)[0])) == set(CONFIGS.values()) | {CustomLoss}
