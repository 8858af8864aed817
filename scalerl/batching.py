"""Batching: the groups a step trains on. Zero-variance filter and dynamic sampling (`BatchFiller`),
and the two off-policy modes as batch collectors (`PipelineRL`, `PPOOffPolicy`) yielding `MiniBatch`es.

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

## Collectors

The two off-policy modes of the paper (Section 3.1), as batch collectors.

`collect(version, new_filler, observe)` returns the mini-batches the trainer steps on next, one
optimizer step each. Every group drawn is shown to `observe` (the curriculum's pass history)
and offered to a `scalerl.batching.BatchFiller` (zero-variance filter, DAPO's dynamic
sampling), which decides when a mini-batch is full; the loop's filter stage (`filter_groups`)
then picks the groups it trains on by the same rule (`has_variance`).
Staleness of a group = trainer version - min(policy versions of its tokens).

- `PipelineRL(k)`: the generator streams continuously (see scalerl.transport) and applies each new
  version in flight; one mini-batch per call, its groups taken in draw order. The transport's
  `Window` keeps every group within k versions of the trainer, so the staleness check here
  should never fire; if it does (a bug, or a source that does not keep the rule) the group is
  dropped and counted (`staleness/dropped`), never trained on.
- `PPOOffPolicy(k)`: generate k*P groups with frozen weights and cut them into k mini-batches
  of P; the generator gets the new weights only after those k steps (the newest `TrainerUpdate`
  is applied when the next round starts).

Departures from the paper (collectors):
2. PipelineRL's trainer waits for a draw still in flight instead of taking a later, finished
   one (strict draw order): it never trains on data staler than k and never drops a group, at
   the price of waiting for the slowest group of the oldest draws. The paper's trainer waits
   only when it would otherwise exceed k.
"""


from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from scalerl.config import Config
from scalerl.errors import ScaleRLError
from scalerl.transport.protocol import TrainerUpdate
from scalerl.types import Group


def group_rewards(group: Group) -> list[float]:
    """The G rewards of a scored group; a non-finite reward (a custom reward function's) is an error."""
    rewards = group.rewards
    for i, r in enumerate(rewards):
        if not isinstance(r, (int, float)) or not math.isfinite(r):
            raise ScaleRLError(f"prompt {group.prompt.id!r}: completion {i} has reward {r!r} (expected a finite number)")
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
        return {"batch/groups": float(len(self.groups)), "batch/drawn": float(self.n_drawn),
                "batch/zero_variance_dropped": float(self.n_dropped), "batch/exhausted": float(self.exhausted),
                "batch/extra_prompts": float(self.extra_prompts), "batch/empty": float(self.empty)}

@dataclass(frozen=True)
class MiniBatch:
    """The groups drawn for one optimizer step, as the transport delivered them (scored; the loop's
    filter stage picks the ones it trains on: `filter_groups`). Nothing changes it once made."""

    groups: list[Group]             # every group drawn for this step, in draw order (stale ones excluded)
    gen_seconds: float = 0.0        # generation wall-clock attributed to it (PPO mode)
    wait_seconds: float = 0.0       # trainer waited this long for data
    stale_dropped: int = 0
    tokens_generated: int = 0       # every token generated for it: trained, filtered out or dropped
    metrics: dict[str, float] = field(default_factory=dict)   # the batch rule's (batch/*), the transport's


def staleness(group: Group, version: int) -> int:
    return version - min(c.min_version for c in group.completions)


def n_tokens(groups: list[Group]) -> int:
    return sum(len(c.tokens) for g in groups for c in g.completions)


class PipelineRL:
    def __init__(self, source, k: int):
        self.source = source
        self.k = k

    def collect(self, version: int, new_filler: Callable, observe: Callable[[Group], None]) -> list[MiniBatch]:
        t0 = time.monotonic()
        filler, groups, dropped = new_filler(), [], []
        while not filler.full:
            group = self.source.get()
            if staleness(group, version) > self.k:
                dropped.append(group)
                continue
            observe(group)
            groups.append(group)
            filler.add(group)
        return [MiniBatch(groups, wait_seconds=time.monotonic() - t0, stale_dropped=len(dropped),
                          tokens_generated=n_tokens(groups) + n_tokens(dropped), metrics=filler.metrics())]

    def ready(self) -> None:
        """Wait until the source can generate (start-up is not compute)."""
        self.source.ready()

    def send(self, update: TrainerUpdate) -> None:
        """After every step: the weights are applied in flight, the retired prompts never drawn again."""
        self.source.send(update)

    def sampler_state(self) -> dict:
        return self.source.sampler_state()

    def pause(self) -> None:
        self.source.pause()

    def resume(self) -> None:
        self.source.resume()

    def processes(self) -> dict[str, int]:
        """The transport's own processes, name -> pid (`system/rss_mb/<name>`)."""
        return self.source.processes()

    def close(self) -> None:
        self.source.close()


class PPOOffPolicy:
    def __init__(self, generator, sampler, reward_fn, k: int, prompts_per_step: int, generations: int,
                 decode_threads: int | None = None, retired=None, score_workers: int = 0):
        self.generator = generator
        self.score_workers = score_workers
        self.retired = retired          # the sampler's view of the curriculum (a transport.RetiredSet)
        self.decode_threads = decode_threads
        self.sampler = sampler
        self.reward_fn = reward_fn
        self.k = k
        self.P = prompts_per_step
        self.G = generations
        self.pending: TrainerUpdate | None = None   # the newest weights, applied when the next round starts

    def _generate(self, n_prompts: int) -> list[Group]:
        """n_prompts draws, scored; one group per draw (the same prompt drawn twice: two groups)."""
        from scalerl.transport.window import GroupAssembler

        assembler = GroupAssembler(self.G, self.reward_fn, self.score_workers)
        prompts = [assembler.add_prompt(self.sampler.next()) for _ in range(n_prompts)]
        threads = torch.get_num_threads()
        torch.set_num_threads(self.decode_threads or threads)
        try:
            completions = self.generator.generate(prompts, self.G)
        finally:
            torch.set_num_threads(threads)
        try:
            groups = [g for g in map(assembler.add, completions) if g is not None]
        finally:
            assembler.close()
        return sorted(groups, key=lambda g: g.draw)

    def collect(self, version: int, new_filler: Callable, observe: Callable[[Group], None]) -> list[MiniBatch]:
        if self.pending is not None:      # a round starts on the newest weights (frozen for its k steps)
            self.generator.update_weights(self.pending.weights, self.pending.version)
            self.pending = None
        t0 = time.monotonic()
        pool = self._generate(self.k * self.P)
        gen_seconds = time.monotonic() - t0
        drawn = []
        for _ in range(self.k):
            filler, groups = new_filler(), []
            while not filler.full:
                if not pool:  # dynamic sampling wants more than the k*P drawn: generate (frozen weights)
                    t1 = time.monotonic()
                    pool = self._generate(self.P)
                    gen_seconds += time.monotonic() - t1
                group = pool.pop(0)
                observe(group)
                groups.append(group)
                filler.add(group)
            drawn.append((groups, filler.metrics()))
        left_over = n_tokens(pool)   # generated but not drawn: still compute, counted with the last step
        return [MiniBatch(groups, gen_seconds=gen_seconds / self.k, metrics=metrics,
                          tokens_generated=n_tokens(groups) + (left_over if i == self.k - 1 else 0))
                for i, (groups, metrics) in enumerate(drawn)]

    def ready(self) -> None: ...

    def send(self, update: TrainerUpdate) -> None:
        """Retired prompts leave the sampler at once; the weights wait for the next round (`collect`)."""
        if self.retired is not None:
            for prompt_id in update.retired:
                self.retired.add(prompt_id)
        self.pending = update

    def sampler_state(self) -> dict:
        return self.sampler.state_dict()

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def processes(self) -> dict[str, int]:
        """None: the generator runs in the trainer process."""
        return {}

    def close(self) -> None:
        getattr(self.generator, "close", lambda: None)()   # a server's client stops what it started
