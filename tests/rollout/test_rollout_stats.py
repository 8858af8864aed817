"""Interrupted completions: `group_stats` keeps interruption, answered-after-interruption and
truncation rates apart; an interrupted completion's answer is scored like any other."""

from __future__ import annotations

import pytest

from doubles import scored
from scalerl.trainer.step import group_stats
from scalerl.types import Completion, Prompt


def completion(reason: str, n: int = 3) -> Completion:
    return Completion(
        id=reason,
        prompt_id="p",
        prompt_tokens=[1],
        tokens=[2] * n,
        logprobs=[-1.0] * n,
        versions=[0] * n,
        text="",
        finish_reason=reason,
        forced_mask=[False] * n,
    )


def test_rates_by_finish_reason():
    reasons = [
        "eos",
        "eos",
        "length",
        "interrupted_eos",
        "interrupted_budget",
        "interrupted_budget",
        "interrupted_length",
        "length",
    ]
    stats = group_stats([scored(Prompt("p", "q", "a"), [completion(r) for r in reasons], [-1.0] * 8)])
    assert stats["train/interrupted_rate"] == pytest.approx(4 / 8)
    assert stats["train/interrupted_answered_rate"] == pytest.approx(3 / 4)  # the _length one was cut
    assert stats["train/truncation_rate"] == pytest.approx(2 / 8)  # cut without an interruption
    assert "train/truncated_rate" not in stats


def test_no_interruption_no_answered_rate():
    stats = group_stats([scored(Prompt("p", "q", "a"), [completion("eos"), completion("length")], [-1.0, -1.0])])
    assert stats["train/interrupted_rate"] == 0.0 and stats["train/truncation_rate"] == 0.5
    assert "train/interrupted_answered_rate" not in stats


def test_the_share_the_length_penalty_lowered():
    import dataclasses

    g = scored(Prompt("p", "q", "a"), [completion("eos") for _ in range(4)], [1.0, 0.0, 1.0, 0.0])
    g = dataclasses.replace(
        g, scores=[dataclasses.replace(s, penalty=p) for s, p in zip(g.scores, [-0.5, 0.0, 0.0, -1.0])]
    )
    assert group_stats([g])["train/length_penalised_rate"] == pytest.approx(2 / 4)
    assert (
        group_stats([scored(Prompt("p", "q", "a"), [completion("eos")], [1.0])])["train/length_penalised_rate"] == 0.0
    )


@pytest.mark.parametrize("answer,passed", [("a0b2c9", True), ("a0b2c8", False)])
def test_an_interrupted_answer_is_checked_like_any_other(answer, passed):
    from scalerl.config import DEFAULT_PHRASE, RewardConfig
    from scalerl.rewards import RewardFn
    from scalerl.tasks.arith import ArithTask

    task = ArithTask("arith-3")
    prompt = task.train_prompt(0)  # a3b5c2+a7b6c6= -> a0b2c9 (235 + 667 = 902)
    assert prompt.answer == "a0b2c9"
    text = "<think>a3+7+0=10,b5+6+1=12," + DEFAULT_PHRASE + answer  # cut mid-scratchpad, then answered
    c = Completion(
        id="x",
        prompt_id=prompt.id,
        prompt_tokens=[1],
        tokens=[2] * 40,
        logprobs=[-1.0] * 40,
        versions=[0] * 40,
        text=text,
        finish_reason="interrupted_eos",
        forced_mask=[False] * 40,
    )
    s = RewardFn(task, RewardConfig())(prompt, c)
    assert s.passed is passed and s.reward == (1.0 if passed else -1.0) and s.error is None
