"""Tasks: where prompts come from and how answers are checked.

The task is `task` of the run's config, a union by `type` (scalerl.config.TaskConfig); each kind
registers its builder (`scalerl.tasks.registry`):
  arith       built-in addition: arith, arith-easy, arith-<D>, arith-<K>x<D> (`scalerl.tasks.arith`)
  code_expr   built-in: print an expression of two integers (`scalerl.tasks.code_expr`)
  file        a user dataset: JSONL/JSON/CSV/parquet, save_to_disk, Hub (`scalerl.tasks.files`)
  code        programming problems with tests, run in the sandbox (`scalerl.tasks.code`)
  rg          reasoning-gym datasets and weighted mixes (`scalerl.tasks.rg`)
  mix         a weighted mix of the above, per-domain pass rates (`scalerl.tasks.mix`)
  python      the user's own class in a Python file (`scalerl.tasks.user`)
`get_task(cfg, tokenizer)` builds one; `run_tasks(cfg, tokenizer, model)` builds a training run's
(its task with the run's batch size, prompt-length limit and thinking format; its validation prompts;
its downstream sets), the one place a run's tasks are built (scalerl.assembly.run).
Every task is a finite training pool: `len(task)` prompts (`task.train_size`), read by index
with `train_prompt(index)` for 0 <= index < len(task) (stable ids; the curriculum sampler
traverses them in a seeded order per epoch), and a disjoint validation set of `val_size`
prompts, `val_prompts(n)` for n <= val_size.
`check(completion_text, prompt) -> bool` checks one answer inline; for `RewardFn`, `checker`
is a picklable `(completion_text, prompt) -> score` (bool or a float in [0, 1]) and
`isolate_checker` says whether it must run in a worker process. Checkers read the answer
section only (`scalerl.rewards.answer_section`, `task.answer_marker`).

Departures from the paper:
1. Built-in synthetic tasks stand in for the paper's maths datasets (Polaris-53k) so the
   whole loop runs on a CPU; user maths datasets are read as the paper's are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Protocol

from scalerl.config import task_config
from scalerl.errors import ScaleRLError
from scalerl.tasks.registry import TaskContext, build_task
from scalerl.types import Prompt


class Task(Protocol):
    name: str
    train_size: int
    val_size: int
    answer_marker: str  # where the checker reads the answer (`scalerl.rewards.answer_section`)
    isolate_checker: bool
    score_workers: int  # completions scored concurrently beside generation (0: inline; optional)
    checker: Callable[[str, Prompt], float]

    def __len__(self) -> int: ...
    def train_prompt(self, index: int) -> Prompt: ...
    def val_prompts(self, n: int) -> list[Prompt]: ...
    def check(self, completion_text: str, prompt: Prompt) -> bool: ...


def get_task(
    cfg,
    tokenizer=None,
    *,
    room: int | None = None,
    min_train: int = 1,
    think: bool = False,
    sandbox=None,
    stop_early: bool = False,
) -> Task:
    """The task `cfg` describes (a member of `TaskConfig`, or a short name such as 'rg:chain_sum');
    `tokenizer` decides on a chat template. `room`: the most tokens a prompt may have beside the
    task's own `max_prompt_tokens`; `min_train`: the fewest training prompts accepted (one batch);
    `think`: the recipe interrupts thinking (reasoning-gym opens a `<think>`); `sandbox` (a
    `SandboxConfig`, default limits when None) and `stop_early` (all-or-nothing rewards: a code
    answer's first failing test decides): code tasks."""
    if isinstance(cfg, str):
        cfg = task_config(cfg)
    return build_task(cfg, TaskContext(tokenizer, room, min_train, think, sandbox, stop_early))


def run_context(cfg, tokenizer, model) -> TaskContext:
    """The context a training run's tasks are built in (`cfg`: a `Config`): the room the model's
    context (`max_position_embeddings`) leaves a prompt beside `rollout.max_new_tokens`, one batch of
    training prompts at least, a thinking section when the recipe interrupts, the run's sandbox."""
    context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    room = context - cfg.rollout.max_new_tokens if context is not None else None
    return TaskContext(
        tokenizer,
        room,
        cfg.batch.prompts,
        cfg.rollout.length.type == "interrupt",
        cfg.sandbox,
        not cfg.reward.partial_credit and cfg.reward.threshold == 1.0,
    )


def task_for_run(cfg, tokenizer, model) -> Task:
    """The task of a training run (`cfg`: a `Config`), built in `run_context`."""
    return build_task(cfg.task, run_context(cfg, tokenizer, model))


@dataclass
class RunTasks:
    """A run's tasks, built once (scalerl.assembly.run) and only read by the loop: the training task, the
    validation prompts each evaluation scores, and the downstream sets (`eval.downstream`)."""

    train: Task
    val_prompts: list[Prompt]
    downstream: list[tuple[str, Task, list[Prompt], Callable]]  # (name, task, its prompts, its reward)


def run_tasks(cfg, tokenizer, model, train: Task | None = None) -> RunTasks:
    """The run's tasks (`train` given: the training task already built, e.g. by the run's components):
    the validation prompts are `eval.prompts_for` the task's held-out set; each downstream set is its
    task built as alone (no batch to fill, no prompt-length limit but its own), its first
    `eval.downstream_prompts` validation prompts and its pass/fail reward."""
    from scalerl.rewards import RewardFn

    ctx = run_context(cfg, tokenizer, model)
    train = train if train is not None else build_task(cfg.task, ctx)
    val = train.val_prompts(cfg.eval.prompts_for(train.val_size))
    downstream = []
    for spec in cfg.eval.downstream:
        task = build_task(spec, dataclasses.replace(ctx, room=None, min_train=1, stop_early=False))
        n = min(cfg.eval.downstream_prompts, task.val_size)
        downstream.append((spec.name, task, task.val_prompts(n), RewardFn(task, cfg.reward)))
    names = [name for name, *_ in downstream]
    if len(set(names)) != len(names):
        raise ScaleRLError(
            f"eval.downstream names a set twice ({', '.join(names)}): its rows would overwrite each other"
        )
    return RunTasks(train, val, downstream)
