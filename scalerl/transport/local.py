"""Transports between the generator and the trainer (PipelineRL-k), behind the one seam.

A `RolloutSource` (scalerl.transport.protocol) carries scored groups (all G completions of one draw of a prompt, rewards
filled) from the generator to the trainer, and the trainer's weights + policy version back to
the generator, which applies them in flight. Two in-machine implementations:

- `ThreadedRollouts`: the generator streams in a background thread of this process. Right for
  a GPU (one CUDA context) and for tests.
- `ProcessRollouts`: the generator runs in its own process (torch.multiprocessing, spawn) with
  its own torch thread count; groups come back over an mp.Queue; the weights are one buffer both
  processes map (shared memory on a CPU, device memory through CUDA IPC on a GPU), which the
  generator decodes from directly, under a lock taken at every decode-step boundary
  (scalerl.transport.weights); retired prompt ids and evaluation requests go through a queue,
  and the evaluation runs there, on the published weights. On a CPU the decode loop is
  Python-bound: in one process the two stages fight over the GIL and torch's process-global
  thread pool; in two they run truly in parallel (docs/training.md has the measurement). The
  same code runs on CUDA: the generator off the trainer's interpreter, weights passed device to
  device.
`scalerl.transport.ray.RayRollouts` implements the same Protocol with Ray actors, the
same records and the same `Window`. Each streams groups in draw order (`get`) and batches them
by PipelineRL-k (`scalerl.transport.policy.Streamed`).

PipelineRL-k, one rule for every transport (paper Section 3.1; docs/design.md):
- Every start of a prompt is a *draw*, numbered 0, 1, 2, ... by the transport; the trainer
  takes groups strictly in draw order (`InOrder`), waiting for a draw still in flight rather
  than taking a later one, so no group is overtaken and none is dropped.
- `Window`: the generator may start draw n only if n < D(u) + P*(k+1), where u is the policy
  version it decodes with and D(u) the number of draws the trainer had taken when it published
  u. Each step takes at least P draws, so draw n is taken by version u + k at the latest: its
  staleness (trainer version - oldest token version) is at most k, and reaches k when the
  trainer is the slower stage. One escape keeps DAPO's dynamic sampling (more than P draws in a
  step) and skipped empty batches from deadlocking: when the generator holds the newest
  version, it may also start the draws the trainer needs next (n < taken + P; staleness <= 1).
- The engine never blocks on the window: the prompt iterator yields None ("nothing may start
  now") and the engine keeps decoding what is in flight.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch

from scalerl.errors import ScaleRLError, UserCodeError
from scalerl.transport.policy import PipelineRL, Streamed
from scalerl.transport.protocol import GeneratorBuild, TrainerUpdate
from scalerl.transport.weights import SharedWeights, StepGate, WeightsLink
from scalerl.transport.window import GroupAssembler, InOrder, LockedSampler, RetiredSet, Window
from scalerl.types import Completion, Group, Prompt


def _window_prompts(
    sampler: LockedSampler, assembler: GroupAssembler, may_start: Callable[[int], bool], stop
) -> Iterator[Prompt | None]:
    """The engine's prompt iterator: the next draw when `may_start(draw)`, else None (wait)."""
    while not stop.is_set():
        if not may_start(assembler.next_draw):
            yield None
            continue
        yield assembler.add_prompt(sampler.next())


# ==================================================================== threads
class _PausedByEvent:
    """`pause` / `resume` of a transport by the event `self._paused` (a thread's or a process's):
    while it is set the generator starts no prompt and holds the ones in flight (`stream`'s
    `hold`), so an evaluation has the cores to itself."""

    _paused: threading.Event

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()


class ThreadedRollouts(Streamed, _PausedByEvent):
    """PipelineRL generator in a background thread of this process."""

    def __init__(
        self,
        generator,
        sampler: LockedSampler,
        n: int,
        reward_fn: Callable[[Prompt, Completion], None],
        window: Window,
        version: int,
        retired: RetiredSet | None = None,
        score_workers: int = 0,
    ):
        self.generator = generator
        self.sampler = sampler
        self.retired = retired  # the sampler's view of the curriculum
        self.assembler = GroupAssembler(n, reward_fn, score_workers, deliver=self._deliver, fail=self._fail)
        self.window = window
        self.policy = PipelineRL(window.k)
        self.published = version
        self.order = InOrder()
        window.publish(version, 0)
        self._groups: queue.Queue[Group | None] = queue.Queue()
        self._paused = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="scalerl-generator", daemon=True)
        self._thread.start()

    def _may_start(self, draw: int) -> bool:
        return not self._paused.is_set() and self.window.may_start(
            draw, self.generator.version, self.published, self.order.next
        )

    def _deliver(self, group: Group) -> None:
        self._groups.put(group)

    def _fail(self, exc: BaseException) -> None:
        """The generator thread's or a scoring thread's error: handed to the trainer thread, re-raised by get()."""
        if self._error is None:
            self._error = exc
        self._stop.set()
        self._groups.put(None)  # wakes a waiting get()

    def _run(self) -> None:
        try:
            prompts = _window_prompts(self.sampler, self.assembler, self._may_start, self._stop)
            for completion in self.generator.stream(prompts, self.assembler.n, stop=self._stop, hold=self._paused):
                self.assembler.add(completion)  # the group goes to `_deliver` once scored
        except BaseException as exc:
            self._fail(exc)
        finally:
            self._groups.put(None)  # wakes a waiting get()

    def ready(self) -> None: ...

    def get(self, timeout: float | None = None) -> Group:
        while (group := self.order.pop()) is None:
            try:
                got = self._groups.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no rollout group arrived within {timeout} s") from None
            if got is None:
                self._groups.put(None)
                if self._error is not None:
                    raise self._error
                raise RuntimeError("the generator stopped")
            self.order.push(got)
        return group

    def send(self, update: TrainerUpdate) -> None:
        if self.retired is not None:
            for prompt_id in update.retired:
                self.retired.add(prompt_id)
        self.window.set_bound(update.bound)
        self.window.publish(update.version, self.order.next)
        self.generator.update_weights(update.weights, update.version)
        self.published = update.version

    def sampler_state(self) -> dict:
        return self.sampler.state_dict()

    def processes(self) -> dict[str, int]:
        """None of its own: the generator is a thread of the trainer process."""
        return {}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.assembler.close()
        getattr(self.generator, "close", lambda: None)()  # a server's client stops what it started


# ==================================================================== processes
def watch_parent(parent: int, stop=None) -> None:
    """End this process when its parent `parent` is gone (even by kill -9), from the child's first
    moment (a generator when its trainer dies; a study's worker when the study dies); `stop` is
    set first."""
    stop = stop or threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if os.getppid() != parent:
                stop.set()
                os._exit(0)  # nothing of this process is worth keeping once its parent is gone
            time.sleep(0.05)

    threading.Thread(target=watch, name="scalerl-parent-watch", daemon=True).start()


@dataclass(frozen=True)
class EvalSpec:
    """How a generator process evaluates for the trainer: its evaluation engine's seed and
    temperature (None: the rollout's), and the torch threads it evaluates with (the training
    stream is held meanwhile, so these may be every core the run holds)."""

    seed: int
    temperature: float | None
    threads: int


SETTLE_EVERY_S = 2.0  # a generator process frees its dropped K/V caches (reference cycles) this often
_ERROR_SENT = threading.Event()  # a generator process sent the trainer an error (`_report_failure`)


def _serve_requests(stop, in_q, out_q, retired: RetiredSet | None, evaluator) -> None:
    """The generator process's second thread: takes the trainer's retired prompts and evaluation
    requests, and frees the dropped caches every `SETTLE_EVERY_S`."""
    from scalerl.run.memory import settle

    settled = time.monotonic()
    try:
        while not stop.is_set():
            if time.monotonic() - settled > SETTLE_EVERY_S:
                settle()
                settled = time.monotonic()
            try:
                kind, payload = in_q.get(timeout=0.05)
            except queue.Empty:
                continue
            if kind == "retire" and retired is not None:
                retired.add(payload)
            elif kind == "evaluate":
                if evaluator is None:
                    raise RuntimeError("this generator process was started without an evaluation spec")
                out_q.put(("eval", evaluator(*payload), None))
    except BaseException as exc:
        _report_failure(exc, out_q, stop)


def _prompts_and_groups(task, retired, sampler_seed: int, sampler_state: dict, n: int, reward_fn, out_q, stop):
    """The generator process's prompt sampler (locked: two threads draw) and the assembler that scores each group
    and sends it, with the sampler's state after its draw, to the trainer."""
    from scalerl.rl.curriculum import CurriculumSampler

    sampler = CurriculumSampler(task, retired, seed=sampler_seed)
    sampler.load_state_dict(sampler_state)
    locked = LockedSampler(sampler)
    assembler = GroupAssembler(
        n,
        reward_fn,
        GroupAssembler.workers_for(task),
        deliver=lambda group: out_q.put(("group", group, locked.state_dict())),
        fail=lambda exc: _report_failure(exc, out_q, stop),
    )
    return locked, assembler


def _generator_main(
    build: GeneratorBuild,
    seed: int,
    threads: int,
    sampler_state: dict,
    retired: RetiredSet | None,
    n: int,
    window: Window,
    link: WeightsLink,
    taken,
    evals: EvalSpec | None,
    paused,
    stop,
    out_q,
    in_q,
    parent: int,
) -> None:
    """Body of the generator process: stream, score, send groups, decoding straight from the
    published weights (`StepGate` at every step boundary); a second thread takes the trainer's
    retired prompts and evaluation requests, and frees the dropped caches every `SETTLE_EVERY_S`."""
    from scalerl.run.memory import freeze, tune_malloc

    watch_parent(parent, stop)
    tune_malloc()
    torch.set_num_threads(threads)
    try:
        generator, task, reward_fn, sampler_seed = build(seed, weights=link.tensors)
        evaluator = None if evals is None else _Evaluator(build, evals, link, task, reward_fn, threads)
        freeze()  # the models, tokenizer and task, built for the whole run: never scanned by a collection again
        locked, assembler = _prompts_and_groups(task, retired, sampler_seed, sampler_state, n, reward_fn, out_q, stop)
        gate = StepGate(link, generator, paused, window.record)

        threading.Thread(
            target=_serve_requests, args=(stop, in_q, out_q, retired, evaluator), name="scalerl-requests", daemon=True
        ).start()
        out_q.put(("ready", None, None))

        def may_start(draw: int) -> bool:
            return not paused.is_set() and window.may_start(draw, generator.version, link.version.value, taken.value)

        try:
            for completion in generator.stream(
                _window_prompts(locked, assembler, may_start, stop), n, stop=stop, hold=gate
            ):
                assembler.add(completion)  # the group goes to `out_q` once scored (`deliver`)
        finally:
            gate.release()
            assembler.close()
            getattr(generator, "close", lambda: None)()  # a server's client stops what it started
        if not _ERROR_SENT.is_set():  # an error sent must reach the trainer before this process exits
            out_q.cancel_join_thread()  # stopped: exit now, even if nobody reads the groups still buffered
    except BaseException as exc:
        _report_failure(exc, out_q, stop)


def _report_failure(exc: BaseException, out_q, stop) -> None:
    """A generator process's error, from its main thread or a scoring thread, sent to the trainer: a
    user-facing one (e.g. every prompt retired) as its one line, a bug with its traceback."""
    if isinstance(exc, ScaleRLError):  # a user's code's error whole (its frames), another as its line
        out_q.put(("user_error", exc if isinstance(exc, UserCodeError) else str(exc), None))
    else:
        out_q.put(("error", "".join(traceback.format_exception(exc)), None))
    _ERROR_SENT.set()
    stop.set()


class _Evaluator:
    """The generator process's evaluation engine, built at start-up on the published weights (no
    copy of its own); runs `generate` with `EvalSpec.threads` while the training stream is held.
    Its K/V cache lives during a request only (freed by `settle` after it)."""

    def __init__(self, build: GeneratorBuild, evals: EvalSpec, link: WeightsLink, task, reward, threads: int):
        # the training reward is passed only so that nothing builds another (scoring is the trainer's)
        # on the local engine, whatever `rollout.engine` says (a server's client would start a second server)
        self.generator = build(
            evals.seed, weights=link.tensors, task=task, reward=reward, temperature=evals.temperature, local=True
        ).generator
        self.evals, self.threads = evals, threads

    def __call__(self, prompts: list[Prompt], n: int, reseed: bool) -> list[Completion]:
        from scalerl.run.memory import settle

        torch.set_num_threads(self.evals.threads)
        try:
            if reseed:
                self.generator.reseed()
            return self.generator.generate(prompts, n)
        finally:
            torch.set_num_threads(self.threads)
            settle()


def exit_reason(name: str, code: int | None) -> str:
    """One line on how a child process ended: "generator process exited with code -9 (killed: out of
    memory?)"; a negative code is the signal that ended it."""
    if code is None:
        return f"{name} is still running"
    if code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"signal {-code}"
        why = "killed: out of memory?" if code == -signal.SIGKILL else f"ended by {sig}"
        return f"{name} exited with code {code} ({why})"
    return f"{name} exited with code {code}"


class ProcessRollouts(Streamed, _PausedByEvent):
    """PipelineRL generator in a separate process (see the module docstring).

    The weights go through `SharedWeights` (scalerl.transport.weights): one buffer both processes
    map, which the generator decodes from directly; `alias` makes it the trainer's own parameters
    (then `step_guard` must wrap the optimizer's step: `aliased`). `dtype`: the generator's decode
    dtype (default: the weights'); `head`: the LM head weight's name (a lower-precision engine keeps
    an fp32 copy for its fp32 head). With `evals`, the process also evaluates for the trainer
    (`evaluator()`), so the trainer's process holds no evaluation engine and no second K/V cache.

    The process is not a daemon, so that it may start helpers of its own (math-verify's checker
    workers); it exits when `close()` stops it, and by itself as soon as the trainer process is
    gone, from its first moment on (`watch_parent`).
    """

    START_S = 600.0  # the generator process's start-up (imports, model build) must end within this

    def __init__(
        self,
        build: GeneratorBuild,
        seed: int,
        weights: dict[str, torch.Tensor],
        version: int,
        sampler_state: dict,
        curriculum,
        n: int,
        window: Window,
        threads: int,
        *,
        dtype: torch.dtype | None = None,
        alias: bool = False,
        head: str | None = None,
        evals: EvalSpec | None = None,
    ):
        ctx = torch.multiprocessing.get_context("spawn")
        self.window = window
        self.policy = PipelineRL(window.k)
        self.order = InOrder()
        dtype = dtype or next(iter(weights.values())).dtype
        self.weights = SharedWeights(ctx, weights, version, window.horizon(0), dtype, alias, head, self._check_alive)
        self._taken = ctx.Value("q", 0, lock=False)
        self._paused = ctx.Event()
        self._stop = ctx.Event()
        self._out = ctx.Queue()
        self._in = ctx.Queue()
        self._sampler_state = dict(sampler_state)
        self._ready = False
        self._proc = ctx.Process(
            target=_generator_main,
            name="scalerl-generator",
            daemon=False,
            args=(
                build,
                seed,
                threads,
                sampler_state,
                RetiredSet.of(curriculum),
                n,
                window,
                self.weights.link,
                self._taken,
                evals,
                self._paused,
                self._stop,
                self._out,
                self._in,
                os.getpid(),
            ),
        )
        self._proc.start()

    @property
    def aliased(self) -> bool:
        """The published weights are the trainer's parameters: the optimizer must step under `step_guard`."""
        return self.weights.aliased

    def _check_alive(self) -> None:
        if not self._proc.is_alive():
            raise ScaleRLError(
                f"{exit_reason('generator process', self._proc.exitcode)}: the run stopped "
                "at its last checkpoint, carry on with --resume"
            )

    def _receive(self, timeout: float | None) -> tuple:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                kind, payload, sampler_state = self._out.get(timeout=1.0)
            except queue.Empty:
                self._check_alive()
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"no rollout group arrived within {timeout} s") from None
                continue
            if kind == "user_error":
                raise payload if isinstance(payload, UserCodeError) else ScaleRLError(payload)
            if kind == "error":
                raise RuntimeError(f"the generator process failed:\n{payload}")
            if kind == "ready":
                self._ready = True
            elif kind == "group":
                self._sampler_state = sampler_state
                self.order.push(payload)
            return kind, payload

    def ready(self) -> None:
        """Wait until the generator process has built its model (start-up is not compute)."""
        while not self._ready:
            self._receive(self.START_S)

    def get(self, timeout: float | None = None) -> Group:
        while (group := self.order.pop()) is None:
            self._receive(timeout)
        self._taken.value = self.order.next
        return group

    def send(self, update: TrainerUpdate) -> None:
        for prompt_id in update.retired:
            self._in.put(("retire", prompt_id))
        self.window.set_bound(update.bound)
        self.weights.publish(update.weights, update.version, self.window.horizon(self.order.next))

    def step_guard(self, version: int):
        """The context the trainer's optimizer steps in when the weights are aliased: the lock held, then
        `version` published (the weights change between two decode steps and carry their version)."""
        return self.weights.write(version, self.window.horizon(self.order.next))

    def evaluator(self) -> RemoteGenerator:
        """The evaluation engine of the generator process, as a generator the trainer evaluates with."""
        return RemoteGenerator(self)

    def evaluate(self, prompts: Sequence[Prompt], n: int, reseed: bool) -> list[Completion]:
        """All `n` samples of every prompt from the generator process's evaluation engine (its training
        stream held by `pause()` meanwhile); groups that arrive meanwhile wait in draw order."""
        self._in.put(("evaluate", (list(prompts), n, reseed)))
        while True:
            kind, payload = self._receive(None)
            if kind == "eval":
                return payload

    def sampler_state(self) -> dict:
        return dict(self._sampler_state)

    def processes(self) -> dict[str, int]:
        """The generator process, for `system/rss_mb/generator0` (while it runs)."""
        return {"generator0": self._proc.pid} if self._proc.is_alive() else {}

    def device_memory(self) -> dict[str, tuple[float, float]]:
        """The generator process's CUDA memory (allocated, reserved MiB) as it last reported it; {} on a CPU."""
        cuda = any(t.device.type == "cuda" for t in self.weights.buffers.values())
        return {"generator0": tuple(self.weights.link.cuda_mb)} if cuda and self._proc.is_alive() else {}

    def published_mb(self) -> float:
        """MiB of the published weights' buffer (shared by both processes)."""
        return self.weights.nbytes() / 2**20

    def close(self) -> None:
        self._stop.set()
        self._in.cancel_join_thread()  # requests a dead generator never read must not hold this process at exit
        deadline = time.monotonic() + 10
        while self._proc.is_alive() and time.monotonic() < deadline:
            try:  # drain, so the child's queue feeder can flush and the child exit
                self._out.get(timeout=0.1)
            except queue.Empty:
                pass
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(timeout=5)


class RemoteGenerator:
    """The trainer's handle on a generator process's evaluation engine: `generate` and `reseed` of
    `scalerl.rollout.Generator` (what `scalerl.evaluate` needs). The evaluation runs there, on the
    published weights (the trainer's, after the step's publish), while that process's training
    stream is held; the trainer's process keeps no evaluation engine and no K/V cache of its own."""

    def __init__(self, source: ProcessRollouts):
        self.source = source
        self._reseed = False

    @property
    def version(self) -> int:
        return self.source.weights.version

    def reseed(self) -> None:
        self._reseed = True

    def generate(self, prompts: Sequence[Prompt], n: int) -> list[Completion]:
        out = self.source.evaluate(prompts, n, self._reseed)
        self._reseed = False
        return out
