"""Rollout: the generation engine behind the `Generator` protocol.

`Engine(model, tokenizer, cfg: RolloutConfig, fp32_head=True, seed=0)` samples completions with
per-token generator log-probabilities and policy versions, continuous batching, in-flight
weight updates and forced interruption (whose length budget `length.py` checks), on the
fixed-shape loop (`static.py`, `forward.py`, sized by `slots.py`) or the eager reference
(`eager.py`, `cache.py`). `make_engine` builds the engine `rollout.engine` names and `build_engine` the run's
(`registry.py`: the local one, or a vLLM server's client, `vllm.py`; each declares what it needs,
`EngineNeeds`). See docs/rollout.md.
"""

from scalerl.config import DEFAULT_PHRASE, PAPER_PHRASE
from scalerl.rollout.engine import Engine
from scalerl.rollout.protocol import Generator
from scalerl.rollout.registry import EngineNeeds, EngineSpec, build_engine, engine_spec, make_engine

__all__ = [
    "DEFAULT_PHRASE",
    "Engine",
    "EngineNeeds",
    "EngineSpec",
    "Generator",
    "PAPER_PHRASE",
    "build_engine",
    "engine_spec",
    "make_engine",
]
