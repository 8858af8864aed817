"""Transports between the generator and the trainer, behind two small Protocols.

- `RolloutSource`: scored groups (all G completions of one prompt, rewards filled) flowing
  from the generator to the trainer, with a back-pressure gate.
- `WeightSink`: the trainer's weights + policy version flowing back to the generator.

`ThreadedRollouts` is the in-process implementation of both: the generator streams in a
background thread (continuous batching, in-flight weight updates), the trainer pulls groups.
A Ray transport (later) implements the same two Protocols with actors and the same records.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Iterator, Protocol

from scalerl.types import Completion, Group, Prompt


class RolloutSource(Protocol):
    def get(self, timeout: float | None = None) -> Group:
        """The next scored group (blocks; raises the generator's error if it failed)."""

    def pause(self) -> None:
        """Start no new prompt until `resume()` (e.g. while the trainer evaluates)."""

    def resume(self) -> None: ...

    def close(self) -> None: ...


class WeightSink(Protocol):
    def publish(self, state_dict: dict, version: int) -> None:
        """Hand new weights to the generator; it applies them in flight."""


class PromptSampler:
    """Draws training prompts in order from `task.train_prompt(i)`, skipping retired ones.

    `position` is the index of the next prompt to draw: it is part of a checkpoint.
    """

    def __init__(self, task, is_retired: Callable[[str], bool], position: int = 0):
        self.task = task
        self.is_retired = is_retired
        self.position = position
        self._lock = threading.Lock()

    def next(self) -> Prompt:
        with self._lock:
            while True:
                prompt = self.task.train_prompt(self.position)
                self.position += 1
                if not self.is_retired(prompt.id):
                    return prompt


class GroupAssembler:
    """Collects streamed completions into groups of `n` per prompt and scores them."""

    def __init__(self, n: int, reward_fn: Callable[[Prompt, Completion], None]):
        self.n = n
        self.reward_fn = reward_fn
        self.prompts: dict[str, Prompt] = {}
        self.partial: dict[str, list[Completion]] = {}

    def add_prompt(self, prompt: Prompt) -> None:
        self.prompts[prompt.id] = prompt
        self.partial[prompt.id] = []

    def add(self, completion: Completion) -> Group | None:
        prompt = self.prompts[completion.prompt_id]
        self.reward_fn(prompt, completion)
        done = self.partial[completion.prompt_id]
        done.append(completion)
        if len(done) < self.n:
            return None
        del self.partial[completion.prompt_id], self.prompts[completion.prompt_id]
        return Group(prompt=prompt, completions=done)


class ThreadedRollouts:
    """PipelineRL generator in a background thread of this process.

    Back-pressure: the generator starts no new prompt while `max_queued` finished groups wait
    for the trainer. (Gating on finished groups, not on prompts started, cannot deadlock: an
    engine that blocks on the prompt iterator stalls its in-flight sequences, but the trainer
    can always take the groups already queued.) With `max_queued` about P*k the data stays
    within about k policy versions of the trainer; the trainer still checks each group's
    staleness and drops any beyond k.
    """

    def __init__(self, generator, sampler: PromptSampler, n: int,
                 reward_fn: Callable[[Prompt, Completion], None], max_queued: int):
        self.generator = generator
        self.sampler = sampler
        self.assembler = GroupAssembler(n, reward_fn)
        self.max_queued = max_queued
        self._groups: queue.Queue[Group] = queue.Queue()
        self._cond = threading.Condition()
        self._queued = 0
        self._paused = False
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.busy_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="scalerl-generator", daemon=True)
        self._thread.start()

    # -- generator side
    def _prompts(self) -> Iterator[Prompt]:
        while not self._stop.is_set():
            with self._cond:
                while not self._stop.is_set() and (
                        self._paused or self._queued >= self.max_queued):
                    self._cond.wait(timeout=0.1)
                if self._stop.is_set():
                    return
            prompt = self.sampler.next()
            self.assembler.add_prompt(prompt)
            yield prompt

    def _run(self) -> None:
        try:
            for completion in self.generator.stream(self._prompts(), self.assembler.n, stop=self._stop):
                group = self.assembler.add(completion)
                if group is not None:
                    with self._cond:
                        self._queued += 1
                    self._groups.put(group)
        except BaseException as exc:  # handed to the trainer thread, re-raised there by get()
            self._error = exc
        finally:
            self._groups.put(None)  # type: ignore[arg-type]  # wakes a waiting get()

    # -- trainer side
    def get(self, timeout: float | None = None) -> Group:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._error is not None:
                raise self._error
            try:
                group = self._groups.get(timeout=0.5)
            except queue.Empty:
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError("no rollout group arrived in time") from None
                continue
            if group is None:
                if self._error is not None:
                    raise self._error
                raise RuntimeError("the generator stopped")
            with self._cond:
                self._queued -= 1
                self._cond.notify_all()
            return group

    def publish(self, state_dict: dict, version: int) -> None:
        self.generator.update_weights(state_dict, version)

    def pause(self) -> None:
        with self._cond:
            self._paused = True

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=30)
