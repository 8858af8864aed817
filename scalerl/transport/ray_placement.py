"""Where the actors run: plain per-actor resource requests, or one placement group.

`ray.placement: none` lets Ray place each actor wherever its `ray.*_cpus` / `ray.*_gpus` (and
custom `ray.*_resources`, which pin actors to the nodes that offer them) fit.
`pack` / `spread` first reserve one placement group holding a bundle per generator actor and
per trainer worker (ranks 1..W-1), atomically (all or nothing, so a run never starts with half
its actors), with Ray's PACK (as few nodes as possible: trainers near each other for the
all-reduce) or SPREAD (one actor per node where possible: generators on separate GPUs/hosts)
strategy; each actor is then scheduled into its own bundle, and a restarted actor returns to it.
"""

from __future__ import annotations

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from scalerl.config import Config
from scalerl.errors import ScaleRLError

PLACE_TIMEOUT_S = 300  # seconds for the cluster to grant the actors' resources


def _bundle(cpus: float, gpus: float, custom: dict[str, float]) -> dict[str, float]:
    bundle = {k: v for k, v in (("CPU", cpus), ("GPU", gpus), *custom.items()) if v > 0}
    if not bundle:
        raise ScaleRLError(
            "ray.placement pack/spread needs resources in every bundle: set ray.generator_cpus "
            "and ray.trainer_cpus (or the *_gpus) above 0, or use ray.placement=none"
        )
    return bundle


class Placement:
    """Scheduling options for generator rank r and trainer rank t; `close()` frees the group."""

    def __init__(self, cfg: Config):
        r = cfg.ray
        self.n_generators = r.generators
        self.generator_resources, self.trainer_resources = r.generator_resources, r.trainer_resources
        self.first_trainer = r.trainers - cfg.trainer.actors(r.trainers)  # 0 under fsdp (every rank an actor), else 1
        self.group = None
        if r.placement == "none":
            return
        bundles = [_bundle(r.generator_cpus, r.generator_gpus, r.generator_resources)] * r.generators
        bundles += [_bundle(r.trainer_cpus, r.trainer_gpus, r.trainer_resources)] * cfg.trainer.actors(r.trainers)
        self.group = placement_group(bundles, strategy=r.placement.upper())
        ready, _ = ray.wait([self.group.ready()], timeout=PLACE_TIMEOUT_S)
        if not ready:
            remove_placement_group(self.group)
            raise ScaleRLError(
                f"ray.placement {r.placement}: the cluster did not grant {len(bundles)} bundles "
                f"({bundles[0]} per generator) within {PLACE_TIMEOUT_S} s; compare with `ray status`"
            )

    def _options(self, index: int, custom: dict[str, float]) -> dict:
        """An actor's options: its bundle of the group (custom resources included), or its own request."""
        if self.group is None:
            return {"resources": dict(custom)} if custom else {}
        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index)}

    def generator(self, rank: int) -> dict:
        return self._options(rank, self.generator_resources)

    def trainer(self, rank: int) -> dict:
        """Options of trainer rank actor `rank` (ddp: 1..W-1, rank 0 being the driver, outside the group;
        fsdp: 0..W-1)."""
        return self._options(self.n_generators + rank - self.first_trainer, self.trainer_resources)

    def close(self) -> None:
        if self.group is not None:
            remove_placement_group(self.group)
            self.group = None
