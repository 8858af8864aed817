"""User datasets: JSONL, JSON, CSV or parquet files, folders saved by `datasets`' `save_to_disk`,
or Hugging Face Hub ids, of `prompt`/`answer` (or `problem`/`answer`) rows, or the columns that
`task.columns` names.

Files are read line by line (JSONL), as one JSON array (.json), with `csv` or with
`pyarrow.parquet`, so that every unreadable file is one `ScaleRLError` naming the file, the line
and the problem (an empty file, bytes that are not UTF-8, a text file named .parquet, an invalid
JSON line, a row that is not an object, a missing field). A folder is read with
`datasets.load_from_disk`, a path that is neither file nor folder with `datasets.load_dataset`
(a DatasetDict: its `train` split). A prompt is text, or TRL's conversational form, a list of
`{role, content}` messages. Each row becomes a `Prompt` whose id is `<file name>:<row>:<hash of
content>` (stable while the file is unchanged) and whose `meta["columns"]` holds the row's other
columns (custom rewards receive them). Instruct tokenizers (those with a chat template) get text
as a user turn, messages as they are, with a generation prompt; without a template, messages are
their contents, one per line. The prompt says where the answer goes (`task.answer_instruction`,
by default the format of `task.answer_marker`, `<answer>` tags unless set): in a system turn for
an instruct model, before the question otherwise; the checker reads exactly that. With
`task.shots` = k (instruct models), the file's first k distinct rows in content-hash order are
taken out of the data and shown before each question as solved chat turns whose reply is only
the answer, written where the checker reads it (`<answer>87</answer>`). Prompts that repeat a
question are kept once and counted; prompts
over the length limit are skipped and counted, or refused (`scalerl.tasks.pool`). Rows are split
into training and validation by a hash of their content: the last `val_size` rows in hash order
are held out (unset: a tenth of the distinct rows, at least 1, at most 512), so the split does
not depend on file order and the two parts never share a prompt; the training pool is the rest
(or its first `train_size` in a seeded order). Answers are checked with `math-verify` on the
answer section (`scalerl.rewards`, in a worker process).

Departures from the paper:
1. The paper holds out 1,000 prompts of Polaris-53k; here `task.val_size` rows of the file, or a
   tenth of them.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from scalerl.config import DEFAULT_VAL_SIZE, FileTaskConfig
from scalerl.errors import ScaleRLError
from scalerl.rewards import ANSWER_TAG, BOXED, instruction_for, math_verify_check
from scalerl.tasks.pool import PromptPool, dedupe, split_rows
from scalerl.tasks.registry import TaskContext, register
from scalerl.types import Prompt

_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
_QUESTION_FIELDS = ("prompt", "problem")
VAL_FRACTION = 10  # a file without task.val_size holds out a tenth of its distinct rows


def _lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every non-blank line; non-UTF-8 bytes name the line."""
    out = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ScaleRLError(
                    f"{path} line {number}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
                ) from None
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
        return _read_jsonl(path)  # JSON lines in a .json file
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScaleRLError(f"{path} line {e.lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise ScaleRLError(f"{path}: element {bad} of the JSON array is not an object")
    return rows


def _read_csv(path: Path) -> list[dict]:
    lines = _lines(path)  # checks the encoding, line by line
    csv.field_size_limit(sys.maxsize)  # long fields are the length limit's business
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
_HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def _read_saved(path: Path) -> list[dict]:
    """A folder written by `datasets`' `save_to_disk`: a Dataset, or a DatasetDict's `train` split."""
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except FileNotFoundError as e:
        raise ScaleRLError(
            f"task.path {str(path)!r}: a folder, but not one saved by datasets' save_to_disk "
            f"({' '.join(str(e).split())[:200]})"
        ) from None
    return _train_split(ds, str(path)).to_list()


def _read_hub(name: str) -> list[dict]:
    """The `train` split of a Hugging Face Hub dataset (`datasets.load_dataset`)."""
    import datasets

    try:
        ds = datasets.load_dataset(name)
    except (ConnectionError, FileNotFoundError, ValueError) as e:
        raise ScaleRLError(
            f"task.path {name!r}: no such file or folder, and not loadable as a Hugging Face Hub "
            f"dataset ({' '.join(str(e).split())[:200]})"
        ) from None
    return _train_split(ds, name).to_list()


def _train_split(ds, source: str):
    if not hasattr(ds, "keys"):  # a Dataset, not a DatasetDict
        return ds
    if "train" not in ds:
        raise ScaleRLError(f"{source}: expected a 'train' split, found {', '.join(ds.keys())}")
    return ds["train"]


def read_records(path: str) -> list[dict]:
    """Every row of `path` as a dict: a file by its suffix, a `save_to_disk` folder, else a Hub id."""
    p = Path(path)
    if p.is_dir():
        return _read_saved(p)
    if p.suffix.lower() not in _READERS:
        if not p.exists() and _HUB_ID.fullmatch(path):
            return _read_hub(path)
        raise ScaleRLError(
            f"task.path {path!r}: expected a {', '.join(_SUFFIXES)} file, a folder saved by "
            f"datasets' save_to_disk, or a Hugging Face Hub dataset id"
        )
    if not p.is_file():
        raise ScaleRLError(f"task.path {path!r}: no such file")
    if p.stat().st_size == 0:
        raise ScaleRLError(f"{path}: the file is empty")
    try:
        return _READERS[p.suffix.lower()](p)
    except (OSError, MemoryError) as e:
        raise ScaleRLError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None


@dataclass(frozen=True)
class Row:
    """One dataset row: its prompt (text, or chat messages), its answer, and every column but the prompt."""

    question: str | list[dict]
    answer: str
    columns: dict


def read_rows(path: str, columns: dict[str, str] | None = None) -> list[Row]:
    """The rows of `path` (`read_records`); prompt and answer read from `columns` (`task.columns`),
    else `prompt` or `problem`, and `answer`. Any problem is a `ScaleRLError` naming the file (and row)."""
    records = read_records(path)
    if not records:
        raise ScaleRLError(f"{path}: no rows")
    field, answer = _columns(path, list(records[0]), columns or {})
    rows = []
    for i, record in enumerate(records):
        q, a = record.get(field), record.get(answer)
        if a is None or isinstance(a, (dict, list)) or not str(a).strip():
            raise ScaleRLError(f"{path}: row {i} has no {answer!r}")
        others = {k: v for k, v in record.items() if k != field}  # as TRL: the answer too
        rows.append(Row(_question(path, i, field, q), str(a), others))
    return rows


def _columns(path: str, found: list[str], columns: dict[str, str]) -> tuple[str, str]:
    """(prompt column, answer column) of a file whose columns are `found`."""
    field = columns.get("prompt") or next((f for f in _QUESTION_FIELDS if f in found), None)
    answer = columns.get("answer", "answer")
    missing = [c for c in (field, answer) if c is not None and c not in found]
    if columns and missing:
        raise ScaleRLError(
            f"{path}: task.columns names {', '.join(map(repr, missing))}, not a column of the file "
            f"(its columns: {', '.join(found)})"
        )
    if field is None or missing:
        raise ScaleRLError(
            f"{path}: expected columns prompt/answer or problem/answer, found {found} (set "
            f"task.columns={{prompt: <column>, answer: <column>}} to name others)"
        )
    return field, answer


def _question(path: str, row: int, field: str, value) -> str | list[dict]:
    """A row's prompt: non-empty text, or TRL's conversational form, a list of {role, content} messages."""
    if isinstance(value, list):
        bad = next(
            (
                m
                for m in value
                if not isinstance(m, dict)
                or not isinstance(m.get("role"), str)
                or not isinstance(m.get("content"), str)
            ),
            None,
        )
        if not value or bad is not None:
            raise ScaleRLError(
                f"{path}: row {row} {field!r}: expected text or a list of {{role, content}} messages, "
                f"got {json.dumps(bad if value else value, default=str)[:120]}"
            )
        return [{"role": m["role"], "content": m["content"]} for m in value]
    if value is None or isinstance(value, dict) or not str(value).strip():
        raise ScaleRLError(f"{path}: row {row} has no {field!r}")
    return str(value)


def _content_hash(question: str, answer: str) -> str:
    return hashlib.sha256(f"{question}\x00{answer}".encode()).hexdigest()[:12]


def val_share(distinct: int) -> int:
    """Validation prompts a file holds out when `task.val_size` is unset: a tenth of its distinct
    rows, at least 1, at most `DEFAULT_VAL_SIZE`."""
    return max(1, min(DEFAULT_VAL_SIZE, distinct // VAL_FRACTION))


@register(FileTaskConfig)
class FileTask(PromptPool):
    """A finite dataset: a training pool (traversed in epochs by the sampler) and a disjoint validation set."""

    isolate_checker = True  # math-verify uses signal timeouts: run it in a worker process
    score_workers = 0

    def __init__(self, cfg: FileTaskConfig, ctx: TaskContext = TaskContext()):
        path, answer_marker, tokenizer, limit = cfg.path, cfg.answer_marker or ANSWER_TAG, ctx.tokenizer, ctx.limit(cfg)
        rows = list(enumerate(read_rows(path, cfg.columns)))
        name = Path(path.rstrip("/")).name
        self.instruction = instruction_for(cfg.answer_instruction, answer_marker)
        rows, self.examples = take_shots(rows, cfg.shots, path, tokenizer)
        turns = example_turns(self.examples, answer_marker)
        prompts, duplicates = dedupe([self._make(name, i, row, tokenizer, self.instruction, turns) for i, row in rows])
        if len(rows) > 1 and len(prompts) == 1:
            raise ScaleRLError(f"{path}: all {len(rows)} rows repeat one prompt; a dataset needs distinct prompts")
        self._train, self._val, overlong = split_rows(
            prompts, duplicates, path, limit, cfg.val_size, val_share, ctx.min_train, cfg.train_size, cfg.seed
        )
        self.name = f"file:{name}"
        self.seed = cfg.seed
        self.duplicates, self.overlong = duplicates, overlong
        self.answer_marker = answer_marker
        self.checker = functools.partial(prompt_math_check, marker=answer_marker)

    @staticmethod
    def _make(name: str, index: int, row: Row, tokenizer, instruction: str | None, turns: list[dict] = ()) -> Prompt:
        question = _question_key(row)
        h = _content_hash(question, row.answer)
        return Prompt(
            id=f"{name}:{index}:{h}",
            text=_apply_template(row.question, tokenizer, instruction, turns),
            answer=row.answer,
            meta={"row": index, "hash": h, "question": question, "prompt": row.question, "columns": row.columns},
        )

    def check(self, completion_text: str, prompt: Prompt) -> bool:
        """math-verify inline (main thread only); `RewardFn` runs it in a worker process."""
        return self.checker(completion_text, prompt)


def prompt_math_check(completion_text: str, prompt: Prompt, marker: str = ANSWER_TAG) -> bool:
    """`math_verify_check` against the prompt's answer (the file task's picklable `checker`)."""
    return math_verify_check(completion_text, prompt.answer, marker)


def _question_key(row: Row) -> str:
    return row.question if isinstance(row.question, str) else json.dumps(row.question, ensure_ascii=False)


def take_shots(
    rows: list[tuple[int, Row]], shots: int, path: str, tokenizer
) -> tuple[list[tuple[int, Row]], list[Row]]:
    """(the rows left, `shots` solved examples taken out of them): the first distinct rows in content-
    hash order, so never a validation row (the split holds out the last ones) and never trained on;
    the same whatever the seed or the file's order. Examples are chat turns: an instruct model only."""
    if not shots:
        return rows, []
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ScaleRLError("task.shots needs an instruct model (a tokenizer with a chat template)")
    first: dict[str, Row] = {}
    for _, row in sorted(rows, key=lambda r: _content_hash(_question_key(r[1]), r[1].answer)):
        first.setdefault(_question_key(row), row)
    if len(first) <= shots:
        raise ScaleRLError(f"{path}: task.shots={shots} leaves no row to train on ({len(first)} distinct rows)")
    examples = list(first.values())[:shots]
    shown = {_question_key(r) for r in examples}
    return [(i, r) for i, r in rows if _question_key(r) not in shown], examples


def example_reply(answer: str, marker: str) -> str:
    """A solved example's reply: only the answer, written where `answer_section(text, marker)` reads it."""
    if marker == BOXED:
        return f"\\boxed{{{answer}}}"
    tag = re.fullmatch(r"<([A-Za-z_][\w-]*)>", marker)
    return f"{marker}{answer}</{tag.group(1)}>" if tag else f"{marker} {answer}"


def example_turns(examples: list[Row], marker: str) -> list[dict]:
    """The examples as earlier chat turns: each question's user turns, then the reply."""
    turns = []
    for row in examples:
        asked = (
            [{"role": "user", "content": row.question}]
            if isinstance(row.question, str)
            else [m for m in row.question if m["role"] != "system"]
        )
        turns += [*asked, {"role": "assistant", "content": example_reply(row.answer, marker)}]
    return turns


def _apply_template(
    question: str | list[dict], tokenizer, instruction: str | None = None, turns: list[dict] = ()
) -> str:
    """The prompt text: a chat template's rendering (text becomes a user turn) with a generation
    prompt, `instruction` in a system turn (after the row's own system turn, if it has one; in the
    first user turn when the template refuses a system role), solved examples (`turns`, task.shots)
    before the question; without a template, `instruction`, a blank line, and the text or the
    messages' contents one per line."""
    messages = [{"role": "user", "content": question}] if isinstance(question, str) else question
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        body = question if isinstance(question, str) else "\n".join(m["content"] for m in messages)
        return f"{instruction}\n\n{body}" if instruction else body
    if turns:
        at = 1 if messages[0]["role"] == "system" else 0
        messages = [*messages[:at], *turns, *messages[at:]]
    if not instruction:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if messages[0]["role"] == "system":
        system = [{"role": "system", "content": f"{messages[0]['content']}\n\n{instruction}"}, *messages[1:]]
    else:
        system = [{"role": "system", "content": instruction}, *messages]
    from jinja2 import TemplateError

    try:
        return tokenizer.apply_chat_template(system, tokenize=False, add_generation_prompt=True)
    except TemplateError:  # a template without a system role (Gemma's): the first user turn
        first = next((i for i, m in enumerate(messages) if m["role"] == "user"), 0)
        told = [
            dict(m, content=f"{instruction}\n\n{m['content']}") if i == first else m for i, m in enumerate(messages)
        ]
        return tokenizer.apply_chat_template(told, tokenize=False, add_generation_prompt=True)
