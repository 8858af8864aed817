"""Typed records that travel between stages (tasks -> rollout -> rewards -> trainer).

    Prompt --generator--> Completion --RewardFn--> Score;  G of each --GroupAssembler--> Group

Plain dataclasses of Python lists and numbers, so they pickle cheaply across threads,
processes and Ray actors. Tensors are built from them at the trainer. Records flow forward:
a `Completion` is frozen when the generator yields it, and scoring does not change it but
gives a `Score` beside it (a length penalty is a new `Score`, `dataclasses.replace`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

FinishReason = Literal["eos", "length", "interrupted_eos", "interrupted_budget", "interrupted_length"]
"""Why a completion stopped (one field; `scalerl.trainer.step.group_stats` turns it into rates):
eos                 the model ended it (EOS token) within budget;
length              cut by a token budget without an interruption: `max_new_tokens`, or the answer
                    budget after the model closed `</think>` itself (truncated: no final EOS);
interrupted_eos     the thinking budget was reached, the interruption phrase was forced, and the
                    model then ended its answer by EOS within the answer budget;
interrupted_budget  interrupted, and the answer used its whole answer budget;
interrupted_length  interrupted, but cut at `max_new_tokens` before the answer budget was spent
                    (the engine refuses budgets where this can happen; other generators may not).
"""
INTERRUPT_ANSWERED: frozenset[str] = frozenset({"interrupted_eos", "interrupted_budget"})


@dataclass(frozen=True)
class Prompt:
    """One task instance. `id` is stable across runs (derived from the task, split and index)."""

    id: str
    text: str  # the prompt as given to the tokenizer (chat template applied)
    answer: str  # the reference answer the checker compares against
    meta: dict = field(default_factory=dict)  # e.g. {"difficulty": 3}


@dataclass(frozen=True)
class Completion:
    """One sampled completion of one prompt, with everything the trainer needs.

    `logprobs[t]` is the generator's log-probability of `tokens[t]` under the distribution it
    actually sampled from (after temperature), computed with an FP32 head;
    `versions[t]` is the policy version whose weights produced `tokens[t]` (with in-flight
    weight updates one completion can span several versions).
    """

    id: str  # unique per completion across the run (e.g. "<prompt_id>/<sample>@<seed>")
    prompt_id: str
    prompt_tokens: list[int]
    tokens: list[int]  # generated tokens only (includes any injected interruption phrase)
    logprobs: list[float]  # len == len(tokens)
    versions: list[int]  # len == len(tokens)
    text: str  # decoded generated text
    finish_reason: FinishReason
    # positions in `tokens` that were injected (interruption phrase) rather than sampled:
    # they carry no generator logprob of their own and are masked out of the loss.
    forced_mask: list[bool] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def interrupted(self) -> bool:
        return self.finish_reason.startswith("interrupted")

    @property
    def interrupt_answered(self) -> bool:
        """Interrupted, then got its whole answer budget or ended by EOS within it."""
        return self.finish_reason in INTERRUPT_ANSWERED

    @property
    def min_version(self) -> int:
        return min(self.versions) if self.versions else -1


@dataclass(frozen=True)
class Score:
    """The reward stage's verdict on one completion (`scalerl.rewards.RewardFn`)."""

    reward: float  # what trains: pass_value / fail_value (partial credit, length penalty)
    passed: bool  # correctness: the score reached reward.threshold (filters, curriculum)
    error: str | None = None  # the checker raised or timed out (the completion then failed)
    slow: bool = False  # the check took longer than reward.slow_s (or timed out)
    penalty: float = 0.0  # the overlong length penalty included in `reward` (<= 0; 0 without one)


@dataclass(frozen=True)
class Group:
    """The G completions of one prompt and their scores (same order): the unit of advantage
    computation."""

    prompt: Prompt
    completions: list[Completion]
    scores: list[Score]
    draw: int = 0  # the generator's draw index: groups reach the trainer in draw order
    score_seconds: float = 0.0  # time spent scoring its completions (summed over scoring threads)
    score_wait: float = 0.0  # time the generator waited for those scores after its last completion
    score_latency: float = 0.0  # time from its last completion to its last score (the generator need not wait)
    score_cpu_seconds: float = 0.0  # CPU time of the sandbox runs its scoring made (programs, launchers)

    def __post_init__(self) -> None:
        if len(self.scores) != len(self.completions):
            raise ValueError(
                f"group {self.prompt.id!r}: {len(self.completions)} completions but {len(self.scores)} scores"
            )

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.scores]

    @property
    def passes(self) -> int:
        return sum(s.passed for s in self.scores)

    @property
    def pass_rate(self) -> float:
        return self.passes / max(1, len(self.scores))


def rollout_stats(completions: Sequence[Completion], scores: Sequence[Score], prefix: str) -> dict[str, float]:
    """The statistics every rollout row reports (`train/` for a step's groups, `val/` for an
    evaluation): reward, pass rate, length, and the share cut by a budget without an interruption
    (`truncation_rate`) kept apart from the share interrupted (`interrupted_rate`)."""
    n = max(1, len(completions))
    return {
        f"{prefix}/reward_mean": sum(s.reward for s in scores) / n,
        f"{prefix}/pass_rate": sum(s.passed for s in scores) / n,
        f"{prefix}/length_mean": sum(len(c.tokens) for c in completions) / n,
        f"{prefix}/truncation_rate": sum(c.truncated for c in completions) / n,
        f"{prefix}/interrupted_rate": sum(c.interrupted for c in completions) / n,
    }
