"""What the loop writes and warns about each step: the stage clock (`time/<stage>`), the step's
metrics row, and the one-line warnings (no answer section, truncation, a failing reward, a
collapsing curve)."""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager

from scalerl.errors import told
from scalerl.rewards import has_answer
from scalerl.trainer.step import group_stats
from scalerl.transport.policy import staleness
from scalerl.transport.protocol import MiniBatch

TRUNCATION_WARN = 0.10
NO_ANSWER_WARN = 0.5  # share of a batch's completions without an answer section that warns (once)
WARN_EVERY = 50  # steps between two truncation warnings


class Clock:
    """Seconds per named stage since the last `take()`; `time/<stage>` in the step's metrics row."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - t0

    def take(self) -> dict[str, float]:
        seconds, self.seconds = self.seconds, {}
        return seconds


def check_rewards(mb: MiniBatch, step: int) -> None:
    """Stop when the reward (the checker, or reward.function) failed on every answer of a batch:
    nothing could ever pass."""
    errors = [s.error for g in mb.groups for s in g.scores]
    if errors and all(e is not None for e in errors):
        raise told(
            f"step {step}: the reward failed on all {len(errors)} answers of the batch (first error: "
            f"{errors[0]}); fix the checker, reward.function or the dataset's answers",
            errors[0],
        )


def step_row(mb: MiniBatch, kept: list, version: int, counters, retired: int) -> dict:
    """The rollout and batch part of step `version`'s metrics row: reward, pass and length statistics
    of every group drawn (`group_stats`), staleness of the kept ones, the batch rule's and the
    transport's metrics, the run's drop and skip totals, the time the trainer waited for data and
    the generator's own generation and scoring time."""
    ages = [staleness(g, version - 1) for g in kept]
    row = group_stats(mb.groups)
    row.update(mb.metrics)
    row.update(
        {
            "staleness/mean": sum(ages) / len(ages),
            "staleness/max": max(ages),
            "staleness/dropped": counters.stale_dropped,
            "rollout/switched_tokens": switched_share(mb.groups),
            "staleness/dropped_share": counters.stale_dropped / max(1.0, counters.groups_drawn),
            "train/skipped_batches": counters.skipped_batches,
            "curriculum/retired": retired,
            "time/gen_wait": mb.wait_seconds,
            "time/gen": mb.gen_seconds,
            "time/score": sum(g.score_seconds for g in mb.groups),
            "time/score_wait": sum(g.score_wait for g in mb.groups),
            "time/score_latency": sum(g.score_latency for g in mb.groups) / max(1, len(mb.groups)),
            "time/score_cpu": sum(g.score_cpu_seconds for g in mb.groups),
            "version": version,
        }
    )
    row.update(domain_counts(mb.groups))
    return row


def switched_share(groups: list) -> float:
    """The share of generated tokens sampled under a newer policy than their completion's first token
    (PipelineRL's in-flight weight updates reaching sequences mid-way)."""
    tokens = [(v, c.versions[0]) for g in groups for c in g.completions for v in c.versions]
    return sum(v > first for v, first in tokens) / max(1, len(tokens))


def domain_counts(groups: list) -> dict[str, float]:
    """Per domain of a mixed task (`prompt.meta["domain"]`; nothing for a single task): the groups drawn
    (`batch/drawn/<domain>`) and how many of them all failed or all passed (`batch/all_failed/<domain>`,
    `batch/all_passed/<domain>`: the groups the zero-variance filter drops, when it is on)."""
    row: dict[str, float] = {}
    for g in groups:
        domain = g.prompt.meta.get("domain")
        if domain is None:
            continue
        for name, counts in (("drawn", True), ("all_failed", g.passes == 0), ("all_passed", g.passes == len(g.scores))):
            key = f"batch/{name}/{domain}"
            row[key] = row.get(key, 0.0) + float(counts)
    return row


def eval_postfix(erow: dict) -> dict[str, str]:
    """The progress bar's view of an eval row: the pass rate and the live forecast of A."""
    out = {"val": f"{erow['val/pass_rate']:.3f}"}
    if "forecast/A" in erow:
        out["A"] = f"{erow['forecast/A']:.3f}[{erow['forecast/A_lo']:.2f},{erow['forecast/A_hi']:.2f}]"
        if erow.get("forecast/identified") == 0:  # the data do not bound the ceiling: a lower bound only
            lb = erow.get("forecast/A_lower_bound")
            out["A"] = f">={lb:.2f} (not identified)" if lb is not None else "not identified"
    if erow.get("forecast/fell"):
        out["A"] = "fell"
    return out


class Warnings:
    """The loop's one-line warnings, each said once (truncation: at most every WARN_EVERY steps)."""

    def __init__(self, answer_marker: str) -> None:
        self.marker = answer_marker
        self.no_answer_said = self.fell_said = False
        self.truncation_at = -WARN_EVERY

    def no_answer(self, mb: MiniBatch, step: int) -> float:
        """`train/no_answer_rate`: the share of the batch's completions with no answer section at all
        (not wrong answers: nothing where the checker reads); one warning, the first time it is most."""
        texts = [c.text for g in mb.groups for c in g.completions]
        share = sum(not has_answer(t, self.marker) for t in texts) / max(1, len(texts))
        if share > NO_ANSWER_WARN and not self.no_answer_said:
            self.no_answer_said = True
            warnings.warn(
                f"step {step}: {share:.0%} of the completions have no answer section at all (nothing "
                f"where the checker reads, task.answer_marker = {self.marker!r}), not wrong answers: the "
                "model does not write the format the task asks for; look at samples with `scalerl "
                "generate`, set task.answer_marker / task.answer_instruction, or raise "
                "rollout.max_new_tokens if they are cut first",
                stacklevel=1,
            )
        return share

    def truncation(self, row: dict, step: int) -> None:
        cut = row["train/truncation_rate"] + row["train/interrupted_rate"]  # the paper's "truncation rate"
        if cut > TRUNCATION_WARN and step >= self.truncation_at + WARN_EVERY:
            self.truncation_at = step
            warnings.warn(
                f"step {step}: {cut:.0%} of the completions were cut or interrupted (> "
                f"{TRUNCATION_WARN:.0%}): training tends to degrade (paper Section 2); see "
                "train/truncation_rate and train/interrupted_rate in metrics.jsonl",
                stacklevel=1,
            )

    def fell(self, erow: dict) -> None:
        if erow.get("forecast/fell") and not self.fell_said:
            self.fell_said = True
            warnings.warn(
                f"step {erow['step']}: the validation pass rate fell after its peak "
                f"({erow['forecast/peak']:.3f} -> {erow['val/pass_rate']:.3f}): the run is collapsing and "
                "its sigmoid forecast no longer holds; see forecast/fell and the training metrics in "
                "metrics.jsonl",
                stacklevel=1,
            )
