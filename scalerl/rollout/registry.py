"""The generation engines, registered against their config class (`rollout.engine`), as losses are.

Each engine module registers its builder with a declaration of what it needs of the run
(`EngineNeeds`), and the build asks the declaration (`engine_spec`) instead of testing config
strings: where the generator stage may run (`scalerl.assembly.resources.generator_host`), whether it
decodes a copy of the trainer's model (`scalerl.assembly.generator.generator_copy`), and what it refuses
(`EngineSpec.require`, one line naming the setting that asked for it):

    hosts     where its generator stage may run: `thread` (a thread of the trainer's process, or the
              process of `scalerl generate`), `process` (a generator process of ours:
              `pipeline.transport`), `ray` (Ray actors: `pipeline.backend`). The client of a server
              of its own (vLLM) runs anywhere: the server runs beside it, started by it
    copy      it decodes a copy of the trainer's model in the stage's process (the local engine);
              without it the model it is given is only read at start-up (the vLLM client saves it for
              its server), and the evaluation decodes the trainer's model on the local engine
    devices   the device types (`model.device` resolved: cpu, cuda) it decodes on; None: any
    lora      it decodes a model with a LoRA adapter (`model.lora`)

A builder is `build(model, tokenizer, cfg: RolloutConfig, *, fp32_head, seed, greedy, ignore_eos)`
and returns a `scalerl.rollout.Generator`; `build_engine` is the one call that builds the run's
engine from its config (`scalerl generate` and every generator stage of `scalerl train`). The config
class names its module (`module`), imported on first use, so adding an engine touches three files:
its config class (the choice, in the `rollout.engine` union), its module, its test.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Literal

from scalerl.config import Config, LocalEngineConfig, RolloutConfig
from scalerl.errors import ScaleRLError

Host = Literal["thread", "process", "ray"]
HOSTS: dict[str, str] = {
    "thread": "a thread of the trainer's process",
    "process": "a generator process of its own",
    "ray": "Ray actors",
}
ANY_HOST: frozenset[str] = frozenset(HOSTS)


@dataclass(frozen=True)
class EngineNeeds:
    """What an engine needs of the run (the module docstring): declared where it registers."""

    hosts: frozenset[str] = ANY_HOST
    copy: bool = True
    devices: frozenset[str] | None = None
    lora: bool = True


@dataclass(frozen=True)
class EngineSpec:
    name: str
    build: Callable[..., object]
    needs: EngineNeeds = EngineNeeds()

    def require(self, cfg: Config, device: str, host: str | None = None, asked: str = "") -> None:
        """A one-line refusal when the run asks of this engine what its declaration does not give: `device`
        (the resolved `model.device`), `model.lora`, and `host` (None: not asked here), chosen by `asked`."""
        needs, kind = self.needs, device.split(":")[0]
        if host is not None and host not in needs.hosts:
            where = " or ".join(HOSTS[h] for h in HOSTS if h in needs.hosts)
            raise ScaleRLError(
                f"{asked or 'the run'}: rollout.engine {self.name} runs its generator in {where} only, "
                f"not in {HOSTS[host]} (its EngineNeeds.hosts); use {_USE[host]}"
            )
        if needs.devices is not None and kind not in needs.devices:
            raise ScaleRLError(
                f"model.device = {device!r}: rollout.engine {self.name} decodes on "
                f"{', '.join(sorted(needs.devices))} only (its EngineNeeds.devices)"
            )
        if cfg.model.lora is not None and not needs.lora:
            raise ScaleRLError(
                f"model.lora: rollout.engine {self.name} does not decode a LoRA model (its "
                "EngineNeeds.lora); use rollout.engine=local"
            )


_USE = {
    "ray": "pipeline.backend=local",
    "process": "pipeline.transport=thread or auto",
    "thread": "pipeline.transport=process",
}

ENGINES: dict[type, EngineSpec] = {}


def register(config_cls: type, needs: EngineNeeds = EngineNeeds()) -> Callable:
    """Decorator: `build` is the engine of `config_cls`, needing `needs` (see the module docstring)."""

    def add(build: Callable) -> Callable:
        ENGINES[config_cls] = EngineSpec(config_cls.model_fields["type"].default, build, needs)
        return build

    return add


def engine_spec(engine_cfg) -> EngineSpec:
    """The registered engine of a `rollout.engine` config (its module imported on first use)."""
    cls = type(engine_cfg)
    if cls not in ENGINES:
        importlib.import_module(cls.module)
    spec = ENGINES.get(cls)
    if spec is None:
        raise ScaleRLError(
            f"rollout.engine: no engine is registered for {cls.__name__} (its module {cls.module} "
            f"registers none; registered: {', '.join(s.name for s in ENGINES.values())})"
        )
    return spec


def make_engine(
    model,
    tokenizer,
    cfg: RolloutConfig,
    *,
    fp32_head: bool = True,
    seed: int = 0,
    greedy: bool = False,
    ignore_eos: bool = False,
):
    """The engine `cfg.engine` names, decoding `model` (see the module docstring)."""
    return engine_spec(cfg.engine).build(
        model, tokenizer, cfg, fp32_head=fp32_head, seed=seed, greedy=greedy, ignore_eos=ignore_eos
    )


def build_engine(
    cfg: Config,
    model,
    tokenizer,
    *,
    seed: int,
    greedy: bool = False,
    temperature: float | None = None,
    local: bool = False,
):
    """The run's engine decoding `model`, after its declaration's checks (`EngineSpec.require`, on the model's
    device): what `scalerl generate` samples with and what every generator stage of `scalerl train` decodes
    with (`scalerl.assembly.generator.build_generator`). `temperature`: in place of `rollout.temperature` (the
    evaluation's); `local`: the local engine, whatever `rollout.engine` says (the evaluation decodes the
    trainer's model in place)."""
    rollout = cfg.rollout if temperature is None else cfg.rollout.model_copy(update={"temperature": temperature})
    if local:
        rollout = rollout.model_copy(update={"engine": LocalEngineConfig()})
    spec = engine_spec(rollout.engine)
    spec.require(cfg, str(next(model.parameters()).device))
    return spec.build(model, tokenizer, rollout, fp32_head=cfg.model.fp32_head, seed=seed, greedy=greedy)
