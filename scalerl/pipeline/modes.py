"""The two off-policy modes of the paper (Section 3.1), as batch collectors.

Each `collect(version)` returns the mini-batches the trainer steps on next, one optimizer
step each, with the staleness of every group measured against the trainer version it will be
trained at: staleness = trainer version - min(policy versions of the group's tokens).

- `PipelineRL(k)`: the generator streams continuously (see transport.ThreadedRollouts) and
  applies each new version in flight; one mini-batch of P groups per call; a group staler
  than k is dropped and counted, never trained on.
- `PPOOffPolicy(k)`: generate k*P groups with frozen weights, return them as k mini-batches
  of P; the generator gets the new weights only after those k steps.

Departures from the paper:
1. PipelineRL's bound is enforced on both sides: the generator starts no prompt while about P*k
   finished groups wait (back-pressure) and the trainer drops any group staler than k. The paper's
   trainer waits instead; dropping cannot deadlock when data was already too old.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from scalerl.types import Group


@dataclass
class MiniBatch:
    groups: list[Group]
    train_version: int              # trainer version this mini-batch is meant for
    gen_seconds: float = 0.0        # generation wall-clock attributed to it (PPO mode)
    wait_seconds: float = 0.0       # trainer waited this long for data
    stale_dropped: int = 0


def staleness(group: Group, version: int) -> int:
    return version - min(c.min_version for c in group.completions)


class PipelineRL:
    def __init__(self, source, k: int, prompts_per_step: int):
        self.source = source
        self.k = k
        self.P = prompts_per_step

    def collect(self, version: int) -> list[MiniBatch]:
        t0 = time.monotonic()
        groups, dropped = [], 0
        while len(groups) < self.P:
            group = self.source.get()
            if staleness(group, version) > self.k:
                dropped += 1
                continue
            groups.append(group)
        return [MiniBatch(groups, version, wait_seconds=time.monotonic() - t0, stale_dropped=dropped)]

    def after_step(self, state_dict: dict, version: int) -> None:
        self.source.publish(state_dict, version)

    def pause(self) -> None:
        self.source.pause()

    def resume(self) -> None:
        self.source.resume()

    def close(self) -> None:
        self.source.close()


class PPOOffPolicy:
    def __init__(self, generator, sampler, reward_fn, k: int, prompts_per_step: int, generations: int):
        self.generator = generator
        self.sampler = sampler
        self.reward_fn = reward_fn
        self.k = k
        self.P = prompts_per_step
        self.G = generations
        self._pending: dict | None = None

    def collect(self, version: int) -> list[MiniBatch]:
        t0 = time.monotonic()
        prompts = [self.sampler.next() for _ in range(self.k * self.P)]
        by_id = {p.id: p for p in prompts}
        completions = self.generator.generate(prompts, self.G)
        grouped: dict[str, list] = {p.id: [] for p in prompts}
        for c in completions:
            self.reward_fn(by_id[c.prompt_id], c)
            grouped[c.prompt_id].append(c)
        groups = [Group(by_id[pid], cs) for pid, cs in grouped.items()]
        gen_seconds = (time.monotonic() - t0) / self.k
        return [MiniBatch(groups[j * self.P:(j + 1) * self.P], version + j, gen_seconds=gen_seconds)
                for j in range(self.k)]

    def after_step(self, state_dict: dict, version: int) -> None:
        self._pending = (state_dict, version)

    def after_round(self) -> None:
        if self._pending is not None:
            self.generator.update_weights(*self._pending)
            self._pending = None

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def close(self) -> None: ...
