"""What every finite task does to its prompts before training: dedupe, a prompt-length limit,
a disjoint train/validation split, and the checks that make a pool trainable.

- **Duplicates**: prompts whose question text repeats are kept once (the first row) and
  counted; a dataset whose rows all repeat one prompt is refused.
- **Length**: a prompt longer than `max_tokens` tokens (`task.max_prompt_tokens`, default the
  model's context minus `rollout.max_new_tokens`) is skipped and counted, or the dataset is
  refused (`task.overlong=refuse`). Bounded work whatever the row: only the first
  `max_tokens * CHARS_PER_TOKEN_MAX` characters are ever tokenized, and a prompt whose prefix
  already holds more than `max_tokens` tokens, or which is longer than that prefix, is over.
- **Size**: the training pool must hold at least `min_train` prompts (`batch.prompts`), after
  `val_size` are held out; the message names the numbers.
What was dropped is reported once, as a warning naming the source.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass
from typing import Callable

from scalerl.errors import ScaleRLError
from scalerl.types import Prompt

CHARS_PER_TOKEN_MAX = 16  # a prompt of more characters per token than this counts as over the limit


@dataclass(frozen=True)
class PromptLimit:
    """The prompt-length rule of a run (None: no limit)."""

    max_tokens: int | None = None
    overlong: str = "skip"  # skip | refuse
    tokenizer: object = None  # None: one token per character


def n_tokens_capped(text: str, limit: PromptLimit) -> int:
    """Tokens in `text`, or `max_tokens + 1` when it is certainly over the limit (bounded work)."""
    cap = limit.max_tokens * CHARS_PER_TOKEN_MAX
    if len(text) > cap:
        return limit.max_tokens + 1
    if limit.tokenizer is None:
        return len(text)
    return len(limit.tokenizer(text, add_special_tokens=False)["input_ids"])


def apply_limit(prompts: list[Prompt], limit: PromptLimit, source: str) -> tuple[list[Prompt], int]:
    """(prompts within the limit, how many were over); `refuse` raises on the first one over."""
    if limit.max_tokens is None:
        return prompts, 0
    kept = []
    for p in prompts:
        n = n_tokens_capped(p.text, limit)
        if n <= limit.max_tokens:
            kept.append(p)
        elif limit.overlong == "refuse":
            where = f" row {p.meta['row']}" if "row" in p.meta else f" prompt {p.id!r}"
            size = f"{n} tokens" if n <= limit.max_tokens else f"{len(p.text):,} characters"
            raise ScaleRLError(
                f"{source}{where}: a prompt of {size}, over task.max_prompt_tokens={limit.max_tokens} "
                f"(set task.overlong=skip to skip such rows, or raise the limit)"
            )
    return kept, len(prompts) - len(kept)


def dedupe(prompts: list[Prompt], key=lambda p: p.meta.get("question", p.text)) -> tuple[list[Prompt], int]:
    """(first prompt of each distinct question, number of duplicates dropped)."""
    seen, out = set(), []
    for p in prompts:
        k = key(p)
        if k not in seen:
            seen.add(k)
            out.append(p)
    return out, len(prompts) - len(out)


def check_sizes(source: str, distinct: int, val_size: int, min_train: int, dropped: str = "") -> None:
    """Refuse a pool that cannot give `val_size` validation and `min_train` training prompts."""
    if distinct - val_size >= min_train:
        return
    need = f"task.val_size={val_size} held out for validation + batch.prompts={min_train} for one training batch"
    raise ScaleRLError(
        f"{source}: {distinct} distinct prompts{dropped}, need at least {val_size + min_train} "
        f"({need}); lower task.val_size or batch.prompts, or add rows"
    )


def report_dropped(source: str, duplicates: int, overlong: int, limit: PromptLimit) -> str:
    """Warn once about dropped rows; return the clause for error messages ('' if none)."""
    parts = []
    if duplicates:
        parts.append(f"{duplicates} duplicate prompts dropped")
    if overlong:
        parts.append(f"{overlong} prompts over task.max_prompt_tokens={limit.max_tokens} skipped")
    if not parts:
        return ""
    warnings.warn(f"{source}: {', '.join(parts)}", stacklevel=3)
    return f" ({', '.join(parts)})"


class PromptPool:
    """A task's fixed prompts: the training pool `_train` (its ids stable) and the held-out
    `_val`, shared by the file and reasoning-gym tasks. Subclasses fill both and `name`."""

    name: str
    _train: list[Prompt]
    _val: list[Prompt]

    @property
    def train_size(self) -> int:
        return len(self._train)

    @property
    def val_size(self) -> int:
        return len(self._val)

    def __len__(self) -> int:
        return len(self._train)

    def train_prompt(self, index: int) -> Prompt:
        return self._train[index % len(self._train)]

    def val_prompts(self, n: int) -> list[Prompt]:
        if n > len(self._val):
            raise ScaleRLError(f"task {self.name}: asked for {n} validation prompts, task.val_size is {len(self._val)}")
        return self._val[:n]


def split_rows(
    prompts: list[Prompt],
    duplicates: int,
    source: str,
    limit: PromptLimit,
    val_size: int | None,
    default_val: Callable[[int], int],
    min_train: int,
    train_size: int | None,
    seed: int,
) -> tuple[list[Prompt], list[Prompt], int]:
    """A dataset's prompts (already deduplicated) into (train, val, overlong): prompts over `limit`
    dropped, the sizes checked (`val_size` None: `default_val` of the prompts kept), the validation set the last
    `val_size` by content hash (the same whatever the seed), the training pool shuffled by `seed`
    and cut to `train_size`."""
    prompts, overlong = apply_limit(prompts, limit, source)
    dropped = report_dropped(source, duplicates, overlong, limit)
    val_size = val_size if val_size is not None else default_val(len(prompts))
    check_sizes(source, len(prompts), val_size, min_train, dropped)
    by_hash = sorted(prompts, key=lambda p: p.meta["hash"])
    train, val = by_hash[: len(by_hash) - val_size], by_hash[len(by_hash) - val_size :]
    random.Random(seed).shuffle(train)
    return train[:train_size], val, overlong
