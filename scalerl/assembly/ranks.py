"""The trainer's ranks (`trainer.strategy`, `ray.trainers`): the step `Trainer.train_on` runs.

single: this process steps (`train_step`). ddp: this process is rank 0 and ranks 1..W-1 are Ray
actors with full copies (scalerl.trainer.data_parallel). fsdp: W Ray actors hold the shards and
this process keeps the full weights to publish and evaluate (scalerl.trainer.sharded). With the
local backend, a local Ray is started for the rank actors alone (the generator stays a process
or thread of this machine) and stopped at the end.
"""

from __future__ import annotations

from typing import Callable

from scalerl.assembly.state import Trainer
from scalerl.errors import ScaleRLError
from scalerl.run.checkpoint import SHARDS


def trainer_ranks(tr: Trainer, options: Callable[[int], dict] | None = None) -> list[Callable[[], None]]:
    """Set `tr.step_fn` (and `tr.shards` under fsdp) for the run's strategy; what to close at the end."""
    cfg = tr.cfg
    strategy = cfg.trainer.resolved(cfg.ray.trainers)
    if strategy == "single":
        return []
    if strategy == "ddp":
        from scalerl.trainer.data_parallel import DataParallelStep

        tr.step_fn = DataParallelStep(tr.model, tr.optim, cfg, options=options)
        return [tr.step_fn.close]
    from scalerl.trainer.sharded import ShardedStep

    restored = tr.restored / SHARDS if tr.restored is not None and (tr.restored / SHARDS).is_dir() else None
    if tr.restored is not None and restored is None and tr.optim.opt.state:
        raise ScaleRLError(f"{tr.restored} was written by trainer.strategy {cfg.trainer.strategy!r} other than fsdp "
                           "(no dcp/ folder): its AdamW state cannot be sharded; resume with that strategy, or "
                           "start a new run from its weights (model.name=<run dir>)")
    tr.shards = tr.step_fn = ShardedStep(tr.model, cfg, options=options, restore=restored)
    return [tr.shards.close]


def local_ranks(tr: Trainer) -> list[Callable[[], None]]:
    """The local backend's trainer ranks: a local Ray for their actors when the strategy has any."""
    cfg = tr.cfg
    if cfg.trainer.actors(cfg.ray.trainers) == 0:
        return []
    from scalerl.assembly.ray_session import RaySession   # imports Ray: only when there are rank actors

    session = RaySession(cfg)
    try:
        return [*trainer_ranks(tr), session.close]   # the ranks first, then their Ray
    except BaseException:
        session.close()
        raise
