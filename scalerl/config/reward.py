"""`reward` (pass/fail values, a custom reward function) and `sandbox` (the limits of a model's program)."""

from __future__ import annotations

from pydantic import Field, model_validator

from scalerl.config.base import _Section


class RewardConfig(_Section):
    pass_value: float = Field(1.0, description="reward of a passing completion")
    fail_value: float = Field(-1.0, description="reward of a failing one (and of a checker error)")
    timeout_s: float = Field(5.0, gt=0, description="per-answer checker timeout (math-verify)")
    threshold: float = Field(
        1.0, gt=0, le=1, description="a completion passes iff its checker score (in [0, 1]) reaches this, in (0, 1]"
    )
    partial_credit: bool = Field(
        False,
        description="a failing completion earns fail_value + score * (pass_value - fail_value) instead of fail_value",
    )
    slow_s: float = Field(1.0, gt=0, description="a check slower than this (or timed out) counts in train/reward_slow")
    function: str | None = Field(
        None,
        description="a custom reward with TRL's signature fn(prompts, completions, **columns) -> list[float | "
        "None], as '<module>:<name>' or '<path/to/file.py>:<name>'; alone (no weights) its value is "
        "the reward and a completion passes iff it reaches threshold",
    )
    weights: list[float] | None = Field(
        None,
        description="[checker, function]: the reward is checker reward x weights[0] + function value x "
        "weights[1], and passing stays the checker's (none: the function alone)",
    )

    @model_validator(mode="after")
    def _weights_need_function(self) -> RewardConfig:
        if self.weights is not None and (self.function is None or len(self.weights) != 2):
            raise ValueError(
                f"weights = {self.weights}: expected [checker weight, function weight] beside a reward.function"
            )
        return self


class SandboxConfig(_Section):
    """Limits of each run of a model's program (code tasks; `scalerl.sandbox`, docs/sandbox.md)."""

    timeout_s: float = Field(
        4.0, gt=0, le=600, description="wall limit of one test run (CPU limit: this rounded up + 1 s)"
    )
    memory_mb: int = Field(
        256,
        ge=32,
        description="address-space limit of each of the program's processes (it holds at most nproc x memory_mb)",
    )
    output_limit: int = Field(1 << 20, ge=1, description="bytes kept per stream; more stops the program")
    nproc: int = Field(8, ge=1, description="processes and threads the program may have")
    disk_mb: int = Field(32, ge=1, description="size of the program's working directory (a tmpfs)")
    allow_unisolated: bool = Field(
        False,
        description="where namespaces cannot be made, run programs with limits only (no filesystem, network "
        "or process isolation; never as root) instead of refusing",
    )
    reuse_results: bool = Field(
        True,
        description="a program already run on a prompt's tests is scored from its result instead of run again "
        "(the last 4096 results per process; copies among a group's samples are common): a program "
        "whose output depends on chance or time gets one draw for all its copies",
    )
