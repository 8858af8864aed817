"""Tasks: where prompts come from and how answers are checked.

`get_task(cfg, tokenizer) -> Task`:
  arith, arith-easy, arith-<D>, arith-<K>x<D>   built-in addition (see `scalerl.tasks.arith`)
  file (with `cfg.path`)                        a user JSONL/CSV/parquet dataset (`scalerl.tasks.files`)
Every task has `name`, `train_prompt(index)`, `train_prompts()` (endless; a finite dataset
cycles), `val_prompts(n)`, `check(completion_text, prompt)`, and, for `RewardFn`, `checker`
(a picklable `(completion_text, answer) -> bool`) and `isolate_checker`.

Departures from the paper:
1. Built-in synthetic tasks stand in for the paper's maths datasets (Polaris-53k) so the
   whole loop runs on a CPU; user maths datasets are read as the paper's are.
"""

from __future__ import annotations

from typing import Iterator, Protocol

from scalerl.errors import ScaleRLError
from scalerl.types import Prompt

BUILTIN = ("arith", "arith-easy", "arith-<digits>", "arith-<operands>x<digits>")


class Task(Protocol):
    name: str
    isolate_checker: bool

    def train_prompt(self, index: int) -> Prompt: ...
    def train_prompts(self) -> Iterator[Prompt]: ...
    def val_prompts(self, n: int) -> list[Prompt]: ...
    def check(self, completion_text: str, prompt: Prompt) -> bool: ...
    def checker(self, completion_text: str, answer: str) -> bool: ...


def get_task(cfg, tokenizer=None) -> Task:
    """The task named by `cfg` (a `TaskConfig`); `tokenizer` decides on a chat template."""
    if cfg.name == "file":
        if not cfg.path:
            raise ScaleRLError("task.name 'file' needs task.path (a JSONL, CSV or parquet file)")
        from scalerl.tasks.files import FileTask

        return FileTask(cfg.path, val_size=cfg.val_size, seed=cfg.seed, tokenizer=tokenizer)
    if cfg.name == "arith" or cfg.name.startswith("arith-"):
        from scalerl.tasks.arith import ArithTask

        return ArithTask(cfg.name, seed=cfg.seed, tokenizer=tokenizer)
    raise ScaleRLError(f"task.name {cfg.name!r}: expected 'file' or one of {', '.join(BUILTIN)}")
