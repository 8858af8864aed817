"""What a model is, read without loading its weights: `model_facts(name) -> ModelFacts | None`.

The derived profile (`scalerl.configure.derived_profile`) sets a model's learning rate, warm-up,
lengths and batch from these facts when no measured profile (`scalerl.configure.PROFILES`) covers
it. The built-in character-tokenizer models get None: the config's defaults are theirs.

- `params`: the parameter count, summed from the safetensors headers (shapes only, no weights
  read), else estimated from config.json's shapes (a Llama-style decoder);
- `chat_template`: whether the tokenizer carries one (tokenizer_config.json or chat_template.jinja);
- `context`: config.json's `max_position_embeddings` (or `n_positions`, `max_sequence_length`).

Names: `smollm2-135m` (from its known shape, without converting the GGUF), any Hugging Face
checkpoint folder, a Hub id (`org/name`: `scalerl.models.checkpoint_dir` fetches it, where a hub
is reachable), and a scalerl run or checkpoint directory (the facts of the model it trained).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from scalerl.errors import ScaleRLError

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


@dataclass(frozen=True)
class ModelFacts:
    name: str
    params: int
    chat_template: bool
    context: int | None
    params_from: str  # "safetensors" (counted), "shape" (a known architecture) or "config" (estimated)

    def describe(self) -> str:
        """'135M parameters, chat template, context 8192'."""
        size = f"{self.params / 1e9:.1f}B" if self.params >= 1e9 else f"{self.params / 1e6:.0f}M"
        est = " (estimated from config.json)" if self.params_from == "config" else ""
        chat = "chat template" if self.chat_template else "no chat template"
        ctx = f"context {self.context}" if self.context else "context unknown"
        return f"{size} parameters{est}, {chat}, {ctx}"


def model_facts(name: str) -> ModelFacts | None:
    """The facts of model `name`; None for the built-in character-tokenizer models (and
    `smollm2-shape-random`, a benchmark shape)."""
    from scalerl.models import CHAR_TOKENIZER_MODELS, base_model, checkpoint_dir

    name = base_model(name)  # a run or checkpoint directory: the model it trained
    if name in CHAR_TOKENIZER_MODELS or name in ("tiny-random", "smollm2-shape-random"):
        return None
    if name == "smollm2-135m":
        from scalerl.models.smollm2 import SHAPE

        return ModelFacts(name, estimate_params(SHAPE), True, SHAPE["max_position_embeddings"], "shape")
    return folder_facts(checkpoint_dir(name), name)


def folder_facts(path: Path, name: str | None = None) -> ModelFacts:
    """The facts of a Hugging Face checkpoint folder (config.json, safetensors, tokenizer files)."""
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ScaleRLError(f"{path / 'config.json'}: cannot be read as JSON ({exc})") from None
    config = config.get("text_config", config) if isinstance(config, dict) else {}
    counted = safetensors_params(path)
    params = counted if counted is not None else estimate_params(config)
    context = next((int(config[k]) for k in CONTEXT_KEYS if isinstance(config.get(k), int) and config[k] > 0), None)
    return ModelFacts(
        name or str(path), params, has_chat_template(path), context, "safetensors" if counted is not None else "config"
    )


def safetensors_params(path: Path) -> int | None:
    """Parameters summed over the safetensors files' headers (None when the folder has none)."""
    from safetensors import safe_open

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                n = 1
                for dim in f.get_slice(key).get_shape():
                    n *= dim
                total += n
    return total


def estimate_params(config: dict) -> int:
    """A Llama-style decoder's parameters from its config's shapes: embeddings (twice when the
    head is not tied), per layer the attention (grouped K/V heads), a gated MLP and two norms."""
    try:
        d, layers, vocab = int(config["hidden_size"]), int(config["num_hidden_layers"]), int(config["vocab_size"])
    except (KeyError, TypeError, ValueError):
        raise ScaleRLError(
            "config.json: hidden_size, num_hidden_layers and vocab_size are needed to size the "
            "model (no safetensors file to count)"
        ) from None
    heads = int(config.get("num_attention_heads") or 1)
    kv = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or d // heads)
    ff = int(config.get("intermediate_size") or 4 * d)
    attn = d * heads * head_dim * 2 + d * kv * head_dim * 2
    per_layer = attn + 3 * d * ff + 2 * d
    embed = vocab * d * (1 if config.get("tie_word_embeddings", True) else 2)
    return embed + layers * per_layer + d


def has_chat_template(path: Path) -> bool:
    path = Path(path)
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return True
    try:
        tok = json.loads((path / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(isinstance(tok, dict) and tok.get("chat_template"))
