"""Code tasks: the answer is a Python program, scored by running it on tests in the sandbox.

`task.name=code` with `task.path`: a JSONL (or JSON, CSV, parquet, a saved or Hub dataset: read
as `scalerl.tasks.files` reads them) of rows with a prompt and tests, in any of these shapes
(examples/code-tasks.jsonl has one row of each):

    {"prompt": "...", "tests": [{"input": "1 2\\n", "output": "3\\n"}, ...]}        standard input/output
    {"prompt": "...", "tests": ["assert add(1, 2) == 3", ...]}                   assert statements
    {"problem": "...", "tests": "[{\\"input\\": ..., \\"output\\": ..., \\"testtype\\": \\"stdin\\"}]"}
                                                                                DeepCoder (tests as JSON text;
    {"problem": "...", "tests": [{"input": "[1, 2]", "output": "3", "testtype": "functional"}],
     "metadata": {"func_name": "add"}}                                          functional: one JSON argument
                                                                                per input line)
    {"question": "...", "input_output": "{\\"inputs\\": [...], \\"outputs\\": [...]}"}   TACO / APPS (with
                                                                                "fn_name": functional)

The prompt column is `prompt`, `problem` or `question`. The model's answer is read where the
maths answers are (`scalerl.rewards.answer_section`: after the last `</think>` by default, or
`task.answer_marker`); in it, the last fenced code block, else the whole section, is the
program. Each test is one `scalerl.sandbox.run_program` run under `sandbox.*` limits:
- standard input/output: the program reads the input; it passes when its output equals the
  expected output, line by line with trailing whitespace and trailing blank lines ignored;
- assert: the program, then the assert, then a print of a random token; it passes when the
  run ends `ok` with that token as its last line (an early `exit(0)` does not pass);
- functional: the program, then a call of the named function on the test's arguments; the
  returned value is printed (after a random token) and compared with the expected value by the
  checker, outside the sandbox.
The checker's score is the share of tests passed; with all-or-nothing rewards (`reward.partial_credit`
false, `reward.threshold` 1) it stops at the first failing test, which decides the score.

Departures from the paper:
1. The paper trains on DeepCoder's problems and scores them with its test harness; here any
   file of that shape, scored in scalerl's own sandbox (docs/sandbox.md).
2. Assert and functional tests run inside the program's process, so a program written to do
   so could find the token in its own code objects and print it; standard input/output tests
   compare outside the sandbox and cannot be fooled that way.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scalerl.config import CodeTaskConfig, SandboxConfig
from scalerl.errors import ScaleRLError
from scalerl.rewards import THINK_CLOSE, answer_section, instruction_for
from scalerl.sandbox import Limits, require_isolation, run_program
from scalerl.tasks.files import _apply_template, read_records, val_share
from scalerl.tasks.pool import PromptPool, dedupe, split_rows
from scalerl.tasks.registry import TaskContext, register
from scalerl.types import Prompt

PROMPT_FIELDS = ("prompt", "problem", "question")
STDIO_INSTRUCTION = (
    "Write a complete Python 3 program in a ```python code block: it reads the input from "
    "standard input and prints the answer to standard output."
)
FUNCTION_INSTRUCTION = "Write Python 3 code in a ```python code block that defines {what}."
FENCE = "```"
SCORE_WORKERS = min(8, 2 * len(os.sched_getaffinity(0)))  # benchmarks/sandbox.py: 2 per core is near the best


@dataclass(frozen=True)
class CodeTest:
    """One test: `kind` 'stdio' (input, output), 'assert' (code) or 'call' (fn, args, expected)."""

    kind: str
    input: str = ""
    output: str = ""
    code: str = ""
    fn: str = ""
    args: tuple = ()
    expected: object = None


def parse_tests(row: dict, where: str) -> list[CodeTest]:
    """The tests of one row, in any shape of the module docstring; a `ScaleRLError` naming `where`."""
    if "input_output" in row:
        io = _json(row["input_output"], f"{where} 'input_output'")
        if (
            not isinstance(io, dict)
            or not isinstance(io.get("inputs"), list)
            or not isinstance(io.get("outputs"), list)
            or len(io["inputs"]) != len(io["outputs"])
        ):
            raise ScaleRLError(
                f'{where}: \'input_output\' must be {{"inputs": [...], "outputs": [...]}} of equal lengths'
            )
        if io.get("fn_name"):
            return [
                CodeTest("call", fn=io["fn_name"], args=tuple(i if isinstance(i, list) else [i]), expected=o)
                for i, o in zip(io["inputs"], io["outputs"])
            ]
        return [CodeTest("stdio", input=_text(i), output=_text(o)) for i, o in zip(io["inputs"], io["outputs"])]
    if "tests" not in row:
        raise ScaleRLError(f"{where}: no 'tests' (or 'input_output') column")
    tests = _json(row["tests"], f"{where} 'tests'")
    if not isinstance(tests, list) or not tests:
        raise ScaleRLError(f"{where}: 'tests' must be a non-empty list, got {json.dumps(tests)[:80]}")
    meta = _json(row.get("metadata") or {}, f"{where} 'metadata'")
    fn = meta.get("func_name") if isinstance(meta, dict) else None
    return [_one_test(t, fn, f"{where} test {i}") for i, t in enumerate(tests)]


def _one_test(t, fn: str | None, where: str) -> CodeTest:
    if isinstance(t, str):
        if not t.strip():
            raise ScaleRLError(f"{where}: an empty assert statement")
        return CodeTest("assert", code=t)
    if not isinstance(t, dict) or "input" not in t or "output" not in t:
        raise ScaleRLError(
            f'{where}: expected an assert statement or {{"input": ..., "output": ...}}, got '
            f"{json.dumps(t, default=str)[:80]}"
        )
    if t.get("testtype") == "functional":
        if not fn:
            raise ScaleRLError(f"{where}: a functional test needs metadata.func_name")
        args = tuple(_json(line, where) for line in str(t["input"]).splitlines() if line.strip())
        return CodeTest("call", fn=fn, args=args, expected=_json(t["output"], where))
    return CodeTest("stdio", input=_text(t["input"]), output=_text(t["output"]))


def _json(value, where: str):
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise ScaleRLError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None


def _text(value) -> str:
    return "\n".join(map(str, value)) + "\n" if isinstance(value, list) else str(value)


def extract_program(completion_text: str, marker: str = THINK_CLOSE) -> str | None:
    """The program in a completion: the last fenced block of its answer section (`answer_section`),
    else the whole section; None when there is no answer section or it is empty."""
    section = answer_section(completion_text, marker)
    if section is None:
        return None
    end = section.rfind(FENCE)
    start = section.rfind(FENCE, 0, end) if end >= 0 else -1
    if start >= 0:
        body = section[start + len(FENCE) : end]
        first, _, rest = body.partition("\n")
        section = rest if first.strip().isidentifier() or not first.strip() else body
    return section.strip("\n") or None


def same_output(got: str, expected: str) -> bool:
    """Line by line, trailing whitespace and trailing blank lines ignored."""

    def lines(s: str) -> list[str]:
        out = [line.rstrip() for line in s.splitlines()]
        while out and not out[-1]:
            out.pop()
        return out

    return lines(got) == lines(expected)


def run_test(program: str, test: CodeTest, limits: Limits, allow_unisolated: bool) -> bool:
    """One test of `program` in the sandbox; see the module docstring."""
    if test.kind == "stdio":
        r = run_program(program, stdin=test.input, limits=limits, allow_unisolated=allow_unisolated)
        _raise_refused(r)
        return r.status == "ok" and same_output(r.stdout, test.output)
    token = secrets.token_hex(16)
    if test.kind == "assert":
        source = f"{program}\n\n{test.code}\nprint({token!r})\n"
    else:
        source = (
            f"{program}\n\nimport json as _j\n_r = {test.fn}(*_j.loads({json.dumps(list(test.args))!r}))\n"
            f"print({token!r} + _j.dumps(_r))\n"
        )
    r = run_program(source, limits=limits, allow_unisolated=allow_unisolated)
    _raise_refused(r)
    last = r.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    if r.status != "ok" or not last.startswith(token):
        return False
    if test.kind == "assert":
        return last == token
    try:
        return _plain(json.loads(last[len(token) :])) == _plain(test.expected)
    except json.JSONDecodeError:
        return False


def _plain(value):
    """JSON-comparable: tuples as lists (a function may return either)."""
    return json.loads(json.dumps(value))


def _raise_refused(r) -> None:
    if r.status == "refused":
        raise ScaleRLError(r.stderr)


RESULT_CACHE_ENTRIES = 4096  # scores of (program, tests) kept per process (`ResultCache`)


class ResultCache:
    """The scores of (program, tests, limits) already run, so that copies of one program run once:
    the G samples of a prompt often repeat a program (54% of the 128 programs of 16 groups were
    distinct at step 120 of the two-domain run, docs/sandbox.md), and an evaluation sees the
    same programs again. A copy that arrives while the first is running waits for its result;
    an error (a refused sandbox) is not kept. Bounded: the last `entries` results (LRU), a few
    hundred bytes each. `runs` and `reused` count since start."""

    def __init__(self, entries: int = RESULT_CACHE_ENTRIES):
        self.entries = entries
        self.runs = self.reused = 0
        self._done: OrderedDict[str, float] = OrderedDict()
        self._running: dict[str, Future] = {}
        self._lock = threading.Lock()

    def get(self, key: str, compute: Callable[[], float]) -> float:
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                self.reused += 1
                return self._done[key]
            running = self._running.get(key)
            first = running is None
            if first:
                running = self._running[key] = Future()
                self.runs += 1
            else:
                self.reused += 1
        if not first:  # another thread runs it: its result (or its error)
            return running.result()
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                del self._running[key]
            running.set_exception(exc)
            raise
        with self._lock:
            del self._running[key]
            self._done[key] = value
            while len(self._done) > self.entries:
                self._done.popitem(last=False)
        running.set_result(value)
        return value


RESULTS = ResultCache()


def code_check(
    completion_text: str,
    prompt: Prompt,
    marker: str = THINK_CLOSE,
    limits: Limits = Limits(),
    allow_unisolated: bool = False,
    stop_early: bool = False,
    reuse: bool = True,
) -> float:
    """The share of the prompt's tests the completion's program passes (0 without a program);
    `stop_early`: stop at the first failure (all-or-nothing rewards); `reuse`: a program already
    run on these tests is not run again (`RESULTS`; `sandbox.reuse_results`). The task's picklable
    checker."""
    program = extract_program(completion_text, marker)
    if program is None:
        return 0.0
    tests = prompt.meta["tests"]

    def run() -> float:
        passed = 0
        for test in tests:
            if run_test(program, test, limits, allow_unisolated):
                passed += 1
            elif stop_early:
                break
        return passed / len(tests)

    if not reuse:
        return run()
    key = hashlib.sha256(repr((program, tests, limits, allow_unisolated, stop_early)).encode()).hexdigest()
    return RESULTS.get(key, run)


def sandboxed_checker(marker: str, ctx: TaskContext) -> Callable[[str, Prompt], float]:
    """A code task's picklable checker: the answer's program run on the prompt's tests in the
    context's sandbox (`ctx.stop_early`: the first failing test decides); refused here where the
    sandbox cannot isolate a program and `sandbox.allow_unisolated` is off."""
    sb = ctx.sandboxed()
    require_isolation(sb.allow_unisolated)
    return functools.partial(
        code_check,
        marker=marker,
        limits=sandbox_limits(sb),
        allow_unisolated=sb.allow_unisolated,
        stop_early=ctx.stop_early,
        reuse=sb.reuse_results,
    )


@register(CodeTaskConfig)
class CodeTask(PromptPool):
    """A file of programming problems with tests (see the module docstring)."""

    isolate_checker = False  # the sandbox isolates each run; a worker process would add nothing
    score_workers = SCORE_WORKERS  # programs mostly wait on their process: score beside generation

    def __init__(self, cfg: CodeTaskConfig, ctx: TaskContext = TaskContext()):
        path, limit, self.answer_marker = cfg.path, ctx.limit(cfg), cfg.answer_marker or THINK_CLOSE
        self.checker = sandboxed_checker(self.answer_marker, ctx)
        records = read_records(path)
        if not records:
            raise ScaleRLError(f"{path}: no rows")
        name = Path(path.rstrip("/")).name
        self.instruction = instruction_for(cfg.answer_instruction, self.answer_marker)
        made = [self._make(name, i, r, path, ctx.tokenizer, self.instruction) for i, r in enumerate(records)]
        prompts, duplicates = dedupe(made)
        self._train, self._val, _ = split_rows(
            prompts, duplicates, path, limit, cfg.val_size, val_share, ctx.min_train, cfg.train_size, cfg.seed
        )
        self.name = f"code:{name}"
        self.seed = cfg.seed

    @staticmethod
    def _make(name: str, index: int, row: dict, path: str, tokenizer, instruction: str | None) -> Prompt:
        where = f"{path}: row {index}"
        field = next((f for f in PROMPT_FIELDS if f in row), None)
        if field is None or not isinstance(row[field], str) or not row[field].strip():
            raise ScaleRLError(
                f"{where}: expected a non-empty text column {' or '.join(PROMPT_FIELDS)}, found {sorted(row)}"
            )
        tests = parse_tests(row, where)
        question = row[field]
        calls = sorted({t.fn for t in tests if t.kind == "call"})
        if calls:
            task = FUNCTION_INSTRUCTION.format(what=" and ".join(f"the function {f}" for f in calls))
        elif all(t.kind == "stdio" for t in tests):
            task = STDIO_INSTRUCTION
        else:
            task = (
                FUNCTION_INSTRUCTION.format(what="what the tests below use")
                + "\n"
                + "\n".join(t.code for t in tests[:1] if t.kind == "assert")
            )
        body = f"{question}\n\n{task}"
        answer = json.dumps([t.__dict__ for t in tests], default=str)
        h = hashlib.sha256(f"{question}\x00{answer}".encode()).hexdigest()[:12]
        return Prompt(
            id=f"{name}:{index}:{h}",
            text=_apply_template(body, tokenizer, instruction),
            answer=answer,
            meta={"row": index, "hash": h, "question": question, "tests": tests, "kind": "code"},
        )

    def check(self, completion_text: str, prompt: Prompt) -> bool:
        return self.checker(completion_text, prompt) >= 1.0


def sandbox_limits(sb: SandboxConfig) -> Limits:
    """The sandbox's limits of one program run, from `sandbox` of the run's config."""
    return Limits(
        timeout_s=sb.timeout_s, memory_mb=sb.memory_mb, output_limit=sb.output_limit, nproc=sb.nproc, disk_mb=sb.disk_mb
    )
