"""The Ray session of a run: connect to a cluster (`ray.address`) or start a local Ray sized for the
actors, and stop only what was started. `pipeline.backend: ray` opens one for its generator actors and
trainer ranks, the local backend for its trainer rank actors alone (scalerl.assembly.ranks.start_ray)."""

from __future__ import annotations

import contextlib

from scalerl.transport import require_ray

require_ray()

import ray  # noqa: E402

from scalerl.config import Config  # noqa: E402
from scalerl.errors import ScaleRLError, first_line  # noqa: E402


def cpus_needed(cfg: Config) -> float:
    """CPUs the actors reserve: generators (the ray backend), and the trainer rank actors (ranks
    1..W-1 under ddp, rank 0 being this process; all W under fsdp)."""
    generators = cfg.ray.generators if cfg.pipeline.backend == "ray" else 0
    return generators * cfg.ray.generator_cpus + cfg.trainer.actors(cfg.ray.trainers) * cfg.ray.trainer_cpus


def why_ray(cfg: Config) -> str:
    """What Ray is started for, as the config asks for it."""
    ranks = cfg.trainer.actors(cfg.ray.trainers)
    what = [f"{cfg.ray.generators} generator actors (--backend ray)"] if cfg.pipeline.backend == "ray" else []
    if ranks:
        what.append(
            f"{ranks} trainer rank actors (trainer.strategy {cfg.trainer.resolved(cfg.ray.trainers)} with "
            f"ray.trainers = {cfg.ray.trainers} runs its ranks as Ray actors, with or without --backend ray)"
        )
    return " and ".join(what) or "the run"


@contextlib.contextmanager
def ray_start(which: str, advice: str):
    """Ray failing to start or connect is one line: which Ray, why (Ray's first line), what to try."""
    try:
        yield
    except ScaleRLError:
        raise
    except Exception as exc:  # Ray raises bare Exceptions ("The current node timed out during startup")
        with contextlib.suppress(Exception):  # a half-started Ray: its processes stopped before the error
            ray.shutdown()
        raise ScaleRLError(f"{which} could not start: {first_line(exc)}; {advice}") from None


class RaySession:
    """Connects to a cluster or starts a local Ray; shuts down only what it started.

    A local Ray gets `ray.num_cpus` CPUs, by default the machine's cores or, if the actors
    reserve more, that many (logical CPUs: the actors then share the cores). An explicit
    `ray.num_cpus` too small for the actors is an error rather than a run that never starts.
    """

    def __init__(self, cfg: Config):
        import os

        self.started = False
        if ray.is_initialized():
            return
        if cfg.ray.address:
            with ray_start(
                f"Ray at ray.address = {cfg.ray.address}",
                "check that `ray status` there shows the cluster, or leave ray.address unset for a local Ray",
            ):
                ray.init(address=cfg.ray.address, include_dashboard=False, log_to_driver=True)
            return
        needed = cpus_needed(cfg)
        if cfg.ray.num_cpus is not None and cfg.ray.num_cpus < needed:
            raise ScaleRLError(
                f"ray.num_cpus = {cfg.ray.num_cpus}: the actors reserve {needed:g} CPUs ({cfg.ray.generators} "
                f"generators x ray.generator_cpus {cfg.ray.generator_cpus:g} + "
                f"{cfg.trainer.actors(cfg.ray.trainers)} trainer ranks x ray.trainer_cpus {cfg.ray.trainer_cpus:g}); "
                "raise ray.num_cpus or lower those"
            )
        num_cpus = cfg.ray.num_cpus or max(os.cpu_count() or 1, int(-(-needed // 1)))
        with ray_start(
            f"a local Ray ({num_cpus} CPUs) for {why_ray(cfg)}",
            "rerun when the machine is less loaded, or start Ray first (`ray start --head`, which waits "
            "as long as it takes) and add --set ray.address=auto",
        ):
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=True)
        self.started = True

    def close(self) -> None:
        if self.started:
            ray.shutdown()
