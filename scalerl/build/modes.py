"""The configured off-policy mode over its transport: PipelineRL-k over a generator thread, a
generator process or Ray actors; PPO-off-policy-k over a generator in this process."""

from __future__ import annotations

from scalerl.batching import PipelineRL, PPOOffPolicy
from scalerl.build.generator import generator_copy
from scalerl.build.resources import Threads, use_process
from scalerl.build.state import Trainer
from scalerl.lora import merged_state_dict
from scalerl.transport.local import ProcessRollouts, ThreadedRollouts
from scalerl.transport.window import GroupAssembler, LockedSampler, RetiredSet, Window


def make_mode(tr: Trainer, device: str, threads: Threads):
    """The mode for `tr` (after its restore): `collect`, `send`, `pause`/`resume`, `close`, ..."""
    from scalerl.rl.curriculum import CurriculumSampler

    cfg, comps = tr.cfg, tr.comps
    P, G, k = cfg.batch.prompts, cfg.batch.generations, cfg.pipeline.k
    gen_seed = cfg.run.seed * 1_000_003 + tr.state.step  # a resumed run draws fresh samples
    sampler_state = tr.state.sampler or {"seed": cfg.run.seed, "epoch": 0, "position": 0}
    if cfg.pipeline.backend == "ray":  # generator actors + data-parallel trainer ranks
        from scalerl.build.ray import ray_mode

        return ray_mode(tr, comps.build, gen_seed, sampler_state)
    if cfg.pipeline.mode == "pipeline_rl" and use_process(cfg, device):
        source = ProcessRollouts(comps.build, gen_seed, merged_state_dict(tr.model), tr.state.step,
                                 sampler_state, tr.curriculum, G, Window(P, k), threads.decode)
        return PipelineRL(source, k)
    stage = comps.stage(generator_copy(tr.model, cfg), gen_seed)
    stage.generator.update_weights(merged_state_dict(tr.model), tr.state.step)
    retired = RetiredSet.of(tr.curriculum)
    sampler = CurriculumSampler(stage.task, retired, seed=stage.sampler_seed)
    sampler.load_state_dict(sampler_state)
    if cfg.pipeline.mode == "pipeline_rl":
        source = ThreadedRollouts(stage.generator, LockedSampler(sampler), G, stage.reward, Window(P, k),
                                  tr.state.step, retired, score_workers=GroupAssembler.workers_for(stage.task))
        return PipelineRL(source, k)
    return PPOOffPolicy(stage.generator, LockedSampler(sampler), stage.reward, k, P, G, threads.decode, retired,
                        score_workers=GroupAssembler.workers_for(stage.task))
