"""Resolving a run's configuration: the layers of `load_config`, the model-dependent profile, the CLI flags.

The schema (`Config` and its sections) is in `scalerl.config`, merging one layer and validating the
result in `scalerl.config.merge`; this module puts the layers together.

Resolution order (`load_config`): defaults -> recipe preset -> config file -> `--set` overrides
-> the model-dependent profile for every key that neither the file nor a `--set` gave: derived from
the model's size, chat template and context (`derived_profile`, any model but the built-in ones),
overlaid by a measured one where there is one (`PROFILES`: SmolLM2 on reasoning-gym tasks).
Unknown keys are refused as each layer is merged; values are validated together once all layers
are applied, so the order of `--set` overrides never matters, and an error names the key and the
layer that set it.
"""

from __future__ import annotations

import argparse
import math
import typing
from pathlib import Path
from typing import Any

import yaml

from scalerl.config import Config, recipe_path, task_name
from scalerl.config.merge import blamer, leaf_keys, merge, parse_override, read_yaml, validate


# ================================================================ the layers
def load_config(
    recipe: str | None = "scalerl", config_file: str | Path | None = None, overrides: typing.Iterable[str] = ()
) -> Config:
    """Defaults -> recipe preset -> config file -> dotted overrides, validated at each layer.

    With `recipe=None` the config file's own `recipe:` key picks the preset (else `scalerl`).
    """
    file_data = read_yaml(config_file) if config_file is not None else {}
    name = recipe or file_data.get("recipe") or "scalerl"
    path = recipe_path(name)
    data = Config().model_dump(mode="json")
    preset = f"recipe {name!r} ({path.name})"
    data = merge(data, read_yaml(path), Config, preset)
    validate(data, preset)
    layers = [(str(config_file), file_data)] if config_file is not None else []
    layers += [(f"--set {o}", parse_override(o)) for o in overrides]
    for source, patch in layers:  # keys checked as each layer is merged ...
        data = merge(data, patch, Config, source)
    user_keys = [k for _, patch in layers for k in leaf_keys(patch)]
    values, origin = model_profile(data)
    data, applied = apply_profile(data, user_keys, values)
    if "eval.every" in user_keys and "eval.schedule" not in user_keys:
        data["eval"]["schedule"] = "linear"  # setting eval.every asks for evaluations every N steps
    data["recipe"] = name
    cfg = validate(data, blamer(layers, preset))  # ... values checked together, once all are applied
    cfg._profile = (origin, applied)
    return cfg


# ================================================================ model-dependent defaults
PROFILES: dict[tuple[str, str], dict[str, Any]] = {
    # SmolLM2-135M-Instruct on reasoning-gym (docs/models-and-tasks.md, "Defaults that depend on the
    # model"): lr 1e-5 (ten times TRL's GRPO default; it took rg:chain_sum, 2-3 one-digit terms, from
    # 0.05 to 0.14 in 15 steps without instability), short completions (it answers in <answer> tags
    # without thinking first: 12 tokens on average), batches a CPU decodes in seconds, and an
    # evaluation of 512 completions (standard error about 0.01-0.02).
    ("smollm2-135m", "rg:"): {
        "optim.lr": 1e-5,
        "optim.warmup_steps": 0,
        "rollout.max_new_tokens": 64,
        "rollout.length.think_min": 16,
        "rollout.length.think_max": 24,
        "rollout.length.answer_budget": 16,
        "batch.prompts": 8,
        "batch.generations": 8,
        "eval.prompts": 128,
        "eval.samples": 4,
        "task.val_size": 128,
        # three solved examples as chat turns: without them the 135M model never wrote <answer>
        # tags (0 of 20 samples tagged on rg:chain_sum); with them every sample was tagged
        "task.shots": 3,
    },
}


def profile_for(model: str, task: str) -> dict[str, Any]:
    """The measured profile for a (model, task) pair: {dotted key: value}; empty when none applies."""
    for (m, t), values in PROFILES.items():
        if model == m and task.startswith(t):
            return values
    return {}


# The derived profile's anchors (docs/your-data.md, "Defaults for any model"), each chosen for a reason
# stated before any run used it:
LR_ANCHORS = ((135e6, 1e-5), (8e9, 5e-7))  # SmolLM2-135M measured on rg:chain_sum (PROFILES); the paper's 8B
LR_RANGE = (1e-7, 1e-5)  # no extrapolation above the measured small-model rate
LORA_LR_FACTOR = 10  # LoRA's best rate ~10x full fine-tuning's ("LoRA Without Regret", 2025)
MAX_NEW_TOKENS = 256  # TRL GRPOConfig's max_completion_length
CPU_PROMPTS, CPU_GENERATIONS, CPU_EVAL = 8, 8, 128  # batches a CPU decodes in seconds at 135M (PROFILES)
SHOTS, SHOTS_BELOW = 3, 1e9  # SmolLM2-135M wrote no answer tags without examples (0 of 20 on rg,
# 0% on a file's first step), every one with three (PROFILES)
PHRASE_ROOM = 24  # tokens kept for the interruption phrase (20: the paper's, SmolLM2)


def derived_lr(params: float, lora: bool) -> float:
    """Log-log interpolation between the two anchors in LR_ANCHORS, clipped to LR_RANGE; x10 for LoRA."""
    (n0, lr0), (n1, lr1) = LR_ANCHORS
    slope = math.log(lr1 / lr0) / math.log(n1 / n0)
    lr = min(max(lr0 * (params / n0) ** slope, LR_RANGE[0]), LR_RANGE[1])
    return float(f"{lr * (LORA_LR_FACTOR if lora else 1):.2g}")


def derived_profile(facts, task: str, lora: bool, device: str) -> dict[str, Any]:
    """Defaults for a model no measured profile covers, from its facts (`scalerl.models.facts`):
    the learning rate from its parameter count (`derived_lr`), no warm-up (TRL's and verl's default;
    SmolLM2 trained without one), TRL's completion budget (a quarter of the context at most) with the
    interruption window at its end, three solved examples for an instruct model under 1B parameters on
    a file or reasoning-gym task, and on a CPU the batch and evaluation of the SmolLM2 profile."""
    budget = min(MAX_NEW_TOKENS, facts.context // 4) if facts.context else MAX_NEW_TOKENS
    answer = max(16, budget // 8)
    think_max = max(1, budget - answer - PHRASE_ROOM)
    values: dict[str, Any] = {
        "optim.lr": derived_lr(facts.params, lora),
        "optim.warmup_steps": 0,
        "rollout.max_new_tokens": budget,
        "rollout.length.answer_budget": answer,
        "rollout.length.think_max": think_max,
        "rollout.length.think_min": max(1, round(0.85 * think_max)),
    }
    if facts.chat_template and facts.params < SHOTS_BELOW and task.split(":")[0] in ("file", "rg"):
        values["task.shots"] = SHOTS
    if device == "cpu":
        values.update({"batch.prompts": CPU_PROMPTS, "batch.generations": CPU_GENERATIONS})
        if task.split(":")[0] not in ("file", "code"):  # a generated task: a file's split follows its size
            values.update({"task.val_size": CPU_EVAL, "eval.prompts": CPU_EVAL})
    return values


def model_profile(data: dict) -> tuple[dict[str, Any], str]:
    """(profile values, where they come from) for the config `data`: the derived profile of its model
    (any model but the built-in ones), overlaid by the measured one of PROFILES; ({}, "") for none."""
    model, task = data["model"]["name"], task_name(data["task"])
    measured = profile_for(model, task)
    from scalerl.models.facts import model_facts

    facts = model_facts(model)
    if facts is None:
        return measured, (f"measured for {model} on {task}" if measured else "")
    device = data["model"]["device"]
    if device == "auto":  # as resolve_device, without refusing a device not here
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    derived = derived_profile(facts, task, data["model"]["lora"] is not None, device.split(":")[0])
    origin = f"derived from {model} ({facts.describe()})"
    return {**derived, **measured}, origin + (f", measured for {task.split(':')[0]}: tasks" if measured else "")


def apply_profile(data: dict, user_keys: list[str], values: dict[str, Any]) -> tuple[dict, dict[str, Any]]:
    """(`data` with `values` applied to every key no user layer set, the keys applied) (a profile key
    under a length-control variant applies only while that variant is selected)."""
    out = yaml.safe_load(yaml.safe_dump(data))  # a deep copy of plain data
    applied = {}
    for key, value in values.items():
        if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in user_keys):
            continue
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node[part]
        if leaf in node or "type" not in node:
            node[leaf] = value
            applied[key] = value
    return out, applied


def profile_line(cfg: Config) -> str | None:
    """One line naming the model profile a loaded config got and its values (None when none applied)."""
    origin, applied = getattr(cfg, "_profile", ("", {}))
    if not applied:
        return None
    body = ", ".join(f"{k}={v}" for k, v in applied.items())
    return f"model profile ({origin}): {body} (each one overridable with --set)"


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """`--recipe NAME`, `--config FILE`, `--set KEY=VALUE` (repeatable) for any command."""
    parser.add_argument(
        "--recipe", default=None, help="preset to start from (default: the config file's, else scalerl)"
    )
    parser.add_argument("--config", default=None, metavar="FILE", help="YAML config file (partial or resolved)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dotted override, e.g. --set loss.eps_max=8 (repeatable, applied in order)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    """The Config of a command parsed with `add_config_arguments`."""
    return load_config(args.recipe, args.config, args.overrides)
