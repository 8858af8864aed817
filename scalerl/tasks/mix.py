"""A weighted mix of tasks from different domains: `task.name=arith,code` (maths and code, as the
paper's Section 5 trains Polaris-53K with DeepCoder).

Each part is the task its name gives alone (`code` reads `task.path`); `task.weights`, one per
part (default equal), are the parts' shares of the training pool, and so of the draws: the
curriculum sampler traverses the pool in a seeded order. A part with fewer prompts than its share
has them repeated (the same prompt, the same id, so the curriculum's history is one per prompt).
The validation set is split by the same shares (each part at least one prompt). Every prompt
carries `meta["domain"]` (the part's name): the evaluation logs `val/pass_rate/<domain>` beside
the overall `val/pass_rate`, and the checker is the prompt's part's.

Departures from the paper:
1. The paper mixes two datasets by concatenation (their sizes set the shares); here the shares
   are set by `task.weights`, whatever the sizes.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from typing import Callable

from scalerl.config import MixTaskConfig
from scalerl.errors import ScaleRLError
from scalerl.tasks.registry import TaskContext, at_least, build_task, register
from scalerl.types import Prompt


def mix_check(completion_text: str, prompt: Prompt, checkers: dict[str, Callable]) -> float:
    """The prompt's domain's checker (the mix's picklable `checker`)."""
    return checkers[prompt.meta["domain"]](completion_text, prompt)


def _tagged(prompt: Prompt, domain: str) -> Prompt:
    return dataclasses.replace(prompt, meta={**prompt.meta, "domain": domain})


def shares(weights: list[float] | None, n: int, names: list[str]) -> list[float]:
    if weights is None:
        return [1.0 / n] * n
    if len(weights) != n:
        raise ScaleRLError(f"task.weights={weights}: expected {n} weights, one per part of {','.join(names)}")
    return [w / sum(weights) for w in weights]


class MixTask:
    """Parts `(domain, task)` mixed by `weights` (see the module docstring)."""

    def __init__(
        self, parts: list[tuple[str, object]], weights: list[float] | None, seed: int = 0, train_size: int | None = None
    ):
        names = [name for name, _ in parts]
        if len(set(names)) != len(names):
            raise ScaleRLError(f"task.name {','.join(names)}: a part is named twice")
        markers = {task.answer_marker for _, task in parts}
        if len(markers) > 1:
            raise ScaleRLError(
                f"task.name {','.join(names)}: the parts read answers at different markers "
                f"({', '.join(sorted(markers))}); set task.answer_marker"
            )
        self.parts = parts
        self.name = ",".join(names)
        self.shares = shares(weights, len(parts), names)
        total = train_size or sum(len(task) for _, task in parts)
        self._pool: list[tuple[int, int]] = []
        for i, ((_, task), share) in enumerate(zip(parts, self.shares)):
            n = max(1, round(total * share))
            self._pool += [(i, j % len(task)) for j in range(n)]
        random.Random(seed).shuffle(self._pool)
        self.answer_marker = markers.pop()
        self.isolate_checker = any(task.isolate_checker for _, task in parts)
        self.score_workers = max(task.score_workers for _, task in parts)
        self.checker = functools.partial(mix_check, checkers={name: task.checker for name, task in parts})
        self._by_name = dict(parts)

    @property
    def train_size(self) -> int:
        return len(self._pool)

    @property
    def val_size(self) -> int:
        return sum(task.val_size for _, task in self.parts)

    def __len__(self) -> int:
        return len(self._pool)

    def train_prompt(self, index: int) -> Prompt:
        part, j = self._pool[index % len(self._pool)]
        name, task = self.parts[part]
        return _tagged(task.train_prompt(j), name)

    def val_prompts(self, n: int) -> list[Prompt]:
        """`n` validation prompts split by the shares, each part at least one and at most its own."""
        if n > self.val_size:
            raise ScaleRLError(f"task {self.name}: asked for {n} validation prompts, the parts hold {self.val_size}")
        counts = [min(task.val_size, max(1, round(n * s))) for (_, task), s in zip(self.parts, self.shares)]
        return [_tagged(p, name) for (name, task), k in zip(self.parts, counts) for p in task.val_prompts(k)]

    def check(self, completion_text: str, prompt: Prompt) -> bool:
        return self._by_name[prompt.meta["domain"]].check(completion_text, prompt)


@register(MixTaskConfig)
def build(cfg: MixTaskConfig, ctx: TaskContext) -> MixTask:
    """Each part built as alone, mixed by `weights`."""
    parts = [(part.name, build_task(part, ctx.part())) for part in cfg.parts]
    return at_least(MixTask(parts, cfg.weights, seed=cfg.seed, train_size=cfg.train_size), ctx.min_train)
