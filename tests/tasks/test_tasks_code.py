"""The code task: reading test shapes, taking the program from a completion, scoring it in the
sandbox (share of tests passed, all-or-nothing), the example file end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import scalerl.sandbox as sandbox
from scalerl.config import CodeExprTaskConfig, RewardConfig, SandboxConfig, task_config
from scalerl.errors import ScaleRLError
from scalerl.rewards import RewardFn
from scalerl.sandbox import Limits
from scalerl.tasks import get_task
from scalerl.tasks.code import CodeTest, code_check, extract_program, parse_tests, same_output
from scalerl.types import Completion, Prompt

EXAMPLE = Path(__file__).parents[2] / "examples" / "code-tasks.jsonl"
ISOLATED = sandbox.isolation_unavailable() is None
needs_sandbox = pytest.mark.skipif(
    not ISOLATED,
    reason="scoring runs programs: the sandbox refuses here (tests/tasks/test_sandbox.py asserts the refusal)",
)
FAST = Limits(timeout_s=2.0, memory_mb=256)


def answer(code: str) -> str:
    return f"<think>let me write it</think>\n```python\n{code}\n```"


def completion(text: str) -> Completion:
    return Completion(
        id="c", prompt_id="p", prompt_tokens=[], tokens=[], logprobs=[], versions=[], text=text, finish_reason="eos"
    )


def prompt_with(tests: list[CodeTest]) -> Prompt:
    return Prompt(id="p", text="q", answer="", meta={"tests": tests})


SUM_TESTS = [
    CodeTest("stdio", input="1 2\n", output="3\n"),
    CodeTest("stdio", input="5 5\n", output="10\n"),
    CodeTest("stdio", input="0 7\n", output="7\n"),
]


def test_parse_every_shape_of_the_example_file():
    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    got = [parse_tests(r, f"row {i}") for i, r in enumerate(rows)]
    assert got[0][2] == CodeTest("stdio", input="1000000000 1000000000\n", output="2000000000\n")
    assert [t.code for t in got[2]] == [
        "assert is_prime(2)",
        "assert not is_prime(1)",
        "assert is_prime(97)",
        "assert not is_prime(91)",
    ]
    assert got[3] == [
        CodeTest("call", fn="max_product", args=([1, 5, 3],), expected=15),
        CodeTest("call", fn="max_product", args=([-4, -3, 2],), expected=12),
    ]
    assert got[4] == [
        CodeTest("stdio", input="0\n", output="0\n"),
        CodeTest("stdio", input="1\n", output="1\n"),
        CodeTest("stdio", input="10\n", output="55\n"),
    ]
    assert got[5] == [
        CodeTest("call", fn="count_vowels", args=("hello",), expected=2),
        CodeTest("call", fn="count_vowels", args=("xyz",), expected=0),
    ]


@pytest.mark.parametrize(
    "row,message",
    [
        ({"prompt": "p"}, "row 3: no 'tests'"),
        ({"prompt": "p", "tests": []}, "'tests' must be a non-empty list"),
        ({"prompt": "p", "tests": "[{"}, "row 3 'tests': not valid JSON"),
        ({"prompt": "p", "tests": [{"input": "1"}]}, "row 3 test 0: expected an assert statement"),
        (
            {"prompt": "p", "tests": [{"input": "1", "output": "2", "testtype": "functional"}]},
            "needs metadata.func_name",
        ),
        ({"prompt": "p", "input_output": {"inputs": [1], "outputs": []}}, "of equal lengths"),
    ],
)
def test_bad_tests_name_the_row(row, message):
    with pytest.raises(ScaleRLError, match=message):
        parse_tests(row, "f.jsonl: row 3")


def test_extract_program():
    assert extract_program(answer("print(1)")) == "print(1)"
    assert extract_program("<think>```python\nprint(0)\n```</think>```py\nprint(2)\n```") == "print(2)"
    assert extract_program("<think>x</think>\nprint(3)\n") == "print(3)"
    assert extract_program("```python\nprint(1)\n```") is None  # no answer section: cut off while thinking
    assert extract_program("<think>x</think>   ") is None
    assert extract_program("<answer>```\nprint(4)\n```</answer>", "<answer>") == "print(4)"


def test_same_output():
    assert same_output("3  \n\n", "3\n")
    assert same_output("a\nb", "a \nb\n\n")
    assert not same_output("3\n4\n", "3\n")
    assert not same_output("", "0\n")


@needs_sandbox
def test_share_of_tests_and_all_or_nothing():
    good = "a, b = map(int, input().split())\nprint(a + b)"
    wrong_on_second = "a, b = map(int, input().split())\nprint(a + b + (1 if a == 5 else 0))"
    p = prompt_with(SUM_TESTS)
    assert code_check(answer(good), p, limits=FAST) == 1.0
    assert code_check(answer(wrong_on_second), p, limits=FAST) == pytest.approx(2 / 3)
    assert code_check(answer(wrong_on_second), p, limits=FAST, stop_early=True) == pytest.approx(1 / 3)
    assert code_check("<think>no answer yet", p, limits=FAST) == 0.0
    assert code_check(answer("while True: pass"), p, limits=Limits(timeout_s=0.5)) == 0.0


@needs_sandbox
def test_assert_and_functional_tests():
    asserts = prompt_with([CodeTest("assert", code="assert sq(3) == 9"), CodeTest("assert", code="assert sq(-2) == 4")])
    assert code_check(answer("def sq(x):\n    return x * x"), asserts, limits=FAST) == 1.0
    assert code_check(answer("def sq(x):\n    return 9"), asserts, limits=FAST) == 0.5
    # a program that exits 0 before the assert can run does not pass
    assert code_check(answer("import sys\nsys.exit(0)"), asserts, limits=FAST) == 0.0
    assert code_check(answer("import os\nos._exit(0)"), asserts, limits=FAST) == 0.0
    calls = prompt_with(
        [
            CodeTest("call", fn="pair", args=(1,), expected=[1, 2]),
            CodeTest("call", fn="pair", args=(5,), expected=[5, 6]),
        ]
    )
    assert code_check(answer("def pair(x):\n    return (x, x + 1)"), calls, limits=FAST) == 1.0  # a tuple is a list
    assert code_check(answer("def pair(x):\n    print('noise')\n    return [x, 2]"), calls, limits=FAST) == 0.5


@needs_sandbox
def test_the_example_file_end_to_end():
    """Each example row solved by a reference program passes every test; a wrong one fails; the
    reward follows reward.partial_credit."""
    task = get_task(task_config(name="code", path=str(EXAMPLE), val_size=1), sandbox=SandboxConfig(timeout_s=2.0))
    solutions = {
        "Read two integers": "a, b = map(int, input().split())\nprint(a + b)",
        "Read a line of text": "print(input()[::-1])",
        "Write a function is_prime": "def is_prime(n):\n"
        "    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))",
        "Given a list of integers": "def max_product(nums):\n    s = sorted(nums)\n"
        "    return max(s[0] * s[1], s[-1] * s[-2])",
        "Read n, then print": "n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)",
        "Return the number of vowels": "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)",
    }
    prompts = [task.train_prompt(i) for i in range(len(task))] + task.val_prompts(1)
    assert len(prompts) == 6
    for p in prompts:
        code = next(v for k, v in solutions.items() if p.meta["question"].startswith(k))
        assert "```python" in p.text and "</think>" in p.text
        assert task.check(answer(code), p), p.meta["question"]
        assert not task.check(answer("print('no')"), p)
    sums = next(p for p in prompts if p.meta["question"].startswith("Read two"))
    half = "a, b = map(int, input().split())\nprint(a + b if a < 100 else 0)"  # passes 2 of 3
    full = RewardFn(task, RewardConfig(partial_credit=True))(sums, completion(answer(half)))
    assert full.reward == pytest.approx(-1 + 2 / 3 * 2) and not full.passed
    plain = RewardFn(task, RewardConfig())(sums, completion(answer(half)))
    assert plain.reward == -1.0 and not plain.passed


def test_code_task_needs_a_path_and_refuses_without_isolation(monkeypatch):
    with pytest.raises(ScaleRLError, match="task type 'code' needs task.path"):
        get_task(task_config(name="code"))
    monkeypatch.setattr(sandbox, "isolation_unavailable", lambda: "sandbox isolation unavailable: test")
    with pytest.raises(ScaleRLError, match="sandbox isolation unavailable: test; .*sandbox.allow_unisolated=true"):
        get_task(task_config(name="code", path=str(EXAMPLE), val_size=1))


def test_scoring_runs_beside_generation_in_a_pool():
    """With workers, a group's completions are scored concurrently as they arrive (the 4 scores meet at a
    barrier: scored one after another, they could not), in their order; the group records the scoring
    time; a scorer's error reaches the caller."""
    import threading
    import time

    from scalerl.transport.window import GroupAssembler
    from scalerl.types import Score

    together = threading.Barrier(4, timeout=120)  # broken (an error) unless the 4 run at once
    spans, lock = [], threading.Lock()

    def pooled_reward(prompt, c):
        t0 = time.monotonic()
        together.wait()
        with lock:
            spans.append(time.monotonic() - t0)
        if c.text == "boom":
            raise RuntimeError("scorer failed")
        return Score(float(c.text), c.text == "1")

    asm = GroupAssembler(4, pooled_reward, workers=4)
    seen = asm.add_prompt(Prompt(id="p", text="q", answer=""))
    texts = ["1", "0", "1", "0"]
    groups = [asm.add(dataclasses_replace(completion(t), seen.id)) for t in texts[:3]]
    t0 = time.monotonic()
    groups.append(asm.add(dataclasses_replace(completion(texts[3]), seen.id)))
    last_add = time.monotonic() - t0
    assert groups[:3] == [None, None, None]
    g = groups[3]
    assert [s.reward for s in g.scores] == [1.0, 0.0, 1.0, 0.0] and g.passes == 2
    assert g.score_seconds >= sum(spans) and 0 <= g.score_wait <= last_add  # each score timed around its call
    seen = asm.add_prompt(Prompt(id="p", text="q", answer=""))
    for t in ["1", "1", "1"]:
        asm.add(dataclasses_replace(completion(t), seen.id))
    with pytest.raises(RuntimeError, match="scorer failed"):
        asm.add(dataclasses_replace(completion("boom"), seen.id))
    asm.close()
    inline = GroupAssembler(2, lambda p, c: Score(1.0, True))
    seen = inline.add_prompt(Prompt(id="p", text="q", answer=""))
    inline.add(dataclasses_replace(completion("1"), seen.id))
    t0 = time.monotonic()
    g = inline.add(dataclasses_replace(completion("1"), seen.id))
    assert 0 <= g.score_wait <= time.monotonic() - t0 and g.score_seconds >= 0


def _held_reward(release: dict, held: list, lock):
    """A reward whose scores of a prompt named in `release` wait for its event (the time waited into `held`);
    a completion "boom" raises."""
    import time

    from scalerl.types import Score

    def reward(prompt, c):
        if prompt.text in release:
            t0 = time.monotonic()
            assert release[prompt.text].wait(120), f"the {prompt.text} scores were never released"
            with lock:
                held.append(time.monotonic() - t0)
        if c.text == "boom":
            raise RuntimeError("scorer failed")
        return Score(float(c.text), c.text == "1")

    return reward


def test_delivered_groups_are_handed_on_without_waiting_out_of_draw_order():
    """With `deliver`, `add` never waits for a score: a slow group (draw 0, its scores held until the fast
    one is delivered) is delivered after a fast one (draw 1) from the scoring threads, with how long it
    waited for its scores; a scorer's error goes to `fail`, not `deliver`; a group still being scored when
    the assembler closes is dropped. Every wait is on an event the scorers or the callbacks set."""
    import threading
    import time

    from scalerl.transport.window import GroupAssembler

    release = {"slow": threading.Event(), "late": threading.Event()}
    held, lock = [], threading.Lock()

    reward = _held_reward(release, held, lock)
    got, errors, released_at, both, failed = [], [], [], threading.Event(), threading.Event()

    def deliver(group):
        got.append(group)
        if group.draw == 1:  # the fast group is in: the slow one's scores may end
            released_at.append(time.monotonic())
            release["slow"].set()
        if len(got) == 2:
            both.set()

    def fail(error):
        errors.append(error)
        failed.set()

    asm = GroupAssembler(2, reward, workers=4, deliver=deliver, fail=fail)
    slow = asm.add_prompt(Prompt(id="s", text="slow", answer=""))
    fast = asm.add_prompt(Prompt(id="f", text="fast", answer=""))
    returned = [asm.add(dataclasses_replace(completion(t), slow.id)) for t in ("1", "0")]
    slow_added = time.monotonic()
    assert not release["slow"].is_set()  # the slow group's adds returned with its scores held
    returned += [asm.add(dataclasses_replace(completion(t), fast.id)) for t in ("1", "1")]
    assert returned == [None] * 4
    assert both.wait(120), f"{len(got)} of 2 groups delivered within 120 s"
    assert [g.draw for g in got] == [1, 0]
    assert [s.reward for s in got[1].scores] == [1.0, 0.0] and got[1].score_wait == 0.0
    assert got[1].score_latency >= released_at[0] - slow_added and got[1].score_seconds >= sum(held)
    boom = asm.add_prompt(Prompt(id="b", text="fast", answer=""))
    for t in ["1", "boom"]:
        asm.add(dataclasses_replace(completion(t), boom.id))
    assert failed.wait(120), "the scorer's error reported within 120 s"
    assert len(got) == 2 and [str(e) for e in errors] == ["scorer failed"]
    late = asm.add_prompt(Prompt(id="l", text="late", answer=""))
    for t in ["1", "1"]:
        asm.add(dataclasses_replace(completion(t), late.id))
    asm.close()  # while the late group's scores are held
    release["late"].set()
    asm._pool.shutdown(wait=True)  # its scorers and their callbacks have ended
    assert len(got) == 2 and len(errors) == 1


def dataclasses_replace(c: Completion, prompt_id: str) -> Completion:
    import dataclasses

    return dataclasses.replace(c, prompt_id=prompt_id)


def built_anywhere(monkeypatch) -> None:
    """Build code tasks where the sandbox refuses too (these tests run no program there)."""
    if not ISOLATED:
        monkeypatch.setattr(sandbox, "isolation_unavailable", lambda: None)


def test_code_expr_problems_are_consistent(monkeypatch):
    """Each built-in problem's tests agree with an independent evaluation of its expression by
    Python, the splits are disjoint, ids stable, and the reference program passes (when isolated)."""
    from scalerl.tasks.code_expr import ExprCodeTask, parse_name

    built_anywhere(monkeypatch)

    task = ExprCodeTask(CodeExprTaskConfig(seed=3, train_size=64, val_size=16))
    train = [task.train_prompt(i) for i in range(40)]
    val = task.val_prompts(16)
    assert {p.meta["expression"] for p in train}.isdisjoint({p.meta["expression"] for p in val})
    assert task.train_prompt(5) == train[5] and train[5].id == "code-expr/s3/train/5"
    assert {p.meta["subset"] for p in train} == {"depth1", "depth2", "depth3"}
    for p in train + val:
        for t in p.meta["tests"]:
            a, b = map(int, t.input.split())
            assert t.output == f"{eval(p.meta['expression'], {}, {'a': a, 'b': b})}\n", p.meta["expression"]
    assert parse_name("code-expr-2") == (2,)
    with pytest.raises(ScaleRLError, match="code-expr-<depth 1-6>"):
        parse_name("code-expr-x")
    if ISOLATED:
        assert task.check("<think>ok</think>" + train[0].answer, train[0])
        assert not task.check("<think>ok</think>print(0)", train[0])


def test_the_two_domain_warm_start_alternates_sums_and_programs_that_pass(monkeypatch):
    """`ladder-code-1m`'s warm-start examples: every other one a code-expr problem whose target is
    its reference program after empty thinking (a program that passes its own tests, checked in the
    sandbox where there is one), the others the ladder's sums; the fits of the models built before
    it keep their cache keys (no `code` in their build spec)."""
    from scalerl.models import tiny
    from scalerl.models.warmstart import WarmStartSettings
    from scalerl.tasks.code_expr import ExprCodeTask

    built_anywhere(monkeypatch)
    from scalerl.tasks.arith import ArithTask

    warm = tiny.Interleaved([ArithTask("arith", seed=0), tiny.CodeProblems("code-expr", 0)])
    examples = [warm.train_prompt(i) for i in range(8)]
    assert [("tests" in p.meta) for p in examples] == [False, True] * 4
    task = ExprCodeTask(CodeExprTaskConfig(seed=0))
    for i, p in enumerate(examples[1::2]):
        assert p == task.train_prompt(i)  # problem i of the task
        target = p.meta["target"]
        assert target.startswith("<think></think>```python\n") and p.meta["expression"] in target
        if ISOLATED:
            assert task.check(target, p)
        assert warm.check(target, p) and not warm.check(target.replace("print(", "print(1 + "), p)  # the monitor
    for i, p in enumerate(examples[0::2]):
        assert warm.check(p.meta["target"], p) == ArithTask("arith", seed=0).check(p.meta["target"], p)
        assert p.meta["target"] == ArithTask("arith", seed=0).train_prompt(i).meta["target"]
    settings = WarmStartSettings()
    assert "code" not in tiny.build_spec(settings, "tiny", 0.85, "arith")
    assert tiny.build_spec(settings, "tiny", 0.85, "arith+code-expr")["code"]["tasks"] == ["code-expr"]


def test_mix_of_domains_tags_prompts_and_dispatches_checkers(monkeypatch):
    built_anywhere(monkeypatch)
    task = get_task(task_config(name="arith,code-expr", weights=[3, 1], val_size=8, train_size=400))
    domains = [task.train_prompt(i).meta["domain"] for i in range(len(task))]
    assert len(domains) == 400 and domains.count("arith") == 300 and domains.count("code-expr") == 100
    val = task.val_prompts(8)
    assert [p.meta["domain"] for p in val] == ["arith"] * 6 + ["code-expr"] * 2
    arith = next(p for p in val if p.meta["domain"] == "arith")
    assert task.check(f"<think>x</think>{arith.answer}", arith)
    assert task.checker(f"<think>x</think>{arith.answer}", arith)
    assert task.score_workers > 0 and not task.isolate_checker
    with pytest.raises(ScaleRLError, match="expected 2 weights"):
        get_task(task_config(name="arith,code-expr", weights=[1, 2, 3]))
    with pytest.raises(ScaleRLError, match="a part is named twice"):
        get_task(task_config(name="arith,arith"))


def test_evaluation_reports_each_domain():
    from scalerl.evaluate import evaluate
    from scalerl.types import Score

    prompts = [Prompt(id=f"p{i}", text="q", answer="", meta={"domain": "arith" if i < 2 else "code"}) for i in range(4)]

    class Gen:
        def generate(self, ps, k):
            return [
                Completion(
                    id=f"{p.id}-{j}",
                    prompt_id=p.id,
                    prompt_tokens=[],
                    tokens=[1],
                    logprobs=[0.0],
                    versions=[0],
                    text=p.id,
                    finish_reason="eos",
                )
                for p in ps
                for j in range(k)
            ]

    passing = {"p0", "p2", "p3"}  # arith 1 of 2, code 2 of 2
    row = evaluate(Gen(), prompts, 2, lambda p, c: Score(1.0, c.text in passing), workers=2)
    assert row["val/pass_rate"] == 0.75
    assert row["val/pass_rate/arith"] == 0.5 and row["val/pass_rate/code"] == 1.0


def test_a_two_domain_build_runs_end_to_end(tmp_path, monkeypatch):
    """A two-step `build_tiny` on the mix saves a model that loads, its monitor over both domains."""
    import json

    from scalerl.models import tiny
    from scalerl.models.warmstart import WarmStartSettings

    settings = WarmStartSettings(
        max_steps=2, batch_size=4, eval_from=2, eval_every=2, monitor_size=4, max_target_tokens=120, lo=0.0, hi=1.01
    )
    tiny.build_tiny(tmp_path, settings, shape="tiny", wrong_order_share=0.85, warm_task="arith+code-expr")
    summary = json.loads((tmp_path / "warm_start.json").read_text())
    assert summary["chosen_step"] == 2 and 0.0 <= summary["history"][0]["monitor_pass"] <= 1.0
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(tmp_path).config.max_position_embeddings >= 420  # prompt + target


def test_each_domain_counts_its_groups_that_all_failed_or_all_passed():
    """`batch/drawn|all_failed|all_passed/<domain>` (monitor.domain_counts): counted by hand below;
    a prompt without a domain (a single task) adds nothing."""
    from scalerl.monitor import domain_counts
    from scalerl.types import Group, Score

    def group(domain, passed):
        meta = {} if domain is None else {"domain": domain}
        return Group(
            prompt=Prompt(id="p", text="", answer="", meta=meta),
            completions=[completion("x")] * len(passed),
            scores=[Score(1.0 if p else 0.0, p) for p in passed],
        )

    groups = [
        group("code", [False, False]),
        group("code", [True, False]),
        group("code", [False, False]),
        group("arith", [True, True]),
        group(None, [False, False]),
    ]
    assert domain_counts(groups) == {
        "batch/drawn/code": 3.0,
        "batch/all_failed/code": 2.0,
        "batch/all_passed/code": 0.0,
        "batch/drawn/arith": 1.0,
        "batch/all_failed/arith": 0.0,
        "batch/all_passed/arith": 1.0,
    }
    assert domain_counts([group(None, [True])]) == {}


def test_copies_of_a_program_run_once_and_the_cache_is_bounded(monkeypatch):
    """`code_check` with `reuse`: 8 copies of one program scored from 8 threads at once run its 3
    tests once (3 sandbox runs, counted by a stand-in for run_program), a different program runs
    its own; without `reuse` every copy runs; the cache keeps its last `entries` results only."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import scalerl.tasks.code as code
    from scalerl.sandbox import SandboxResult

    calls, lock = [], threading.Lock()

    def fake_run_program(source, stdin="", limits=None, allow_unisolated=False):
        with lock:
            calls.append((source, stdin))
        time.sleep(0.05)  # long enough for the copies to arrive while the first runs
        out = str(sum(map(int, stdin.split()))) + "\n" if "a + b" in source else "0\n"
        return SandboxResult("ok", out, "", 0, 0.05)

    monkeypatch.setattr(code, "run_program", fake_run_program)
    monkeypatch.setattr(code, "RESULTS", code.ResultCache(entries=2))
    tests = [CodeTest("stdio", input=f"{a} {b}\n", output=f"{a + b}\n") for a, b in [(1, 2), (3, 4), (0, 0)]]
    prompt = Prompt(id="p", text="", answer="", meta={"tests": tests})
    good = "</think>```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    bad = "</think>```python\nprint(0)\n```"
    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(lambda t: code_check(t, prompt), [good] * 8 + [bad] * 2))
    assert scores == [1.0] * 8 + [pytest.approx(1 / 3)] * 2
    assert len(calls) == 6 and code.RESULTS.runs == 2 and code.RESULTS.reused == 8
    calls.clear()
    assert [code_check(t, prompt, reuse=False) for t in [good] * 3] == [1.0] * 3 and len(calls) == 9
    calls.clear()
    code_check(good, prompt)  # reused: now the most recent of the two kept
    code_check("</think>```python\nprint(1)\n```", prompt)  # a third result for 2 places: bad goes
    assert len(calls) == 3
    code_check(good, prompt)  # still kept: no run
    assert len(calls) == 3
    code_check(bad, prompt)  # run again
    assert len(calls) == 6


def test_a_groups_sandbox_cpu_is_counted_from_every_scoring_thread_and_checker_worker():
    """`Group.score_cpu_seconds` (the step's `time/score_cpu`) sums the CPU time of the sandbox runs
    made to score the group, in whichever scoring thread ran them; a run made in a checker worker
    process (a task whose checker is isolated) is credited to the thread that asked for it."""
    import threading

    from scalerl import sandbox
    from scalerl.rewards import CheckerPool
    from scalerl.transport.window import GroupAssembler
    from scalerl.types import Score

    src = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.05:\n    pass\nprint('ok')\n"
    runs, lock = [], threading.Lock()

    def reward(prompt, c):
        r = sandbox.run_program(src)
        with lock:
            runs.append(r)
        return Score(float(r.status == "ok"), r.status == "ok")

    asm = GroupAssembler(4, reward, workers=2)
    seen = asm.add_prompt(Prompt(id="p", text="q", answer=""))
    g = [asm.add(dataclasses_replace(completion("x"), seen.id)) for _ in range(4)][-1]
    asm.close()
    assert len(runs) == 4
    if sandbox.isolation_unavailable() is not None:
        assert g.score_cpu_seconds == 0.0 and all(r.cpu_seconds is None for r in runs)
    else:
        assert g.score_cpu_seconds == pytest.approx(sum(r.cpu_seconds for r in runs))
        assert g.score_cpu_seconds >= 4 * 0.05
    pool = CheckerPool(1)
    try:
        before = sandbox.cpu_seconds_used()
        r, _ = pool.call_timed(sandbox.run_program, (src,), 60.0)
        assert sandbox.cpu_seconds_used() - before == pytest.approx(r.cpu_seconds or 0.0)
        if sandbox.isolation_unavailable() is None:
            assert r.cpu_seconds >= 0.05
    finally:
        pool.close()
