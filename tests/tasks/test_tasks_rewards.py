"""RewardFn: exact checker, math-verify in a worker process, failures that never stop a batch."""

import threading
import time

import pytest

from scalerl.config import RewardConfig, task_config
from scalerl.rewards import RewardFn
from scalerl.tasks import get_task
from scalerl.tasks.arith import ArithTask
from scalerl.types import Completion, Prompt


def _completion(text: str) -> Completion:
    return Completion(
        id="c", prompt_id="p", prompt_tokens=[], tokens=[], logprobs=[], versions=[], text=text, finish_reason="eos"
    )


PROMPT = Prompt(id="p", text="a4b3c2d1+a8b7c6d5=", answer="a2b1c9d6")


def test_exact_rewards_plus_minus_one_and_zero_one():
    pm, zo = RewardFn(ArithTask(), RewardConfig()), RewardFn(ArithTask(), RewardConfig(pass_value=1, fail_value=0))
    good, bad = _completion("<think>..</think>a2b1c9d6</s>"), _completion("<think>..</think>a2b1c9d5</s>")
    for fn, expected in ((pm, (1.0, -1.0)), (zo, (1.0, 0.0))):
        g, b = fn(PROMPT, good), fn(PROMPT, bad)
        assert (g.reward, b.reward) == expected
        assert (g.passed, b.passed, g.error, b.error, g.slow, b.slow) == (True, False, None, None, False, False)


def test_adversarial_100kB_strings_fail_fast():
    fn = RewardFn(ArithTask(), RewardConfig())
    attacks = ["</think>" * 12_800, "9" * 100_000, "<think>" + "a2b1c9d6" * 12_500, "</think>" + "a2b1c9d6" * 12_500]
    comps = [_completion(a) for a in attacks]
    t0 = time.perf_counter()
    scores = [fn(PROMPT, c) for c in comps]
    assert time.perf_counter() - t0 < 1.0
    assert [s.reward for s in scores] == [-1.0] * 4


def hanging_or_exact(text: str, prompt: Prompt) -> bool:
    """A checker that raises, hangs or compares, chosen by the reference answer."""
    answer = prompt.answer
    if answer == "raise":
        raise ValueError("checker bug")
    if answer == "hang":
        time.sleep(3600)
    return text == answer


class _FakeTask:
    checker = staticmethod(hanging_or_exact)  # module-level: picklable into a worker process

    def __init__(self, isolate: bool):
        self.isolate_checker = isolate


def test_raising_checker_scores_fail_and_is_counted():
    fn = RewardFn(_FakeTask(isolate=False), RewardConfig())
    comps = [_completion("x"), _completion("ok"), _completion("x")]
    scores = [fn(Prompt(id="p", text="", answer=ans), c) for c, ans in zip(comps, ["raise", "ok", "raise"])]
    assert [s.reward for s in scores] == [-1.0, 1.0, -1.0]
    # a checker outside scalerl (this file: a user's) is named where it raised
    source = open(__file__).read().splitlines()
    line = next(i for i, ln in enumerate(source, 1) if 'raise ValueError("checker bug")' in ln)
    assert scores[0].error == f"ValueError: checker bug ({__file__}:{line} in hanging_or_exact)"
    assert [s.error is not None for s in scores] == [True, False, True]


@pytest.fixture
def pooled():
    fn = RewardFn(_FakeTask(isolate=True), RewardConfig(timeout_s=4.0), pool_size=1)
    yield fn
    fn.close()


def test_hanging_checker_times_out_in_a_worker_and_the_batch_goes_on(pooled):
    answers = ["ok", "hang", "ok", "raise"]
    comps = [_completion("ok") for _ in answers]
    scores = []

    def score():  # from a non-main thread, as a pipeline does
        for c, ans in zip(comps, answers):
            scores.append(pooled(Prompt(id="p", text="", answer=ans), c))

    t = threading.Thread(target=score)
    t.start()
    t.join(timeout=180)
    assert len(scores) == 4
    assert [s.reward for s in scores] == [1.0, -1.0, 1.0, -1.0]  # the killed worker was replaced
    assert scores[1].error.startswith("timeout")
    assert "checker bug" in scores[3].error
    assert [s.error is not None for s in scores] == [False, True, False, True]
    assert [s.slow for s in scores] == [False, True, False, False]


def test_math_verify_on_user_data_from_a_thread(tmp_path):
    path = tmp_path / "maths.jsonl"
    path.write_text(
        '{"problem": "Half of one?", "answer": "1/2"}\n' * 2 + '{"problem": "One plus one?", "answer": "2"}\n'
    )
    task = get_task(task_config(name="file", path=str(path), val_size=1, answer_marker="</think>"))
    fn = RewardFn(task, RewardConfig(timeout_s=20.0), pool_size=1)
    half = Prompt(id="h", text="", answer="1/2")
    texts = [
        "<think>hmm</think>The answer is $\\boxed{0.5}$",
        "<think>\\boxed{0.5}</think>so \\boxed{3}",
        "\\frac{" * 20_000,
    ]
    comps = [_completion(t) for t in texts]
    scores = []
    th = threading.Thread(target=lambda: scores.extend(fn(half, c) for c in comps))
    th.start()
    th.join(timeout=120)
    fn.close()
    assert [s.passed for s in scores] == [True, False, False]
    assert all(s.error is None for s in scores[:2])


def test_the_training_reward_adds_the_length_penalty_in_a_new_score_and_changes_no_completion():
    import dataclasses

    from scalerl.configure import load_config
    from scalerl.rewards import training_reward

    cfg = load_config("dapo", overrides=["rollout.length.max_len=6", "rollout.length.tolerance=4"])
    shaped = training_reward(RewardFn(ArithTask(), RewardConfig()), cfg)
    right = dataclasses.replace(_completion("<think>..</think>a2b1c9d6</s>"), tokens=[5] * 5)  # 5 tokens
    score = shaped(PROMPT, right)
    assert (score.reward, score.passed, score.error) == (1.0 - 3 / 4, True, None)  # -(5 - 2) / 4 by hand
    assert score.penalty == pytest.approx(-3 / 4)  # what the penalty took, kept apart (train/length_penalised_rate)
    short = dataclasses.replace(right, tokens=[5] * 2)  # 2 <= 6 - 4: no penalty
    assert (shaped(PROMPT, short).reward, shaped(PROMPT, short).penalty) == (1.0, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        right.text = "changed"  # records flow forward: a completion is frozen
    plain = training_reward(RewardFn(ArithTask(), RewardConfig()), load_config("scalerl"))
    assert plain(PROMPT, right).reward == 1.0  # interruptions, not a penalty: the plain reward
    assert plain(PROMPT, right).penalty == 0.0
