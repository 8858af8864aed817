"""The `Generator` protocol: what the pipeline needs from a rollout engine.

`scalerl.rollout.Engine` (our own KV-cache decoding loop) implements it; another engine (vLLM on
GPU, a remote server) plugs in by providing the same five members.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from scalerl.types import Completion, Prompt


@runtime_checkable
class Generator(Protocol):
    """A source of completions with per-token generator log-probabilities and policy versions."""

    @property
    def version(self) -> int:
        """Policy version of the weights used for the next sampled token."""
        ...

    def generate(self, prompts: Sequence[Prompt], n: int) -> list[Completion]:
        """All `n` samples of every prompt, grouped by prompt in input order."""
        ...

    def stream(
        self,
        prompts: Iterable[Prompt],
        n: int,
        stop: threading.Event | None = None,
        hold: threading.Event | None = None,
    ) -> Iterator[Completion]:
        """Endless continuous batching: yields each completion as it finishes; returns when the
        prompts run out (after the last completion) or as soon as `stop` is set (in-flight
        sequences are dropped). While `hold` is set it computes nothing: the sequences in flight
        wait, their state kept (the transports hold it while the trainer evaluates, so the
        evaluation has the cores to itself)."""
        ...

    def update_weights(self, state_dict: Mapping[str, object], version: int) -> None:
        """Thread-safe. New weights, used from the next decode step on (in flight: sequences in
        progress continue on their existing KV cache)."""
        ...

    def reseed(self) -> None:
        """Restart the sampling random streams from the generator's seed (the evaluation calls it
        before each evaluation: common random numbers across evaluations)."""
        ...
