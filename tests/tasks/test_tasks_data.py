"""Task pools, answer sections, and hostile dataset files: each refused in one line naming the file."""

import json
import time

import pytest

from scalerl.cli import main
from scalerl.config import RewardConfig, task_config
from scalerl.errors import ScaleRLError
from scalerl.rewards import RewardFn, answer_section
from scalerl.rl.curriculum import CurriculumExhausted, CurriculumSampler, NoPositiveResampling
from scalerl.tasks import get_task
from scalerl.tasks.arith import ArithTask
from scalerl.types import Completion, Group, Prompt, Score


def _completion(text: str) -> Completion:
    return Completion(
        id="c", prompt_id="p", prompt_tokens=[], tokens=[], logprobs=[], versions=[], text=text, finish_reason="eos"
    )


# ---------------------------------------------------------------- answer sections
@pytest.mark.parametrize(
    "text,marker,expected",
    [
        ("<think>7</think> 12 </s>", "</think>", "12"),
        ("<think>so 12", "</think>", None),  # cut before its answer
        ("Let me see, 7. Answer: 12\n", "Answer:", "12"),
        ("Let me see, 12 is close", "Answer:", None),
        ("<answer>3</answer> no, <answer>12</answer>", "<answer>", "12"),
        ("<answer>3</answer> no, <answer>12", "<answer>", "3"),  # the unclosed one is no answer
        ("<answer>12", "<answer>", None),
        ("x \\boxed{\\frac{1}{2}} then \\boxed{1{2}3}", "\\boxed{}", "1{2}3"),
        ("so \\boxed{\\frac{1}{2", "\\boxed{}", None),
    ],
)
def test_answer_section(text, marker, expected):
    assert answer_section(text, marker) == expected


def test_maths_checker_reads_the_answer_only(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"problem": f"{i}+{i}?", "answer": str(2 * i)}) + "\n" for i in range(4)))
    prompt = Prompt("p", "", "14")
    cases = {
        "</think>": ["<think>7+7=14</think>The sum is 14.", "<think>7+7 is 14, so", "14"],
        "Answer:": ["7+7. Answer: 14", "7+7 makes 14 and", "7+7 is 14? Answer: 15"],
        "\\boxed{}": ["sum \\boxed{14}", "\\boxed{14", "14"],
    }
    for marker, texts in cases.items():
        task = get_task(task_config(name="file", path=str(path), val_size=1, answer_marker=marker))
        got = [task.check(t, prompt) for t in texts]
        assert got == [True, False, False], (marker, got)


def test_arith_checker_with_a_marker():
    task = ArithTask("arith", answer_marker="Answer:")
    p = task.train_prompt(0)
    assert task.check(f"... Answer: {p.answer}", p) and not task.check(p.meta["target"], p)


# ---------------------------------------------------------------- pools
def test_arith_pool_is_finite_stable_and_disjoint_from_validation():
    task = get_task(task_config(name="arith", train_size=50, val_size=20))
    assert len(task) == 50 and task.train_size == 50
    assert [task.train_prompt(i).id for i in range(3)] == ["arith/s0/train/0", "arith/s0/train/1", "arith/s0/train/2"]
    pool = {task.train_prompt(i).text for i in range(50)}
    assert pool.isdisjoint(p.text for p in task.val_prompts(20))
    assert len(get_task(task_config(name="arith"))) == 4096  # the documented default pool (DEFAULT_TRAIN_SIZE)


def _g(prompt, n_pass, n=4):
    comps = [
        Completion(
            id=f"{prompt.id}/{i}",
            prompt_id=prompt.id,
            prompt_tokens=[],
            tokens=[],
            logprobs=[],
            versions=[],
            text="",
            finish_reason="eos",
        )
        for i in range(n)
    ]
    return Group(prompt, comps, [Score(0.0, i < n_pass) for i in range(n)])


def test_retired_prompts_never_drawn_again_across_epochs_and_resume():
    task, cur = ArithTask("arith", train_size=12), NoPositiveResampling(0.9)
    s = CurriculumSampler(task, cur, seed=5)
    first = [next(s) for _ in range(12)]
    assert sorted(p.id for p in first) == sorted(task.train_prompt(i).id for i in range(12))
    retired = {p.id for p in first[:5]}
    for p in first[:5]:
        cur.update(_g(p, 4))
    state, cstate = json.loads(json.dumps(s.state_dict())), json.loads(json.dumps(cur.state_dict()))
    drawn = [next(s).id for _ in range(21)]  # three more epochs of the 7 left
    assert s.epoch == 4 and not retired & set(drawn)
    assert [sorted(drawn[i : i + 7]) for i in (0, 7, 14)] == [sorted(drawn[:7])] * 3
    assert drawn[:7] != drawn[7:14]  # the order changes every epoch
    cur2 = NoPositiveResampling()
    cur2.load_state_dict(cstate)  # --resume
    s2 = CurriculumSampler(ArithTask("arith", train_size=12), cur2, seed=5)
    s2.load_state_dict(state)
    assert [next(s2).id for _ in range(21)] == drawn


def test_all_retired_raises_at_once_with_a_message():
    task, cur = ArithTask("arith", train_size=30), NoPositiveResampling(0.5)
    for i in range(30):
        cur.update(_g(task.train_prompt(i), 2))
    s = CurriculumSampler(task, cur, seed=0)
    t0 = time.perf_counter()
    with pytest.raises(CurriculumExhausted, match=r"all 30 training prompts are retired \(pass rate >= 0.5\)"):
        next(s)
    assert time.perf_counter() - t0 < 0.5


# ---------------------------------------------------------------- small and repetitive datasets
def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_duplicates_are_dropped_and_counted(tmp_path):
    rows = [{"prompt": f"q{i % 6}", "answer": str(i % 6)} for i in range(10)]  # 4 repeats
    with pytest.warns(UserWarning, match="4 duplicate prompts dropped"):
        task = get_task(task_config(name="file", path=str(_jsonl(tmp_path / "d.jsonl", rows)), val_size=2))
    assert task.duplicates == 4 and len(task) == 4


def _train_cli(capsys, tmp_path, *sets):
    args = [a for s in ("model.name=tiny-random", "eval.prompts=1", *sets) for a in ("--set", s)]
    code = main(["train", "--no-progress", *args, "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    return code, err


def test_fewer_training_prompts_than_a_batch_is_refused(tmp_path, capsys):
    data = _jsonl(tmp_path / "three.jsonl", [{"prompt": f"{i}+1?", "answer": str(i + 1)} for i in range(3)])
    code, err = _train_cli(
        capsys, tmp_path, "task.name=file", f"task.path={data}", "task.val_size=1", "batch.prompts=8"
    )
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{data}: 3 distinct prompts, need at least 9 (task.val_size=1" in err and "batch.prompts=8" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_one_repeated_prompt_is_refused(tmp_path, capsys):
    data = _jsonl(tmp_path / "same.jsonl", [{"prompt": "1+1?", "answer": "2"}] * 50)
    code, err = _train_cli(capsys, tmp_path, "task.name=file", f"task.path={data}", "task.val_size=1")
    assert (
        code == 2 and err == f"scalerl: error: {data}: all 50 rows repeat one prompt; a dataset needs distinct prompts"
    )


def test_builtin_pool_smaller_than_a_batch_is_refused(tmp_path, capsys):
    code, err = _train_cli(capsys, tmp_path, "task.train_size=4", "batch.prompts=8")
    assert code == 2 and "task.train_size=4 is smaller than batch.prompts=8" in err


# ---------------------------------------------------------------- hostile files
GOOD = "".join(json.dumps({"prompt": f"{i}+{i}?", "answer": str(2 * i)}) + "\n" for i in range(6))


@pytest.mark.parametrize(
    "name,content,match",
    [
        ("empty.jsonl", b"", "the file is empty"),
        (
            "latin1.jsonl",
            GOOD.encode() + b'{"prompt": "caf\xe9", "answer": "1"}\n',
            r"line 7: not UTF-8 text \(byte 0xe9",
        ),
        ("text.parquet", GOOD.encode(), "not a readable parquet file"),
        ("bad.jsonl", GOOD.encode() + b'{"prompt": "x", "answer": \n', r"line 7: not valid JSON"),
        ("list.jsonl", GOOD.encode() + b"[1, 2]\n", r"line 7: expected a JSON object, got list"),
        ("latin1.csv", b"prompt,answer\ncaf\xe9,1\n", r"line 2: not UTF-8 text"),
        ("blank.csv", b"prompt,answer\n", "no rows"),
    ],
)
def test_unreadable_file_is_one_line_naming_it(tmp_path, capsys, name, content, match):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ScaleRLError, match=match) as info:
        get_task(task_config(name="file", path=str(path), val_size=1))
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    code, err = _train_cli(capsys, tmp_path, "task.name=file", f"task.path={path}", "task.val_size=1")
    assert code == 2 and len(err.splitlines()) == 1 and str(path) in err


def test_50MB_row_is_skipped_and_counted_or_refused(tmp_path):
    path = tmp_path / "huge.jsonl"
    path.write_text(GOOD + json.dumps({"prompt": "x" * 50_000_000, "answer": "1"}) + "\n")
    t0 = time.perf_counter()
    with pytest.warns(UserWarning, match=r"1 prompts over task.max_prompt_tokens=400 skipped"):
        task = get_task(task_config(name="file", path=str(path), val_size=1, max_prompt_tokens=400))
    assert task.overlong == 1 and len(task) == 5
    with pytest.raises(
        ScaleRLError,
        match=r"huge.jsonl row 6: a prompt of 50,000,000 characters, over "
        r"task.max_prompt_tokens=400",
    ):
        get_task(
            task_config(
                name="file",
                path=str(path),
                val_size=1,
                answer_instruction=None,
                max_prompt_tokens=400,
                overlong="refuse",
            )
        )
    assert time.perf_counter() - t0 < 30


def test_prompt_limit_defaults_to_the_model_context(tmp_path, capsys):
    rows = [
        {"prompt": f"{i}?" + " pad" * (40 if i == 0 else 0), "answer": str(i)} for i in range(6)
    ]  # row 0: 162 chars
    data = _jsonl(tmp_path / "long.jsonl", rows)
    code, err = _train_cli(
        capsys,
        tmp_path,
        "task.name=file",
        f"task.path={data}",
        "task.val_size=1",
        "task.overlong=refuse",
        "rollout.max_new_tokens=400",
    )  # tiny-random: 512 positions
    assert code == 2 and "row 0: a prompt of" in err and "over task.max_prompt_tokens=112" in err


# ---------------------------------------------------------------- the maths checker on hostile answers
def test_100k_latex_answer_is_bounded_and_silent(tmp_path, capfd):
    path = _jsonl(tmp_path / "m.jsonl", [{"problem": f"{i}+{i}?", "answer": str(2 * i)} for i in range(4)])
    task = get_task(task_config(name="file", path=str(path), val_size=1, answer_marker="</think>"))
    fn = RewardFn(task, RewardConfig(timeout_s=3.0, slow_s=0.5), pool_size=1)
    attack = "</think>" + "\\frac{\\sqrt{" * 8_000 + "x" + "}}" * 8_000 + "\\left(" * 2_000  # ~120k chars
    good = fn(Prompt("w", "", "4"), _completion("<think>2+2</think>\\boxed{4}"))  # starts the worker
    comps = [_completion(attack) for _ in range(3)]
    t0 = time.perf_counter()
    scores = [fn(Prompt("p", "", "4"), c) for c in comps]
    elapsed = time.perf_counter() - t0
    fn.close()
    assert good.passed and [s.passed for s in scores] == [False] * 3
    assert elapsed < 3 * 3.0 + 10  # each answer within the timeout (+ respawns)
    out = capfd.readouterr()
    assert "frac" not in out.out + out.err  # the checker's own output stays out
