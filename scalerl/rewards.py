"""Rewards: run a task's checker on a completion and return its `Score` (reward, passed, error, slow).

`RewardFn(task, cfg)(prompt, completion) -> Score` never raises on a checker error (a completion that is
not a `Completion` is a TypeError) and leaves the completion as it is. A task exposes `checker`, a picklable
`(completion_text, prompt) -> score` (a bool, or a float in [0, 1]), and `isolate_checker`:
- built-in tasks (exact match, bounded work) and reasoning-gym tasks run inline;
- user maths data runs `math-verify` (parse + verify). Its own timeouts use signals, which
  work only in a process's main thread, so it runs in a worker process of `CheckerPool`,
  which waits at most `cfg.timeout_s` and kills and replaces a worker that hangs. This works
  from any thread and inside Ray actors. The worker's console output (math-verify logs each
  answer it gives up on) goes nowhere; the text it parses is capped at `MATH_MAX_CHARS`.
A completion passes iff its score reaches `cfg.threshold` (default 1.0); with
`cfg.partial_credit` a failing one earns `fail + score * (pass - fail)`. A checker that raises
or times out scores `cfg.fail_value` and records the error in the score (`Score.error`; the run's
`train/reward_errors` counts them per step); a check slower than `cfg.slow_s` (or timed out) sets
`Score.slow`.

`cfg.function` adds a user's reward function (TRL's signature), alone or weighted beside the
checker (`RewardFn`, `scalerl.custom_reward`).

The checker reads the answer only (`answer_section`): the text after the last `</think>` by
default, or after a configurable marker (`task.answer_marker`: `Answer:`, or an opening tag
such as `<answer>` / `\\boxed{}` whose content is read) for models that do not think. A
completion without it (cut before its answer) has no answer and fails.

Departures from the paper:
1. The paper's reward is +1/-1 from its verifiers; the values are configurable (0/1 too), and
   partial credit (reasoning-gym's scores) is an option.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import os
import queue
import re
import threading
import time
from typing import Callable

from scalerl.errors import failure
from scalerl.sandbox import cpu_seconds_used, credit_cpu
from scalerl.types import Completion, Prompt, Score

THINK_CLOSE = "</think>"
BOXED = "\\boxed{}"
ANSWER_TAG = "<answer>"
ANSWER_MAX_CHARS = 4096  # an answer section is cut to its first 4 kB (bounded checker work)
MATH_MAX_CHARS = 1024  # math-verify parses at most the last 1 kB of an answer section
_END_MARKERS = ("</s>", "<|im_end|>", "<|endoftext|>", "<pad>")
_TAG = re.compile(r"<([A-Za-z_][\w-]*)>")
_STARTUP_S = 120.0  # a fresh worker's start-up (imports) does not count as checker time


def answer_section(text: str, marker: str = THINK_CLOSE) -> str | None:
    """The answer part of a completion, or None when it has none (cut before its answer).

    `marker` `</think>` or `Answer:` (any text): what follows its last occurrence, up to an end
    marker (`</s>`, `<|im_end|>`, ...). An opening tag `<answer>`: the content of the last
    `<answer>...</answer>` (a missing closing tag is no answer). `\\boxed{}`: the content of the
    last `\\boxed{...}` with balanced braces. Linear time; at most `ANSWER_MAX_CHARS` returned.
    """
    if marker == BOXED:
        return _last_boxed(text)
    tag = _TAG.fullmatch(marker)
    if tag:
        end = text.rfind(f"</{tag.group(1)}>")
        start = text.rfind(marker, 0, end) if end >= 0 else -1
        return text[start + len(marker) : end].strip()[:ANSWER_MAX_CHARS] if start >= 0 else None
    cut = text.rfind(marker)
    if cut < 0:
        return None
    answer = text[cut + len(marker) : cut + len(marker) + ANSWER_MAX_CHARS]
    for end in _END_MARKERS:
        answer = answer.split(end, 1)[0]
    return answer.strip()


def format_instruction(marker: str) -> str:
    """The sentence that asks for the answer where `answer_section(text, marker)` reads it."""
    if marker == BOXED:
        return "Put your final answer within \\boxed{}."
    tag = _TAG.fullmatch(marker)
    if tag:
        return f"Put only your final answer between {marker} and </{tag.group(1)}> tags, at the end of your response."
    if marker == THINK_CLOSE:
        return "Think inside <think></think>, then write only your final answer after </think>."
    return f"End your response with {marker.strip()} followed by only your final answer."


def instruction_for(instruction: str | None, marker: str) -> str | None:
    """`task.answer_instruction` resolved: 'auto' -> `format_instruction(marker)`; None -> None; text as is."""
    return format_instruction(marker) if instruction == "auto" else instruction


def has_answer(text: str, marker: str = THINK_CLOSE) -> bool:
    """Whether a completion has an answer section at all (right or wrong)."""
    return answer_section(text, marker) is not None


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, min(len(text), i + ANSWER_MAX_CHARS)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j].strip()
    return None


def math_verify_check(completion_text: str, answer: str, marker: str = THINK_CLOSE) -> bool:
    """math-verify on the answer section (`answer_section`); no section: False."""
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # it logs every answer it gives up on
    section = answer_section(completion_text, marker)
    if section is None:
        return False
    if marker == BOXED:
        section = f"\\boxed{{{section}}}"
    gold = parse(answer if "$" in answer or "\\" in answer else f"${answer}$")
    return bool(verify(gold, parse(section[-MATH_MAX_CHARS:])))


class CheckerTimeout(Exception):
    pass


def _worker(conn) -> None:
    """Worker process loop: say ready, then receive `(fn, args)`, send `(ok, result_or_error,
    sandbox CPU seconds)`, the last what the check's sandbox runs cost (`scalerl.sandbox`).
    The checker's own console output is discarded (its errors come back through the pipe)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        import math_verify  # noqa: F401  (imported during start-up, not during the first check)
    except ImportError:
        pass
    conn.send("ready")
    while True:
        try:
            fn, args = conn.recv()
        except EOFError:
            return
        cpu = cpu_seconds_used()
        try:
            value = fn(*args)
        except Exception as e:  # reported to the caller as this check's error
            conn.send((False, f"{type(e).__name__}: {e}", cpu_seconds_used() - cpu))
        else:
            conn.send((True, value, cpu_seconds_used() - cpu))


def _loaded(fn) -> bool:
    """Run in a fresh worker: receiving `fn` has imported its module."""
    return True


class CheckerPool:
    """Worker processes that run checkers with a timeout; a hung worker is killed and replaced."""

    def __init__(self, size: int = 2):
        self._ctx = mp.get_context("spawn")
        self._idle: queue.Queue = queue.Queue()
        for _ in range(size):
            self._idle.put(None)  # slots start empty; workers spawn on first use

    def _spawn(self):
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker, args=(child,), daemon=True)
        proc.start()
        child.close()
        if not parent.poll(_STARTUP_S) or parent.recv() != "ready":
            proc.kill()
            raise RuntimeError(f"checker worker did not start within {_STARTUP_S:g}s")
        return proc, parent

    def call(self, fn: Callable, args: tuple, timeout: float):
        """`fn(*args)` in a worker; raises `CheckerTimeout`, or `RuntimeError` if it raised."""
        return self.call_timed(fn, args, timeout)[0]

    def call_timed(self, fn: Callable, args: tuple, timeout: float) -> tuple:
        """(`fn(*args)` in a worker, seconds it took, a worker's start-up excluded)."""
        worker = self._idle.get()
        try:
            if worker is None:  # a fresh worker: load the checker's module before timing
                worker = self._spawn()
                worker[1].send((_loaded, (fn,)))
                if not worker[1].poll(_STARTUP_S):
                    raise CheckerTimeout(f"checker {fn!r} did not load within {_STARTUP_S:g}s")
                worker[1].recv()
            t0 = time.monotonic()
            worker[1].send((fn, args))
            if not worker[1].poll(timeout):
                raise CheckerTimeout(f"checker exceeded {timeout:g}s")
            ok, value, cpu = worker[1].recv()
            seconds = time.monotonic() - t0
            credit_cpu(cpu)  # the sandbox runs it made count for the calling thread
        except (CheckerTimeout, EOFError, OSError):
            if worker is not None:  # hung or dead: kill it; the slot respawns lazily
                worker[0].kill()
                worker[0].join()
            worker = None
            raise
        finally:
            self._idle.put(worker)
        if not ok:
            raise RuntimeError(value)
        return value, seconds

    def close(self) -> None:
        while not self._idle.empty():
            worker = self._idle.get_nowait()
            if worker is not None:
                worker[0].kill()
                worker[0].join()


class RewardFn:
    """`(prompt, completion) -> Score`; thread-safe. The run's metrics count errors and slow
    checks per step from the scores (`group_stats`).

    With `cfg.function` (`scalerl.custom_reward`): without `cfg.weights` the function's value is
    the reward and the completion passes iff it reaches `cfg.threshold` (None, or an error: it
    scores `fail_value` and fails); with `cfg.weights = [w_checker, w_function]` the reward is
    `w_checker * checker reward + w_function * value` (None: the checker's term only) and
    passing stays the checker's."""

    def __init__(self, task, cfg, pool_size: int = 2):
        from scalerl.custom_reward import CustomReward

        self.task = task
        self.cfg = cfg
        self.custom = CustomReward(cfg.function) if cfg.function else None
        self._pool_size = pool_size
        self._pool: CheckerPool | None = None
        self._lock = threading.Lock()

    def __call__(self, prompt: Prompt, completion: Completion) -> Score:
        if not isinstance(completion, Completion):
            raise TypeError(
                f"RewardFn(prompt, completion): expected a scalerl.types.Completion, got "
                f"{type(completion).__name__} (wrap text as Completion(..., text=...))"
            )
        if self.custom is None:
            return self._checked(prompt, completion)
        if self.cfg.weights is None:
            return self._custom_alone(prompt, completion)
        return self._custom_beside(prompt, completion)

    def _custom_alone(self, prompt: Prompt, completion: Completion) -> Score:
        try:
            value = self.custom(prompt, completion.text)
        except RuntimeError as e:
            return Score(self.cfg.fail_value, False, failure(e, str(e)))
        if value is None:
            return Score(self.cfg.fail_value, False)
        return Score(value, value >= self.cfg.threshold)

    def _custom_beside(self, prompt: Prompt, completion: Completion) -> Score:
        checked = self._checked(prompt, completion)
        w_checker, w_function = self.cfg.weights
        try:
            value, error = self.custom(prompt, completion.text), None
        except RuntimeError as e:
            value, error = None, failure(e, str(e))
        reward = w_checker * checked.reward + (w_function * value if value is not None else 0.0)
        return dataclasses.replace(checked, reward=reward, error=checked.error or error)

    def _checked(self, prompt: Prompt, completion: Completion) -> Score:
        """The task's checker on `completion`: pass/fail (or partial credit) as a Score."""
        score, error, seconds = 0.0, None, 0.0
        try:
            result, seconds = self._check(completion.text, prompt)
            score = min(1.0, max(0.0, float(result)))
        except CheckerTimeout as e:
            error = f"timeout: {e}"
        except Exception as e:  # a checker failure scores a fail and never stops the run
            error = failure(e)
        slow = seconds > self.cfg.slow_s or (error or "").startswith("timeout")
        passed = error is None and score >= self.cfg.threshold
        return Score(self._reward(passed, score if error is None else 0.0), passed, error, slow)

    def _reward(self, passed: bool, score: float) -> float:
        if passed:
            return self.cfg.pass_value
        if self.cfg.partial_credit:
            return self.cfg.fail_value + score * (self.cfg.pass_value - self.cfg.fail_value)
        return self.cfg.fail_value

    def _check(self, text: str, prompt: Prompt) -> tuple:
        """(the checker's score, seconds it took)."""
        if not self.task.isolate_checker:
            t0 = time.monotonic()
            return self.task.checker(text, prompt), time.monotonic() - t0
        with self._lock:
            if self._pool is None:
                self._pool = CheckerPool(self._pool_size)
        return self._pool.call_timed(self.task.checker, (text, prompt), self.cfg.timeout_s)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def __getstate__(self):  # picklable into Ray actors: no processes, no lock
        state = self.__dict__.copy()
        state["_pool"], state["_lock"] = None, None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()


def training_reward(reward_fn: Callable, cfg) -> Callable:
    """The training reward: pass/fail, plus the overlong penalty when length control is `penalty`."""
    length = cfg.rollout.length
    if length.type != "penalty":
        return reward_fn
    from scalerl.rl.length_penalty import shaped_reward

    def shaped(prompt: Prompt, completion: Completion) -> Score:
        score = reward_fn(prompt, completion)
        reward = shaped_reward(score.reward, len(completion.tokens), length, passed=score.passed)
        return dataclasses.replace(score, reward=reward, penalty=reward - score.reward)

    return shaped
