"""Batching: the groups a step trains on. Zero-variance filter and dynamic sampling (`BatchFiller`).

## Filtering

Batch hygiene: zero-variance filtering and dynamic-sampling bookkeeping (paper Section 3.2,
Fig. 6a; Section 4).

A group is kept iff its completions differ in correctness: 0 < #passed < G. A group that is all
correct or all wrong gives the pass/fail reward no variance, so all its advantages are 0 and it
gives no gradient. ScaleRL drops it from the batch: it is not counted in the batch size and not
resampled within the step, so a step can run on fewer than `batch.prompts` groups, and a step
whose every group was dropped is skipped (the `empty` outcome). DAPO's dynamic sampling instead
keeps drawing prompts until `batch.prompts` groups survive; `BatchFiller.extra_prompts` counts
the extra draws. Magistral drops the same groups without resampling.

The decision is on correctness (`Score.passed`), not on the reward: with a length penalty
(DAPO, Magistral, or ScaleRL with `rollout.length.type=penalty`) the reward also depends on the
length, and a group that is all correct but of unequal lengths has reward variance made of
length alone. DAPO keeps a group iff 0 < #correct < G (the constraint of its objective) and
Magistral drops the groups whose answers are all correct or all wrong, so such a group is
dropped here too; the penalty then acts only inside groups of mixed correctness, where it ranks
long answers below short ones of the same correctness. With the +-1 reward (ScaleRL's default)
correctness and reward carry the same information and this is the paper's zero-reward-variance
filter. With the filter off every group is trained, and an all-correct group of unequal lengths
trains on advantages made of length alone.

Departures from the paper (filtering):
1. Dynamic sampling stops after `max_draws` prompts (default 4 x the target, DAPO's
   `max_num_gen_batches` idea) and returns whatever survived, so a task the model has
   saturated cannot loop forever; `BatchFiller.exhausted` reports it (`batch/exhausted`).

The step's groups come from the run's `scalerl.transport.protocol.RolloutSource`, under its
policy (PipelineRL-k or PPO-off-policy-k: scalerl.transport.policy), as `MiniBatch`es.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scalerl.config import Config
from scalerl.errors import ScaleRLError
from scalerl.types import Group


def group_rewards(group: Group) -> list[float]:
    """The G rewards of a scored group; a non-finite reward (a custom reward function's) is an error."""
    rewards = group.rewards
    for i, r in enumerate(rewards):
        if not isinstance(r, (int, float)) or not math.isfinite(r):
            raise ScaleRLError(
                f"prompt {group.prompt.id!r}: completion {i} has reward {r!r} (expected a finite number)"
            )
    return rewards


def n_correct(group: Group) -> int:
    """How many of the group's completions passed (their rewards checked on the way)."""
    group_rewards(group)
    return group.passes


def has_variance(group: Group) -> bool:
    """True iff the group is informative: 0 < #correct < G (correctness varies)."""
    return 0 < n_correct(group) < len(group.completions)


def zero_variance_filter(groups: list[Group]) -> tuple[list[Group], int]:
    """(groups of mixed correctness, how many were dropped). All dropped -> ([], len(groups))."""
    kept = [g for g in groups if has_variance(g)]
    return kept, len(groups) - len(kept)


def filter_groups(groups: list[Group], cfg: Config) -> tuple[list[Group], int]:
    """The loop's filter stage: (the groups a step trains on, how many the filter dropped). With
    `filter.zero_variance` the zero-variance filter (the groups `BatchFiller` counted as kept while
    drawing: the same `has_variance`), else every group."""
    return zero_variance_filter(groups) if cfg.filter.zero_variance else (list(groups), 0)


@dataclass
class BatchFiller:
    """Collects scored groups into one optimizer step's batch.

    zero_variance=False          every group is kept; full at `target` groups
    zero_variance, not dynamic   (ScaleRL) full after `target` draws; dropped groups shrink it
    zero_variance and dynamic    (DAPO) full at `target` kept groups or after `max_draws` draws
    """

    target: int
    zero_variance: bool = True
    dynamic_sampling: bool = False
    max_draws: int | None = None
    groups: list[Group] = field(default_factory=list)
    n_drawn: int = 0
    n_dropped: int = 0

    def __post_init__(self) -> None:
        if self.target < 1:
            raise ScaleRLError(f"BatchFiller: target must be >= 1, got {self.target}")
        if self.max_draws is None:
            self.max_draws = 4 * self.target
        if self.max_draws < self.target:
            raise ScaleRLError(f"BatchFiller: max_draws ({self.max_draws}) must be >= target ({self.target})")

    @classmethod
    def from_config(cls, cfg: Config) -> BatchFiller:
        return cls(cfg.batch.prompts, cfg.filter.zero_variance, cfg.filter.dynamic_sampling)

    def add(self, group: Group) -> bool:
        """Offer one scored group; True if it joined the batch."""
        if self.full:
            raise ScaleRLError(f"BatchFiller: batch already full ({len(self.groups)} groups, {self.n_drawn} drawn)")
        self.n_drawn += 1
        if self.zero_variance and not has_variance(group):
            self.n_dropped += 1
            return False
        self.groups.append(group)
        return True

    @property
    def full(self) -> bool:
        if self.zero_variance and self.dynamic_sampling:
            return len(self.groups) >= self.target or self.n_drawn >= self.max_draws
        return self.n_drawn >= self.target

    @property
    def exhausted(self) -> bool:
        """Dynamic sampling gave up before `target` groups survived."""
        return self.full and len(self.groups) < self.target and self.dynamic_sampling and self.zero_variance

    @property
    def empty(self) -> bool:
        """Full, but every group was dropped: the step is skipped (and counted by the trainer)."""
        return self.full and not self.groups

    @property
    def extra_prompts(self) -> int:
        """Prompts drawn beyond the target to fill the batch (dynamic sampling)."""
        return max(0, self.n_drawn - self.target)

    def metrics(self) -> dict[str, float]:
        return {
            "batch/groups": float(len(self.groups)),
            "batch/drawn": float(self.n_drawn),
            "batch/zero_variance_dropped": float(self.n_dropped),
            "batch/exhausted": float(self.exhausted),
            "batch/extra_prompts": float(self.extra_prompts),
            "batch/empty": float(self.empty),
        }
