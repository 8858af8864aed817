"""What the trainer does with a step's groups: `batch`, `advantage`, `filter`, `curriculum`, `loss`
(cispo | ppo_clip | gspo | reinforce | custom: the user's own) and `optim`."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from scalerl.config.base import _Section
from scalerl.user_code import check_call, load_function, resolve_spec

MAX_PROMPTS = 65_536  # per step: 30x the largest batch of the paper (2048); catches typos such as 1e12
MAX_GENERATIONS = 1_024  # per prompt (paper: 16)
MAX_COMPLETIONS = 1_048_576  # prompts x generations per step


class BatchConfig(_Section):
    prompts: int = Field(32, ge=1, le=MAX_PROMPTS, description="prompts per optimizer step (after filtering)")
    generations: int = Field(8, ge=2, le=MAX_GENERATIONS, description="completions per prompt (G)")
    activation_budget_mb: float | None = Field(
        None,
        gt=0,
        description="activations (MiB) one trainer micro-batch keeps for its backward, estimated from "
        "the model's shape (scalerl.trainer.step.ActivationCost): the step's groups are "
        "packed into micro-batches within it, whole groups, and with `recompute: auto` a "
        "group that alone is larger recomputes its layers (none: 512 on a CPU, at most a "
        "twentieth of the memory available; an eighth of the device's memory on a GPU; "
        "scalerl.trainer.step.activation_budget, docs/design.md, Memory)",
    )
    recompute: Literal["auto", "always", "never"] = Field(
        "auto",
        description="recompute each decoder layer's activations in the backward instead of keeping them "
        "(the forward keeps only every layer's input): `auto` for a micro-batch whose kept "
        "activations would pass `activation_budget_mb` (a group alone larger than the budget), "
        "`always` for every micro-batch (packed by the recomputed cost), `never` to keep them all; "
        "a recomputed micro-batch runs each layer's forward twice (docs/design.md, Memory)",
    )

    @model_validator(mode="after")
    def _completions(self) -> BatchConfig:
        if self.prompts * self.generations > MAX_COMPLETIONS:
            raise ValueError(
                f"batch.prompts x batch.generations = {self.prompts} x {self.generations} = "
                f"{self.prompts * self.generations:,} completions per step: more than the "
                f"{MAX_COMPLETIONS:,} allowed"
            )
        return self


class AdvantageConfig(_Section):
    norm: Literal["batch", "prompt", "none"] = Field(
        "batch", description="divide by batch std (ScaleRL), group std (GRPO), or nothing"
    )
    baseline: Literal["mean", "leave_one_out"] = Field("mean", description="group mean, or mean of the other G-1")


class FilterConfig(_Section):
    zero_variance: bool = Field(
        True, description="drop groups whose rewards are all equal (not counted, not resampled)"
    )
    dynamic_sampling: bool = Field(
        False, description="DAPO: keep sampling prompts until batch.prompts groups survive the filter"
    )


class CurriculumConfig(_Section):
    no_positive_resampling: bool = Field(
        True, description="never resample prompts whose pass rate (see pass_rate) reached threshold"
    )
    threshold: float = Field(0.9, gt=0, le=1, description="pass rate at which a prompt is retired, in (0, 1]")
    pass_rate: Literal["last", "cumulative"] = Field(
        "last",
        description="last: the pass rate of the prompt's latest group (its latest epoch, as Polaris filters "
        "between epochs); cumulative: over all its groups",
    )


# ---------------------------------------------------------------- losses
Aggregation = Literal["prompt", "sample", "token"]
_AGG_HELP = "prompt: mean over a prompt's tokens, then over prompts; sample: per completion; token: over all tokens"


class CispoLoss(_Section):
    type: Literal["cispo"] = Field("cispo", description="sg(min(rho, eps_max)) * A * log pi (paper Eq. 4)")
    eps_max: float = Field(5.0, gt=0, description="upper truncation of the importance ratio")
    aggregation: Aggregation = Field("prompt", description=_AGG_HELP)


class PPOClipLoss(_Section):
    type: Literal["ppo_clip"] = Field(
        "ppo_clip", description="min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A) (paper Eq. 2)"
    )
    eps_low: float = Field(0.2, gt=0, lt=1, description="lower clip: rho >= 1 - eps_low")
    eps_high: float = Field(0.2, gt=0, description="upper clip: rho <= 1 + eps_high (DAPO clip-higher: 0.28)")
    kl_beta: float = Field(0.0, ge=0, description="k3 KL penalty to the initial policy")
    aggregation: Aggregation = Field("sample", description=_AGG_HELP)


class GSPOLoss(_Section):
    type: Literal["gspo"] = Field("gspo", description="sequence ratio exp(mean_t log rho), clipped (paper Section 3.2)")
    eps_low: float = Field(3e-4, gt=0, lt=1, description="lower clip of the sequence ratio")
    eps_high: float = Field(4e-4, gt=0, description="upper clip of the sequence ratio")
    aggregation: Aggregation = Field("sample", description=_AGG_HELP)


class ReinforceLoss(_Section):
    type: Literal["reinforce"] = Field("reinforce", description="A * log pi, no importance correction")
    aggregation: Aggregation = Field("sample", description=_AGG_HELP)


class CustomLoss(_Section):
    type: Literal["custom"] = Field("custom", description="the user's own per-token objective (loss.function)")
    function: str = Field(
        ...,
        description="fn(logprobs, gen_logprobs, advantages, mask, **options) -> the (N, T) per-token objective "
        "J_t to maximise (logprobs (N, T) with grad, gen_logprobs (N, T), advantages (N,), mask "
        "(N, T); 0 where masked), as '<module>:<name>' or '<path/to/file.py>:<name>' "
        "(docs/recipes.md)",
    )
    options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments the function is called with")
    aggregation: Aggregation = Field("prompt", description=_AGG_HELP)

    @field_validator("function")
    @classmethod
    def _absolute(cls, spec: str) -> str:
        """Loaded (a wrong path or name is one line naming it as written), then the file's path made absolute
        (another process, a resume from elsewhere finds it)."""
        load_function(spec, "loss.function")
        return resolve_spec(spec, "loss.function")

    @model_validator(mode="after")
    def _callable(self) -> CustomLoss:
        """Loaded and its signature checked now: a wrong path, name or signature is one line before anything
        is built."""
        check_call(
            load_function(self.function, "loss.function"), self.function, "loss.function", LOSS_ARGUMENTS, self.options
        )
        return self


LOSS_ARGUMENTS = ("logprobs", "gen_logprobs", "advantages", "mask")
LossConfig = Annotated[Union[CispoLoss, PPOClipLoss, GSPOLoss, ReinforceLoss, CustomLoss], Field(discriminator="type")]


# ---------------------------------------------------------------- optimizer, pipeline, eval, run
class OptimConfig(_Section):
    lr: float = Field(
        5e-5,
        gt=0,
        description="AdamW learning rate (paper 8B: 5e-7; the default testbed: 5e-5, docs/study.md; "
        "the old tiny testbed ran at 2e-4 and collapsed at 6e-4)",
    )
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas, each in [0, 1)")
    eps: float = Field(1e-15, gt=0, description="AdamW epsilon (paper: 1e-15)")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay (paper: 0.01)")
    warmup_steps: int = Field(20, ge=0, description="linear warm-up, then constant")
    grad_clip: float = Field(1.0, gt=0, description="max global gradient norm")

    @model_validator(mode="after")
    def _betas(self) -> OptimConfig:
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must each be in [0, 1), got {list(self.betas)}")
        return self
