"""Built-in arithmetic task and user dataset files."""

import hashlib
from collections import Counter

import pytest

from scalerl.config import RolloutConfig, task_config
from scalerl.errors import ScaleRLError
from scalerl.tasks import get_task
from scalerl.tasks.arith import ArithTask, completion_text, exact_check, problem_text


def test_worked_example_scratchpad_and_answer():
    # 1234 + 5678 = 6912; columns from the least significant: 4+8=12, 3+7+1=11, 2+6+1=9, 1+5=6
    assert problem_text((1234, 5678)) == "a4b3c2d1+a8b7c6d5="
    assert completion_text((1234, 5678), 4) == "<think>a4+8+0=12,b3+7+1=11,c2+6+1=09,d1+5+0=06,</think>a2b1c9d6"
    # 999 + 1 + 5 = 1005 (a 3-operand sum with a final carry), small operands padded to 3 digits
    assert completion_text((999, 1, 5), 3) == "<think>a9+1+5+0=15,b9+0+0+1=10,c9+0+0+1=10,</think>a5b0c0d1"


def test_exact_check_reads_the_text_after_the_last_think_close():
    assert exact_check("<think>x</think>a2b1", "a2b1")
    assert exact_check("<think>x</think> a2b1 </s><pad><pad>", "a2b1")
    assert exact_check("<think>a</think>11</think>a2b1", "a2b1")
    assert not exact_check("<think>x</think>a2b2", "a2b1")
    assert not exact_check("<think>x</think>a2b1c0", "a2b1")
    assert not exact_check("a2b1", "a2b1")  # no closed thinking part: no final answer


def test_train_prompts_are_deterministic_and_seeded():
    a, b, c = ArithTask(seed=0), ArithTask(seed=0), ArithTask(seed=1)
    assert [a.train_prompt(i) for i in range(50)] == [b.train_prompt(i) for i in range(50)]
    assert [a.train_prompt(i).text for i in range(50)] != [c.train_prompt(i).text for i in range(50)]
    stream = a.train_prompts()
    assert [next(stream).id for _ in range(3)] == ["arith/s0/train/0", "arith/s0/train/1", "arith/s0/train/2"]


def test_answers_are_the_reversed_sums():
    for p in (ArithTask(seed=3).train_prompt(i) for i in range(200)):
        ops = [int(x[1::2][::-1]) for x in p.text.rstrip("=").split("+")]  # drop letters, un-reverse
        digits = str(sum(ops))[::-1]
        assert p.answer == "".join("abcdefghijklmnopq"[i] + d for i, d in enumerate(digits))
        assert p.meta["target"].endswith("</think>" + p.answer)


def _independent_is_val(text: str) -> bool:
    ops = [str(int(x[1::2][::-1])) for x in text.rstrip("=").split("+")]
    h = hashlib.sha256(("scalerl-arith-split-v1:" + ",".join(ops)).encode()).digest()[:8]
    return int.from_bytes(h, "big") / 2**64 < 0.05


@pytest.mark.parametrize("name", ["arith", "arith-2"])
def test_validation_never_overlaps_training(name):
    task = ArithTask(name, seed=0)
    val = task.val_prompts(300)
    train = [task.train_prompt(i) for i in range(20_000)]
    assert len({p.text for p in val}) == 300
    assert not {p.text for p in val} & {p.text for p in train}
    assert all(_independent_is_val(p.text) for p in val)
    assert not any(_independent_is_val(p.text) for p in train)
    assert task.val_prompts(300) == val  # the same every call
    assert ArithTask(name, seed=5).val_prompts(1)[0].text != val[0].text or name == "arith-2"


@pytest.mark.parametrize(
    "name, expected",
    [
        ("arith", {"2x3": 1 / 3, "2x5": 1 / 3, "2x7": 1 / 3}),
        ("arith-2to7", {f"2x{d}": 1 / 6 for d in range(2, 8)}),
        ("arith-358", {"2x3": 1 / 3, "2x5": 1 / 3, "2x8": 1 / 3}),
        ("arith-tail", {"2x3": 0.62, "2x16": 0.38}),
        ("arith-mixed", {"2x2": 0.20, "2x3": 0.25, "2x4": 0.30, "2x16": 0.25}),
    ],
)
def test_difficulty_mix_frequencies_follow_the_weights(name, expected):
    counts = Counter(ArithTask(name).train_prompt(i).meta["subset"] for i in range(10_000))
    assert set(counts) == set(expected)
    for subset, share in expected.items():
        assert abs(counts[subset] / 10_000 - share) < 0.02


def test_every_rung_of_the_default_ladder_fits_the_default_budgets():
    """The default task has no item the length budget makes unlearnable: every target's thinking
    (up to and including `</think>`) closes before the earliest interruption, and the whole target
    fits the completion budget; the old tail (`arith-tail`, 16 digits) fits neither."""
    from scalerl.config import InterruptConfig
    from scalerl.models.tiny import build_tokenizer

    tok = build_tokenizer()
    budget, think_min = RolloutConfig().max_new_tokens, InterruptConfig().think_min
    for name, fits in (("arith", True), ("arith-tail", None)):
        task = ArithTask(name)
        for p in (task.train_prompt(i) for i in range(300)):
            thinking = p.meta["target"].split("</think>")[0] + "</think>"
            n_think, n = len(tok(thinking)["input_ids"]), len(tok(p.meta["target"])["input_ids"]) + 1  # + EOS
            assert n_think == 1 + 10 * p.meta["digits"] + 1  # <think>, 10 characters a column, </think>
            ok = n_think < think_min and n <= budget
            assert ok == (fits if fits is not None else p.meta["digits"] != 16)


@pytest.mark.parametrize("control,longest_kept,share_cut", [("think-56", 5, 1 / 3), ("think-40", 3, 2 / 3)])
def test_the_thinking_budget_controls_cut_exactly_the_longer_rungs(control, longest_kept, share_cut):
    """The graded controls (scalerl.study.variants.CONTROLS) interrupt thinking before the longer
    rungs' scratchpads close and after the shorter ones' do: `think-56` leaves the 7-digit third of
    the default ladder unpassable, `think-40` the 5- and 7-digit two thirds, whatever the model."""
    from scalerl.models.tiny import build_tokenizer
    from scalerl.study.variants import CONTROLS

    sets = dict(s.split("=") for s in next(c for c in CONTROLS if c[0] == control)[2])
    lo, hi = int(sets["rollout.length.think_min"]), int(sets["rollout.length.think_max"])
    tok = build_tokenizer()
    task = ArithTask("arith")
    cut = Counter()
    for p in (task.train_prompt(i) for i in range(600)):
        n_think = len(tok(p.meta["target"].split("</think>")[0] + "</think>")["input_ids"])
        assert n_think < lo or n_think > hi  # never decided by the draw
        cut[p.meta["digits"] > longest_kept] += n_think > hi
    assert cut[False] == 0 and cut[True] > 0
    assert abs(sum(cut.values()) / 600 - share_cut) < 0.05


def test_difficulty_knob_in_the_name():
    p = ArithTask("arith-3x6").train_prompt(0)
    assert p.meta == {**p.meta, "operands": 3, "digits": 6}
    assert len(p.text) == 3 * 12 + 2 + 1
    with pytest.raises(ScaleRLError, match="arith-<digits>"):
        ArithTask("arith-hard")


def test_get_task_errors_name_the_field():
    with pytest.raises(ScaleRLError, match="task.name 'poetry'"):
        get_task(task_config(name="poetry"))
    with pytest.raises(ScaleRLError, match="task.path"):
        get_task(task_config(name="file"))


def test_chat_template_wraps_the_problem():
    from scalerl.models.tiny import build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
    p = ArithTask("arith", tokenizer=tok).train_prompt(0)
    raw = ArithTask("arith").train_prompt(0)
    assert p.text.startswith("<|user|>") and p.text.endswith(raw.text + "<|assistant|>")


# ---------------------------------------------------------------- user files
ASK = "Put only your final answer between <answer> and </answer> tags, at the end of your response."
ROWS = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(12)]


def _write(tmp_path, kind, rows):
    import datasets

    path = tmp_path / f"data.{kind}"
    ds = datasets.Dataset.from_list(rows)
    {"jsonl": ds.to_json, "csv": ds.to_csv, "parquet": ds.to_parquet}[kind](str(path))
    return path


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
def test_file_task_reads_rows_with_stable_ids_and_disjoint_split(tmp_path, kind):
    path = _write(tmp_path, kind, ROWS)
    cfg = task_config(name="file", path=str(path), val_size=3)
    a, b = get_task(cfg), get_task(cfg)
    val = a.val_prompts(3)
    train = [a.train_prompt(i) for i in range(9)]
    assert [p.id for p in val] == [p.id for p in b.val_prompts(3)]
    assert {p.id for p in val}.isdisjoint(p.id for p in train)
    assert sorted(p.meta["row"] for p in val + train) == list(range(12))
    p = next(q for q in val + train if q.meta["row"] == 7)
    assert (p.text, p.answer) == (f"{ASK}\n\nWhat is 7 + 7?", "14")  # the format the checker reads, first
    assert p.id.startswith("data." + kind + ":7:")


def test_file_task_row_without_answer_names_file_and_row(tmp_path):
    rows = [{"prompt": "1+1?", "answer": "2"}, {"prompt": "2+2?", "answer": None}]
    path = _write(tmp_path, "jsonl", rows)
    with pytest.raises(ScaleRLError, match=r"data.jsonl: row 1 has no 'answer'"):
        get_task(task_config(name="file", path=str(path), val_size=1))


def test_file_task_wrong_columns(tmp_path):
    path = _write(tmp_path, "jsonl", [{"question": "1+1?", "solution": "2"}] * 3)
    with pytest.raises(ScaleRLError, match="expected columns prompt/answer or problem/answer"):
        get_task(task_config(name="file", path=str(path), val_size=1))


def test_the_wrong_order_habit_of_the_tiny_order_warm_start():
    """`tiny-order`'s warm-start targets: a seeded ~85% write the answer most-significant digit
    first (refused by the checker), the scratchpad untouched; the rest are the task's own."""
    from scalerl.models.tiny import WRONG_ORDER_SHARE, _WrongOrderHabit
    from scalerl.tasks.arith import ArithTask, most_significant_first

    assert most_significant_first("<think>a4+8+0=12,</think>a2b1") == "<think>a4+8+0=12,</think>b1a2"
    task = ArithTask("arith-mixed", seed=0)
    habit = _WrongOrderHabit(task, WRONG_ORDER_SHARE)
    flipped = 0
    for i in range(2000):
        mine, theirs = habit.train_prompt(i), task.train_prompt(i)
        assert mine.text == theirs.text and mine.answer == theirs.answer
        head, _, answer = mine.meta["target"].rpartition("</think>")
        assert head == theirs.meta["target"].rpartition("</think>")[0]
        if answer != theirs.answer:
            flipped += 1
            assert not task.check(mine.meta["target"], mine) and sorted(
                answer[i : i + 2] for i in range(0, len(answer), 2)
            ) == sorted(theirs.answer[i : i + 2] for i in range(0, len(theirs.answer), 2))
        else:
            assert task.check(mine.meta["target"], mine)
    assert abs(flipped / 2000 - WRONG_ORDER_SHARE) < 0.03  # binomial sd at n=2000: 0.008
    assert habit.train_prompt(7).meta == _WrongOrderHabit(task, WRONG_ORDER_SHARE).train_prompt(7).meta  # seeded
