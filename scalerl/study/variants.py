"""The configurations of a study: recipes compared (paper Fig. 2) and leave-one-out variants
of ScaleRL (paper Fig. 7, Section 4), each a readable list of `--set` overrides.

Every leave-one-out variant swaps exactly one ScaleRL component for the alternative the paper
tested against it; the overrides are applied after the base recipe and the user's `--set`.

Departures from the paper:
1. "CISPO -> DAPO loss" keeps ScaleRL's prompt-level aggregation and batch normalisation
   and swaps only the objective for PPO-clip with DAPO's clip-higher (eps_low 0.2,
   eps_high 0.28), as the paper's Fig. 7 does (its "DAPO loss" row).
2. "PipelineRL -> PPO-off-policy" keeps k (the base's k = 8: eight optimizer steps per batch
   of 8 x P groups), the paper's PPO-off-policy-8.
3. Length-control windows that cannot act inside a small completion budget (thinking budget +
   interruption phrase + answer budget, the phrase counted with the model's tokenizer; or the
   penalty's max_len, over `rollout.max_new_tokens`) are scaled to that budget by
   `fit_length_control` in the defaults' proportions (interrupt between 25% and 35% of the
   budget, shortened until the phrase and a 20% answer budget fit; penalty over the last 20%
   before the budget). The paper interrupts later (10-12k thinking tokens of a 16k budget); the
   tiny model's thinking is short (docs/rollout.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from scalerl.config import Config, InterruptConfig, LengthPenaltyConfig
from scalerl.errors import ScaleRLError
from scalerl.study.activity import (
    ActivityCheck,
    clipping_acts,
    length_control_acts,
    resampling_acts,
    window_acts,
    zero_variance_filter_acts,
)


@dataclass(frozen=True)
class Variant:
    """One configuration of a study: a recipe plus overrides, under a short name."""

    name: str  # run directory name and label in the report
    recipe: str  # preset the overrides apply to
    overrides: tuple[str, ...] = ()  # `--set` overrides after the user's own
    swaps: str = ""  # what changed, in words (the report's table)
    seed_offset: int = 0  # its seeds are seed_offset, seed_offset + 1, ... (`base-again`)
    acts: ActivityCheck | None = None  # does the swapped component act? (scalerl.study.activity; None: no check,
    # the swap always changes the update, e.g. token against prompt aggregation)

    @property
    def sets_pipeline(self) -> bool:
        """The swap is of the pipeline itself (`pipeline.*`: PipelineRL's k, PPO-off-policy), whose point
        is the data's age: a change of staleness is its effect, not a side effect."""
        return any(o.startswith("pipeline.") for o in self.overrides)


# (name, what the paper swapped, overrides, the check of whether the component acts): ScaleRL
# component -> the paper's alternative.
LEAVE_ONE_OUT: tuple[tuple[str, str, tuple[str, ...], ActivityCheck | None], ...] = (
    (
        "dapo-loss",
        "CISPO -> DAPO loss (PPO-clip, eps 0.2 / 0.28)",
        ("loss.type=ppo_clip", "loss.eps_low=0.2", "loss.eps_high=0.28"),
        clipping_acts,
    ),
    ("token-agg", "prompt -> token aggregation", ("loss.aggregation=token",), None),
    ("prompt-norm", "batch -> prompt advantage normalisation", ("advantage.norm=prompt",), None),
    ("no-fp32-head", "FP32 LM head -> off", ("model.fp32_head=false",), None),
    ("no-zero-var-filter", "zero-variance filter -> off", ("filter.zero_variance=false",), zero_variance_filter_acts),
    ("no-npr", "No-Positive-Resampling -> off", ("curriculum.no_positive_resampling=false",), resampling_acts),
    ("ppo-off-policy", "PipelineRL -> PPO-off-policy (same k)", ("pipeline.mode=ppo_off_policy",), None),
    ("length-penalty", "forced interruptions -> length penalty", ("rollout.length.type=penalty",), length_control_acts),
)

# PipelineRL's k (paper Fig. 4: k = 8 beat k = 1 .. 4 on efficiency); the base's own k is not repeated
K_SWEEP = (1, 2, 4, 8)

# the FP32 head with a bf16 trunk (paper Fig. 5b: the head in fp32 raised the ceiling); on a CPU
# the base computes in fp32 (`model.compute_dtype=auto`), where the head's precision cannot matter
PRECISION: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("bf16-trunk", "fp32 -> bf16 trunk (FP32 head kept)", ("model.compute_dtype=bf16",)),
    (
        "bf16-trunk-no-fp32-head",
        "fp32 -> bf16 trunk, FP32 head -> off",
        ("model.compute_dtype=bf16", "model.fp32_head=false"),
    ),
)

# The paper's scaling axes (Section 5; issue "The paper's studies on a trustworthy testbed"), each
# at x0.5 and x2 of the default testbed's value, named `<axis>-<value>`: prompts per step (32),
# the thinking budget (interruption at 88-104, completion budget 160), generations per prompt at a
# fixed 256 completions a step (8), and the model (ladder-1m; the same warm start at 2.4M and 4.2M).
AXES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("batch-16", "prompts per step 32 -> 16 (x0.5)", ("batch.prompts=16",)),
    ("batch-64", "prompts per step 32 -> 64 (x2)", ("batch.prompts=64",)),
    (
        "think-52",
        "thinking budget 88-104 -> 44-52 tokens (x0.5; completion budget 160 -> 100)",
        ("rollout.length.think_min=44", "rollout.length.think_max=52", "rollout.max_new_tokens=100"),
    ),
    (
        "think-208",
        "thinking budget 88-104 -> 176-208 tokens (x2; completion budget 160 -> 320)",
        ("rollout.length.think_min=176", "rollout.length.think_max=208", "rollout.max_new_tokens=320"),
    ),
    (
        "gens-4",
        "32 prompts x 8 generations -> 64 x 4 (256 completions a step)",
        ("batch.prompts=64", "batch.generations=4"),
    ),
    (
        "gens-16",
        "32 prompts x 8 generations -> 16 x 16 (256 completions a step)",
        ("batch.prompts=16", "batch.generations=16"),
    ),
    ("model-2m", "ladder-1m -> ladder-2m (2.4M parameters, the same warm start)", ("model.name=ladder-2m",)),
    ("model-4m", "ladder-1m -> ladder-4m (4.2M parameters, the same warm start)", ("model.name=ladder-4m",)),
)

RECIPES = ("scalerl", "grpo", "dapo", "gspo", "magistral", "minimax")

# The controls of a study (docs/study.md, "The controls"): effects known to exist, which the study
# must detect before its other verdicts are read, and one known not to exist, which it must not.
# Graded thinking budgets on the shipped weights (chosen before any run, issue 47): the interruption
# decides by construction which rungs can pass. A correct scratchpad closes `</think>` at its 32nd
# (3-digit), 52nd (5-digit) and 72nd (7-digit) token; `think-56` (54-60) leaves the 7-digit rung
# unpassable, `think-40` (36-44) the 5- and 7-digit rungs. So A(think-40) < A(think-56) < A(base).
# (The larger model of the earlier controls is not shipped, so it is not a control of these weights.)
CONTROLS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "think-56",
        "thinking budget 88-104 -> 54-60 tokens (the 7-digit scratchpad, 72 tokens, does not fit)",
        ("rollout.length.think_min=54", "rollout.length.think_max=60"),
        "lower",
    ),
    (
        "think-40",
        "thinking budget 88-104 -> 36-44 tokens (only the 3-digit scratchpad, 32 tokens, fits)",
        ("rollout.length.think_min=36", "rollout.length.think_max=44"),
        "lower",
    ),
)
# the graded order the controls' A must follow, lowest first
CONTROL_ORDER: tuple[str, ...] = ("think-40", "think-56", "base")
CONTROL_BASE = "base"  # the controls' name for the base configuration
CONTROL_AGAIN = "base-again"  # the base under as many other seeds: the negative control


def plan_variants(
    base: str = "scalerl",
    leave_one_out: bool = False,
    recipes: tuple[str, ...] = (),
    k_sweep: bool = False,
    precision: bool = False,
    controls: bool = False,
    seeds: int = 1,
    axes: bool = False,
) -> list[Variant]:
    """The base first, then the other recipes, then the leave-one-out variants of the base, the
    PipelineRL k-sweep (`pipeline-k<N>` for every N of `K_SWEEP`; the one equal to the base is
    left out by the study as a no-op), the bf16-trunk pair (`PRECISION`) and the scaling axes
    (`AXES`: prompts per step, thinking budget, generations per prompt, model size). The axes alone
    name their base `base` (studies/axes/base/, as the controls do); beside recipes it is the recipe's name.

    `controls`: the study of the instrument instead (`CONTROLS`): the base named `base`, the
    positive controls, and `base-again`, the base under `seeds` other seeds (seeds, seeds + 1, ...)."""
    if controls:
        if leave_one_out or recipes or k_sweep or precision or axes:
            raise ScaleRLError(
                "--controls is a study of its own: run it without --leave-one-out, --recipes, "
                "--k-sweep, --precision and --axes"
            )
        return [
            Variant(CONTROL_BASE, base, (), "base"),
            *(Variant(name, base, overrides, swaps) for name, swaps, overrides, _ in CONTROLS),
            Variant(
                CONTROL_AGAIN, base, (), f"base, seeds {seeds}..{2 * seeds - 1} (negative control)", seed_offset=seeds
            ),
        ]
    alone = axes and not (leave_one_out or recipes or k_sweep or precision)  # the axes study: its base is `base`
    variants = [Variant(CONTROL_BASE if alone else base, base, (), "base")]
    variants += [Variant(r, r, (), f"recipe {r}") for r in recipes if r != base]
    if leave_one_out:
        variants += [Variant(name, base, overrides, swaps, acts=acts) for name, swaps, overrides, acts in LEAVE_ONE_OUT]
    if k_sweep:
        variants += [
            Variant(f"pipeline-k{k}", base, (f"pipeline.k={k}",), f"PipelineRL k -> {k}", acts=window_acts(k))
            for k in K_SWEEP
        ]
    if precision:
        variants += [Variant(name, base, overrides, swaps) for name, swaps, overrides in PRECISION]
    if axes:
        variants += [Variant(name, base, overrides, swaps) for name, swaps, overrides in AXES]
    return variants


def fit_length_control(cfg: Config, phrase_tokens: int | None = None) -> list[str]:
    """Scale length-control windows that cannot act within `rollout.max_new_tokens` (header, 3).

    `phrase_tokens`: the interruption phrase's length in tokens (default: counted with the
    tokenizer of `cfg.model.name`). Changes `cfg` in place and returns what it changed (for the
    report); [] when it fits. A budget too small for the phrase and an answer is refused.
    """
    budget = cfg.rollout.max_new_tokens
    length = cfg.rollout.length
    if isinstance(length, InterruptConfig):
        if phrase_tokens is None:
            from scalerl.rollout.length import phrase_tokens as count

            phrase_tokens = count(cfg.model.name, length.phrase)
        if length.think_max + phrase_tokens + length.answer_budget <= budget:
            return []
        answer = max(1, budget // 5)
        think_max = min(budget * 7 // 20, budget - answer - phrase_tokens)
        if think_max < 1:
            raise ScaleRLError(
                f"rollout.max_new_tokens ({budget}) cannot hold a thinking token, the interruption phrase "
                f"({phrase_tokens} tokens) and a {answer}-token answer; raise it, shorten rollout.length.phrase, "
                "or use rollout.length.type=none"
            )
        think_min = max(1, min(think_max, budget // 4))
        cfg.rollout.length = length.model_copy(
            update=dict(think_min=think_min, think_max=think_max, answer_budget=answer)
        )
        return [
            f"rollout.length (interrupt) scaled to the {budget}-token budget: think {think_min}..{think_max}, "
            f"phrase {phrase_tokens}, answer {answer}"
        ]
    if isinstance(length, LengthPenaltyConfig) and length.max_len > budget:
        tolerance = min(length.tolerance, max(1, budget // 5))
        cfg.rollout.length = LengthPenaltyConfig(max_len=budget, tolerance=tolerance, penalty=length.penalty)
        return [
            f"rollout.length (penalty) scaled to the {budget}-token budget: max_len {budget}, tolerance {tolerance}"
        ]
    return []


def variants_table(variants: list[Variant]) -> str:
    """Markdown table: name, recipe, what it swaps, the overrides."""
    lines = ["| config | recipe | swaps | overrides |", "|---|---|---|---|"]
    for v in variants:
        sets = " ".join(f"`{o}`" for o in v.overrides) or "-"
        lines.append(f"| {v.name} | {v.recipe} | {v.swaps} | {sets} |")
    return "\n".join(lines)
