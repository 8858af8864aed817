"""Transports between the generator and the trainer (PipelineRL), behind one small Protocol.

A `RolloutSource` carries scored groups (all G completions of one prompt, rewards filled) from
the generator to the trainer, with back-pressure, and the trainer's weights + policy version
back to the generator, which applies them in flight. Two in-machine implementations:

- `ThreadedRollouts`: the generator streams in a background thread of this process. Right for
  a GPU (one CUDA context) and for tests.
- `ProcessRollouts`: the generator runs in its own process (torch.multiprocessing, spawn) with
  its own torch thread count; groups come back over an mp.Queue, weights go out through
  shared-memory tensors + a version counter, retired prompt ids through a queue. On a CPU the
  decode loop is Python-bound: in one process the two stages fight over the GIL and torch's
  process-global thread pool; in two they run truly in parallel (docs/training.md has the
  measurement).

Back-pressure: the generator starts no new prompt while `max_queued` finished groups wait for
the trainer. (Gating on finished groups, not on prompts started, cannot deadlock: an engine
that blocks on the prompt iterator stalls its in-flight sequences, but the trainer can always
take the groups already queued.) With `max_queued` about P*k the data stays within about k
policy versions of the trainer; the trainer still checks staleness and drops groups beyond k.
`scalerl.distributed.rollouts.RayRollouts` implements the same Protocol with Ray actors and the same records.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from typing import Callable, Iterator, Protocol

import torch

from scalerl.types import Completion, Group, Prompt


class RolloutSource(Protocol):
    def get(self, timeout: float | None = None) -> Group:
        """The next scored group (blocks; raises the generator's error if it failed)."""

    def publish(self, state_dict: dict, version: int) -> None:
        """Hand new weights to the generator; it applies them in flight."""

    def retire(self, prompt_id: str) -> None:
        """The curriculum retired a prompt: never sample it again."""

    def sampler_state(self) -> dict:
        """Position of the prompt sampler (for checkpoints)."""

    def pause(self) -> None:
        """Start no new prompt until `resume()` (e.g. while the trainer evaluates)."""

    def resume(self) -> None: ...

    def close(self) -> None: ...


class LockedSampler:
    """A `scalerl.rl.curriculum.CurriculumSampler` safe to call from several threads."""

    def __init__(self, sampler):
        self.sampler = sampler
        self._lock = threading.Lock()

    def next(self) -> Prompt:
        with self._lock:
            return next(self.sampler)

    def state_dict(self) -> dict:
        with self._lock:
            return self.sampler.state_dict()


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


def _gated_prompts(sampler: LockedSampler, assembler: GroupAssembler, may_start: Callable[[], bool],
                   stop) -> Iterator[Prompt]:
    while not stop.is_set():
        while not stop.is_set() and not may_start():
            time.sleep(0.005)
        if stop.is_set():
            return
        prompt = sampler.next()
        assembler.add_prompt(prompt)
        yield prompt


# ==================================================================== threads
class ThreadedRollouts:
    """PipelineRL generator in a background thread of this process."""

    def __init__(self, generator, sampler: LockedSampler, n: int,
                 reward_fn: Callable[[Prompt, Completion], None], max_queued: int):
        self.generator = generator
        self.sampler = sampler
        self.assembler = GroupAssembler(n, reward_fn)
        self.max_queued = max_queued
        self._groups: queue.Queue[Group | None] = queue.Queue()
        self._paused = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="scalerl-generator", daemon=True)
        self._thread.start()

    def _may_start(self) -> bool:
        return not self._paused.is_set() and self._groups.qsize() < self.max_queued

    def _run(self) -> None:
        try:
            prompts = _gated_prompts(self.sampler, self.assembler, self._may_start, self._stop)
            for completion in self.generator.stream(prompts, self.assembler.n, stop=self._stop):
                group = self.assembler.add(completion)
                if group is not None:
                    self._groups.put(group)
        except BaseException as exc:  # handed to the trainer thread, re-raised there by get()
            self._error = exc
        finally:
            self._groups.put(None)  # wakes a waiting get()

    def get(self, timeout: float | None = None) -> Group:
        try:
            group = self._groups.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no rollout group arrived within {timeout} s") from None
        if group is None:
            self._groups.put(None)
            if self._error is not None:
                raise self._error
            raise RuntimeError("the generator stopped")
        return group

    def publish(self, state_dict: dict, version: int) -> None:
        self.generator.update_weights(state_dict, version)

    def retire(self, prompt_id: str) -> None: ...  # the sampler reads the trainer's curriculum directly

    def sampler_state(self) -> dict:
        return self.sampler.state_dict()

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


# ==================================================================== processes
class _RetiredSet:
    """The generator process's view of the curriculum: the retired ids the trainer sent."""

    def __init__(self, threshold: float, retired: list[str]):
        self.threshold = threshold
        self.ids = set(retired)

    def is_retired(self, prompt_id: str) -> bool:
        return prompt_id in self.ids


def _generator_main(build: Callable, build_args: tuple, threads: int, sampler_state: dict,
                    curriculum: tuple[float, list[str]] | None, n: int, max_queued: int, shared: dict,
                    version, lock, queued, paused, stop, out_q, retire_q) -> None:
    """Body of the generator process: stream, score, send groups; apply weights as they come."""
    torch.set_num_threads(threads)
    try:
        from scalerl.rl.curriculum import CurriculumSampler

        generator, task, reward_fn, seed = build(*build_args)
        retired = _RetiredSet(*curriculum) if curriculum is not None else None
        sampler = CurriculumSampler(task, retired, seed=seed)
        sampler.load_state_dict(sampler_state)
        locked = LockedSampler(sampler)
        assembler = GroupAssembler(n, reward_fn)
        applied = [-1]

        def sync() -> None:
            v = version.value
            if v != applied[0]:
                with lock:
                    generator.update_weights(shared, version.value)
                    applied[0] = version.value
            while retired is not None:
                try:
                    retired.ids.add(retire_q.get_nowait())
                except queue.Empty:
                    break

        parent = os.getppid()

        def watcher() -> None:
            while not stop.is_set():
                if os.getppid() != parent:  # the trainer died (even by kill -9): stop, never linger
                    stop.set()
                    break
                sync()
                time.sleep(0.005)

        sync()
        threading.Thread(target=watcher, daemon=True).start()

        def may_start() -> bool:
            return not paused.is_set() and queued.value < max_queued

        for completion in generator.stream(_gated_prompts(locked, assembler, may_start, stop), n, stop=stop):
            group = assembler.add(completion)
            if group is not None:
                with queued.get_lock():
                    queued.value += 1
                out_q.put(("group", group, locked.state_dict()))
        out_q.cancel_join_thread()  # stopped: exit now, even if nobody reads the groups still buffered
    except BaseException:  # sent to the trainer, which raises it
        out_q.put(("error", traceback.format_exc(), None))


class ProcessRollouts:
    """PipelineRL generator in a separate process (see the module docstring)."""

    def __init__(self, build: Callable, build_args: tuple, weights: dict[str, torch.Tensor], version: int,
                 sampler_state: dict, curriculum, n: int, max_queued: int, threads: int):
        ctx = torch.multiprocessing.get_context("spawn")
        self._shared = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in weights.items()}
        self._version = ctx.Value("q", version, lock=False)
        self._lock = ctx.Lock()
        self._queued = ctx.Value("i", 0)
        self._paused = ctx.Event()
        self._stop = ctx.Event()
        self._out = ctx.Queue()
        self._retire = ctx.Queue()
        self._sampler_state = dict(sampler_state)
        cur = (curriculum.threshold, sorted(curriculum.state_dict()["retired"])) if curriculum is not None else None
        self._proc = ctx.Process(
            target=_generator_main, name="scalerl-generator", daemon=True,
            args=(build, build_args, threads, sampler_state, cur, n, max_queued, self._shared, self._version,
                  self._lock, self._queued, self._paused, self._stop, self._out, self._retire))
        self._proc.start()

    def get(self, timeout: float | None = None) -> Group:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                kind, payload, sampler_state = self._out.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._proc.is_alive():
                    raise RuntimeError(f"the generator process died (exit code {self._proc.exitcode})") from None
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"no rollout group arrived within {timeout} s") from None
        if kind == "error":
            raise RuntimeError(f"the generator process failed:\n{payload}")
        with self._queued.get_lock():
            self._queued.value -= 1
        self._sampler_state = sampler_state
        return payload

    def publish(self, state_dict: dict, version: int) -> None:
        with self._lock, torch.no_grad():
            for name, target in self._shared.items():
                target.copy_(state_dict[name])
            self._version.value = version

    def retire(self, prompt_id: str) -> None:
        self._retire.put(prompt_id)

    def sampler_state(self) -> dict:
        return dict(self._sampler_state)

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def close(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + 10
        while self._proc.is_alive() and time.monotonic() < deadline:
            try:  # drain, so the child's queue feeder can flush and the child exit
                self._out.get(timeout=0.1)
            except queue.Empty:
                pass
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(timeout=5)
