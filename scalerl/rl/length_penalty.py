"""Soft overlong punishment: length control by reward shaping (DAPO Eq. 13; the paper's Eq. 9,
the alternative to forced interruptions, Section 2 and A.15).

    penalty(|y|) = 0                                          |y| <= L_max - L_cache
                 = ((L_max - L_cache) - |y|) / L_cache * p    L_max - L_cache < |y| <= L_max
                 = -p                                         |y| > L_max

with L_max = `max_len`, L_cache = `tolerance`, p = `penalty`; the value is added to the
pass/fail reward. `Score.passed` stays the correctness, which the zero-variance filter
reads (scalerl/batching.py): under the filter the penalty shapes advantages only inside groups of mixed
correctness.

Departures from the paper:
1. The penalty size `p` is a parameter (DAPO: 1); the paper's rewards are +-1, so p = 1 can
   turn a long correct answer into a 0 reward, as in DAPO.
2. It applies to every completion, correct or not (DAPO). The paper's summary describes it for
   long correct solutions; use `correct_only=True` in `shaped_reward` for that reading.
"""

from __future__ import annotations

from scalerl.config import LengthPenaltyConfig
from scalerl.errors import ScaleRLError


def overlong_penalty(length: int, max_len: int, tolerance: int, penalty: float = 1.0) -> float:
    """The (non-positive) reward added to a completion of `length` tokens."""
    if length < 0 or max_len < 1 or not 0 <= tolerance <= max_len or penalty < 0:
        raise ScaleRLError(
            f"overlong_penalty: need length >= 0, max_len >= 1, 0 <= tolerance <= max_len, "
            f"penalty >= 0; got length={length}, max_len={max_len}, tolerance={tolerance}, "
            f"penalty={penalty}"
        )
    start = max_len - tolerance
    if length <= start:
        return 0.0
    if length > max_len:
        return -float(penalty)
    return (start - length) / tolerance * penalty


def shaped_reward(
    reward: float, length: int, cfg: LengthPenaltyConfig, passed: bool = True, correct_only: bool = False
) -> float:
    """`reward` plus the overlong penalty of `cfg` (only for passing completions if `correct_only`)."""
    if correct_only and not passed:
        return reward
    return reward + overlong_penalty(length, cfg.max_len, cfg.tolerance, cfg.penalty)
