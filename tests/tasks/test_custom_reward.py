"""A user's reward function with TRL's signature: loaded from a module or a file, alone or
weighted beside the checker, its errors named by row, and its values in a real run's metrics."""

import json
import pickle
from pathlib import Path

import pytest

from cli_helpers import SMALL, one_line, train_cli
from scalerl.config import RewardConfig, task_config
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.rewards import RewardFn
from scalerl.run.metrics import read_rows
from scalerl.tasks import get_task
from scalerl.tasks.arith import ArithTask
from scalerl.types import Completion

REWARDS = '''
def length_share(prompts, completions, answer, **columns):
    """0.1 per character of the completion, None when the row's `skip` column says so."""
    if columns.get("skip") == ["yes"]:
        return [None]
    return [0.1 * len(c) for c in completions]

def echo_columns(prompts, completions, **columns):
    return [float(len(prompts[0]) + sum(len(str(v[0])) for v in columns.values()))]

def half(prompts, completions, **columns):
    return [0.5 for _ in completions]

def broken(prompts, completions, **columns):
    return [1.0 / 0]
'''


def _completion(text: str) -> Completion:
    return Completion(
        id="c", prompt_id="p", prompt_tokens=[], tokens=[], logprobs=[], versions=[], text=text, finish_reason="eos"
    )


@pytest.fixture
def rewards_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARDS)
    return path


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        "".join(
            json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1), "skip": "yes" if i == 0 else "no"}) + "\n"
            for i in range(4)
        )
    )
    return path


def test_alone_its_value_is_the_reward_and_passes_at_threshold(rewards_file, data):
    task = get_task(task_config(name="file", path=str(data), val_size=1))
    fn = RewardFn(task, RewardConfig(function=f"{rewards_file}:length_share", threshold=0.5))
    row1 = next(task.train_prompt(i) for i in range(len(task)) if task.train_prompt(i).meta["row"] == 1)
    assert (fn(row1, _completion("abcd")).reward, fn(row1, _completion("abcd")).passed) == (pytest.approx(0.4), False)
    assert (fn(row1, _completion("abcdef")).reward, fn(row1, _completion("abcdef")).passed) == (
        pytest.approx(0.6),
        True,
    )


def test_it_gets_the_prompt_and_every_other_column(rewards_file, data):
    task = get_task(task_config(name="file", path=str(data), val_size=1))
    fn = RewardFn(task, RewardConfig(function=f"{rewards_file}:echo_columns"))
    p = task.train_prompt(0)
    row = p.meta["row"]
    expected = len(f"{row}+1=") + len(str(row + 1)) + len("yes" if row == 0 else "no")  # prompt, answer, skip
    assert fn(p, _completion("x")).reward == expected


def test_beside_the_checker_weighted_and_none_leaves_its_term_out(rewards_file, data):
    task = ArithTask()
    p = task.train_prompt(0)
    right, wrong = _completion(f"<think></think>{p.answer}"), _completion("<think></think>a1")
    fn = RewardFn(task, RewardConfig(function=f"{rewards_file}:length_share", weights=[1.0, 2.0]))
    for c, checker in ((right, 1.0), (wrong, -1.0)):
        s = fn(p, c)
        assert (s.reward, s.passed) == (pytest.approx(checker + 2.0 * 0.1 * len(c.text)), checker > 0)
    file_task = get_task(task_config(name="file", path=str(data), val_size=1))
    row0 = next(
        q
        for q in [*map(file_task.train_prompt, range(len(file_task))), *file_task.val_prompts(1)]
        if q.meta["row"] == 0
    )  # its `skip` column is "yes": the function says None
    beside = RewardFn(file_task, RewardConfig(function=f"{rewards_file}:length_share", weights=[1.0, 2.0]))
    assert beside(row0, _completion("<answer>1</answer>")).reward == 1.0  # the checker's term only (0+1 = 1)


def test_an_error_names_the_row_and_fails_that_completion(rewards_file, data):
    task = get_task(task_config(name="file", path=str(data), val_size=1))
    fn = RewardFn(task, RewardConfig(function=f"{rewards_file}:broken"))
    p = task.train_prompt(0)
    s = fn(p, _completion("x"))
    assert (s.reward, s.passed) == (-1.0, False)
    assert s.error == (
        f"reward.function {rewards_file}:broken raised on row {p.meta['row']} ({p.id}): "
        f"ZeroDivisionError: float division by zero "
        f"({rewards_file}:{_line_of(rewards_file, '/ 0')} in broken)"
    )


def _line_of(path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def test_a_module_name_and_pickling(rewards_file, monkeypatch):
    monkeypatch.syspath_prepend(str(rewards_file.parent))
    fn = RewardFn(ArithTask(), RewardConfig(function="my_rewards:half"))
    p = ArithTask().train_prompt(0)
    assert fn(p, _completion("x")).reward == 0.5 and fn(p, _completion("x")).passed is False
    copy = pickle.loads(pickle.dumps(fn.custom))  # as a generator process or Ray actor receives it
    assert copy(p, "x") == 0.5


@pytest.mark.parametrize(
    "spec,match",
    [
        ("nocolon", r"reward.function 'nocolon': expected <module>:<name> or <path/to/file.py>:<name>$"),
        ("missing_file.py:f", r"reward.function 'missing_file.py:f': no such file '.*missing_file.py'$"),
        ("json:nothing_here", r"reward.function 'json:nothing_here': json has no function 'nothing_here'$"),
        (
            "no_such_module_xyz:f",
            r"reward.function 'no_such_module_xyz:f': importing no_such_module_xyz raised "
            r"ModuleNotFoundError: No module named 'no_such_module_xyz'$",
        ),
    ],
)
def test_bad_specs_are_one_line(spec, match):
    with pytest.raises(ScaleRLError, match=match):
        RewardFn(ArithTask(), RewardConfig(function=spec))


def test_weights_need_a_function():
    with pytest.raises(
        ScaleRLError,
        match=r"^--set reward.weights=\[1.0, 2.0\]: reward: weights = \[1.0, 2.0\]: "
        r"expected \[checker weight, function weight\] beside a reward.function",
    ):
        load_config("scalerl", overrides=["reward.weights=[1.0, 2.0]"])


def test_a_plain_string_completion_is_a_type_error():
    task = ArithTask()
    with pytest.raises(TypeError, match=r"expected a scalerl.types.Completion, got str"):
        RewardFn(task, RewardConfig())(task.train_prompt(0), "<think></think>a1")


def _run(capsys, tmp_path, name, extra):
    sets = SMALL + ["run.max_steps=2", "filter.zero_variance=false", *extra]
    code, out, err = train_cli(capsys, *[a for s in sets for a in ("--set", s)], "--run-dir", str(tmp_path / name))
    assert code == 0, err
    return [r for r in read_rows(tmp_path / name / "metrics.jsonl") if r.get("kind") != "eval"]


def test_a_real_run_trains_on_the_function(capsys, tmp_path, rewards_file):
    # tiny-random never writes a correct sum: the checker's reward is fail_value (-1) on every completion
    alone = _run(capsys, tmp_path, "alone", [f"reward.function={rewards_file}:half"])
    beside = _run(capsys, tmp_path, "beside", [f"reward.function={rewards_file}:half", "reward.weights=[1.0, 4.0]"])
    assert [r["train/reward_mean"] for r in alone if "train/reward_mean" in r] == [0.5, 0.5]
    assert [r["train/reward_mean"] for r in beside if "train/reward_mean" in r] == [-1.0 + 4.0 * 0.5] * 2


def test_a_run_whose_function_always_raises_stops(capsys, tmp_path, rewards_file):
    sets = SMALL + ["run.max_steps=2", f"reward.function={rewards_file}:broken"]
    code, _, err = train_cli(capsys, *[a for s in sets for a in ("--set", s)], "--run-dir", str(tmp_path / "r"))
    lines = err.strip().splitlines()  # the line, then the function's own frame (tests/cli/test_user_errors.py)
    assert (
        code == 2
        and "step 1: the reward failed on all 8 answers of the batch (first error: reward.function "
        f"{rewards_file}:broken raised on "
        in one_line(lines[0])
    )
    at = next(i for i, ln in enumerate(Path(rewards_file).read_text().splitlines(), 1) if "1.0 / 0" in ln)
    assert lines[1:] == [f'  File "{rewards_file}", line {at}, in broken', "    return [1.0 / 0]"]
