"""User datasets: JSONL, JSON, CSV or parquet files of `prompt`/`answer` (or `problem`/`answer`) rows.

Read line by line (JSONL), as one JSON array (.json), with `csv` or with `pyarrow.parquet`,
so that every unreadable file is one `ScaleRLError` naming the file, the line and the problem
(an empty file, bytes that are not UTF-8, a text file named .parquet, an invalid JSON line, a
row that is not an object, a missing field). Each row becomes a `Prompt` whose id is
`<file name>:<row>:<hash of content>` (stable while the file is unchanged). Instruct
tokenizers (those with a chat template) get the question as a user turn with a generation
prompt. Prompts that repeat a question are kept once and counted; prompts over the length
limit are skipped and counted, or refused (`scalerl.tasks.pool`). Rows are split into training
and validation by a hash of their content: the last `val_size` rows in hash order are held
out, so the split does not depend on file order and the two parts never share a prompt; the
training pool is the rest (or its first `train_size` in a seeded order). Answers are checked
with `math-verify` on the answer section (`scalerl.rewards`, in a worker process).

Departures from the paper:
1. The paper holds out 1,000 prompts of Polaris-53k; here `task.val_size` rows of the file.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import random
import sys
from pathlib import Path

from scalerl.errors import ScaleRLError
from scalerl.tasks.pool import PromptPool, PromptLimit, apply_limit, check_sizes, dedupe, report_dropped
from scalerl.rewards import THINK_CLOSE, math_verify_check
from scalerl.types import Prompt

_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
_QUESTION_FIELDS = ("prompt", "problem")


def _lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every non-blank line; non-UTF-8 bytes name the line."""
    out = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ScaleRLError(f"{path} line {number}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                   f"{e.start + 1})") from None
            if text.strip():
                out.append((number, text))
    return out


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for number, text in _lines(path):
        try:
            rows.append(json.loads(text))
        except json.JSONDecodeError as e:
            raise ScaleRLError(f"{path} line {number}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(rows[-1], dict):
            raise ScaleRLError(f"{path} line {number}: expected a JSON object, got {type(rows[-1]).__name__}")
    return rows


def _read_json(path: Path) -> list[dict]:
    text = "".join(t for _, t in _lines(path))
    if not text.lstrip().startswith("["):
        return _read_jsonl(path)                         # JSON lines in a .json file
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScaleRLError(f"{path} line {e.lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise ScaleRLError(f"{path}: element {bad} of the JSON array is not an object")
    return rows


def _read_csv(path: Path) -> list[dict]:
    lines = _lines(path)                                 # checks the encoding, line by line
    csv.field_size_limit(sys.maxsize)                    # long fields are the length limit's business
    try:
        return list(csv.DictReader(t for _, t in lines))
    except csv.Error as e:
        raise ScaleRLError(f"{path}: not valid CSV ({e})") from None


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as e:
        raise ScaleRLError(f"{path}: not a readable parquet file ({' '.join(str(e).split())[:200]})") from None


_READERS = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet}


def read_rows(path: str) -> list[tuple[str, str]]:
    """`(question, answer)` of every row; any problem is a `ScaleRLError` naming the file (and row)."""
    p = Path(path)
    if p.suffix.lower() not in _READERS:
        raise ScaleRLError(f"task.path {path!r}: expected a {', '.join(_SUFFIXES)} file")
    if not p.is_file():
        raise ScaleRLError(f"task.path {path!r}: no such file")
    if p.stat().st_size == 0:
        raise ScaleRLError(f"{path}: the file is empty")
    try:
        records = _READERS[p.suffix.lower()](p)
    except (OSError, MemoryError) as e:
        raise ScaleRLError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None
    if not records:
        raise ScaleRLError(f"{path}: no rows")
    columns = list(records[0])
    field = next((f for f in _QUESTION_FIELDS if f in columns), None)
    if field is None or "answer" not in columns:
        raise ScaleRLError(f"{path}: expected columns prompt/answer or problem/answer, found {columns}")
    rows = []
    for i, row in enumerate(records):
        q, a = row.get(field), row.get("answer")
        if q is None or isinstance(q, (dict, list)) or not str(q).strip():
            raise ScaleRLError(f"{path}: row {i} has no {field!r}")
        if a is None or isinstance(a, (dict, list)) or not str(a).strip():
            raise ScaleRLError(f"{path}: row {i} has no 'answer'")
        rows.append((str(q), str(a)))
    return rows


def _content_hash(question: str, answer: str) -> str:
    return hashlib.sha256(f"{question}\x00{answer}".encode()).hexdigest()[:12]


class FileTask(PromptPool):
    """A finite dataset: a training pool (traversed in epochs by the sampler) and a disjoint validation set."""

    isolate_checker = True      # math-verify uses signal timeouts: run it in a worker process

    def __init__(self, path: str, val_size: int, seed: int = 0, tokenizer=None, train_size: int | None = None,
                 answer_marker: str = THINK_CLOSE, limit: PromptLimit = PromptLimit(), min_train: int = 1):
        rows = read_rows(path)
        name = Path(path).name
        prompts, duplicates = dedupe([self._make(name, i, q, a, tokenizer) for i, (q, a) in enumerate(rows)])
        if len(rows) > 1 and len(prompts) == 1:
            raise ScaleRLError(f"{path}: all {len(rows)} rows repeat one prompt; a dataset needs distinct prompts")
        prompts, overlong = apply_limit(prompts, limit, path)
        dropped = report_dropped(path, duplicates, overlong, limit)
        check_sizes(path, len(prompts), val_size, min_train, dropped)
        by_hash = sorted(prompts, key=lambda p: p.meta["hash"])
        self.name = f"file:{name}"
        self.seed = seed
        self.duplicates, self.overlong = duplicates, overlong
        self._val = by_hash[len(by_hash) - val_size:]
        self._train = by_hash[:len(by_hash) - val_size]
        random.Random(seed).shuffle(self._train)
        self._train = self._train[:train_size]
        self.checker = functools.partial(prompt_math_check, marker=answer_marker)

    @staticmethod
    def _make(name: str, row: int, question: str, answer: str, tokenizer) -> Prompt:
        h = _content_hash(question, answer)
        return Prompt(id=f"{name}:{row}:{h}", text=_apply_template(question, tokenizer), answer=answer,
                      meta={"row": row, "hash": h, "question": question})

    def check(self, completion_text: str, prompt: Prompt) -> bool:
        """math-verify inline (main thread only); `RewardFn` runs it in a worker process."""
        return self.checker(completion_text, prompt)


def prompt_math_check(completion_text: str, prompt: Prompt, marker: str = THINK_CLOSE) -> bool:
    """`math_verify_check` against the prompt's answer (the file task's picklable `checker`)."""
    return math_verify_check(completion_text, prompt.answer, marker)


def _apply_template(question: str, tokenizer) -> str:
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return question
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                         add_generation_prompt=True)
