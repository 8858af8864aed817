"""Rollout: the generation engine behind the `Generator` protocol.

`Engine(model, tokenizer, cfg: RolloutConfig, fp32_head=True, seed=0)` samples completions with
per-token generator log-probabilities and policy versions, continuous batching, in-flight
weight updates and forced interruption. See docs/rollout.md.
"""

from scalerl.rollout.engine import PHRASE, Engine
from scalerl.rollout.protocol import Generator

__all__ = ["Engine", "Generator", "PHRASE"]
