"""`group_stats`: interruption, answered-after-interruption and truncation rates, kept apart."""

from __future__ import annotations

import pytest

from scalerl.pipeline.step import group_stats
from scalerl.types import Completion, Group, Prompt


def completion(reason: str, n: int = 3) -> Completion:
    return Completion(id=reason, prompt_id="p", prompt_tokens=[1], tokens=[2] * n, logprobs=[-1.0] * n,
                      versions=[0] * n, text="", finish_reason=reason, forced_mask=[False] * n,
                      reward=-1.0, passed=False)


def test_rates_by_finish_reason():
    reasons = ["eos", "eos", "length", "interrupted_eos", "interrupted_budget", "interrupted_budget",
               "interrupted_length", "length"]
    stats = group_stats([Group(Prompt("p", "q", "a"), [completion(r) for r in reasons])])
    assert stats["train/interrupted_rate"] == pytest.approx(4 / 8)
    assert stats["train/interrupted_answered_rate"] == pytest.approx(3 / 4)   # the _length one was cut
    assert stats["train/truncation_rate"] == pytest.approx(2 / 8)           # cut without an interruption
    assert "train/truncated_rate" not in stats


def test_no_interruption_no_answered_rate():
    stats = group_stats([Group(Prompt("p", "q", "a"), [completion("eos"), completion("length")])])
    assert stats["train/interrupted_rate"] == 0.0 and stats["train/truncation_rate"] == 0.5
    assert "train/interrupted_answered_rate" not in stats
