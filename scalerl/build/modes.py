"""The configured off-policy mode over its transport: PipelineRL-k over a generator thread, a
generator process or Ray actors; PPO-off-policy-k over a generator in this process.

The process transport's weights (scalerl.transport.weights): one buffer both processes map, in
the generator's decode dtype; when that is the trainer's dtype on the same device and no adapter
is merged (`model.lora` unset), the buffer is the trainer's own parameters (publishing copies
nothing) and the optimizer steps under the transport's lock (`Optimizer.step_guard`)."""

from __future__ import annotations

import torch

from scalerl.batching import PipelineRL, PPOOffPolicy
from scalerl.build.generator import decode_dtype, generator_copy
from scalerl.build.resources import Threads, use_process
from scalerl.build.state import Trainer
from scalerl.errors import ScaleRLError
from scalerl.lora import merged_state_dict
from scalerl.rollout import engine_spec
from scalerl.transport.local import EvalSpec, ProcessRollouts, ThreadedRollouts
from scalerl.transport.window import GroupAssembler, LockedSampler, RetiredSet, Window


def make_mode(tr: Trainer, device: str, threads: Threads, evals: EvalSpec) -> tuple[object, ProcessRollouts | None]:
    """The mode for `tr` (after its restore): `collect`, `send`, `pause`/`resume`, `close`, ...; and
    the generator process's transport when the mode runs one (it also evaluates, with `evals`)."""
    from scalerl.rl.curriculum import CurriculumSampler

    cfg, comps = tr.cfg, tr.comps
    P, G, k = cfg.batch.prompts, cfg.batch.generations, cfg.pipeline.k
    gen_seed = cfg.run.seed * 1_000_003 + tr.state.step  # a resumed run draws fresh samples
    sampler_state = tr.state.sampler or {"seed": cfg.run.seed, "epoch": 0, "position": 0}
    if cfg.pipeline.backend == "ray":  # generator actors + data-parallel trainer ranks
        spec = engine_spec(cfg.rollout.engine)
        if not spec.process or not spec.copy:   # a server's client: a server per generator actor, not built yet
            raise ScaleRLError(f"pipeline.backend = ray: rollout.engine {spec.name} on Ray actors is not built yet; "
                               "use pipeline.backend=local")
        from scalerl.build.ray import ray_mode

        return ray_mode(tr, comps.build, gen_seed, sampler_state), None
    if use_process(cfg, device):
        source = ProcessRollouts(comps.build, gen_seed, merged_state_dict(tr.model), tr.state.step,
                                 sampler_state, tr.curriculum, G, Window.of(cfg), threads.decode,
                                 dtype=torch.float32 if decode_dtype(cfg) == "fp32" else torch.bfloat16, alias=cfg.model.lora is None,
                                 head=_head_name(tr.model), evals=evals)
        if source.aliased:
            tr.optim.step_guard = source.step_guard
        return PipelineRL(source, k), source
    stage = comps.stage(generator_copy(tr.model, cfg), gen_seed)
    stage.generator.update_weights(merged_state_dict(tr.model), tr.state.step)
    retired = RetiredSet.of(tr.curriculum)
    sampler = CurriculumSampler(stage.task, retired, seed=stage.sampler_seed)
    sampler.load_state_dict(sampler_state)
    if cfg.pipeline.mode == "pipeline_rl":
        source = ThreadedRollouts(stage.generator, LockedSampler(sampler), G, stage.reward, Window.of(cfg),
                                  tr.state.step, retired, score_workers=GroupAssembler.workers_for(stage.task))
        return PipelineRL(source, k), None
    return PPOOffPolicy(stage.generator, LockedSampler(sampler), stage.reward, k, P, G, threads.decode, retired,
                        score_workers=GroupAssembler.workers_for(stage.task)), None


def _head_name(model) -> str | None:
    """The state-dict name of the LM head's weight (its fp32 values serve a bf16 engine's fp32 head)."""
    head = model.get_output_embeddings()
    if head is None:
        return None
    return next((name for name, t in model.state_dict(keep_vars=True).items() if t is head.weight), None)
