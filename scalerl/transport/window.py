"""PipelineRL-k bookkeeping shared by every transport (thread, process, Ray): which draw may start
(`Window`), groups handed out in draw order (`InOrder`), completions assembled into scored groups
(`GroupAssembler`), the generator side's view of retired prompts (`RetiredSet`) and a thread-safe
sampler (`LockedSampler`). The rule itself is written down in `scalerl.transport.local` and docs/design.md.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from scalerl.sandbox import cpu_seconds_used
from scalerl.types import Completion, Group, Prompt, Score


class Window:
    """The PipelineRL-k admission rule (see the module docstring): which draw may start."""

    KEEP = 64  # versions whose horizon is remembered (a generator never lags further)

    def __init__(self, prompts_per_step: int, k: int):
        self.P, self.k = prompts_per_step, k
        self.bound = k  # the staleness bound in force (<= k; `scalerl.rl.staleness`)
        self.horizons: dict[int, int] = {}

    @classmethod
    def of(cls, cfg) -> Window:
        """A run's window: `batch.prompts` draws a step, at most `pipeline.k` stale; with `pipeline.max_kl`
        the bound starts at 1 and follows the trainer's measurements (`TrainerUpdate.bound`)."""
        window = cls(cfg.batch.prompts, cfg.pipeline.k)
        if cfg.pipeline.max_kl is not None:
            window.set_bound(1)
        return window

    def set_bound(self, bound: int | None) -> None:
        """The bound for draws started on the versions published from now on (None: unchanged)."""
        if bound is not None:
            self.bound = max(1, min(self.k, bound))

    def horizon(self, taken: int) -> int:
        """The first draw that may not start on a version published when `taken` draws were taken."""
        return taken + self.P * (self.bound + 1)

    def record(self, version: int, horizon: int) -> None:
        self.horizons[version] = horizon
        for old in [v for v in self.horizons if v < version - self.KEEP]:
            del self.horizons[old]

    def publish(self, version: int, taken: int) -> None:
        self.record(version, self.horizon(taken))

    def may_start(self, draw: int, applied: int, published: int, taken: int) -> bool:
        """Draw `draw` may start on the generator's weights `applied`; the trainer has published
        `published` and taken `taken` draws."""
        horizon = self.horizons.get(applied)
        if horizon is not None and draw < horizon:
            return True
        return applied == published and draw < taken + self.P


class InOrder:
    """Trainer side: hands groups out in draw order, whatever order they finish in."""

    def __init__(self) -> None:
        self.next = 0  # draws taken so far = the next draw to hand out
        self.waiting: dict[int, Group] = {}

    def push(self, group: Group) -> None:
        self.waiting[group.draw] = group

    def pop(self) -> Group | None:
        group = self.waiting.pop(self.next, None)
        if group is not None:
            self.next += 1
        return group


class RetiredSet:
    """The generator side's view of No-Positive-Resampling: the prompt ids the trainer retired,
    sent back as `retire` messages on every transport; the sampler skips them."""

    def __init__(self, threshold: float, retired: list[str] | None = None):
        self.threshold = threshold
        self.ids = set(retired or ())

    @classmethod
    def of(cls, curriculum) -> RetiredSet | None:
        """The trainer's curriculum as the generator starts from it (None: no curriculum)."""
        if curriculum is None:
            return None
        return cls(curriculum.threshold, sorted(curriculum.state_dict()["retired"]))

    def add(self, prompt_id: str) -> None:
        self.ids.add(prompt_id)

    def is_retired(self, prompt_id: str) -> bool:
        return prompt_id in self.ids


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
    """Collects streamed completions into groups of `n` per draw and scores them.

    The engine sees each draw's prompt under its own id (`<prompt id>#<draw>`), so the same
    prompt may be in flight twice (a small dataset, a pool nearly exhausted by the curriculum)
    without two groups merging; the group carries the original prompt and its draw number.

    `workers` > 0 (a task's `score_workers`: code tasks, whose checker runs programs) scores each
    completion in a thread pool as it arrives, beside generation; 0 scores inline.
    `Group.score_seconds` sums the scoring time of its completions either way, and
    `Group.score_cpu_seconds` the CPU time of the sandbox runs their scoring made.

    How a finished group is handed on:
    - `deliver` given (every transport): `add` returns None and `deliver(group)` is called once
      the group's last score is in, from the scoring thread that finished it, so the generator
      never waits for a slow program (`Group.score_wait` 0; `Group.score_latency`: how long the
      group waited for its scores after its last completion). A scorer's error goes to
      `fail(exc)` instead. Groups may then be delivered out of draw order; the trainer takes them
      in draw order (`InOrder`, the Ray hub). Both callables must not block for long.
    - no `deliver` (a batch scored at once: evaluation, PPO rounds): `add` returns the group when
      its last completion arrives, after waiting for its scores (`Group.score_wait`).
    """

    def __init__(
        self,
        n: int,
        reward_fn: Callable[[Prompt, Completion], Score],
        workers: int = 0,
        deliver: Callable[[Group], None] | None = None,
        fail: Callable[[BaseException], None] | None = None,
    ):
        if (deliver is None) != (fail is None):
            raise ValueError("GroupAssembler: deliver and fail go together")
        self.n = n
        self.reward_fn = reward_fn
        self.next_draw = 0
        self.draws: dict[str, tuple[int, Prompt]] = {}
        self.partial: dict[str, tuple[list[Completion], list]] = {}
        self.deliver, self.fail = deliver, fail
        self._closed = False
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="scalerl-score") if workers > 0 else None

    def add_prompt(self, prompt: Prompt, draw: int | None = None) -> Prompt:
        """Register a draw of `prompt` (the next one, or `draw` when re-running a known one);
        returns the prompt as the engine must see it."""
        if draw is None:
            draw, self.next_draw = self.next_draw, self.next_draw + 1
        key = f"{prompt.id}#{draw}"
        self.draws[key] = (draw, prompt)
        self.partial[key] = ([], [])
        return dataclasses.replace(prompt, id=key)

    @staticmethod
    def workers_for(task) -> int:
        """A task's `score_workers`; optional in the `Task` protocol (a user's own task may predate it): 0."""
        return getattr(task, "score_workers", 0)

    def _timed(self, prompt: Prompt, completion: Completion) -> tuple[Score, float, float]:
        """(the score, the seconds it took, the CPU seconds of the sandbox runs it made)."""
        t0, cpu0 = time.monotonic(), cpu_seconds_used()
        score = self.reward_fn(prompt, completion)
        return score, time.monotonic() - t0, cpu_seconds_used() - cpu0

    def add(self, completion: Completion) -> Group | None:
        """Take one completion; see the class docstring for when and how its group is handed on."""
        draw, prompt = self.draws[completion.prompt_id]
        done, scored = self.partial[completion.prompt_id]
        done.append(completion)
        if self._pool is None:
            scored.append(self._timed(prompt, completion))
        else:
            scored.append(self._pool.submit(self._timed, prompt, completion))
        if len(done) < self.n:
            return None
        del self.partial[completion.prompt_id], self.draws[completion.prompt_id]
        last = time.monotonic()
        if self.deliver is None:
            results = [s.result() if isinstance(s, Future) else s for s in scored]  # a scorer's error raises here
            waited = time.monotonic() - last
            return _group(prompt, done, draw, results, wait=waited, latency=waited)
        if self._pool is None:
            self.deliver(_group(prompt, done, draw, scored, wait=0.0, latency=0.0))
            return None
        _Pending(self, prompt, done, draw, scored, last)
        return None

    def close(self) -> None:
        """Stop scoring: queued completions are dropped, a group still being scored is not delivered."""
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _group(
    prompt: Prompt,
    completions: list[Completion],
    draw: int,
    results: list[tuple[Score, float, float]],
    wait: float,
    latency: float,
) -> Group:
    return Group(
        prompt=prompt,
        completions=completions,
        scores=[s for s, _, _ in results],
        draw=draw,
        score_seconds=sum(t for _, t, _ in results),
        score_wait=wait,
        score_latency=latency,
        score_cpu_seconds=sum(c for _, _, c in results),
    )


class _Pending:
    """One group whose completions are being scored in the pool: delivered (or its error reported)
    by the done-callback of whichever of its futures finishes last."""

    def __init__(
        self,
        owner: GroupAssembler,
        prompt: Prompt,
        completions: list[Completion],
        draw: int,
        futures: list[Future],
        last: float,
    ):
        self.owner, self.prompt, self.completions, self.draw = owner, prompt, completions, draw
        self.futures, self.last = futures, last
        self.left = len(futures)
        self.lock = threading.Lock()
        for f in futures:
            f.add_done_callback(self._one_done)  # runs at once, in this thread, if already done

    def _one_done(self, _: Future) -> None:
        with self.lock:
            self.left -= 1
            if self.left:
                return
        owner = self.owner
        if owner._closed or any(f.cancelled() for f in self.futures):
            return  # the assembler was closed (the run is stopping): nobody takes this group
        error = next((f.exception() for f in self.futures if f.exception() is not None), None)
        if error is not None:
            owner.fail(error)
            return
        results = [f.result() for f in self.futures]
        try:
            owner.deliver(
                _group(
                    self.prompt, self.completions, self.draw, results, wait=0.0, latency=time.monotonic() - self.last
                )
            )
        except BaseException as exc:  # e.g. the Ray hub gone: reported like a scorer's error
            owner.fail(exc)
