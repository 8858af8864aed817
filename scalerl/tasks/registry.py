"""The task kinds, registered against their config class (`task.type`, scalerl.config), as losses
and engines are.

Each task module registers a builder for its config class, `(cfg, ctx: TaskContext) -> Task`: the
task class itself, built from its config and the context (arith and mix, whose classes take their own
few values, register a `build` function); `build_task` imports the class's module (`module`) on first
use and calls it. Adding a task kind touches three files: its config class in scalerl/config/tasks.py
(in `TASK_KINDS`, with only its own fields), its module with `@register(ItsConfig)`, its test
(docs/design.md, "Adding a task").
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Callable

from scalerl.config import SandboxConfig
from scalerl.errors import ScaleRLError
from scalerl.tasks.pool import PromptLimit

TASKS: dict[type, Callable] = {}


@dataclass(frozen=True)
class TaskContext:
    """What a task is built with beside its own config: the tokenizer (a chat template or not), the room
    for a prompt in the model's context (`room`: context - rollout.max_new_tokens; None: no limit but the
    task's own `max_prompt_tokens`), the fewest training prompts accepted (one batch), whether the recipe
    interrupts thinking, the sandbox's limits and all-or-nothing scoring (code tasks)."""

    tokenizer: object = None
    room: int | None = None
    min_train: int = 1
    think: bool = False
    sandbox: object = None  # a SandboxConfig (None: its defaults)
    stop_early: bool = False

    def limit(self, cfg) -> PromptLimit:
        """The prompt-length rule of a task that has one (`max_prompt_tokens`, else the context's room)."""
        if cfg.max_prompt_tokens is None and self.room is not None and self.room < 1:
            raise ScaleRLError(
                f"rollout.max_new_tokens leaves no room for a prompt in the model's context ({self.room} tokens)"
            )
        return PromptLimit(cfg.max_prompt_tokens or self.room, cfg.overlong, self.tokenizer)

    def sandboxed(self) -> SandboxConfig:
        """The sandbox's limits (`sandbox` of the run's config; its defaults when the context has none)."""
        return self.sandbox if self.sandbox is not None else SandboxConfig()

    def part(self) -> TaskContext:
        """The context of a mix's part: any number of training prompts (the mix checks its own)."""
        return dataclasses.replace(self, min_train=1)


def register(config_cls: type) -> Callable:
    """Decorator: `build` (a task class, or a function) makes the task of `config_cls` as `build(cfg, ctx)`
    (see the module docstring)."""

    def add(build: Callable) -> Callable:
        TASKS[config_cls] = build
        return build

    return add


def build_task(cfg, ctx: TaskContext = TaskContext()):
    """The task `cfg` (a member of `scalerl.config.TaskConfig`) describes."""
    return (TASKS.get(type(cfg)) or _first_use(type(cfg)))(cfg, ctx)


def _first_use(cls: type) -> Callable:
    """The builder of `cls`, its module imported (`cls.module`), which registers it."""
    importlib.import_module(cls.module)
    if cls not in TASKS:
        raise ScaleRLError(
            f"task.type {cls.model_fields['type'].default!r}: no task is registered for "
            f"{cls.__name__} (its module {cls.module} registers none)"
        )
    return TASKS[cls]


def at_least(task, min_train: int):
    """`task`, refused when it holds fewer training prompts than one batch."""
    if len(task) < min_train:
        raise ScaleRLError(f"task {task.name}: task.train_size={len(task)} is smaller than batch.prompts={min_train}")
    return task
