"""The two off-policy modes of the paper (Section 3.1), as batch collectors.

`collect(version, new_filler, observe)` returns the mini-batches the trainer steps on next, one
optimizer step each. Every group drawn is shown to `observe` (the curriculum's pass history)
and offered to a `scalerl.rl.filters.BatchFiller` (zero-variance filter, DAPO's dynamic
sampling), which decides when a mini-batch is full and which groups it trains on.
Staleness of a group = trainer version - min(policy versions of its tokens).

- `PipelineRL(k)`: the generator streams continuously (see transport.py) and applies each new
  version in flight; one mini-batch per call, its groups taken in draw order. The transport's
  `Window` keeps every group within k versions of the trainer, so the staleness check here
  should never fire; if it does (a bug, or a source that does not keep the rule) the group is
  dropped and counted (`staleness/dropped`), never trained on.
- `PPOOffPolicy(k)`: generate k*P groups with frozen weights and cut them into k mini-batches
  of P; the generator gets the new weights only after those k steps.

Departures from the paper:
1. PipelineRL's trainer waits for a draw still in flight instead of taking a later, finished
   one (strict draw order): it never trains on data staler than k and never drops a group, at
   the price of waiting for the slowest group of the oldest draws. The paper's trainer waits
   only when it would otherwise exceed k.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from scalerl.types import Group


@dataclass
class MiniBatch:
    groups: list[Group]             # every group drawn for this step (for reward/length stats)
    kept: list[Group]               # the groups it trains on
    gen_seconds: float = 0.0        # generation wall-clock attributed to it (PPO mode)
    wait_seconds: float = 0.0       # trainer waited this long for data
    stale_dropped: int = 0
    tokens_generated: int = 0       # every token generated for it: trained, filtered out or dropped
    filler: dict[str, float] = field(default_factory=dict)


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
        return [MiniBatch(groups, filler.groups, wait_seconds=time.monotonic() - t0, stale_dropped=len(dropped),
                          tokens_generated=n_tokens(groups) + n_tokens(dropped), filler=filler.metrics())]

    def ready(self) -> None:
        """Wait until the source can generate (start-up is not compute)."""
        self.source.ready()

    def after_step(self, state_dict: dict, version: int) -> None:
        self.source.publish(state_dict, version)

    def retire(self, prompt_id: str) -> None:
        self.source.retire(prompt_id)

    def after_round(self, state_dict: dict, version: int) -> None: ...

    def sampler_state(self) -> dict:
        return self.source.sampler_state()

    def pause(self) -> None:
        self.source.pause()

    def resume(self) -> None:
        self.source.resume()

    def close(self) -> None:
        self.source.close()


class PPOOffPolicy:
    def __init__(self, generator, sampler, reward_fn, k: int, prompts_per_step: int, generations: int,
                 decode_threads: int | None = None, retired=None):
        self.generator = generator
        self.retired = retired          # the sampler's view of the curriculum (a transport.RetiredSet)
        self.decode_threads = decode_threads
        self.sampler = sampler
        self.reward_fn = reward_fn
        self.k = k
        self.P = prompts_per_step
        self.G = generations

    def _generate(self, n_prompts: int) -> list[Group]:
        """n_prompts draws, scored; one group per draw (the same prompt drawn twice: two groups)."""
        from scalerl.pipeline.transport import GroupAssembler

        assembler = GroupAssembler(self.G, self.reward_fn)
        prompts = [assembler.add_prompt(self.sampler.next()) for _ in range(n_prompts)]
        threads = torch.get_num_threads()
        torch.set_num_threads(self.decode_threads or threads)
        try:
            completions = self.generator.generate(prompts, self.G)
        finally:
            torch.set_num_threads(threads)
        groups = [g for g in map(assembler.add, completions) if g is not None]
        return sorted(groups, key=lambda g: g.draw)

    def collect(self, version: int, new_filler: Callable, observe: Callable[[Group], None]) -> list[MiniBatch]:
        t0 = time.monotonic()
        pool = self._generate(self.k * self.P)
        gen_seconds = time.monotonic() - t0
        out = []
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
            out.append(MiniBatch(groups, filler.groups, tokens_generated=n_tokens(groups), filler=filler.metrics()))
        out[-1].tokens_generated += n_tokens(pool)  # generated but left over: still compute
        for mb in out:
            mb.gen_seconds = gen_seconds / self.k
        return out

    def ready(self) -> None: ...

    def after_step(self, state_dict: dict, version: int) -> None: ...

    def retire(self, prompt_id: str) -> None:
        if self.retired is not None:
            self.retired.add(prompt_id)

    def after_round(self, state_dict: dict, version: int) -> None:
        self.generator.update_weights(state_dict, version)

    def sampler_state(self) -> dict:
        return self.sampler.state_dict()

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...
