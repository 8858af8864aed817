"""The generation engines, registered against their config class (`rollout.engine`), as losses are.

Each engine module registers a builder with what it needs of the run, and the build asks it
(`engine_spec`) instead of testing config strings:

    process   it may run in a generator process of ours (`pipeline.transport: process`); an engine
              that is a client of a server of its own (vLLM) runs in a thread of the trainer's process
    copy      it decodes a copy of the trainer's model in our process (the local engine); without it,
              the model it is given is only read at start-up (the vLLM client saves it for its server)

A builder is `build(model, tokenizer, cfg: RolloutConfig, *, fp32_head, seed, greedy, ignore_eos)`
and returns a `scalerl.rollout.Generator`. The config class names its module (`module`), imported on
first use, so adding an engine touches three files: its config class, its module, its test.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from scalerl.config import RolloutConfig
from scalerl.errors import ScaleRLError


@dataclass(frozen=True)
class EngineSpec:
    name: str
    build: Callable[..., object]
    process: bool = True
    copy: bool = True


ENGINES: dict[type, EngineSpec] = {}


def register(config_cls: type, *, process: bool = True, copy: bool = True) -> Callable:
    """Decorator: `build` is the engine of `config_cls` (see the module docstring)."""
    def add(build: Callable) -> Callable:
        ENGINES[config_cls] = EngineSpec(config_cls.model_fields["type"].default, build, process, copy)
        return build
    return add


def engine_spec(engine_cfg) -> EngineSpec:
    """The registered engine of a `rollout.engine` config (its module imported on first use)."""
    cls = type(engine_cfg)
    if cls not in ENGINES:
        importlib.import_module(cls.module)
    spec = ENGINES.get(cls)
    if spec is None:
        raise ScaleRLError(f"rollout.engine: no engine is registered for {cls.__name__} (its module {cls.module} "
                           f"registers none; registered: {', '.join(s.name for s in ENGINES.values())})")
    return spec


def make_engine(model, tokenizer, cfg: RolloutConfig, *, fp32_head: bool = True, seed: int = 0,
                greedy: bool = False, ignore_eos: bool = False):
    """The engine `cfg.engine` names, decoding `model` (see the module docstring)."""
    return engine_spec(cfg.engine).build(model, tokenizer, cfg, fp32_head=fp32_head, seed=seed, greedy=greedy,
                                         ignore_eos=ignore_eos)
