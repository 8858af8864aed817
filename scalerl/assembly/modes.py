"""The configured off-policy mode over its transport (`make_mode`, a `Mode`): PipelineRL-k over a
generator thread, a generator process or Ray actors, as the engine's declaration allows
(`scalerl.assembly.resources.generator_host`); PPO-off-policy-k over a generator in this process.

The process transport's weights (scalerl.transport.weights): one buffer both processes map, in
the generator's decode dtype; when that is the trainer's dtype on the same device and no adapter
is merged (`model.lora` unset), the buffer is the trainer's own parameters (publishing copies
nothing) and the optimizer steps under the transport's lock (`Optimizer.step_guard`)."""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

import torch

from scalerl.batching import BatchFiller, MiniBatch, PipelineRL, PPOOffPolicy
from scalerl.assembly.generator import decode_dtype, generator_copy
from scalerl.assembly.resources import Threads, generator_host
from scalerl.assembly.state import Trainer
from scalerl.lora import merged_state_dict
from scalerl.transport.local import EvalSpec, ProcessRollouts, ThreadedRollouts
from scalerl.transport.protocol import TrainerUpdate
from scalerl.transport.window import GroupAssembler, LockedSampler, RetiredSet, Window
from scalerl.types import Group


@runtime_checkable
class Mode(Protocol):
    """What the loop asks of an off-policy mode (`make_mode`'s first value): PipelineRL-k over a thread, a
    process or Ray actors (`scalerl.batching.PipelineRL`, `scalerl.assembly.ray.RayPipelineRL`), PPO-off-policy-k
    (`scalerl.batching.PPOOffPolicy`)."""

    def ready(self) -> None:
        """Wait until the generator can generate (start-up is not compute)."""
        ...

    def collect(self, version: int, new_filler: Callable[[], BatchFiller],
                observe: Callable[[Group], None]) -> list[MiniBatch]:
        """The next step's batches (PPO-off-policy: k of them), each filled until `new_filler()`'s rule is met;
        `observe` sees each group taken, in order."""
        ...

    def send(self, update: TrainerUpdate) -> None:
        """After every optimizer step: the new weights and the prompts retired since the last."""
        ...

    def sampler_state(self) -> dict:
        """The prompt sampler's state, for a checkpoint."""
        ...

    def pause(self) -> None:
        """Stop generating (the evaluation has the cores), the sequences in flight kept."""
        ...

    def resume(self) -> None:
        ...

    def processes(self) -> dict[str, int]:
        """The mode's own processes, name -> pid (their memory is monitored)."""
        ...

    def close(self) -> None:
        ...


def make_mode(tr: Trainer, device: str, threads: Threads, evals: EvalSpec) -> tuple[Mode, ProcessRollouts | None]:
    """The mode for `tr` (after its restore), over the generator host the engine allows (`generator_host`); and
    the generator process's transport when the mode runs one (it also evaluates, with `evals`)."""
    cfg = tr.cfg
    gen_seed = cfg.run.seed * 1_000_003 + tr.state.step  # a resumed run draws fresh samples
    sampler_state = tr.state.sampler or {"seed": cfg.run.seed, "epoch": 0, "position": 0}
    host = generator_host(cfg, device)
    if host == "ray":  # generator actors + data-parallel trainer ranks
        from scalerl.assembly.ray import ray_mode

        return ray_mode(tr, tr.comps.build, gen_seed, sampler_state), None
    if host == "process":
        source = ProcessRollouts(tr.comps.build, gen_seed, merged_state_dict(tr.model), tr.state.step,
                                 sampler_state, tr.curriculum, cfg.batch.generations, Window.of(cfg), threads.decode,
                                 dtype=torch.float32 if decode_dtype(cfg) == "fp32" else torch.bfloat16,
                                 alias=cfg.model.lora is None, head=_head_name(tr.model), evals=evals)
        if source.aliased:
            tr.optim.step_guard = source.step_guard
        return PipelineRL(source, cfg.pipeline.k), source
    return _in_process(tr, threads, gen_seed, sampler_state), None


def _in_process(tr: Trainer, threads: Threads, gen_seed: int, sampler_state: dict) -> Mode:
    """The generator in the trainer's process: PipelineRL-k's thread, or PPO-off-policy-k's alternating rounds."""
    from scalerl.rl.curriculum import CurriculumSampler

    cfg = tr.cfg
    P, G, k = cfg.batch.prompts, cfg.batch.generations, cfg.pipeline.k
    stage = tr.comps.stage(generator_copy(tr.model, cfg), gen_seed)
    stage.generator.update_weights(merged_state_dict(tr.model), tr.state.step)
    retired = RetiredSet.of(tr.curriculum)
    sampler = CurriculumSampler(stage.task, retired, seed=stage.sampler_seed)
    sampler.load_state_dict(sampler_state)
    if cfg.pipeline.mode == "pipeline_rl":
        source = ThreadedRollouts(stage.generator, LockedSampler(sampler), G, stage.reward, Window.of(cfg),
                                  tr.state.step, retired, score_workers=GroupAssembler.workers_for(stage.task))
        return PipelineRL(source, k)
    return PPOOffPolicy(stage.generator, LockedSampler(sampler), stage.reward, k, P, G, threads.decode, retired,
                        score_workers=GroupAssembler.workers_for(stage.task))


def _head_name(model) -> str | None:
    """The state-dict name of the LM head's weight (its fp32 values serve a bf16 engine's fp32 head)."""
    head = model.get_output_embeddings()
    if head is None:
        return None
    return next((name for name, t in model.state_dict(keep_vars=True).items() if t is head.weight), None)
