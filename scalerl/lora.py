"""LoRA through PEFT: adapters on the trainer's Linear layers; everyone else gets merged weights.

`apply_lora(model, cfg)` wraps the model with `peft.get_peft_model` and returns the model it
wraps (`get_base_model()`), which now holds `lora.Linear` layers in place of its targets. The
trainer's forward (scalerl.trainer.forward) reaches `model.base_model` and the LM head directly,
so it runs the adapters unchanged; only the adapters require a gradient, and the optimizer takes
only those. The LM head cannot be a target (the FP32 head reads its weight directly).

`merged_state_dict(model)` is what the generator, a checkpoint's model.safetensors and
`scalerl export` get: the base model's parameter names, W + alpha/r * B @ A for each adapted
layer (computed; the trainer's model is not touched), every other tensor as it is. A model
without adapters gives its own `state_dict()`.
"""

from __future__ import annotations

import copy
import warnings

import torch

from scalerl.errors import ScaleRLError

ADAPTER = "default"  # PEFT's adapter name
BASE = ".base_layer."
ADAPTER_KEY = ".lora_"  # in the state-dict keys of the adapters' own weights


def apply_lora(model: torch.nn.Module, cfg) -> torch.nn.Module:
    """`model` (a `*ForCausalLM`) with LoRA adapters on `cfg.targets` (a `scalerl.config.LoraConfig`);
    the base weights frozen, the adapters trainable. Raises a one-line ScaleRLError for a target
    that matches no Linear layer of the model."""
    import peft

    check_targets(model, cfg.targets)
    config = peft.LoraConfig(
        r=cfg.r, lora_alpha=cfg.alpha, target_modules=list(cfg.targets), lora_dropout=cfg.dropout, bias="none"
    )
    with warnings.catch_warnings():  # PEFT asks transformers 5 a deprecated question
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return peft.get_peft_model(model, config).get_base_model()


def check_targets(model: torch.nn.Module, targets: list[str]) -> None:
    """Every target suffix names at least one Linear layer, and none the LM head (PEFT's matching:
    the module's name is the target or ends with '.' + target)."""
    head = model.get_output_embeddings()
    linear = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not head}
    found = ", ".join(dict.fromkeys(name.rsplit(".", 1)[-1] for name in linear))
    for target in targets:
        hits = [(n, m) for n, m in model.named_modules() if n == target or n.endswith("." + target)]
        other = [n for n, m in hits if n not in linear]
        what = (
            "matches no module"
            if not hits
            else f"matches the LM head {other[0]!r} (the FP32 head reads its weight; it cannot be adapted)"
            if other and model.get_submodule(other[0]) is head
            else f"matches {other[0]!r}, which is not a Linear layer"
            if other
            else ""
        )
        if what:
            raise ScaleRLError(
                f"model.lora.targets: {target!r} {what} of {type(model).__name__}; its Linear layers: {found}"
            )


def lora_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """{module name: PEFT LoRA layer} of `model` (empty without adapters)."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def has_lora(model: torch.nn.Module) -> bool:
    return any(ADAPTER_KEY in name for name, _ in model.named_parameters())


def trainable_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@torch.no_grad()
def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights under the base model's names, adapters merged (W + alpha/r * B @ A, new
    tensors for the adapted layers only); `model.state_dict()` when it has no adapters."""
    state = model.state_dict()
    if not has_lora(model):
        return state
    layers = lora_layers(model)
    out = {}
    for key, value in state.items():
        if ADAPTER_KEY in key:
            continue
        owner, _, leaf = key.partition(BASE)
        if leaf and owner in layers:
            if leaf == "weight":
                value = value + layers[owner].get_delta_weight(ADAPTER).to(value.dtype)
            key = f"{owner}.{leaf}"
        out[key] = value
    return out


def adapter_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' weights (what a LoRA run's checkpoint adds to resume)."""
    return {k: v for k, v in model.state_dict().items() if ADAPTER_KEY in k}


def load_adapters(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Put saved adapter weights into `model`; ValueError when they do not fit its adapters."""
    expected = set(adapter_state_dict(model))
    if set(weights) != expected:
        missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
        raise ValueError(f"adapters do not match this model's (missing {missing[:2]}, unexpected {extra[:2]})")
    model.load_state_dict(weights, strict=False)


@torch.no_grad()
def merged_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A plain copy of `model` (no adapter layers, the base model's names), adapters merged."""
    out = copy.deepcopy(model)
    for name, layer in lora_layers(out).items():
        base = layer.get_base_layer()
        base.weight += layer.get_delta_weight(ADAPTER).to(base.weight.dtype)
        out.set_submodule(name, base)
    return out


def unique_storage(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with each shared tensor (tied embeddings) once, contiguous: what safetensors saves
    (its `load_model` accepts any one of the tied names)."""
    seen, out = set(), {}
    for key, value in state.items():
        ident = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape))
        if ident not in seen:
            seen.add(ident)
            out[key] = value.contiguous()
    return out
