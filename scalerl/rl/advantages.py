"""Group-relative advantages (paper Section 2 and Section 4, `Ahat_i`).

    A_i = r_i - baseline_i               baseline: mean_j r_j (GRPO), or the mean of the other
                                         G-1 rewards (leave-one-out, RLOO)
    norm = "batch":  A / std(all A in the batch)      ScaleRL (Section 4, Fig. 14b)
    norm = "prompt": A / std(A of the same prompt)    GRPO, DAPO
    norm = "none":   A

Departures from the paper:
1. Standard deviations are population ones (correction 0). The paper does not say; TRL uses
   the unbiased estimator, a constant factor sqrt(G/(G-1)) for `prompt` that the learning rate
   absorbs (it does not change clipping, which acts on ratios).
2. Zero-std guard: a group whose rewards are all equal gets advantage exactly 0 (no division
   and no epsilon in the denominator); a batch whose advantages are all 0 stays all 0.
"""

from __future__ import annotations

from typing import Callable

import torch

from scalerl.errors import ScaleRLError
from scalerl.rl._checks import check_finite, check_ndim


def unequal_rewards_mask(rewards: torch.Tensor) -> torch.Tensor:
    """(P, G) rewards -> (P,) bool: True where a group's rewards are not all equal. This is the
    zero-std guard (departure 2), not the zero-variance filter: the filter decides on correctness
    (`scalerl.batching.has_variance`, the one definition of a zero-variance group) before the
    advantages are computed; the guard only makes an equal-reward group's advantages exactly 0
    (with the filter off, or when a length penalty makes all-correct rewards equal)."""
    check_ndim("rewards", rewards, 2)
    return rewards.amax(dim=1) != rewards.amin(dim=1)


def _mean_baseline(rewards: torch.Tensor) -> torch.Tensor:
    return rewards - rewards.mean(dim=1, keepdim=True)  # (P, G)


def _leave_one_out_baseline(rewards: torch.Tensor) -> torch.Tensor:
    G = rewards.shape[1]
    others = (rewards.sum(dim=1, keepdim=True) - rewards) / (G - 1)  # (P, G)
    return rewards - others


def _norm_batch(adv: torch.Tensor) -> torch.Tensor:
    std = adv.std(correction=0)
    return adv / std if std > 0 else torch.zeros_like(adv)


def _norm_prompt(adv: torch.Tensor) -> torch.Tensor:
    std = adv.std(dim=1, keepdim=True, correction=0)  # (P, 1)
    return torch.where(std > 0, adv / std.clamp_min(torch.finfo(adv.dtype).tiny), torch.zeros_like(adv))


def _norm_none(adv: torch.Tensor) -> torch.Tensor:
    return adv


BASELINES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mean": _mean_baseline,
    "leave_one_out": _leave_one_out_baseline,
}
NORMS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "batch": _norm_batch,
    "prompt": _norm_prompt,
    "none": _norm_none,
}


def group_advantages(rewards: torch.Tensor, norm: str = "batch", baseline: str = "mean") -> torch.Tensor:
    """(P, G) rewards of P prompts x G completions -> (P, G) advantages."""
    if norm not in NORMS:
        raise ScaleRLError(f"advantage norm {norm!r} is not one of {', '.join(NORMS)}")
    if baseline not in BASELINES:
        raise ScaleRLError(f"advantage baseline {baseline!r} is not one of {', '.join(BASELINES)}")
    check_ndim("rewards", rewards, 2)
    if rewards.shape[1] < 2:
        raise ScaleRLError(f"rewards: need at least 2 completions per prompt, got shape {tuple(rewards.shape)}")
    check_finite("rewards", rewards)
    rewards = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
    centred = BASELINES[baseline](rewards)
    varied = unequal_rewards_mask(rewards).unsqueeze(1)  # (P, 1)
    centred = torch.where(varied, centred, torch.zeros_like(centred))
    return NORMS[norm](centred)
