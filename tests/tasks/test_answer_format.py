"""The prompt asks for the format the checker reads (file and reasoning-gym tasks), and a run warns
once when most completions have no answer section at all (as opposed to wrong answers)."""

import json
import warnings
from types import SimpleNamespace

import pytest

from cli_helpers import SMALL, fake_model, train_cli  # noqa: F401 (fake_model: autouse fixture)
from scalerl.config import task_config
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.monitor import Warnings
from scalerl.run.metrics import read_rows
from scalerl.tasks import get_task
from scalerl.types import Completion, Group, Prompt, Score

ASK_TAGS = "Put only your final answer between <answer> and </answer> tags, at the end of your response."
ASK_BOXED = "Put your final answer within \\boxed{}."


def _completion(text: str) -> Completion:
    return Completion(
        id="c", prompt_id="p", prompt_tokens=[], tokens=[], logprobs=[], versions=[], text=text, finish_reason="eos"
    )


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"What is {i} + 7?", "answer": str(i + 7)}) + "\n" for i in range(6)))
    return path


class ChatTokenizer:
    """A tokenizer double with a chat template: `role: content` lines and a generation prompt."""

    chat_template = "roles"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + (
            "assistant:" if add_generation_prompt else ""
        )


class NoSystemTokenizer(ChatTokenizer):
    """A template that refuses a system turn, as Gemma's does."""

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        from jinja2 import TemplateError

        if any(m["role"] == "system" for m in messages):
            raise TemplateError("System role not supported")
        return super().apply_chat_template(messages, tokenize, add_generation_prompt)


def _row(task, row: int) -> Prompt:
    every = [task.train_prompt(i) for i in range(len(task))] + task.val_prompts(task.val_size)
    return next(p for p in every if p.meta["row"] == row)


def test_file_prompt_states_the_format_per_model_and_the_checker_reads_it(data):
    plain = get_task(task_config(name="file", path=str(data), val_size=1))
    p = _row(plain, 3)
    assert p.text == f"{ASK_TAGS}\n\nWhat is 3 + 7?"  # no template: before the question
    assert plain.check("<think>3+7</think> <answer>10</answer>", p)
    assert not plain.check("<think>3+7</think> 10", p)  # what the old default read: no answer now
    chat = get_task(task_config(name="file", path=str(data), val_size=1), ChatTokenizer())
    assert _row(chat, 3).text == f"system: {ASK_TAGS}\nuser: What is 3 + 7?\nassistant:"  # a system turn
    gemma = get_task(task_config(name="file", path=str(data), val_size=1), NoSystemTokenizer())
    assert _row(gemma, 3).text == f"user: {ASK_TAGS}\n\nWhat is 3 + 7?\nassistant:"
    boxed = get_task(task_config(name="file", path=str(data), val_size=1, answer_marker="\\boxed{}"))
    assert _row(boxed, 3).text == f"{ASK_BOXED}\n\nWhat is 3 + 7?"
    assert boxed.check("so $\\boxed{10}$", _row(boxed, 3)) and not boxed.check("<answer>10</answer>", _row(boxed, 3))
    own = get_task(task_config(name="file", path=str(data), val_size=1, answer_instruction="Answer: <n>"))
    assert _row(own, 3).text == "Answer: <n>\n\nWhat is 3 + 7?"
    off = get_task(task_config(name="file", path=str(data), val_size=1, answer_instruction=None))
    assert _row(off, 3).text == "What is 3 + 7?"
    assert _row(off, 3).id == p.id  # ids do not depend on the instruction


def test_instruction_config_errors_are_one_line():
    with pytest.raises(
        ScaleRLError,
        match=r"^--set task.answer_instruction='  ': task: answer_instruction = '  ': "
        r"expected text, 'auto', or null to turn the instruction off$",
    ):
        load_config("scalerl", overrides=["task.name=file", "task.path=d.jsonl", "task.answer_instruction='  '"])
    assert (
        load_config(
            "scalerl", overrides=["task.name=file", "task.path=d.jsonl", "task.answer_instruction=null"]
        ).task.answer_instruction
        is None
    )


def test_rg_without_a_template_asks_for_answer_tags():
    pytest.importorskip("reasoning_gym")
    task = get_task(task_config(name="rg:chain_sum", train_size=4, val_size=2))
    p = task.train_prompt(0)
    assert p.text == f"{ASK_TAGS}\n\n{p.meta['question']}"
    bare = get_task(task_config(name="rg:chain_sum", train_size=4, val_size=2, answer_instruction=None))
    assert bare.train_prompt(0).text == p.meta["question"]


def _batch(texts):
    prompt = Prompt("p", "", "10")
    return SimpleNamespace(groups=[Group(prompt, [_completion(t) for t in texts], [Score(-1.0, False)] * len(texts))])


def test_no_answer_warns_once_when_most_have_none_not_for_wrong_answers():
    warn = Warnings("<answer>")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert warn.no_answer(_batch(["<answer>7</answer>"] * 4), 5) == 0.0  # wrong, but answered
        assert (
            warn.no_answer(_batch(["<answer>7</answer>", "<answer>8</answer>", "7", "8"]), 5) == 0.5
        )  # half: not most
        assert not caught
        assert warn.no_answer(_batch(["<answer>7</answer>", "7", "8", "<answer>9"]), 5) == 0.75  # unclosed tag too
        assert warn.no_answer(_batch(["7"] * 4), 5) == 1.0
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert msg.startswith("step 5: 75% of the completions have no answer section at all") and "\n" not in msg
    assert "task.answer_marker = '<answer>'" in msg and "not wrong answers" in msg


def test_a_run_warns_early_and_logs_the_rate(capsys, tmp_path, data):
    # tiny-random writes at most 12 characters: never `<answer>` and `</answer>` (17), so every completion lacks one
    sets = [s for s in SMALL if not s.startswith("eval.prompts=")]
    extra = [
        "task.name=file",
        f"task.path={data}",
        "task.val_size=1",
        "run.max_steps=2",
        "filter.zero_variance=false",
        "eval.prompts=1",
    ]
    args = [a for s in sets + extra for a in ("--set", s)]
    with pytest.warns(UserWarning) as record:
        code, out, err = train_cli(capsys, *args, "--run-dir", str(tmp_path / "r"))
    assert code == 0, err
    ours = [str(w.message) for w in record if "no answer section" in str(w.message)]
    assert len(ours) == 1 and ours[0].startswith("step 1: 100% of the completions have no answer section")
    rows = [r for r in read_rows(tmp_path / "r" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["train/no_answer_rate"] for r in rows] == [1.0, 1.0]


def test_file_shots_show_solved_examples_in_the_checkers_format_and_never_train_on_them(tmp_path):
    import hashlib

    path = tmp_path / "d.jsonl"
    rows = [{"question": [{"role": "user", "content": f"What is {i} + 7?"}], "solution": str(i + 7)} for i in range(20)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cols = {"prompt": "question", "answer": "solution"}
    # the examples: the first two rows in content-hash order (computed here from the file's own text)
    key = [hashlib.sha256(f"{json.dumps(r['question'])}\x00{r['solution']}".encode()).hexdigest() for r in rows]
    shown = [rows[i] for i in sorted(range(20), key=key.__getitem__)[:2]]
    for marker, reply in (
        ("<answer>", "<answer>{}</answer>"),
        ("\\boxed{}", "\\boxed{{{}}}"),
        ("Answer:", "Answer: {}"),
    ):
        task = get_task(
            task_config(name="file", path=str(path), columns=cols, shots=2, answer_marker=marker),
            tokenizer=ChatTokenizer(),
        )
        every = [task.train_prompt(i) for i in range(len(task))] + task.val_prompts(task.val_size)
        assert len(every) == 18 and task.val_size == 1  # 2 shown, a tenth of 18 held out
        asked = {p.meta["prompt"][0]["content"] for p in every}
        for ex in shown:
            assert ex["question"][0]["content"] not in asked  # an example is never a question
            turn = f"user: {ex['question'][0]['content']}\nassistant: {reply.format(ex['solution'])}\n"
            assert all(turn in p.text for p in every)
        text = every[0].text
        assert text.index("system: ") < text.index("user: ") and text.endswith(
            f"user: {every[0].meta['prompt'][0]['content']}\nassistant:"
        )
    with pytest.raises(ScaleRLError, match="task.shots needs an instruct model"):
        get_task(task_config(name="file", path=str(path), columns=cols, shots=2))
    with pytest.raises(ScaleRLError, match=r"task.shots=8 leaves no row to train on \(6 distinct rows\)"):
        small = tmp_path / "s.jsonl"
        small.write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
        get_task(task_config(name="file", path=str(small), columns=cols, shots=8), tokenizer=ChatTokenizer())
