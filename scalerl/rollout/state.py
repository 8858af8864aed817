"""The per-row decoding state both loops share, and the constants of continuous batching."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

import torch

from scalerl.types import Prompt

_NEVER = 1 << 40
_END = object()  # the prompt iterator ran out
MIN_SHARED_PREFIX = 32  # tokens: a common prefix this long is prefilled once (`_shared_prefix`)
RECENT_PREFILLS = 4  # prompts whose prefilled K/V (one row each) are kept for their later samples
IDLE_SLEEP_S = 0.005  # wait between two asks when nothing is in flight and no prompt may start


@dataclass
class Request:
    prompt: Prompt
    sample: int
    tokens: list[int]
    serial: int


@dataclass
class Rows:
    """Per-row decoding state, one entry (or row of a (rows, max_new + 1) buffer) per cache row.
    Column `max_new` of the buffers is scratch: rows not in progress write there."""

    active: torch.Tensor  # (R,) bool: row holds a sequence in progress
    next_input: torch.Tensor  # (R,) token fed at the next step
    pos: torch.Tensor  # (R,) its position id
    n_gen: torch.Tensor  # (R,) tokens generated so far
    answer_end: torch.Tensor  # (R,) n_gen at which the answer budget runs out
    thinking: torch.Tensor  # (R,) bool: `</think>` not produced yet
    trigger: torch.Tensor  # (R,) n_gen at which thinking is interrupted
    force_idx: torch.Tensor  # (R,) index into the phrase being forced, -1 if none
    interrupted: torch.Tensor  # (R,) bool: the phrase has started (thinking was interrupted)
    finished: torch.Tensor  # (R,) bool: ended since the last collection (static path)
    reason: torch.Tensor  # (R,) index into the finish reasons, set when it ended
    tokens: torch.Tensor  # (R, max_new + 1)
    logprobs: torch.Tensor  # (R, max_new + 1) fp32
    versions: torch.Tensor  # (R, max_new + 1)
    forced: torch.Tensor  # (R, max_new + 1) bool

    @classmethod
    def empty(cls, rows: int, max_new: int, device: torch.device) -> Rows:
        def z(*shape, dtype=torch.long):
            return torch.zeros(shape, dtype=dtype, device=device)

        b, w = torch.bool, max_new + 1
        return cls(
            z(rows, dtype=b),
            z(rows),
            z(rows),
            z(rows),
            z(rows),
            z(rows, dtype=b),
            z(rows),
            z(rows) - 1,
            z(rows, dtype=b),
            z(rows, dtype=b),
            z(rows),
            z(rows, w),
            z(rows, w, dtype=torch.float32),
            z(rows, w),
            z(rows, w, dtype=b),
        )

    def select(self, keep: torch.Tensor) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name)[keep])

    def grow(self, extra: int) -> None:
        """Append `extra` idle rows."""
        more = Rows.empty(extra, self.tokens.shape[1] - 1, self.tokens.device)
        for f in fields(self):
            setattr(self, f.name, torch.cat([getattr(self, f.name), getattr(more, f.name)]))

    def head(self, n: int) -> Rows:
        """Views of the first `n` rows (writes reach this state)."""
        return Rows(**{f.name: getattr(self, f.name)[:n] for f in fields(self)})

    def move(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Copy rows `src` to rows `dst` in place."""
        for f in fields(self):
            t = getattr(self, f.name)
            t[dst] = t[src]

    def snapshot(self) -> list[torch.Tensor]:
        return [getattr(self, f.name).clone() for f in fields(self)]

    def restore(self, saved: list[torch.Tensor]) -> None:
        for f, s in zip(fields(self), saved):
            getattr(self, f.name).copy_(s)


def shared_prefix(
    contexts: list[tuple[int, ...]], kept: tuple[int, ...] | None, last: tuple[int, ...]
) -> tuple[tuple[int, ...] | None, bool]:
    """Which prefix of `contexts` both decoding loops prefill once: (tokens, reuse). `reuse`: the
    kept prefix `kept` still serves every context; else the prefix the contexts (and `last`, the
    previous admission's first context, so that the samples of one prompt admitted alone still
    find what every prompt shares) have in common, None when shorter than `MIN_SHARED_PREFIX`.
    At least one token of every context is left to run after it."""
    shortest = min(len(c) for c in contexts) - 1
    if kept is not None and len(kept) <= shortest and all(c[: len(kept)] == kept for c in contexts):
        return kept, True
    tokens = tuple(os.path.commonprefix([*contexts, *([last] if last else [])])[:shortest])
    return (tokens, False) if len(tokens) >= MIN_SHARED_PREFIX else (None, False)
