"""A PipelineRL staleness bound that follows the policy's change (`pipeline.max_kl`).

The paper runs PipelineRL-8: data at most 8 optimizer steps old, which it found as good as fresher
data because, at its learning rate (5e-7 on an 8B model), eight steps move the policy little. How
stale the data actually is depends on which stage is faster: when the generator outruns the
trainer, every batch is k steps old. On a model whose policy moves more per step (a larger
learning rate, a small model) k = 8 is then too far off-policy: the default testbed's 7-digit rung
collapsed at staleness 6-8 and held at 2 or less (docs/study.md, issue 47).

So the bound for the draws that start on a new version is measured, not assumed. After every
step the trainer has, for every trained token t, the behaviour log-prob it was sampled with and
its own log-prob `l_t = log pi_trainer - log pi_behaviour`, and the token's staleness `s_t` (the
trainer's version minus the version that sampled it). Per token, the KL of the behaviour policy
from the trainer's, `KL(pi_behaviour || pi_trainer)`, is estimated by `exp(l) - 1 - l` (the
non-negative, unbiased "k3" estimator of Schulman's note "Approximating KL divergence"). A policy that keeps moving
the same way changes its logits in proportion to the steps, so KL grows as `kappa * s**2`;
`kappa` is fitted over the step's stale tokens (`kl_per_version2`). The bound for the next
draws is the largest staleness whose predicted KL stays within `max_kl`, between 1 and `k`, and
it grows by at most one version a step (a "slow start": it begins at 1, so the first draws are
not k steps old before anything is measured); it falls at once.

`max_kl` = 0.01 by default: the per-sample KL at which PPO implementations stop a policy update
(`target_kl`, 0.01 in OpenAI's Spinning Up, the common choice), chosen before any run of this
rule. Nothing is dropped: a draw admitted under a looser bound is trained on when it arrives
(`staleness/max` can exceed the bound in force for a few steps after it falls, never `k`).
"""

from __future__ import annotations

import math

import torch


def k3(logratio: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(behaviour || trainer) from `log pi_trainer - log pi_behaviour` of tokens
    sampled from the behaviour policy: `exp(l) - 1 - l` (>= 0; clamped so a dead token stays finite)."""
    r = logratio.clamp(-20.0, 20.0)
    return torch.expm1(r) - r


def kl_sums(logratio: torch.Tensor, stale: torch.Tensor, mask: torch.Tensor) -> tuple[float, float, float, float]:
    """(sum of KL over masked tokens, their count, sum of KL over masked stale tokens (s >= 1), the sum
    of s**2 over them): what `kappa` and the step's mean KL are computed from (summed over workers)."""
    kl = k3(logratio.detach().float()) * mask
    on_stale = mask * (stale >= 1).float()
    return (
        float(kl.sum()),
        float(mask.sum()),
        float((kl * on_stale).sum()),
        float((stale.float() ** 2 * on_stale).sum()),
    )


def kappa(kl_stale: float, s2: float) -> float | None:
    """KL per squared version, `sum KL / sum s**2` over the stale tokens (None: no stale token)."""
    return kl_stale / s2 if s2 > 0 else None


def next_bound(bound: int, k: int, kappa_: float | None, max_kl: float) -> int:
    """The staleness bound for draws started on the next version: at most one more than `bound`, at
    most `k`, at least 1, and no more than the largest `s` with `kappa * s**2 <= max_kl`."""
    grow = min(k, bound + 1)
    if kappa_ is None or kappa_ <= 0:
        return max(1, grow)
    fits = int(math.floor(math.sqrt(max_kl / kappa_)))
    return max(1, min(grow, fits))


class StalenessBound:
    """The bound in force (`pipeline/bound`), updated from each step's training metrics."""

    def __init__(self, k: int, max_kl: float):
        self.k, self.max_kl, self.bound = k, max_kl, 1

    def update(self, row: dict) -> int:
        self.bound = next_bound(self.bound, self.k, row.get("pipeline/kl_per_version2"), self.max_kl)
        return self.bound
