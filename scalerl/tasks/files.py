"""User datasets: JSONL, CSV or parquet files of `prompt`/`answer` (or `problem`/`answer`) rows.

Read with Hugging Face `datasets` (`load_dataset("json" | "csv" | "parquet", data_files=...)`).
Each row becomes a `Prompt` whose id is `<file name>:<row>:<hash of content>` (stable while
the file is unchanged). Instruct tokenizers (those with a chat template) get the question as
a user turn with a generation prompt. Rows are split into training and validation by a hash
of their content: the last `val_size` rows in hash order are held out, so the split does not
depend on file order and the two parts never share a row. Answers are checked with
`math-verify` through `scalerl.tasks.rewards` (parse + verify, in a worker process).

Departures from the paper:
1. The paper holds out 1,000 prompts of Polaris-53k; here `task.val_size` rows of the file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterator

from scalerl.errors import ScaleRLError
from scalerl.types import Prompt

_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
_QUESTION_FIELDS = ("prompt", "problem")


def read_rows(path: str) -> list[tuple[str, str]]:
    """`(question, answer)` of every row; a missing field is a `ScaleRLError` naming the row."""
    from datasets import load_dataset

    p = Path(path)
    builder = _BUILDERS.get(p.suffix.lower())
    if builder is None:
        raise ScaleRLError(f"task.path {path!r}: expected a .jsonl, .json, .csv or .parquet file")
    if not p.is_file():
        raise ScaleRLError(f"task.path {path!r}: no such file")
    ds = load_dataset(builder, data_files=str(p), split="train")
    field = next((f for f in _QUESTION_FIELDS if f in ds.column_names), None)
    if field is None or "answer" not in ds.column_names:
        raise ScaleRLError(f"{path}: expected columns prompt/answer or problem/answer, found {ds.column_names}")
    rows = []
    for i, row in enumerate(ds):
        q, a = row[field], row["answer"]
        if q is None or not str(q).strip():
            raise ScaleRLError(f"{path}: row {i} has no {field!r}")
        if a is None or not str(a).strip():
            raise ScaleRLError(f"{path}: row {i} has no 'answer'")
        rows.append((str(q), str(a)))
    return rows


def _content_hash(question: str, answer: str) -> str:
    return hashlib.sha256(f"{question}\x00{answer}".encode()).hexdigest()[:12]


class FileTask:
    """A finite dataset: `train_prompts()` cycles over the training rows in a seeded order."""

    isolate_checker = True      # math-verify uses signal timeouts: run it in a worker process

    def __init__(self, path: str, val_size: int, seed: int = 0, tokenizer=None):
        rows = read_rows(path)
        if len(rows) <= val_size:
            raise ScaleRLError(f"{path}: {len(rows)} rows, need more than task.val_size={val_size}")
        name = Path(path).name
        prompts = [self._make(name, i, q, a, tokenizer) for i, (q, a) in enumerate(rows)]
        by_hash = sorted(prompts, key=lambda p: p.meta["hash"])
        self.name = f"file:{name}"
        self.seed = seed
        self._val = by_hash[len(by_hash) - val_size:]
        self._train = by_hash[:len(by_hash) - val_size]
        import random

        random.Random(seed).shuffle(self._train)

    @staticmethod
    def _make(name: str, row: int, question: str, answer: str, tokenizer) -> Prompt:
        h = _content_hash(question, answer)
        return Prompt(id=f"{name}:{row}:{h}", text=_apply_template(question, tokenizer), answer=answer,
                      meta={"row": row, "hash": h, "question": question})

    def train_prompt(self, index: int) -> Prompt:
        return self._train[index % len(self._train)]

    def train_prompts(self) -> Iterator[Prompt]:
        index = 0
        while True:
            yield self.train_prompt(index)
            index += 1

    def val_prompts(self, n: int) -> list[Prompt]:
        if n > len(self._val):
            raise ScaleRLError(f"task {self.name}: asked for {n} validation prompts, task.val_size is {len(self._val)}")
        return self._val[:n]

    @property
    def checker(self):
        from scalerl.tasks.rewards import math_verify_check

        return math_verify_check

    def check(self, completion_text: str, prompt: Prompt) -> bool:
        """math-verify inline (main thread only); `RewardFn` runs it in a worker process."""
        return self.checker(completion_text, prompt.answer)


def _apply_template(question: str, tokenizer) -> str:
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return question
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)
