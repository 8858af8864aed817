"""What a run holds: how its cores are divided among the stages (`Threads`), how many devices it
counts for compute (`split_threads`, `ray_devices`), the evaluation's threads, and whether the
generator runs in a process of its own (`use_process`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from scalerl.config import Config, available_cores
from scalerl.errors import ScaleRLError

EVAL_ALL_CORES_PARAMS = 20e6   # a model this large decodes faster on every core (`eval_threads`)


@dataclass(frozen=True)
class Threads:
    train: int          # torch threads of the trainer
    decode: int         # torch threads of generation
    devices: float      # devices the run holds (compute accounting: device-hours = wall-clock x devices)


def run_cores(cfg: Config) -> int:
    """The cores a run divides among its stages: `run.threads`, else every core it may run on."""
    return cfg.run.threads or available_cores()


def eval_threads(cfg: Config, threads: Threads, n_params: int, device: str) -> int:
    """Threads for the evaluation, which runs while the generator is paused: every core the run
    holds for a model large enough for its decode step to be compute-bound (SmolLM2-135M, 512
    evaluation completions: 49.0 s on 2 threads against 59.6 s on 1), the generator's share
    for the tiny model, whose decode step is Python-bound (more threads only add synchronisation)."""
    if device != "cpu" or n_params < EVAL_ALL_CORES_PARAMS:
        return threads.decode
    if cfg.pipeline.backend == "ray":
        return threads.train                       # the driver's threads; the generators are actors
    return run_cores(cfg)


def split_threads(cfg: Config, device: str) -> Threads:
    """How the cores are divided, and how many devices the run holds.

    On a GPU both stages share the one device, which counts once. On a CPU a device is a core.
    Decoding runs on one torch thread per generator: the tiny model's decode step is
    Python-bound and intra-op threads only add synchronisation (measured slower with 2 threads
    than with 1, see docs/training.md). PipelineRL gives the generator process half the cores
    (at least 1) and the trainer the rest; PPO-off-policy holds all cores for both of its
    alternating phases. On Ray the actors' reserved devices count too (`ray_devices`).
    """
    total = run_cores(cfg)
    if device != "cpu":
        threads = Threads(total, total, 1.0)
    elif cfg.pipeline.mode == "pipeline_rl" and total >= 2 and cfg.pipeline.backend == "local":
        gen = total // 2
        threads = Threads(total - gen, gen, float(total))
    else:
        threads = Threads(total, 1, float(total))
    if cfg.pipeline.backend == "ray":
        threads = replace(threads, devices=ray_devices(cfg, device, threads.train))
    return threads


def ray_devices(cfg: Config, device: str, driver_threads: int) -> float:
    """Devices a Ray run holds: the driver's (its GPU, or its trainer threads) plus what every
    generator and trainer-worker actor reserves. GPUs are counted when the run uses any, else cores."""
    r = cfg.ray
    if device != "cpu" or r.generator_gpus > 0 or r.trainer_gpus > 0:
        return float(device != "cpu") + r.generators * r.generator_gpus + cfg.trainer.actors(r.trainers) * r.trainer_gpus
    return float(driver_threads) + r.generators * r.generator_cpus + cfg.trainer.actors(r.trainers) * r.trainer_cpus


def use_process(cfg: Config, device: str) -> bool:
    """Whether the run's generator runs in a process of its own on this machine: PipelineRL on the
    local backend with `pipeline.transport` process, or auto on a CPU with at least 2 cores (where
    the two stages would otherwise fight over the GIL, decoding a model here: `EngineSpec.copy`; a
    server's client keeps the thread under `auto`). On CUDA `auto` keeps the thread. An engine that no
    generator process of ours may host (`EngineSpec.process`) keeps the thread, and `pipeline.transport:
    process` with it is refused."""
    from scalerl.rollout import engine_spec

    if cfg.pipeline.mode != "pipeline_rl" or cfg.pipeline.backend != "local":
        return False
    spec = engine_spec(cfg.rollout.engine)
    if not spec.process:
        if cfg.pipeline.transport == "process":
            raise ScaleRLError(f"pipeline.transport = process: rollout.engine {spec.name} runs in a server of its own; "
                               "its client runs in a thread of the trainer (use pipeline.transport=thread or auto)")
        return False
    if cfg.pipeline.transport == "auto":
        return spec.copy and device == "cpu" and run_cores(cfg) >= 2
    return cfg.pipeline.transport == "process"
