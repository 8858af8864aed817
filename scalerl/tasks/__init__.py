"""Tasks: where prompts come from and how answers are checked.

`get_task(cfg, tokenizer) -> Task`, or `task_for_run(cfg, tokenizer, model)` for a training run
(the run's batch size, prompt-length limit and thinking format applied):
  arith, arith-easy, arith-<D>, arith-<K>x<D>   built-in addition (see `scalerl.tasks.arith`)
  file (with `cfg.path`)                        a user dataset: JSONL/JSON/CSV/parquet, save_to_disk, Hub (`scalerl.tasks.files`)
  code (with `cfg.path`)                        programming problems with tests, run in the sandbox (`scalerl.tasks.code`)
  code-expr, code-expr-<D>                      built-in: print an expression of two integers (`scalerl.tasks.code_expr`)
  <a>,<b>,...                                   a weighted mix of the above, per-domain pass rates (`scalerl.tasks.mix`)
  rg:<dataset>, rg:<a>,<b>,...                  reasoning-gym datasets and weighted mixes (`scalerl.tasks.rg`)
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

from typing import Callable, Protocol

from scalerl.config import DEFAULT_VAL_SIZE
from scalerl.errors import ScaleRLError
from scalerl.tasks.arith import DEFAULT_TRAIN_SIZE   # pool of the built-in tasks by default
from scalerl.tasks.pool import PromptLimit
from scalerl.types import Prompt

BUILTIN = ("arith", "arith-easy", "arith-<digits>", "arith-<operands>x<digits>", "code-expr", "code-expr-<depth>")


class Task(Protocol):
    name: str
    train_size: int
    val_size: int
    answer_marker: str          # where the checker reads the answer (`scalerl.rewards.answer_section`)
    isolate_checker: bool
    score_workers: int          # completions scored concurrently beside generation (0: inline; optional)
    checker: Callable[[str, Prompt], float]

    def __len__(self) -> int: ...
    def train_prompt(self, index: int) -> Prompt: ...
    def val_prompts(self, n: int) -> list[Prompt]: ...
    def check(self, completion_text: str, prompt: Prompt) -> bool: ...


def get_task(cfg, tokenizer=None, *, limit: PromptLimit = PromptLimit(), min_train: int = 1,
             think: bool = False, sandbox=None, stop_early: bool = False) -> Task:
    """The task named by `cfg` (a `TaskConfig`); `tokenizer` decides on a chat template.

    `limit`: the prompt-length rule; `min_train`: the fewest training prompts accepted
    (one batch); `think`: the recipe interrupts thinking (reasoning-gym opens a `<think>`);
    `sandbox` (a `SandboxConfig`, default limits when None) and `stop_early` (all-or-nothing
    rewards: a code answer's first failing test decides): code tasks."""
    marker = cfg.answer_marker
    if "," in cfg.name and not cfg.name.startswith("rg:"):
        return _mix_task(cfg, tokenizer, limit, min_train, think, sandbox, stop_early)
    if cfg.name == "code" or cfg.name.startswith("code-expr"):
        return _code_task(cfg, tokenizer, limit, min_train, sandbox, stop_early)
    if cfg.name == "file":
        if not cfg.path:
            raise ScaleRLError("task.name 'file' needs task.path (a JSONL, JSON, CSV or parquet file, a folder saved "
                               "by datasets' save_to_disk, or a Hub dataset id)")
        from scalerl.rewards import ANSWER_TAG
        from scalerl.tasks.files import FileTask

        return FileTask(cfg.path, val_size=cfg.val_size, seed=cfg.seed, tokenizer=tokenizer, train_size=cfg.train_size,
                        answer_marker=marker or ANSWER_TAG, limit=limit, min_train=min_train, columns=cfg.columns,
                        instruction=cfg.answer_instruction, shots=cfg.shots)
    if cfg.columns:
        raise ScaleRLError(f"task.columns applies to task.name 'file', not {cfg.name!r}")
    val_size = cfg.val_size or DEFAULT_VAL_SIZE
    if cfg.name.startswith("rg:"):
        from scalerl.tasks.rg import ANSWER_TAG, RgTask
        from scalerl.tasks.rg import DEFAULT_TRAIN_SIZE as RG_TRAIN_SIZE

        return RgTask(cfg.name, cfg.options, cfg.weights, train_size=cfg.train_size or RG_TRAIN_SIZE,
                      val_size=val_size, seed=cfg.seed, tokenizer=tokenizer, system_prompt=cfg.system_prompt,
                      answer_marker=marker or ANSWER_TAG, think=think, limit=limit, min_train=min_train,
                      shots=cfg.shots, instruction=cfg.answer_instruction)
    if cfg.shots:
        raise ScaleRLError(f"task.shots applies to reasoning-gym tasks (rg:...) and files (file), not {cfg.name!r}")
    if cfg.options or cfg.weights:
        raise ScaleRLError(f"task.options / task.weights apply to reasoning-gym tasks (rg:...), not {cfg.name!r}")
    if cfg.name == "arith" or cfg.name.startswith("arith-"):
        from scalerl.tasks.arith import ArithTask

        task = ArithTask(cfg.name, seed=cfg.seed, tokenizer=tokenizer, train_size=cfg.train_size or DEFAULT_TRAIN_SIZE,
                         answer_marker=marker or "</think>", val_size=val_size)
        if len(task) < min_train:
            raise ScaleRLError(f"task.train_size={len(task)} is smaller than batch.prompts={min_train}")
        return task
    raise ScaleRLError(f"task.name {cfg.name!r}: expected 'file', 'code', 'rg:<dataset>' or one of {', '.join(BUILTIN)}")


def _mix_task(cfg, tokenizer, limit: PromptLimit, min_train: int, think: bool, sandbox, stop_early: bool) -> Task:
    """`arith,code`: each part as its name gives it alone, mixed by `task.weights` (`scalerl.tasks.mix`)."""
    from scalerl.tasks.mix import MixTask

    names = [n.strip() for n in cfg.name.split(",")]
    if any(not n or n.startswith("rg:") for n in names):
        raise ScaleRLError(f"task.name {cfg.name!r}: expected built-in, 'code' or 'file' parts separated by commas "
                           "(a reasoning-gym mix is 'rg:<a>,<b>')")
    parts = [(n, get_task(cfg.model_copy(update={"name": n, "weights": None}), tokenizer, limit=limit, think=think,
                          sandbox=sandbox, stop_early=stop_early)) for n in names]
    task = MixTask(parts, cfg.weights, seed=cfg.seed, train_size=cfg.train_size)
    if len(task) < min_train:
        raise ScaleRLError(f"task {task.name}: {len(task)} training prompts, fewer than batch.prompts={min_train}")
    return task


def _code_task(cfg, tokenizer, limit: PromptLimit, min_train: int, sandbox, stop_early: bool) -> Task:
    from scalerl.config import SandboxConfig
    from scalerl.rewards import THINK_CLOSE
    from scalerl.sandbox import Limits
    from scalerl.tasks.code import CodeTask

    sb = sandbox if sandbox is not None else SandboxConfig()
    limits = Limits(timeout_s=sb.timeout_s, memory_mb=sb.memory_mb, output_limit=sb.output_limit, nproc=sb.nproc,
                    disk_mb=sb.disk_mb)
    if cfg.name.startswith("code-expr"):
        from scalerl.tasks.code_expr import DEFAULT_TRAIN_SIZE as EXPR_TRAIN_SIZE
        from scalerl.tasks.code_expr import ExprCodeTask

        task = ExprCodeTask(cfg.name, seed=cfg.seed, train_size=cfg.train_size or EXPR_TRAIN_SIZE,
                            val_size=cfg.val_size or DEFAULT_VAL_SIZE, answer_marker=cfg.answer_marker or THINK_CLOSE,
                            limits=limits, allow_unisolated=sb.allow_unisolated, stop_early=stop_early,
                            tokenizer=tokenizer, reuse=sb.reuse_results)
        if len(task) < min_train:
            raise ScaleRLError(f"task.train_size={len(task)} is smaller than batch.prompts={min_train}")
        return task
    if not cfg.path:
        raise ScaleRLError("task.name 'code' needs task.path (a JSONL of prompts with tests, see "
                           "examples/code-tasks.jsonl)")
    if cfg.columns or cfg.options or cfg.weights or cfg.shots:
        raise ScaleRLError("task.columns / options / weights / shots do not apply to task.name 'code'")
    return CodeTask(cfg.path, val_size=cfg.val_size, seed=cfg.seed, tokenizer=tokenizer, train_size=cfg.train_size,
                    answer_marker=cfg.answer_marker or THINK_CLOSE, limit=limit, min_train=min_train,
                    instruction=cfg.answer_instruction, limits=limits, allow_unisolated=sb.allow_unisolated,
                    stop_early=stop_early, reuse=sb.reuse_results)


def prompt_limit(cfg, tokenizer, model) -> PromptLimit:
    """The run's prompt-length rule: `task.max_prompt_tokens`, else the model's context
    (`max_position_embeddings`) minus `rollout.max_new_tokens`."""
    limit = cfg.task.max_prompt_tokens
    if limit is None:
        context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        if context is not None:
            limit = context - cfg.rollout.max_new_tokens
            if limit < 1:
                raise ScaleRLError(f"rollout.max_new_tokens={cfg.rollout.max_new_tokens} leaves no room for a prompt in "
                                   f"the model's context of {context} tokens")
    return PromptLimit(limit, cfg.task.overlong, tokenizer)


def task_for_run(cfg, tokenizer, model) -> Task:
    """The task of a training run (`cfg`: a `Config`): at least `batch.prompts` training prompts,
    prompts within the model's context, a thinking section when the recipe interrupts."""
    return get_task(cfg.task, tokenizer, limit=prompt_limit(cfg, tokenizer, model), min_train=cfg.batch.prompts,
                    think=cfg.rollout.length.type == "interrupt", sandbox=cfg.sandbox,
                    stop_early=not cfg.reward.partial_credit and cfg.reward.threshold == 1.0)
