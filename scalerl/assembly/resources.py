"""What a run holds: how its cores are divided among the stages (`Threads`), how many devices it
counts for compute (`split_threads`, `ray_devices`), the evaluation's threads, and where the
generator stage runs (`generator_host`: a thread, a process of its own or Ray actors, as the engine's
declaration allows)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from scalerl.config import Config, available_cores

EVAL_ALL_CORES_PARAMS = 20e6  # a model this large decodes faster on every core (`eval_threads`)


@dataclass(frozen=True)
class Threads:
    train: int  # torch threads of the trainer
    decode: int  # torch threads of generation
    devices: float  # devices the run holds (compute accounting: device-hours = wall-clock x devices)


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
    if generator_host(cfg, device) == "ray":
        return threads.train  # the driver's threads; the generators are actors
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
    total, host = run_cores(cfg), generator_host(cfg, device)
    if device != "cpu":
        threads = Threads(total, total, 1.0)
    elif cfg.pipeline.mode == "pipeline_rl" and total >= 2 and host != "ray":
        gen = total // 2
        threads = Threads(total - gen, gen, float(total))
    else:
        threads = Threads(total, 1, float(total))
    if host == "ray":
        threads = replace(threads, devices=ray_devices(cfg, device, threads.train))
    return threads


def ray_devices(cfg: Config, device: str, driver_threads: int) -> float:
    """Devices a Ray run holds: the driver's (its GPU, or its trainer threads) plus what every
    generator and trainer-worker actor reserves. GPUs are counted when the run uses any, else cores."""
    r = cfg.ray
    if device != "cpu" or r.generator_gpus > 0 or r.trainer_gpus > 0:
        return (
            float(device != "cpu") + r.generators * r.generator_gpus + cfg.trainer.actors(r.trainers) * r.trainer_gpus
        )
    return float(driver_threads) + r.generators * r.generator_cpus + cfg.trainer.actors(r.trainers) * r.trainer_cpus


def generator_host(cfg: Config, device: str) -> str:
    """Where the run's generator stage runs (`scalerl.rollout.registry.HOSTS`), after the engine's declaration
    has said it may (`EngineSpec.require`, one line naming the setting that asked): Ray actors under
    `pipeline.backend` ray; a thread of the trainer's process for PPO-off-policy (it alternates with the
    trainer); for PipelineRL on the local backend, `pipeline.transport`, whose `auto` is a process of its own
    on a CPU with at least 2 cores (where the two stages would otherwise fight over the GIL) when the engine
    may run in one and decodes its own copy of the model, else a thread (on CUDA, and for a server's client,
    whose decoding runs in the server's processes)."""
    from scalerl.rollout import engine_spec

    spec = engine_spec(cfg.rollout.engine)
    if cfg.pipeline.backend == "ray":
        host, asked = "ray", "pipeline.backend = ray"
    elif cfg.pipeline.mode != "pipeline_rl":
        host, asked = "thread", f"pipeline.mode = {cfg.pipeline.mode}"
    elif cfg.pipeline.transport == "auto":
        own = spec.needs.copy and device == "cpu" and run_cores(cfg) >= 2  # a server's client keeps the thread
        prefer = ("process", "thread") if own else ("thread", "process")
        host, asked = next((h for h in prefer if h in spec.needs.hosts), prefer[0]), "pipeline.transport = auto"
    else:
        host, asked = cfg.pipeline.transport, f"pipeline.transport = {cfg.pipeline.transport}"
    spec.require(cfg, device, host, asked)
    return host


def use_process(cfg: Config, device: str) -> bool:
    """Whether the run's generator runs in a process of its own on this machine (`generator_host`)."""
    return generator_host(cfg, device) == "process"
