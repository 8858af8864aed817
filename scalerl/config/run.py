"""`run` (steps, seeds, checkpoints, threads) and `Config`: every section of a run together, with the
checks across sections (no boolean where a number goes, finite floats, distinct rewards, one trainer
for `single`, evaluation prompts within the held-out set)."""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from scalerl.config.base import _bool_numbers, _floats, _Section, lookup
from scalerl.config.eval import EvalConfig
from scalerl.config.model import ModelConfig
from scalerl.config.pipeline import PipelineConfig, RayConfig, TrainerConfig
from scalerl.config.reward import RewardConfig, SandboxConfig
from scalerl.config.rollout import RolloutConfig
from scalerl.config.tasks import TASK_KINDS, ArithTaskConfig, TaskConfig, expand_task
from scalerl.config.train import (
    AdvantageConfig,
    BatchConfig,
    CispoLoss,
    CurriculumConfig,
    FilterConfig,
    LossConfig,
    OptimConfig,
)


class RunConfig(_Section):
    seed: int = Field(0, description="global seed (sampling, curriculum order)")
    max_steps: int = Field(120, ge=1, description="optimizer steps to run")
    max_minutes: float | None = Field(
        None,
        gt=0,
        description="stop after this much wall-clock training time (evaluations and checkpoints not counted)",
    )
    checkpoint_every: int = Field(25, ge=1, description="save a checkpoint every N optimizer steps")
    threads: int | None = Field(
        None,
        ge=1,
        description="torch threads (default: split the cores between generator "
        "and trainer); at most the cores this process may use",
    )

    @model_validator(mode="after")
    def _threads_within_cores(self, info: ValidationInfo) -> RunConfig:
        """Checked where a user's config is read on the machine that runs it (`config.merge.validate` passes
        the context `machine`), not where a process of the run rebuilds the config it was handed: a generator
        process, or a trainer rank on a node with other cores."""
        if not (info.context or {}).get("machine"):
            return self
        cores = available_cores()
        if self.threads is not None and self.threads > cores:
            raise ValueError(
                f"run.threads = {self.threads}: this machine gives the process {cores} core(s); "
                f"expected at most {cores} (leave it unset to use them all)"
            )
        return self


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), the bound of `run.threads`."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Config(_Section):
    recipe: str = Field("scalerl", description="name of the preset this config came from")
    _profile: tuple[str, dict] = PrivateAttr(default=("", {}))  # (origin, applied keys): load_config's model profile
    model: ModelConfig = Field(default_factory=ModelConfig, description="model and precision")
    task: TaskConfig = Field(
        default_factory=ArithTaskConfig,
        description=f"prompt source: {' | '.join(TASK_KINDS)} (or its short name, task.name=rg:chain_sum)",
    )
    reward: RewardConfig = Field(default_factory=RewardConfig, description="pass/fail reward values")
    sandbox: SandboxConfig = Field(
        default_factory=SandboxConfig, description="limits of a model's program (code tasks)"
    )
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="generation and length control")
    batch: BatchConfig = Field(default_factory=BatchConfig, description="prompts x generations per step")
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig, description="baseline and normalisation")
    filter: FilterConfig = Field(default_factory=FilterConfig, description="zero-variance filtering / dynamic sampling")
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig, description="No-Positive-Resampling")
    loss: LossConfig = Field(
        default_factory=CispoLoss, description="policy loss: cispo | ppo_clip | gspo | reinforce | custom"
    )
    optim: OptimConfig = Field(default_factory=OptimConfig, description="AdamW and schedule")
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig, description="off-policy mode")
    ray: RayConfig = Field(default_factory=RayConfig, description="Ray backend: cluster, actors, resources")
    trainer: TrainerConfig = Field(
        default_factory=TrainerConfig, description="single, data-parallel or sharded (FSDP2) trainer ranks"
    )
    eval: EvalConfig = Field(default_factory=EvalConfig, description="periodic held-out evaluation")
    run: RunConfig = Field(default_factory=RunConfig, description="steps, seeds, checkpoints")

    _task = field_validator("task", mode="before")(expand_task)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_counts(cls, data: Any) -> Any:
        """`batch.prompts: true` is a mistake, not 1: a boolean is refused wherever a number is expected."""
        if isinstance(data, dict):
            for path in _bool_numbers(Config, data):
                raise ValueError(f"{path} = {lookup(data, path)!r}: expected a number, not a boolean")
        return data

    @model_validator(mode="after")
    def _finite_and_distinct(self) -> Config:
        for path, value in _floats(self):
            if not math.isfinite(value):
                raise ValueError(f"{path} = {value!r}: expected a finite number")
        if self.reward.pass_value <= self.reward.fail_value:
            raise ValueError(
                f"reward.pass_value = {self.reward.pass_value!r} must be greater than reward.fail_value "
                f"= {self.reward.fail_value!r} (equal rewards give no group a learning signal)"
            )
        return self

    @model_validator(mode="after")
    def _one_single_trainer(self) -> Config:
        if self.trainer.strategy == "single" and self.ray.trainers > 1:
            raise ValueError(
                f"trainer.strategy = 'single' runs one trainer, but ray.trainers = {self.ray.trainers}: "
                "set trainer.strategy to ddp or fsdp, or ray.trainers=1"
            )
        return self

    @model_validator(mode="after")
    def _eval_within_val(self) -> Config:
        val_size = getattr(self.task, "val_size", None)
        if None not in (self.eval.prompts, val_size) and self.eval.prompts > val_size:
            raise ValueError(f"eval.prompts ({self.eval.prompts}) must be <= task.val_size ({val_size})")
        return self
