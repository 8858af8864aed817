"""Merging configuration layers into the schema (`scalerl.config`): a layer's keys checked as it is
merged (an unknown key named with where it came from, the closest valid keys, or the TRL/verl key it
is), a union switched to another `type` (`--set loss.type=ppo_clip` resets the section to the new
variant's defaults, keeping the fields every variant shares: for losses `aggregation`), a task's
short name expanded (`task.name=rg:chain_sum`, `scalerl.config.tasks.expand_task`), the merged result
validated with each problem blamed on the layer that set its key; reading YAML files and `--set`
overrides. `scalerl.configure.load_config` puts the layers together.
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from scalerl.config.base import lookup, section_of, variants_of
from scalerl.config.run import Config
from scalerl.errors import ScaleRLError


# ================================================================ schema walking
def _nullable(annotation: Any) -> bool:
    return type(None) in typing.get_args(annotation)


def all_paths(cls: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key of the schema, all union variants included."""
    out = []
    for name, field in cls.model_fields.items():
        path = prefix + name
        subs = list((variants_of(field.annotation) or {}).values()) or [s for s in [section_of(field.annotation)] if s]
        if not subs:
            out.append(path)
        for sub in subs:
            out.extend(p for p in all_paths(sub, path + ".") if p not in out)
    return out


# Key names of TRL's GRPOConfig (and transformers' TrainingArguments) and of verl's ppo_trainer
# config, with the scalerl key that does the same (docs/training.md, "Coming from TRL or verl").
# A note says where the two differ. Looked up by the whole dotted key, then by its last part.
FOREIGN_KEYS: dict[str, tuple[str, str]] = {
    # TRL
    "learning_rate": ("optim.lr", ""),
    "beta": ("loss.kl_beta", "a field of loss.type=ppo_clip"),
    "max_completion_length": ("rollout.max_new_tokens", ""),
    "max_prompt_length": ("task.max_prompt_tokens", ""),
    "num_generations": ("batch.generations", ""),
    "temperature": ("rollout.temperature", ""),
    "top_p": ("rollout.top_p", ""),
    "per_device_train_batch_size": (
        "batch.prompts",
        "TRL counts completions, scalerl prompts: batch.prompts = completions / batch.generations",
    ),
    "generation_batch_size": ("batch.prompts", "prompts x batch.generations completions per step"),
    "eval_steps": ("eval.every", ""),
    "eval.steps": ("eval.every", ""),
    "max_steps": ("run.max_steps", ""),
    "seed": ("run.seed", ""),
    "save_steps": ("run.checkpoint_every", ""),
    "warmup_steps": ("optim.warmup_steps", ""),
    "weight_decay": ("optim.weight_decay", ""),
    "max_grad_norm": ("optim.grad_clip", ""),
    "adam_epsilon": ("optim.eps", ""),
    "adam_beta1": ("optim.betas", "a pair, [beta1, beta2]"),
    "adam_beta2": ("optim.betas", "a pair, [beta1, beta2]"),
    "epsilon": ("loss.eps_low", "a field of loss.type=ppo_clip"),
    "epsilon_high": ("loss.eps_high", "a field of loss.type=ppo_clip"),
    "reward_funcs": ("reward.function", "<module>:<name> or <path/to/file.py>:<name>"),
    "reward_weights": ("reward.weights", "[checker, function]"),
    "loss_type": ("loss.type", "cispo, ppo_clip, gspo, reinforce, or custom (your own: loss.function)"),
    "scale_rewards": ("advantage.norm", "batch, prompt (TRL's group) or none"),
    # verl
    "actor_rollout_ref.actor.optim.lr": ("optim.lr", ""),
    "actor_rollout_ref.actor.optim.lr_warmup_steps": ("optim.warmup_steps", ""),
    "actor_rollout_ref.actor.optim.weight_decay": ("optim.weight_decay", ""),
    "actor_rollout_ref.actor.grad_clip": ("optim.grad_clip", ""),
    "actor_rollout_ref.actor.kl_loss_coef": ("loss.kl_beta", "a field of loss.type=ppo_clip"),
    "actor_rollout_ref.actor.clip_ratio_low": ("loss.eps_low", "a field of loss.type=ppo_clip"),
    "actor_rollout_ref.actor.clip_ratio_high": ("loss.eps_high", "a field of loss.type=ppo_clip"),
    "actor_rollout_ref.rollout.n": ("batch.generations", ""),
    "actor_rollout_ref.rollout.temperature": ("rollout.temperature", ""),
    "actor_rollout_ref.rollout.top_p": ("rollout.top_p", ""),
    "actor_rollout_ref.model.path": ("model.name", ""),
    "algorithm.kl_ctrl.kl_coef": ("loss.kl_beta", "a KL penalty in the loss, a field of loss.type=ppo_clip"),
    "data.train_files": ("task.path", "with task.name=file"),
    "data.train_batch_size": ("batch.prompts", ""),
    "data.max_prompt_length": ("task.max_prompt_tokens", ""),
    "data.max_response_length": ("rollout.max_new_tokens", ""),
    "data.prompt_key": ("task.columns", "{prompt: <column>}"),
    "trainer.total_training_steps": ("run.max_steps", ""),
    "trainer.save_freq": ("run.checkpoint_every", ""),
    "trainer.test_freq": ("eval.every", ""),
}


_VERL_SECTIONS = ("actor_rollout_ref", "algorithm", "data", "trainer")


def foreign_key(path: str) -> str | None:
    """ "verl's name; in scalerl it is <key> (<note>)" for a TRL or verl key (`FOREIGN_KEYS`); None if unknown."""
    found = FOREIGN_KEYS.get(path) or FOREIGN_KEYS.get(path.rsplit(".", 1)[-1])
    if found is None:
        return None
    key, note = found
    origin = "verl" if path.split(".", 1)[0] in _VERL_SECTIONS else "TRL"
    return f"{origin}'s name; in scalerl it is {key}" + (f" ({note})" if note else "")


def _suggest(path: str) -> str:
    candidates = all_paths(Config)
    leaf = path.rsplit(".", 1)[-1]
    same_leaf = [c for c in candidates if c.rsplit(".", 1)[-1] == leaf]
    close = difflib.get_close_matches(path, candidates, n=3, cutoff=0.6)
    found = list(dict.fromkeys(same_leaf + close))[:3]
    return f" (did you mean {', '.join(repr(f) for f in found)}?)" if found else ""


def _unknown_key(path: str, cls: type[BaseModel], source: str, value: Any = None) -> ScaleRLError:
    for key in [path, *leaf_keys(value, path + ".")]:  # a nested verl key is unknown at its first part
        ours = foreign_key(key)
        if ours is not None:
            return ScaleRLError(f"{source}: unknown config key '{key}': {ours}")
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    if "type" in cls.model_fields and parent:
        owners = [
            tag
            for tag, var in (variants_of(_parent_annotation(parent)) or {}).items()
            if path.rsplit(".", 1)[-1] in var.model_fields
        ]
        if owners:
            tag = cls.model_fields["type"].default
            return ScaleRLError(
                f"{source}: '{path}' is not a field of {parent} type {tag!r} (it belongs to type "
                f"{', '.join(owners)}; set {parent}.type first, e.g. --set {parent}.type={owners[0]})"
            )
    return ScaleRLError(f"{source}: unknown config key '{path}'{_suggest(path)}")


def _parent_annotation(path: str) -> Any:
    cls: type[BaseModel] = Config
    annotation: Any = None
    for name in path.split("."):
        annotation = cls.model_fields[name].annotation
        cls = section_of(annotation) or cls
    return annotation


# ================================================================ merging layers
def _switch_variant(current: dict, new_tag: str, variants: dict[str, type[BaseModel]], path: str, source: str) -> dict:
    """Defaults of variant `new_tag`, keeping the fields that every variant shares."""
    if new_tag not in variants:
        hint = difflib.get_close_matches(str(new_tag), list(variants), n=1)
        more = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ScaleRLError(f"{source}: {path}.type = {new_tag!r} is not one of {', '.join(variants)}{more}")
    shared = set.intersection(*(set(v.model_fields) for v in variants.values())) - {"type"}
    fresh = variants[new_tag].model_construct().model_dump(mode="json")  # checked once all layers are in
    fresh.update({k: current[k] for k in shared if k in current})
    return fresh


def merge(base: dict, patch: Any, cls: type[BaseModel], source: str, prefix: str = "") -> dict:
    """`base` (a full dump of `cls`) updated with the partial `patch`; keys checked on the way."""
    if not isinstance(patch, dict):
        where = prefix.rstrip(".") or "the config"
        raise ScaleRLError(f"{source}: {where} must be a mapping of keys, got {patch!r}")
    out = dict(base)
    for key, value in patch.items():
        path = f"{prefix}{key}"
        if key not in cls.model_fields:
            spread = getattr(cls, "spread", None)  # a mix: a field of its parts, set on each that has it
            spread_out = spread(out, key, value) if spread is not None else None
            if spread_out is None:
                raise _unknown_key(path, cls, source, value)
            out = spread_out
            continue
        annotation = cls.model_fields[key].annotation
        variants, section = variants_of(annotation), section_of(annotation)
        if variants is not None:
            value = _expand(value, variants, path, source)
            if isinstance(value, str):  # `--set loss=gspo` is `--set loss.type=gspo`
                value = {"type": value}
            if not isinstance(value, dict):
                raise ScaleRLError(f"{source}: {path} must be a mapping with a `type` key, got {value!r}")
            current = out[key]
            tag = value.get("type", current["type"])
            if tag != current["type"]:
                current = _switch_variant(current, tag, variants, path, source)
            out[key] = merge(current, value, variants[tag], source, path + ".")
        elif section is not None and value is None and _nullable(annotation):  # `--set model.lora=null`
            out[key] = None
        elif section is not None:
            current = out[key] if out[key] is not None else section().model_dump(mode="json")
            out[key] = merge(current, value, section, source, path + ".")
        elif isinstance(value, dict) and isinstance(out.get(key), dict):  # a free mapping (task.options)
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _expand(value: Any, variants: dict[str, type[BaseModel]], path: str, source: str) -> Any:
    """A union's short form (a task's name) as its type and fields, where the union has one."""
    expand = getattr(next(iter(variants.values())), "expand", None)
    if expand is None:
        return value
    try:
        return expand(value)
    except ValueError as exc:
        raise ScaleRLError(f"{source}: {exc}") from None


def leaf_keys(patch: Any, prefix: str = "") -> list[str]:
    """Dotted keys a partial config sets (`{"a": {"b": 1}}` -> ["a.b"])."""
    if not isinstance(patch, dict) or not patch:
        return [prefix.rstrip(".")] if prefix else []
    return [k for key, value in patch.items() for k in leaf_keys(value, f"{prefix}{key}.")]


def _loc(loc: tuple) -> str:
    """Dotted path of a pydantic error location, without union tags (`loss.cispo.eps_max`)."""
    parts: list[str] = []
    node: Any = Config  # a section class, a {tag: class} dict, or None
    for item in loc:
        if isinstance(node, dict):  # the tag of a discriminated union
            node = node.get(item)
            continue
        parts.append(str(item))
        field = node.model_fields.get(item) if node is not None and isinstance(item, str) else None
        node = None if field is None else (variants_of(field.annotation) or section_of(field.annotation))
    return ".".join(parts)


def validate(data: dict, source: str | typing.Callable[[str, str], str]) -> Config:
    """`data` as a Config; a `ScaleRLError` naming, per problem, the key and the layer that set it
    (`source`: a layer name, or a function `(path, message) -> layer name`). The checks against this machine
    (`run.threads` within its cores) run here, where a user's config enters."""
    try:
        return Config.model_validate(data, context={"machine": True})
    except ValidationError as exc:
        blame = source if callable(source) else (lambda path, msg: source)
        msgs = []
        for err in exc.errors():
            path = _loc(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            value = lookup(data, path)
            text = (
                f"{path} = {value!r}: {msg}"
                if path and not isinstance(value, dict)
                else f"{path}: {msg}"
                if path
                else msg
            )
            msgs.append((blame(path, msg), text))
        sources = list(dict.fromkeys(s for s, _ in msgs))
        raise ScaleRLError("; ".join(f"{s}: " + "; ".join(t for s2, t in msgs if s2 == s) for s in sources)) from None


def blamer(layers: list[tuple[str, dict]], default: str) -> typing.Callable[[str, str], str]:
    """`(path, message) -> the last layer that set that key` (or, for a check across keys, one
    the message names); `default` when no layer did."""
    known = sorted(all_paths(Config), key=len, reverse=True)
    keyed = [(source, leaf_keys(patch)) for source, patch in layers]

    def related(a: str, b: str) -> bool:
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    def blame(path: str, msg: str) -> str:
        named = [path] if path else [k for k in known if k in msg or k.rsplit(".", 1)[-1] + " (" in msg]
        for source, keys in reversed(keyed):
            if any(related(k, n) for k in keys for n in named):
                return source
        return default

    return blame


def read_yaml(path: str | Path) -> dict:
    """A YAML mapping from `path` (an empty file is an empty mapping)."""
    path = Path(path)
    if not path.is_file():
        raise ScaleRLError(f"config file {str(path)!r} not found")
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ScaleRLError(f"{path}: not UTF-8 text (byte {exc.start}): a config file is UTF-8 YAML") from None
    except yaml.YAMLError as exc:
        raise ScaleRLError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ScaleRLError(f"{path}: expected a mapping of config keys at the top level, got {type(data).__name__}")
    return data


def parse_override(text: str) -> dict:
    """`loss.eps_max=8` -> {"loss": {"eps_max": 8}}; the value is read as YAML (8, true, null, [a, b])."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ScaleRLError(f"--set {text!r}: expected KEY=VALUE with a dotted key, e.g. loss.eps_max=8")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw  # a plain string such as a path with a colon
    for part in reversed(key.split(".")):
        value = {part: value}
    return value
