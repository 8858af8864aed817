"""The user's own task from a Python file: `task.type=python`, `task.path=<file.py>` (docs/your-data.md).

`task.path` names a class, `<path/to/file.py>:<Class>` or `<module>:<Class>`; a file alone names the
one class it defines with both methods below. The class is constructed with `task.options` as
keyword arguments and has two methods:

    prompts(seed: int) -> iterable of (question, answer)    # or of {"prompt": ..., "answer": ...}
    check(answer: str, reference: str) -> bool | float      # 1.0 or True passes; a float in [0, 1]

`prompts` may be endless (a generator) or finite (a list). scalerl reads distinct questions from it
until it holds `train_size` + `val_size` of them (unset: 4096 + 512, as a built-in task), or until it
ends: a finite one is split as a file is (unset `val_size`: a tenth, at least 1, at most 512). The
held-out set is the last `val_size` prompts by a hash of their content, so the split does not depend
on the order the class yields them; the pool is shuffled by `task.seed`. A question is text or TRL's
chat messages, templated as a file's (the answer instruction of `task.answer_instruction`, `<answer>`
tags unless `task.answer_marker` says otherwise). `check` gets the completion's answer section
(`scalerl.rewards.answer_section`, nothing when it has none: a fail) and the reference answer; it runs
in the thread that scores (the generator's), so it should be quick; what it raises is the checker
error of that completion (counted, never fatal).

Each process that generates (the generator process, a Ray actor) loads the file again: the class must
build the same prompts from the same seed.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
from pathlib import Path

from scalerl.config import DEFAULT_VAL_SIZE, PythonTaskConfig
from scalerl.errors import ScaleRLError, UserCodeError, located, retold
from scalerl.rewards import ANSWER_TAG, answer_section, instruction_for
from scalerl.tasks.arith import DEFAULT_TRAIN_SIZE
from scalerl.tasks.files import FileTask, Row, val_share
from scalerl.tasks.pool import PromptPool, dedupe, split_rows
from scalerl.tasks.registry import TaskContext, register
from scalerl.types import Prompt
from scalerl.user_code import load_module

METHODS = ("prompts", "check")
DRAWS_PER_PROMPT = 20  # a class that repeats itself: give up after this many draws per prompt wanted


def load_task_class(spec: str) -> type:
    """The class `task.path` names (see the module docstring); one `ScaleRLError` naming the file and
    what was expected otherwise."""
    target, sep, name = ("", "", "") if spec.endswith(".py") else spec.rpartition(":")
    if spec.endswith(".py"):
        target = spec
    elif not sep or not target or not name:
        raise ScaleRLError(f"task.path {spec!r}: expected <path/to/file.py>[:<Class>] or <module>:<Class>")
    if target.endswith(".py") and not Path(target).is_file():
        raise ScaleRLError(f"task.path {spec!r}: no such file {target!r} (expected a Python file with a task class)")
    module = load_module(str(Path(target).resolve()) if target.endswith(".py") else target, "task.path", spec)
    if name:
        cls = getattr(module, name, None)
        if not inspect.isclass(cls):
            raise ScaleRLError(f"task.path {spec!r}: {target} has no class {name!r}")
    else:
        found = [
            c
            for _, c in inspect.getmembers(module, inspect.isclass)
            if c.__module__ == module.__name__ and all(callable(getattr(c, m, None)) for m in METHODS)
        ]
        if len(found) != 1:
            what = "no class" if not found else f"{len(found)} classes ({', '.join(c.__name__ for c in found)})"
            raise ScaleRLError(
                f"task.path {spec!r}: {target} defines {what} with methods prompts(seed) and "
                f"check(answer, reference); expected one (or name it: {target}:<Class>)"
            )
        cls = found[0]
    missing = [m for m in METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise ScaleRLError(
            f"task.path {spec!r}: class {cls.__name__} has no method {' or '.join(missing)}; expected "
            "prompts(seed) -> (question, answer) pairs and check(answer, reference) -> bool | float"
        )
    return cls


def _pair(item, spec: str, index: int) -> tuple:
    """(question, answer) of one item the class yielded."""
    if isinstance(item, dict) and "prompt" in item and "answer" in item:
        item = (item["prompt"], item["answer"])
    if not isinstance(item, (tuple, list)) or len(item) != 2 or item[1] is None or not str(item[1]).strip():
        raise ScaleRLError(
            f"task.path {spec!r}: prompts() item {index} is {str(item)[:80]}; expected (question, "
            "answer) or {prompt: ..., answer: ...} with a non-empty answer"
        )
    question, answer = item
    if not isinstance(question, (str, list)) or not question:
        raise ScaleRLError(
            f"task.path {spec!r}: prompts() item {index}: the question is {str(question)[:80]}; "
            "expected text or a list of {role, content} messages"
        )
    return question, str(answer)


def draw_rows(source, seed: int, want: int, spec: str) -> tuple[list[Row], bool]:
    """(up to `want` rows of distinct questions from `source.prompts(seed)`, whether it ended first). What
    the user's `prompts` raises, called or iterated, is a `UserCodeError` naming it."""
    items = _UserItems(source, seed, spec)
    rows, seen = [], set()
    for index, item in enumerate(itertools.islice(items, want * DRAWS_PER_PROMPT)):
        question, answer = _pair(item, spec, index)
        key = str(question)
        if key not in seen:
            seen.add(key)
            rows.append(Row(question, answer, {"answer": answer}))
            if len(rows) == want:
                return rows, False
    if next(items, None) is not None:
        raise ScaleRLError(
            f"task.path {spec!r}: {want * DRAWS_PER_PROMPT:,} prompts drawn hold only {len(rows)} "
            f"distinct questions of the {want} wanted (task.train_size + task.val_size)"
        )
    return rows, True


class _UserItems:
    """`source.prompts(seed)` iterated, what it raises told as the user's (`UserCodeError`)."""

    def __init__(self, source, seed: int, spec: str):
        self.what = f"task.path {spec!r}: {type(source).__name__}.prompts({seed})"
        try:
            self.items = iter(source.prompts(seed))
        except Exception as e:  # the user's code: one line naming it, then the user's frames
            raise UserCodeError(self.what, e) from None

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self.items)
        except StopIteration:
            raise
        except Exception as e:  # the user's generator raised while drawn
            raise UserCodeError(self.what, e) from None


def user_check(completion_text: str, prompt: Prompt, check, marker: str, spec: str) -> float:
    """The user's `check` on the answer section (the task's `checker`): a score in [0, 1]."""
    section = answer_section(completion_text, marker)
    if section is None:
        return 0.0
    try:
        value = check(section, prompt.answer)
    except Exception as e:  # the user's code: this completion's checker error, naming where it raised
        raise retold(f"task.path {spec}: {getattr(check, '__qualname__', 'check')} raised {located(e)}", e) from None
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
        raise RuntimeError(f"task.path {spec}: check returned {value!r}; expected a bool or a float in [0, 1]")
    return float(value)


@register(PythonTaskConfig)
class UserTask(PromptPool):
    """The prompts of a user's class, a training pool and a disjoint validation set (see the module docstring)."""

    isolate_checker = False  # the user's check runs in the scoring thread (a process would load the file again)
    score_workers = 0

    def __init__(self, cfg: PythonTaskConfig, ctx: TaskContext = TaskContext()):
        spec, options, seed, train_size, val_size = cfg.path, cfg.options, cfg.seed, cfg.train_size, cfg.val_size
        answer_marker, limit = cfg.answer_marker or ANSWER_TAG, ctx.limit(cfg)
        cls = load_task_class(spec)
        try:
            source = cls(**(options or {}))
        except Exception as e:  # the user's constructor: named with the class and the options it got
            raise UserCodeError(f"task.path {spec!r}: {cls.__name__}(**{options or {}})", e) from None
        want = (train_size or DEFAULT_TRAIN_SIZE) + (val_size or DEFAULT_VAL_SIZE)
        rows, ended = draw_rows(source, seed, want, spec)
        self.name = f"python:{cls.__name__}"
        self.instruction = instruction_for(cfg.answer_instruction, answer_marker)
        prompts, duplicates = dedupe(
            [FileTask._make(self.name, i, row, ctx.tokenizer, self.instruction) for i, row in enumerate(rows)]
        )
        default_val = val_share if ended else (lambda n: DEFAULT_VAL_SIZE)
        self._train, self._val, self.overlong = split_rows(
            prompts, duplicates, spec, limit, val_size, default_val, ctx.min_train, train_size, seed
        )
        self.seed = seed
        self.answer_marker = answer_marker
        self.checker = functools.partial(user_check, check=source.check, marker=answer_marker, spec=spec)

    def check(self, completion_text: str, prompt: Prompt) -> bool:
        return self.checker(completion_text, prompt) >= 1.0
