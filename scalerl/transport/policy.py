"""The two off-policy modes of the paper (Section 3.1) as the policies of a `RolloutSource`: how
many batches a step gets and when the new weights reach the generator.

`collect(version, new_filler, observe)` returns the mini-batches the trainer steps on next, one
optimizer step each. Every group drawn is shown to `observe` (the curriculum's pass history)
and offered to the step's batch rule (`scalerl.batching.BatchFiller`: zero-variance filter,
DAPO's dynamic sampling), which decides when a mini-batch is full; the loop's filter stage
(`scalerl.batching.filter_groups`) then picks the groups it trains on by the same rule.
Staleness of a group = trainer version - min(policy versions of its tokens).

- `PipelineRL(k)`: the policy of every streaming transport (`Streamed`: a thread, a process, Ray
  actors). The generator streams continuously and applies each new version in flight (`send`
  forwards it at once); one mini-batch per step, its groups taken in draw order. The transport's
  `Window` keeps every group within k versions of the trainer, so the staleness check here
  should never fire; if it does (a bug, or a source that does not keep the rule) the group is
  dropped and counted (`staleness/dropped`), never trained on.
- `PPOOffPolicy(k)`: a source of its own (the generator in this process, not a stream): generate
  k*P groups with frozen weights and cut them into k mini-batches of P; the generator gets the
  new weights only after those k steps (the newest `TrainerUpdate` is applied when the next
  round starts).

Departures from the paper:
1. PipelineRL's trainer waits for a draw still in flight instead of taking a later, finished
   one (strict draw order): it never trains on data staler than k and never drops a group, at
   the price of waiting for the slowest group of the oldest draws. The paper's trainer waits
   only when it would otherwise exceed k.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from scalerl.transport.protocol import Filler, MiniBatch, TrainerUpdate
from scalerl.types import Group


def staleness(group: Group, version: int) -> int:
    return version - min(c.min_version for c in group.completions)


def n_tokens(groups: list[Group]) -> int:
    return sum(len(c.tokens) for g in groups for c in g.completions)


class PipelineRL:
    """PipelineRL-k's batch policy over a stream of scored groups in draw order: one mini-batch a step."""

    def __init__(self, k: int):
        self.k = k

    def collect(
        self, get: Callable[[], Group], version: int, new_filler: Callable[[], Filler], observe: Callable[[Group], None]
    ) -> list[MiniBatch]:
        t0 = time.monotonic()
        filler, groups, dropped = new_filler(), [], []
        while not filler.full:
            group = get()
            if staleness(group, version) > self.k:
                dropped.append(group)
                continue
            observe(group)
            groups.append(group)
            filler.add(group)
        return [
            MiniBatch(
                groups,
                wait_seconds=time.monotonic() - t0,
                stale_dropped=len(dropped),
                tokens_generated=n_tokens(groups) + n_tokens(dropped),
                metrics=filler.metrics(),
            )
        ]


class Streamed:
    """A transport that streams scored groups in draw order (`get`), batched by its PipelineRL-k `policy`
    (the k of its `Window`): the `collect` of `ThreadedRollouts`, `ProcessRollouts` and `RayRollouts`."""

    policy: PipelineRL

    def get(self, timeout: float | None = None) -> Group:
        """The next scored group in draw order (blocks; raises the generator's error if it failed)."""
        raise NotImplementedError

    def collect(
        self, version: int, new_filler: Callable[[], Filler], observe: Callable[[Group], None]
    ) -> list[MiniBatch]:
        return self.policy.collect(self.get, version, new_filler, observe)

    def device_memory(self) -> dict[str, tuple[float, float]]:
        """{}: none measured (a thread shares the trainer's process, Ray's actors may run on other machines);
        `ProcessRollouts` reports its generator process's."""
        return {}


class PPOOffPolicy:
    """PPO-off-policy-k over a generator in this process (see the module docstring)."""

    def __init__(
        self,
        generator,
        sampler,
        reward_fn,
        k: int,
        prompts_per_step: int,
        generations: int,
        decode_threads: int | None = None,
        retired=None,
        score_workers: int = 0,
    ):
        self.generator = generator
        self.score_workers = score_workers
        self.retired = retired  # the sampler's view of the curriculum (a transport.RetiredSet)
        self.decode_threads = decode_threads
        self.sampler = sampler
        self.reward_fn = reward_fn
        self.k = k
        self.P = prompts_per_step
        self.G = generations
        self.pending: TrainerUpdate | None = None  # the newest weights, applied when the next round starts

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

    def collect(
        self, version: int, new_filler: Callable[[], Filler], observe: Callable[[Group], None]
    ) -> list[MiniBatch]:
        if self.pending is not None:  # a round starts on the newest weights (frozen for its k steps)
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
        left_over = n_tokens(pool)  # generated but not drawn: still compute, counted with the last step
        return [
            MiniBatch(
                groups,
                gen_seconds=gen_seconds / self.k,
                metrics=metrics,
                tokens_generated=n_tokens(groups) + (left_over if i == self.k - 1 else 0),
            )
            for i, (groups, metrics) in enumerate(drawn)
        ]

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

    def device_memory(self) -> dict[str, tuple[float, float]]:
        """None of its own: the generator shares the trainer's process."""
        return {}

    def close(self) -> None:
        getattr(self.generator, "close", lambda: None)()  # a server's client stops what it started
