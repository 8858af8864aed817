"""Rewards: run a task's checker on a completion and fill `reward`, `passed`, `reward_error`.

`RewardFn(task, cfg)(prompt, completion)` never raises. A task exposes `checker`, a
module-level function `(completion_text, answer) -> bool`, and `isolate_checker`:
- built-in tasks (exact match after `</think>`, bounded work) run inline;
- user maths data runs `math-verify` (parse + verify). Its own timeouts use signals, which
  work only in a process's main thread, so it runs in a worker process of `CheckerPool`,
  which waits at most `cfg.timeout_s` and kills and replaces a worker that hangs. This works
  from any thread and inside Ray actors.
A checker that raises or times out scores `cfg.fail_value`, records the error on the
completion and is counted (`RewardFn.metrics()`).

Departures from the paper:
1. The paper's reward is +1/-1 from its verifiers; the values are configurable (0/1 too).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
from typing import Callable

from scalerl.types import Completion, Prompt

_THINK_CLOSE = "</think>"
_MATH_TAIL = 4096           # math-verify reads at most the last 4 kB of the final answer
_STARTUP_S = 120.0          # a fresh worker's start-up (imports) does not count as checker time


def math_verify_check(completion_text: str, answer: str) -> bool:
    """math-verify on the text after the last `</think>` (or the whole text without one)."""
    from math_verify import parse, verify

    cut = completion_text.rfind(_THINK_CLOSE)
    text = completion_text[cut + len(_THINK_CLOSE):] if cut >= 0 else completion_text
    gold = parse(answer if "$" in answer or "\\" in answer else f"${answer}$")
    return bool(verify(gold, parse(text[-_MATH_TAIL:])))


class CheckerTimeout(Exception):
    pass


def _worker(conn) -> None:
    """Worker process loop: say ready, then receive `(fn, args)`, send `(ok, result_or_error)`."""
    conn.send("ready")
    while True:
        try:
            fn, args = conn.recv()
        except EOFError:
            return
        try:
            conn.send((True, fn(*args)))
        except Exception as e:  # reported to the caller as this check's error
            conn.send((False, f"{type(e).__name__}: {e}"))


class CheckerPool:
    """Worker processes that run checkers with a timeout; a hung worker is killed and replaced."""

    def __init__(self, size: int = 2):
        self._ctx = mp.get_context("spawn")
        self._idle: queue.Queue = queue.Queue()
        for _ in range(size):
            self._idle.put(None)              # slots start empty; workers spawn on first use

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
        worker = self._idle.get()
        try:
            worker = worker or self._spawn()
            worker[1].send((fn, args))
            if not worker[1].poll(timeout):
                raise CheckerTimeout(f"checker exceeded {timeout:g}s")
            ok, value = worker[1].recv()
        except (CheckerTimeout, EOFError, OSError):
            if worker is not None:             # hung or dead: kill it; the slot respawns lazily
                worker[0].kill()
                worker[0].join()
            worker = None
            raise
        finally:
            self._idle.put(worker)
        if not ok:
            raise RuntimeError(value)
        return value

    def close(self) -> None:
        while not self._idle.empty():
            worker = self._idle.get_nowait()
            if worker is not None:
                worker[0].kill()
                worker[0].join()


class RewardFn:
    """Scores completions in place; thread-safe; counts checks, errors and timeouts."""

    def __init__(self, task, cfg, pool_size: int = 2):
        self.task = task
        self.cfg = cfg
        self._pool_size = pool_size
        self._pool: CheckerPool | None = None
        self._lock = threading.Lock()
        self.counts = {"checked": 0, "passed": 0, "errors": 0, "timeouts": 0}

    def __call__(self, prompt: Prompt, completion: Completion) -> None:
        passed, error = False, None
        try:
            passed = bool(self._check(completion.text, prompt.answer))
        except CheckerTimeout as e:
            error = f"timeout: {e}"
        except Exception as e:  # a checker failure scores a fail and never stops the run
            error = f"{type(e).__name__}: {e}"
        completion.passed = passed
        completion.reward = self.cfg.pass_value if passed else self.cfg.fail_value
        completion.reward_error = error
        with self._lock:
            self.counts["checked"] += 1
            self.counts["passed"] += passed
            self.counts["errors"] += error is not None
            self.counts["timeouts"] += error is not None and error.startswith("timeout")

    def _check(self, text: str, answer: str) -> bool:
        if not self.task.isolate_checker:
            return self.task.checker(text, answer)
        with self._lock:
            if self._pool is None:
                self._pool = CheckerPool(self._pool_size)
        return self._pool.call(self.task.checker, (text, answer), self.cfg.timeout_s)

    def metrics(self) -> dict:
        """Cumulative counts: checked, passed, errors (incl. timeouts), timeouts."""
        with self._lock:
            return dict(self.counts)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def __getstate__(self):                   # picklable into Ray actors: no processes, no lock
        state = self.__dict__.copy()
        state["_pool"], state["_lock"] = None, None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
