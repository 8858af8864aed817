"""What a run trains with (`Components`) and the one builder of its generator stage
(`build_generator`): in the trainer's process it decodes with the model it is given, in a
generator process or a Ray actor it loads its own from the run's config. A generator process
unpickles `build_generator` and imports nothing of the loop's layer or above (tests/project/test_layers.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from scalerl.config import Config
from scalerl.rewards import training_reward
from scalerl.transport.protocol import GeneratorBuild, Stage


@dataclass
class Components:
    """What the loop trains with; tests swap in fakes (a fake generator, a fake reward)."""

    model: torch.nn.Module
    tokenizer: object
    task: object
    reward_fn: Callable  # plain pass/fail: the evaluation's, and the training reward's base
    build: GeneratorBuild  # the generator stage, for every transport (`build_generator`)

    def stage(self, model: torch.nn.Module, seed: int, temperature: float | None = None, local: bool = False) -> Stage:
        """The generator stage in this process, decoding with `model` (`local`: on the local engine, whatever
        `rollout.engine` says: the evaluation's)."""
        given = {"local": True} if local else {}
        return self.build(
            seed,
            model=model,
            tokenizer=self.tokenizer,
            task=self.task,
            reward=self.reward_fn,
            temperature=temperature,
            **given,
        )


def decode_dtype(cfg: Config) -> str:
    """The generator's weight dtype: bf16 under mixed precision (`model.compute_dtype` bf16, or auto on
    a GPU: it decodes a bf16 copy of the trainer's fp32 weights, cast as they are published), else
    `model.dtype`."""
    from scalerl.models import compute_dtype

    return "bf16" if compute_dtype(cfg.model) == "bf16" else cfg.model.dtype


def generator_copy(model: torch.nn.Module, cfg: Config) -> torch.nn.Module:
    """The generator's own copy of the trainer's model, in `decode_dtype(cfg)`, computing its trunk
    as the trainer's forward does (RoPE frequencies in fp32, the trainer's attention kernel); the
    trainer's model itself for an engine that decodes no copy in this process (`EngineNeeds.copy`)."""
    from scalerl.lora import merged_copy
    from scalerl.rollout import engine_spec

    if not engine_spec(cfg.rollout.engine).needs.copy:
        return model
    from scalerl.models import cast_model
    from scalerl.trainer.forward import match_trainer_attention

    return match_trainer_attention(cast_model(merged_copy(model), decode_dtype(cfg)), cfg.model.share_prompt)


def build_generator(
    cfg_json: str,
    device: str,
    *,
    seed: int,
    model: torch.nn.Module | None = None,
    tokenizer=None,
    task=None,
    reward: Callable | None = None,
    temperature: float | None = None,
    weights: dict[str, torch.Tensor] | None = None,
    local: bool = False,
) -> Stage:
    """The engine's generator stage from a run's config (`GeneratorBuild`'s function for real runs).
    Given nothing (a generator process, a Ray actor) it loads the model in `decode_dtype`, the task
    and the reward itself; given `model` (with `tokenizer`), it decodes with that model. Given
    `weights` (the process transport's published buffer), the model decodes from those tensors in
    place of its own (`scalerl.transport.weights.adopt`: no copy of its own). `local`: the local engine,
    whatever `rollout.engine` says (the evaluation decodes the trainer's model in place)."""
    from scalerl.models import load_model
    from scalerl.rewards import RewardFn
    from scalerl.rollout import build_engine
    from scalerl.tasks import task_for_run
    from scalerl.trainer.forward import match_trainer_attention

    cfg = Config.model_validate_json(cfg_json)
    if model is None:
        model, tokenizer = load_model(cfg.model.name, dtype=decode_dtype(cfg), device=device)
        match_trainer_attention(model, cfg.model.share_prompt)
    if weights is not None:
        from scalerl.transport.weights import adopt

        adopt(model, weights)
    task = task if task is not None else task_for_run(cfg, tokenizer, model)
    reward = training_reward(reward if reward is not None else RewardFn(task, cfg.reward), cfg)
    engine = build_engine(cfg, model, tokenizer, seed=seed, temperature=temperature, local=local)
    return Stage(engine, task, reward, cfg.run.seed)


def build_components(cfg: Config, device: str) -> Components:
    """The run's model (in `model.dtype`, the trainer's), tokenizer, task and reward, and the
    generator builder every transport uses."""
    from scalerl.models import load_model
    from scalerl.rewards import RewardFn
    from scalerl.tasks import task_for_run

    model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype, device=device)
    task = task_for_run(cfg, tokenizer, model)
    return Components(
        model,
        tokenizer,
        task,
        RewardFn(task, cfg.reward),
        GeneratorBuild(build_generator, (cfg.model_dump_json(), device)),
    )
