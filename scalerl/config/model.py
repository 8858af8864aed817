"""`model`: the model, its precision and device, LoRA adapters."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from scalerl.config.base import _Section


class LoraConfig(_Section):
    """LoRA adapters (PEFT) on the trainer's Linear layers; the generator decodes the merged weights."""

    r: int = Field(8, ge=1, description="adapter rank")
    alpha: float = Field(16.0, gt=0, description="the update is alpha / r * B @ A")
    targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="module-name suffixes of the Linear layers to adapt (e.g. q_proj, v_proj; each must match a "
        "module of the model; the LM head cannot be one)",
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input while training")


class ModelConfig(_Section):
    name: str = Field(
        "ladder-1m",
        description="'ladder-1m' (built-in, warm-started; the default testbed, docs/study.md), "
        "'ladder-4m', 'ladder-code-1m' (math and code), 'tiny', 'tiny-order', 'small', 'small-order', "
        "'smollm2-135m', a run directory, a HF checkpoint dir or a Hub id",
    )
    dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="parameter dtype of generator and trainer (bf16: pure bf16, AdamW updates in bf16 weights)"
    )
    compute_dtype: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="bf16: the paper's regime: the trunk of generator and trainer in bf16 (the trainer on bf16 "
        "casts of fp32 master weights), the head in fp32 with fp32_head; auto: bf16 on a CUDA "
        "device with bf16, fp32 elsewhere (a CPU without native bf16 emulates it: the default "
        "run's steps took 3-10x longer, docs/training.md)",
    )
    fp32_head: bool = Field(
        True,
        description="LM head + log-softmax in fp32 on generator and trainer (paper 3.2); "
        "acts when the trunk computes in bf16 (compute_dtype)",
    )
    share_prompt: bool = Field(
        True,
        description="trainer runs each group's prompt once, its K/V shared by the G completions (exact; "
        "false: every completion as a full sequence)",
    )
    device: str = Field("auto", description="'auto' (cuda if available), 'cpu', 'cuda', 'cuda:N'")
    lora: LoraConfig | None = Field(
        None,
        description="train LoRA adapters instead of every weight, e.g. {r: 8, alpha: 16, targets: [q_proj, "
        "v_proj]} (none: full fine-tuning); the generator, checkpoints and export get merged weights",
    )
