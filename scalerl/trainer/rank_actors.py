"""Trainer ranks as Ray actors, what the data-parallel (data_parallel.py) and FSDP (sharded.py)
steps share: the address the ranks meet at, waiting until their actors are placed, and the sum over
the ranks that `shard_step` reduces with."""

from __future__ import annotations

import torch
import torch.distributed as dist

from scalerl.config import Config
from scalerl.errors import ScaleRLError
from scalerl.run.ports import free_port

PLACE_TIMEOUT_S = 300  # seconds for the trainer worker actors to be placed and built (model loaded)


def free_address() -> str:
    """tcp://<this node's IP>:<a free port> for `init_process_group`."""
    import ray

    host = ray.util.get_node_ip_address()
    return f"tcp://{host}:{free_port(host)}"


def placed(cfg: Config, actors: list) -> None:
    """Wait until the trainer rank actors are built (`ready()`), at most PLACE_TIMEOUT_S; else kill
    them and raise a ScaleRLError naming the resources they asked for."""
    import ray
    from ray.exceptions import GetTimeoutError

    try:
        ray.get([a.ready.remote() for a in actors], timeout=PLACE_TIMEOUT_S)
    except GetTimeoutError:
        for a in actors:
            ray.kill(a)
        raise ScaleRLError(f"{len(actors)} trainer rank actors (ray.trainer_cpus {cfg.ray.trainer_cpus:g}, "
                           f"ray.trainer_gpus {cfg.ray.trainer_gpus:g} each) were not placed within "
                           f"{PLACE_TIMEOUT_S} s: compare with the free resources in `ray status`") from None


def all_reduce(flat: torch.Tensor) -> None:
    """`shard_step`'s reducer over W ranks: sum over every rank, in place (under ddp the flattened
    gradients and the counters; under fsdp the counters, FSDP having reduce-scattered the gradients)."""
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
