"""The run's source of scored groups (`make_mode`, a `scalerl.transport.protocol.RolloutSource`):
PipelineRL-k over a generator thread, a generator process or Ray actors, as the engine's declaration
allows (`scalerl.assembly.resources.generator_host`); PPO-off-policy-k over a generator in this
process. The policy (scalerl.transport.policy) comes with the source: a streaming transport batches
by PipelineRL-k, `PPOOffPolicy` by its rounds.

The process transport's weights (scalerl.transport.weights): one buffer both processes map, in
the generator's decode dtype; when that is the trainer's dtype on the same device and no adapter
is merged (`model.lora` unset), the buffer is the trainer's own parameters (publishing copies
nothing) and the optimizer steps under the transport's lock (`Optimizer.step_guard`)."""

from __future__ import annotations

import torch

from scalerl.assembly.generator import Components, decode_dtype, generator_copy
from scalerl.assembly.resources import Threads, generator_host
from scalerl.lora import merged_state_dict
from scalerl.trainer.state import Trainer
from scalerl.transport.local import EvalSpec, ProcessRollouts, ThreadedRollouts
from scalerl.transport.policy import PPOOffPolicy
from scalerl.transport.protocol import RolloutSource
from scalerl.transport.window import GroupAssembler, LockedSampler, RetiredSet, Window


def make_mode(
    tr: Trainer, comps: Components, device: str, threads: Threads, evals: EvalSpec, placement=None
) -> RolloutSource:
    """The source for `tr` (after its restore), over the generator host the engine allows (`generator_host`;
    Ray's actors placed by `placement`, a `scalerl.transport.ray_placement.Placement`). A generator process
    also evaluates, with `evals` (`ProcessRollouts.evaluator`)."""
    cfg = tr.cfg
    gen_seed = cfg.run.seed * 1_000_003 + tr.state.step  # a resumed run draws fresh samples
    sampler_state = tr.state.sampler or {"seed": cfg.run.seed, "epoch": 0, "position": 0}
    host = generator_host(cfg, device)
    if host == "ray":  # generator actors (the trainer ranks are the Trainer's strategy)
        return _ray(tr, comps, gen_seed, sampler_state, placement)
    if host == "process":
        source = ProcessRollouts(
            comps.build,
            gen_seed,
            merged_state_dict(tr.model),
            tr.state.step,
            sampler_state,
            tr.curriculum,
            cfg.batch.generations,
            Window.of(cfg),
            threads.decode,
            dtype=torch.float32 if decode_dtype(cfg) == "fp32" else torch.bfloat16,
            alias=cfg.model.lora is None,
            head=_head_name(tr.model),
            evals=evals,
        )
        if source.aliased:
            tr.optim.step_guard = source.step_guard
        return source
    return _in_process(tr, comps, threads, gen_seed, sampler_state)


def _in_process(tr: Trainer, comps: Components, threads: Threads, gen_seed: int, sampler_state: dict) -> RolloutSource:
    """The generator in the trainer's process: PipelineRL-k's thread, or PPO-off-policy-k's alternating rounds."""
    from scalerl.rl.curriculum import CurriculumSampler

    cfg = tr.cfg
    P, G, k = cfg.batch.prompts, cfg.batch.generations, cfg.pipeline.k
    stage = comps.stage(generator_copy(tr.model, cfg), gen_seed)
    stage.generator.update_weights(merged_state_dict(tr.model), tr.state.step)
    retired = RetiredSet.of(tr.curriculum)
    sampler = CurriculumSampler(stage.task, retired, seed=stage.sampler_seed)
    sampler.load_state_dict(sampler_state)
    if cfg.pipeline.mode == "pipeline_rl":
        return ThreadedRollouts(
            stage.generator,
            LockedSampler(sampler),
            G,
            stage.reward,
            Window.of(cfg),
            tr.state.step,
            retired,
            score_workers=GroupAssembler.workers_for(stage.task),
        )
    return PPOOffPolicy(
        stage.generator,
        LockedSampler(sampler),
        stage.reward,
        k,
        P,
        G,
        threads.decode,
        retired,
        score_workers=GroupAssembler.workers_for(stage.task),
    )


def _ray(tr: Trainer, comps: Components, gen_seed: int, sampler_state: dict, placement) -> RolloutSource:
    """`ray.generators` generator actors behind a hub (`scalerl.transport.ray.RayRollouts`; imports Ray)."""
    from scalerl.transport.ray import RayRollouts, RolloutSpec

    cfg = tr.cfg
    spec = RolloutSpec(
        build=comps.build,
        generators=cfg.ray.generators,
        n=cfg.batch.generations,
        window=Window.of(cfg),
        base_seed=gen_seed,
        threads=max(1, int(cfg.ray.generator_cpus)),
        cpus=cfg.ray.generator_cpus,
        gpus=cfg.ray.generator_gpus,
        max_restarts=cfg.ray.max_restarts,
        options=[placement.generator(r) for r in range(cfg.ray.generators)],
        publish=cfg.ray.publish,
        bucket_mb=cfg.ray.publish_bucket_mb,
        publish_timeout_s=cfg.ray.publish_timeout_s,
    )
    return RayRollouts(spec, merged_state_dict(tr.model), tr.state.step, sampler_state)


def _head_name(model) -> str | None:
    """The state-dict name of the LM head's weight (its fp32 values serve a bf16 engine's fp32 head)."""
    head = model.get_output_embeddings()
    if head is None:
        return None
    return next((name for name, t in model.state_dict(keep_vars=True).items() if t is head.weight), None)
