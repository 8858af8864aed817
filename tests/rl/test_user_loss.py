"""A user's own loss by import path (`loss.type: custom`, `loss.function`; docs/recipes.md): CISPO written
here, independently of scalerl.rl.losses, gives the built-in loss and gradients on a step's tensors and in
one trainer step; examples/my_loss.py (the documented one) gives them too. Its errors: tests/cli/test_user_errors.py."""

import pytest
import torch

from scalerl.config import CispoLoss, CustomLoss
from scalerl.rl.losses import policy_loss

MINE = """
import torch


def cispo(logprobs, gen_logprobs, advantages, mask, eps_max):
    weight = torch.minimum(torch.exp(logprobs - gen_logprobs), torch.tensor(eps_max)).detach()
    return weight * advantages[:, None] * logprobs
"""


def _step_tensors(seed: int = 0):
    """A step's tensors: 6 completions of 3 prompts, ragged masks, ratios on both sides of eps_max = 1.5."""
    gen = torch.Generator().manual_seed(seed)
    logprobs = -torch.rand(6, 7, generator=gen, dtype=torch.float64) * 3
    gen_logprobs = logprobs + torch.randn(6, 7, generator=gen, dtype=torch.float64)
    mask = (torch.arange(7)[None, :] < torch.tensor([7, 5, 3, 6, 2, 7])[:, None]).double()
    return logprobs, gen_logprobs, torch.randn(6, generator=gen, dtype=torch.float64), mask, [0, 0, 1, 1, 2, 2]


def _loss_and_grad(cfg, logprobs, *rest):
    leaf = logprobs.clone().requires_grad_(True)
    loss, metrics = policy_loss(cfg, leaf, *rest)
    loss.backward()
    return loss.detach(), leaf.grad, metrics


@pytest.mark.parametrize("aggregation", ["prompt", "sample", "token"])
def test_a_users_cispo_gives_the_builtin_loss_and_gradients(tmp_path, aggregation):
    path = tmp_path / "mine.py"
    path.write_text(MINE)
    tensors = _step_tensors()
    ratio = (tensors[0] - tensors[1]).exp()[tensors[3] > 0]
    assert (ratio > 1.5).any() and (ratio < 1.5).any()  # the truncation is exercised
    builtin = _loss_and_grad(CispoLoss(eps_max=1.5, aggregation=aggregation), *tensors)
    mine = _loss_and_grad(
        CustomLoss(function=f"{path}:cispo", options={"eps_max": 1.5}, aggregation=aggregation), *tensors
    )
    assert torch.allclose(mine[0], builtin[0], rtol=1e-12, atol=0) and builtin[0].abs() > 1e-3
    assert torch.allclose(mine[1], builtin[1], rtol=1e-12, atol=1e-15) and builtin[1].abs().sum() > 1e-3
    assert mine[2]["tokens"] == builtin[2]["tokens"] == 30.0


def test_the_documented_example_is_cispo():
    tensors = _step_tensors(seed=1)
    builtin = _loss_and_grad(CispoLoss(eps_max=5.0), *tensors)
    mine = _loss_and_grad(CustomLoss(function="examples/my_loss.py:truncated_is", options={"eps_max": 5.0}), *tensors)
    assert torch.allclose(mine[0], builtin[0], rtol=1e-12) and torch.allclose(mine[1], builtin[1], rtol=1e-12)


def test_one_trainer_step_with_the_users_cispo_moves_the_weights_as_the_builtin_does(tmp_path, one_torch_thread):
    """The same trainer step (scalerl.trainer.step.train_step: tiny-random, a batch of 4 prompts x 4 scored
    completions, one optimizer step) with either loss: the same loss, gradient norm and weights after it."""
    from scalerl.configure import load_config
    from scalerl.models import load_model
    from scalerl.trainer.step import Optimizer, train_step
    from train_helpers import step_groups

    path = tmp_path / "mine.py"
    path.write_text(MINE)
    groups = step_groups(P=4, G=4, seed=3)
    results = []
    for loss in (
        ["loss.type=cispo", "loss.eps_max=1.5"],
        ["loss.type=custom", f"loss.function={path}:cispo", "loss.options={eps_max: 1.5}"],
    ):
        cfg = load_config("scalerl", overrides=loss)
        model, _ = load_model("tiny-random")
        row = train_step(model, Optimizer(model, cfg), groups, cfg, pad_id=0, step=1)
        results.append((row, {k: v.detach().clone() for k, v in model.state_dict().items()}))
    (builtin, before), (mine, after) = results
    assert mine["train/loss"] == pytest.approx(builtin["train/loss"], rel=1e-6) and builtin["train/loss"] != 0
    assert mine["train/grad_norm"] == pytest.approx(builtin["train/grad_norm"], rel=1e-6)
    for name, weight in before.items():
        torch.testing.assert_close(after[name], weight, rtol=1e-6, atol=1e-8)
