"""The Ray a run needs and the trainer's step strategy (`trainer.strategy`, `ray.trainers`).

single: this process steps (`LocalStep`). ddp: this process is rank 0 and ranks 1..W-1 are Ray
actors with full copies (scalerl.trainer.data_parallel). fsdp: W Ray actors hold the shards and
this process keeps the full weights to publish and evaluate (scalerl.trainer.sharded). With the
local backend, a local Ray is started for the rank actors alone (the generator stays a process
or thread of this machine); with `pipeline.backend: ray`, one session and one placement serve the
generator actors and the trainer ranks. Both are stopped at the end.
"""

from __future__ import annotations

import contextlib

from scalerl.config import Config
from scalerl.errors import ScaleRLError


def start_ray(cfg: Config, host: str, undo: contextlib.ExitStack):
    """Ray for the run when it needs one: a session (`ray.address`, or a local Ray) for the ranks of a
    strategy with rank actors, and for `pipeline.backend: ray` (`host` "ray") also the placement of its
    generator actors and ranks, returned (else None). What it starts is closed by `undo` (last first)."""
    if host == "ray" and cfg.pipeline.mode != "pipeline_rl":
        raise ScaleRLError(f"pipeline.backend 'ray' runs pipeline.mode 'pipeline_rl' only, got {cfg.pipeline.mode!r}")
    if host != "ray" and cfg.trainer.actors(cfg.ray.trainers) == 0:
        return None
    from scalerl.assembly.ray_session import RaySession  # imports Ray: only when there are actors

    undo.callback(RaySession(cfg).close)
    if host != "ray":
        return None
    from scalerl.transport.ray_placement import Placement

    placement = Placement(cfg)
    undo.callback(placement.close)
    return placement
