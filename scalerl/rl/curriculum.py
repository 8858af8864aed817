"""No-Positive-Resampling curriculum (paper Section 3.2, Fig. 6b; Section 4) and the prompt
sampler that honours it.

Every scored group updates its prompt's pass-rate history; a prompt whose pass rate reaches
`threshold` (0.9) is retired and never sampled again.

Departures from the paper:
1. The pass rate that retires a prompt is, by default (`curriculum.pass_rate=last`), that of
   its latest scored group: the epoch it was last drawn in, as Polaris (which the paper
   follows) filters prompts between epochs. `cumulative` reads "historical pass rate" as the
   pass rate over every group of the prompt; measured on the previous default run (`tiny`, 1,024 prompts, 2.5
   epochs), it retired 3 prompts in 80 steps: early failures keep a prompt's cumulative rate
   below 0.9 long after the model has learnt it, so the component hardly acts. Retirement is
   permanent, even if a group of the prompt that was already in flight later lowers it.
2. Every task is a finite pool (as Polaris-53K is): the sampler traverses it in epochs, a
   fresh seeded permutation each, skipping retired prompts; once every prompt is retired it
   raises `CurriculumExhausted` (a ScaleRLError) within the same call (after at most one pass
   over the pool) rather than training on nothing. A task without `__len__` (test fakes) is
   read as endless and gives up after `max_skips` consecutive retired prompts.

At an epoch boundary the next epoch's first prompts are kept apart from the last ones of the
epoch before (`_epoch_order`), so a small pool does not put one prompt in flight twice.

What the loop logs: `len(sampler)` / `sampler.pool_size` (`curriculum/pool_size`) and
`state_dict()["epoch"]` (`curriculum/epoch`); the state (seed, epoch, position) together
with the curriculum's retired ids is all a `--resume` needs.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sized
from typing import Any, Protocol

from scalerl.config import CurriculumConfig
from scalerl.errors import ScaleRLError
from scalerl.types import Group, Prompt

EPOCH_SPREAD = 32  # an epoch's first prompts avoid the previous epoch's last 2 x this


class CurriculumExhausted(ScaleRLError):
    """Every training prompt is retired: there is nothing left to sample."""


def _check_threshold(threshold: float) -> None:
    if not 0 < threshold <= 1:
        raise ScaleRLError(f"curriculum threshold must be in (0, 1], got {threshold}")


class NoPositiveResampling:
    """Per-prompt pass history; prompts at or above `threshold` are retired for good. Thread-safe."""

    def __init__(self, threshold: float = 0.9, pass_rate: str = "last"):
        _check_threshold(threshold)
        if pass_rate not in ("last", "cumulative"):
            raise ScaleRLError(f"curriculum pass_rate must be 'last' or 'cumulative', got {pass_rate!r}")
        self.threshold = float(threshold)
        self.rate = pass_rate
        self._history: dict[str, list[int]] = {}  # prompt id -> [passed, total]
        self._retired: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: CurriculumConfig) -> NoPositiveResampling | None:
        return cls(cfg.threshold, cfg.pass_rate) if cfg.no_positive_resampling else None

    def update(self, group: Group) -> bool:
        """Add a scored group to its prompt's history; True if this retired the prompt."""
        if not group.scores:
            raise ScaleRLError(f"curriculum: group of prompt {group.prompt.id!r} has no scored completions")
        pid = group.prompt.id
        with self._lock:
            counts = self._history.setdefault(pid, [0, 0])
            passed = group.passes
            counts[0] += passed
            counts[1] += len(group.scores)
            rate = passed / len(group.scores) if self.rate == "last" else counts[0] / counts[1]
            if pid in self._retired or rate < self.threshold:
                return False
            self._retired.add(pid)
            return True

    def pass_rate(self, prompt_id: str) -> float | None:
        counts = self._history.get(prompt_id)
        return counts[0] / counts[1] if counts else None

    def is_retired(self, prompt_id: str) -> bool:
        return prompt_id in self._retired

    @property
    def n_retired(self) -> int:
        return len(self._retired)

    @property
    def n_seen(self) -> int:
        return len(self._history)

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able state: threshold, {id: [passed, total]}, sorted retired ids."""
        with self._lock:
            return {
                "threshold": self.threshold,
                "history": {k: list(v) for k, v in self._history.items()},
                "retired": sorted(self._retired),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            threshold, history, retired = state["threshold"], state["history"], state["retired"]
        except KeyError as exc:
            raise ScaleRLError(f"curriculum state: missing key {exc.args[0]!r}") from None
        _check_threshold(threshold)
        with self._lock:
            self.threshold = float(threshold)
            self._history = {str(k): [int(v[0]), int(v[1])] for k, v in history.items()}
            self._retired = set(retired)


class TrainSource(Protocol):
    """What the sampler needs of a task (`scalerl.tasks.Task`); finite tasks also define `__len__`."""

    def train_prompt(self, index: int) -> Prompt: ...


class CurriculumSampler(Iterator[Prompt]):
    """Next training prompt, skipping retired ones.

    Endless task (no `__len__`): indices 0, 1, 2, ... (the task generates them at random).
    Finite task of n prompts: a fresh seeded permutation of range(n) per epoch; with `epochs`
    set, iteration stops after that many epochs. The state is (epoch, position, seed): the
    permutation is recomputed from the seed, so `state_dict` is a small plain dict.
    """

    def __init__(
        self,
        task: TrainSource,
        curriculum: NoPositiveResampling | None = None,
        seed: int = 0,
        epochs: int | None = None,
        max_skips: int = 100_000,
    ):
        self.task, self.curriculum, self.seed = task, curriculum, seed
        self.size = len(task) if isinstance(task, Sized) else None
        if self.size == 0:
            raise ScaleRLError("curriculum sampler: the task has no training prompts")
        self.epochs, self.max_skips = epochs, max_skips
        self.epoch, self.position = 0, 0
        self._order: list[int] | None = None

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.size))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def _epoch_order(self, epoch: int) -> list[int]:
        """The seeded permutation of `epoch`, its first `w` prompts chosen outside the last `2w`
        of the previous epoch's, so that a prompt still in flight at an epoch boundary is not
        drawn again at once (w = min(EPOCH_SPREAD, size // 5), a pure function of seed and epoch)."""
        order = self._permutation(epoch)
        w = min(EPOCH_SPREAD, self.size // 5)
        if epoch == 0 or w == 0:
            return order
        recent = set(self._permutation(epoch - 1)[-2 * w :])
        head = [i for i in order if i not in recent][:w]
        chosen = set(head)
        return head + [i for i in order if i not in chosen]

    def _index(self) -> int:
        if self.size is None:
            return self.position
        if self._order is None:
            self._order = self._epoch_order(self.epoch)
        return self._order[self.position]

    def _advance(self) -> None:
        self.position += 1
        if self.size is not None and self.position == self.size:
            self.epoch, self.position, self._order = self.epoch + 1, 0, None

    def _all_retired(self) -> bool:
        return all(self.curriculum.is_retired(self.task.train_prompt(i).id) for i in range(self.size))

    def __next__(self) -> Prompt:
        skipped = 0
        while True:
            if self.epochs is not None and self.epoch >= self.epochs:
                raise StopIteration
            prompt = self.task.train_prompt(self._index())
            self._advance()
            if self.curriculum is None or not self.curriculum.is_retired(prompt.id):
                return prompt
            skipped += 1
            if self.size is not None and skipped >= self.size:
                if self._all_retired():
                    raise CurriculumExhausted(
                        f"all {self.size} training prompts are retired (pass "
                        f"rate >= {self.curriculum.threshold}); nothing left to train on "
                        f"(a larger pool: task.train_size, or curriculum.threshold)"
                    )
                skipped = 0
            elif self.size is None and skipped >= self.max_skips:
                raise CurriculumExhausted(
                    f"{skipped} consecutive training prompts were retired (pass rate >= "
                    f"{self.curriculum.threshold}); the task looks saturated"
                )

    @property
    def pool_size(self) -> int | None:
        """Prompts in the training pool (None for an endless task)."""
        return self.size

    def state_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.seed, self.epoch, self.position = int(state["seed"]), int(state["epoch"]), int(state["position"])
        self._order = None
