"""The user's own task from a Python file (`task.type=python`, scalerl.tasks.user, examples/custom_task.py):
its prompts and split, its checker, the one-line errors, and the task acting in `scalerl generate` and in a
short `scalerl train` (a real tiny model, the user's check scoring every completion)."""

import json
import re
from pathlib import Path

import pytest

from scalerl.config import task_config
from scalerl.errors import ScaleRLError
from scalerl.tasks import get_task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "custom_task.py"


def _letters(question: str) -> int:
    """The example's answer, computed from its question text (independently of the class)."""
    letter, word = re.fullmatch(r"How many times does the letter (\w) occur in (\w+)\?", question).groups()
    return word.count(letter)


def test_the_example_task_yields_distinct_prompts_split_apart_and_checks_answers():
    task = get_task(task_config(type="python", path=str(EXAMPLE), train_size=200, val_size=20, seed=5))
    train = [task.train_prompt(i) for i in range(len(task))]
    val = task.val_prompts(task.val_size)
    assert (len(train), len(val), task.name) == (200, 20, "python:CountLetters")
    questions = [p.meta["question"] for p in train + val]
    assert len(set(questions)) == 220  # distinct, and train and val disjoint
    assert all(int(p.answer) == _letters(p.meta["question"]) for p in train + val)
    assert "between <answer> and </answer>" in train[0].text  # the instruction of the answer's place
    p = val[0]
    assert task.check(f"I count <answer>{p.answer}</answer>", p)
    assert not task.check(f"<answer>{int(p.answer) + 1}</answer>", p)
    assert not task.check(p.answer, p)  # no answer section: a fail
    again = get_task(task_config(type="python", path=str(EXAMPLE), train_size=200, val_size=20, seed=5))
    assert [again.train_prompt(i).text for i in range(5)] == [t.text for t in train[:5]]  # the seed decides
    other = get_task(task_config(type="python", path=str(EXAMPLE), train_size=200, val_size=20, seed=6))
    assert [other.train_prompt(i).text for i in range(5)] != [t.text for t in train[:5]]


def test_a_finite_task_is_split_as_a_file_and_options_reach_the_class(tmp_path):
    path = tmp_path / "few.py"
    path.write_text(
        "class Few:\n"
        "    def __init__(self, n=3):\n        self.n = n\n"
        "    def prompts(self, seed):\n        return [{'prompt': f'q{i}', 'answer': str(i)} "
        "for i in range(self.n)] + [('q0', '0')]\n"
        "    def check(self, answer, reference):\n        return 0.5\n"
    )
    task = get_task(task_config(type="python", path=f"{path}:Few", options={"n": 40}))
    assert (len(task), task.val_size) == (36, 4)  # 40 distinct: a tenth held out
    p = task.val_prompts(1)[0]
    assert task.checker("<answer>x</answer>", p) == 0.5 and not task.check("<answer>x</answer>", p)


@pytest.mark.parametrize(
    "source, spec, expected",
    [
        (None, "missing.py", "task.path 'missing.py': no such file"),
        ("X = 1\n", "t.py", "t.py defines no class with methods prompts(seed) and check(answer, reference)"),
        ("class A:\n    pass\n", "t.py:A", "class A has no method prompts or check"),
        ("class A:\n    def prompts(self, seed): return []\n", "t.py:B", "t.py has no class 'B'"),
        ("raise RuntimeError('broken')\n", "t.py", "importing"),
        (
            "class A:\n    def prompts(self, seed): yield 'q'\n    def check(self, a, r): return True\n",
            "t.py",
            "prompts() item 0 is q; expected (question, answer)",
        ),
    ],
)
def test_a_task_file_that_does_not_fit_is_one_line_naming_it(tmp_path, monkeypatch, source, spec, expected):
    monkeypatch.chdir(tmp_path)
    if source is not None:
        (tmp_path / "t.py").write_text(source)
    with pytest.raises(ScaleRLError) as err:
        get_task(task_config(type="python", path=spec))
    assert expected in str(err.value) and "\n" not in str(err.value) and f"task.path {spec!r}" in str(err.value)


def test_the_example_runs_in_scalerl_generate(capsys):
    from scalerl.cli import main

    code = main(
        [
            "generate",
            "--prompts",
            "2",
            "--n",
            "2",
            "--set",
            "model.name=tiny-random",
            "--set",
            "rollout.max_new_tokens=12",
            "--set",
            "rollout.length.type=none",
            "--set",
            "task.type=python",
            "--set",
            f"task.path={EXAMPLE}",
            "--set",
            "task.val_size=8",
            "--set",
            "task.train_size=16",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    questions = re.findall(r"How many times does the letter \w occur in \w+\?", out)
    assert len(questions) == 2
    answers = [int(a) for a in re.findall(r"\(answer '(\d+)'\)", out)]
    assert answers == [_letters(q) for q in questions]
    assert "tiny-random on python:CountLetters: pass rate" in out


def test_a_user_task_trains_in_scalerl_train(tmp_path, capsys):
    """A short run (a real tiny model, the real reward): every completion the run scored went through the
    user's check, on the user's prompts."""
    from cli_helpers import SETS
    from scalerl.cli import main

    log = tmp_path / "checked.jsonl"
    src = tmp_path / "logged.py"
    src.write_text(
        EXAMPLE.read_text()
        + (
            "\n\nclass Logged(CountLetters):\n"
            "    def __init__(self, log):\n        super().__init__()\n        self.log = log\n"
            "    def check(self, answer, reference):\n"
            "        import json\n        with open(self.log, 'a') as f:\n"
            "            f.write(json.dumps([answer, reference]) + '\\n')\n"
            "        return True\n"
        )
    )
    run = tmp_path / "run"
    code = main(
        [
            "train",
            "--no-progress",
            "--run-dir",
            str(run),
            "--max-steps",
            "2",
            *SETS,
            "--set",
            "task.type=python",
            "--set",
            f"task.path={src}:Logged",
            "--set",
            f"task.options={{log: {log}}}",
            "--set",
            "task.answer_marker=</think>",
            "--set",
            "task.train_size=32",
            "--set",
            "task.val_size=4",
            "--set",
            "filter.zero_variance=false",
        ]
    )
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2]
    checked = [json.loads(line) for line in log.read_text().splitlines()]
    assert checked and all(ref.isdigit() for _, ref in checked)
    passed = [r for r in rows if r["kind"] == "train"]
    # every completion with an answer section passed (the check said True): the pass rate is theirs
    assert all(0.0 <= r["train/pass_rate"] <= 1.0 for r in passed)
    assert any(r["train/pass_rate"] > 0 for r in passed)
