"""Typed configuration of a run: one class per component, bounds checked on load.

A recipe (scalerl, grpo, dapo, ...) is a YAML preset of `Config` under `scalerl/recipes/`.
Variants are discriminated unions keyed by `type` (`loss: {type: cispo, eps_max: 5}`).
Unknown keys are errors (`extra="forbid"`), never silently ignored.

SKELETON: the field names below are shared by every stage; the objective-library work
fills in loading (YAML, dotted `--set` overrides with closest-key suggestions), presets and
`scalerl recipes`. Keep names stable; add fields rather than rename.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ---------------------------------------------------------------- model
class ModelConfig(_Section):
    name: str = Field("tiny", description="'tiny' (built-in, warm-started), 'smollm2-135m', or a HF checkpoint dir")
    dtype: Literal["fp32", "bf16"] = Field("fp32", description="parameter dtype of generator and trainer")
    fp32_head: bool = Field(True, description="LM head + log-softmax in fp32 on generator and trainer (paper 3.2)")
    device: str = Field("auto", description="'auto' (cuda if available), 'cpu', 'cuda', 'cuda:N'")


# ---------------------------------------------------------------- task and reward
class TaskConfig(_Section):
    name: str = Field("arith", description="built-in task name, or 'file' to read `path`")
    path: str | None = Field(None, description="JSONL/CSV/parquet with prompt/answer (or problem/answer) fields")
    val_size: int = Field(256, ge=1, description="held-out validation prompts")
    seed: int = Field(0, description="seed of the task generator / split")


class RewardConfig(_Section):
    pass_value: float = Field(1.0, description="reward of a passing completion")
    fail_value: float = Field(-1.0, description="reward of a failing one (and of a checker error)")
    timeout_s: float = Field(5.0, gt=0, description="per-answer checker timeout (math-verify)")


# ---------------------------------------------------------------- rollout / length control
class InterruptConfig(_Section):
    type: Literal["interrupt"] = "interrupt"
    think_min: int = Field(96, ge=1, description="forced interruption drawn uniformly in [think_min, think_max] thinking tokens")
    think_max: int = Field(128, ge=1)
    answer_budget: int = Field(32, ge=1, description="tokens allowed after the interruption phrase")


class LengthPenaltyConfig(_Section):
    type: Literal["penalty"] = "penalty"
    max_len: int = Field(160, ge=1, description="completions longer than this get the full penalty")
    tolerance: int = Field(32, ge=0, description="penalty ramps linearly over the last `tolerance` tokens before max_len")
    penalty: float = Field(1.0, ge=0, description="size of the full penalty")


class NoLengthControl(_Section):
    type: Literal["none"] = "none"


LengthControl = Annotated[Union[InterruptConfig, LengthPenaltyConfig, NoLengthControl], Field(discriminator="type")]


class RolloutConfig(_Section):
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(160, ge=1, description="total completion budget (thinking + answer)")
    batch_slots: int = Field(64, ge=1, description="sequences decoded concurrently (continuous batching)")
    length: LengthControl = Field(default_factory=InterruptConfig)


# ---------------------------------------------------------------- batch, advantages, filters, curriculum
class BatchConfig(_Section):
    prompts: int = Field(32, ge=1, description="prompts per optimizer step (after filtering)")
    generations: int = Field(8, ge=2, description="completions per prompt (G)")


class AdvantageConfig(_Section):
    norm: Literal["batch", "prompt", "none"] = Field("batch", description="divide by batch std (ScaleRL), group std (GRPO), or nothing")
    baseline: Literal["mean", "leave_one_out"] = Field("mean", description="group mean, or mean of the other G-1")


class FilterConfig(_Section):
    zero_variance: bool = Field(True, description="drop groups whose rewards are all equal (not counted, not resampled)")


class CurriculumConfig(_Section):
    no_positive_resampling: bool = Field(True, description="never resample prompts whose historical pass rate reached threshold")
    threshold: float = Field(0.9, gt=0, le=1)


# ---------------------------------------------------------------- losses
Aggregation = Literal["prompt", "sample", "token"]


class CispoLoss(_Section):
    type: Literal["cispo"] = "cispo"
    eps_max: float = Field(5.0, gt=0, description="upper truncation of the importance ratio")
    aggregation: Aggregation = "prompt"


class PPOClipLoss(_Section):
    type: Literal["ppo_clip"] = "ppo_clip"
    eps_low: float = Field(0.2, gt=0, lt=1)
    eps_high: float = Field(0.2, gt=0)
    kl_beta: float = Field(0.0, ge=0, description="k3 KL penalty to the initial policy")
    aggregation: Aggregation = "sample"


class GSPOLoss(_Section):
    type: Literal["gspo"] = "gspo"
    eps_low: float = Field(3e-4, gt=0, lt=1)
    eps_high: float = Field(4e-4, gt=0)
    aggregation: Aggregation = "sample"


class ReinforceLoss(_Section):
    type: Literal["reinforce"] = "reinforce"
    aggregation: Aggregation = "sample"


LossConfig = Annotated[Union[CispoLoss, PPOClipLoss, GSPOLoss, ReinforceLoss], Field(discriminator="type")]


# ---------------------------------------------------------------- optimizer, pipeline, eval, run
class OptimConfig(_Section):
    lr: float = Field(1e-4, gt=0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-15, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    warmup_steps: int = Field(20, ge=0, description="linear warm-up, then constant")
    grad_clip: float = Field(1.0, gt=0)


class PipelineConfig(_Section):
    mode: Literal["pipeline_rl", "ppo_off_policy"] = "pipeline_rl"
    k: int = Field(8, ge=1, description="max staleness (PipelineRL) / optimizer steps per batch (PPO-off-policy)")


class EvalConfig(_Section):
    every: int = Field(10, ge=1, description="evaluate every N optimizer steps (and at step 0)")
    prompts: int = Field(256, ge=1, description="validation prompts (<= task.val_size)")
    samples: int = Field(4, ge=1, description="samples per prompt: mean@k pass rate")
    temperature: float = Field(1.0, gt=0)
    fit_min_frac: float = Field(0.1, ge=0, lt=1, description="live forecast ignores the first fraction of compute")


class RunConfig(_Section):
    seed: int = 0
    max_steps: int = Field(300, ge=1)
    max_minutes: float | None = Field(None, gt=0, description="stop after this much wall-clock training time")
    checkpoint_every: int = Field(25, ge=1)
    threads: int | None = Field(None, ge=1, description="torch threads (default: split the cores between generator and trainer)")


class Config(_Section):
    recipe: str = Field("scalerl", description="name of the preset this config came from")
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)
    filter: FilterConfig = Field(default_factory=FilterConfig)
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    loss: LossConfig = Field(default_factory=CispoLoss)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    run: RunConfig = Field(default_factory=RunConfig)
