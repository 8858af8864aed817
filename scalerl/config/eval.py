"""`eval`: the held-out evaluation, its schedule (`eval_schedule`), samples and downstream sets."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from scalerl.config.base import _Section, _yaml_off
from scalerl.config.tasks import DEFAULT_VAL_SIZE, TaskPart, _expand_all


class EvalConfig(_Section):
    schedule: Literal["geometric", "linear"] = Field(
        "geometric",
        description="geometric: `count` evaluations spaced evenly in log-steps from fit_min_frac / 2 "
        "of run.max_steps (the rise before the fits' windows, which start at fit_min_frac of the final compute) to "
        "the end; linear: every `every` steps",
    )
    count: int = Field(
        36,
        ge=2,
        description="evaluations after step 0 on the geometric schedule (fewer when "
        "run.max_steps is small: one per step at most); 36 put 15 or more inside the first half's fit "
        "window (a tenth to a half of the compute) on the default run (docs/default-run.md)",
    )
    every: int = Field(5, ge=1, description="evaluate every N optimizer steps on the linear schedule")
    prompts: int | None = Field(
        None,
        ge=1,
        description="validation prompts (<= task.val_size; none: the validation set, at most 512); 512 x 2 "
        "samples kept the default run's sampling error (val/pass_rate_se) at 0.012 or less "
        "on 8 seeds",
    )
    samples: int = Field(
        2,
        ge=1,
        description="samples per prompt: mean@k pass rate (2: many cheap evaluations "
        "rather than few dear ones, for the fits)",
    )
    temperature: float = Field(1.0, gt=0, description="sampling temperature of the evaluation")
    fit_min_frac: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="the live forecast and the final fit leave out this "
        "first fraction of the compute (the paper: its first 1.5k of 16k GPU-hours); the "
        "first-half check always uses the frozen method's tenth (docs/forecasting.md)",
    )
    downstream: list[TaskPart] = Field(
        default_factory=list,
        description="downstream sets from other distributions, each a task (or its short name, "
        "e.g. [arith-2x12, code-expr-4]): each evaluation also scores `downstream_prompts` of their validation prompts "
        "and logs downstream/<name>/pass_rate",
    )
    downstream_prompts: int = Field(32, ge=1, description="validation prompts evaluated per downstream set")
    split: Literal["auto", "off"] = Field(
        "auto",
        description="auto: where the generator process evaluates on its own threads only (a CPU, the process "
        "transport, a model under 20M parameters, weights decoded in their own dtype), the "
        "trainer's process decodes a share of the prompts at the same time with its own model, "
        "on the cores it would leave idle (scalerl.evaluate.SplitEvaluator); off: one engine "
        "evaluates every prompt",
    )

    _split_off = field_validator("split", mode="before")(_yaml_off)
    _downstream = field_validator("downstream", mode="before")(_expand_all)

    @model_validator(mode="before")
    @classmethod
    def _every_means_linear(cls, data: Any) -> Any:
        """Setting `every` without a `schedule` asks for the linear schedule."""
        if isinstance(data, dict) and "every" in data and "schedule" not in data:
            data = {**data, "schedule": "linear"}
        return data

    def prompts_for(self, val_size: int) -> int:
        """Validation prompts evaluated when the task holds out `val_size`: `prompts`, else
        `min(val_size, DEFAULT_VAL_SIZE)`."""
        return self.prompts if self.prompts is not None else min(val_size, DEFAULT_VAL_SIZE)

    def steps(self, max_steps: int) -> list[int]:
        """The optimizer steps evaluated after step 0 (the last step always is)."""
        if self.schedule == "linear":
            return sorted({*range(self.every, max_steps + 1, self.every), max_steps})
        return eval_schedule(max_steps, self.count, first=max(1, round(max_steps * self.fit_min_frac / 2)))


def eval_schedule(max_steps: int, count: int, first: int = 1) -> list[int]:
    """`count` distinct steps from `first` to max_steps spaced evenly in log(step); where rounding
    would repeat a step the next step is taken instead. Every step from `first` when fewer remain."""
    first = max(1, min(first, max_steps))
    if max_steps - first + 1 <= count:
        return list(range(first, max_steps + 1))
    out: list[int] = []
    for i in range(count):
        out.append(max(out[-1] + 1 if out else first, round(first * (max_steps / first) ** (i / (count - 1)))))
    return sorted({min(s, max_steps) for s in out} | {max_steps})
