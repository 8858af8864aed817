"""Data-parallel trainer step over W workers (torch.distributed: gloo on CPU, NCCL on GPU).

W workers, each stepping on a shard of the step's groups, end with the same weights as one
worker stepping on the whole batch, because they run the same step
(`scalerl.trainer.step.shard_step`, micro-batches and memory bound included) with an
all-reduce of the gradients as its reducer, and:

1. Advantages are computed once, on the whole batch (ScaleRL's batch-level normalisation
   divides by the std of every advantage of the step; a shard's std would differ).
2. Shards hold whole groups (round robin), so a prompt's tokens are never split.
3. The loss is a mean over "aggregation units": prompts with a trainable token (`prompt`),
   completions with one (`sample`), or tokens (`token`). Worker w scales its shard's loss by
   U_w / U (its units over the batch's), so sum_w of the scaled losses is the whole-batch
   loss whatever the shards' prompt and token counts, and the *sum* of the workers' gradients
   is its gradient.
4. One all-reduce (sum) of the flattened gradients plus the scaled loss; the grad-norm clip and
   the AdamW step then run on identical gradients in every worker, so the weights stay equal.

Departures from the single-worker step:
1. `loss/*` metrics other than `loss/loss` are rank 0's shard's, not the batch's.
2. The KL penalty (ppo_clip with kl_beta > 0) is not supported with more than one worker.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from scalerl.config import Config
from scalerl.errors import ScaleRLError
from scalerl.run.ports import host_store, join_group
from scalerl.trainer.step import Optimizer, Shard, plan_shards, shard_step
from scalerl.types import Group

PLACE_TIMEOUT_S = 300  # seconds for the trainer worker actors to be placed and built (model loaded)


def all_reduce(flat: torch.Tensor) -> None:
    """The data-parallel `Reducer` of `shard_step`: sum over every rank, in place."""
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)


def rank_store(component: str):
    """(the store the ranks meet at, hosted by this process on this node's IP at a port the OS picked,
    "host:port" to pass to them): no port is chosen, released and bound again (scalerl.run.ports)."""
    import ray

    host = ray.util.get_node_ip_address()
    store = host_store(host, component)
    return store, f"{host}:{store.port}"


class TrainerWorker:
    """A trainer rank as a Ray actor: its own model + optimizer, kept equal to rank 0's."""

    def __init__(self, cfg_json: str, rank: int, world: int, rendezvous: str, threads: int):
        from scalerl.models import load_model, resolve_device

        torch.set_num_threads(threads)
        self.cfg = Config.model_validate_json(cfg_json)
        device = resolve_device(self.cfg.model.device)
        self.model, tokenizer = load_model(self.cfg.model.name, dtype=self.cfg.model.dtype, device=device)
        if self.cfg.model.lora is not None:  # the adapters' values come from rank 0 (`load`)
            from scalerl.lora import apply_lora

            self.model = apply_lora(self.model, self.cfg.model.lora)
        self.pad_id = tokenizer.pad_token_id
        self.optim = Optimizer(self.model, self.cfg)
        self.backend = "nccl" if device.startswith("cuda") else "gloo"
        self.rank, self.world, self.rendezvous = rank, world, rendezvous

    def ready(self) -> int:
        return self.rank

    def join(self) -> None:
        """Join the process group (returns once every rank has joined)."""
        join_group(self.backend, self.rendezvous, self.rank, self.world, "the data-parallel trainer ranks")

    def load(self, weights: dict, optim_state: dict) -> None:
        self.model.load_state_dict(weights)
        self.optim.load_state_dict(optim_state)

    def step(self, shard: Shard, step: int) -> dict[str, float]:
        return shard_step(self.model, self.optim, shard, self.cfg, self.pad_id, step, reduce=all_reduce)

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}


def start_workers(
    cfg: Config, world: int, rendezvous: str, first_rank: int = 1, options: Callable[[int], dict] | None = None
) -> tuple[list, list]:
    """Trainer worker actors for ranks first_rank..world-1, and the refs of their `join()` calls
    (submitted once all are placed; a rank 0 outside them must join too before those return)."""
    import ray

    cls = ray.remote(TrainerWorker)
    threads = max(1, int(cfg.ray.trainer_cpus))
    workers = [
        cls.options(
            num_cpus=cfg.ray.trainer_cpus, num_gpus=cfg.ray.trainer_gpus, **(options(rank) if options else {})
        ).remote(cfg.model_dump_json(), rank, world, rendezvous, threads)
        for rank in range(first_rank, world)
    ]
    placed(cfg, workers)
    return workers, [w.join.remote() for w in workers]


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
        raise ScaleRLError(
            f"{len(actors)} trainer rank actors (ray.trainer_cpus {cfg.ray.trainer_cpus:g}, "
            f"ray.trainer_gpus {cfg.ray.trainer_gpus:g} each) were not placed within {PLACE_TIMEOUT_S} s: "
            "compare with the free resources in `ray status`"
        ) from None


class DataParallelStep:
    """`train_step`'s drop-in over W ranks: rank 0 is this process (the loop's model), 1..W-1 actors
    (a `scalerl.trainer.state.StepStrategy`: built with the run, its ranks started by `start`)."""

    def __init__(self, cfg: Config, options: Callable[[int], dict] | None = None):
        from scalerl.rl.losses import uses_reference

        if uses_reference(cfg.loss):
            raise ScaleRLError("loss.kl_beta > 0 is not supported with ray.trainers > 1 (set ray.trainers=1)")
        self.cfg, self.options = cfg, options
        self.world = cfg.ray.trainers
        self.workers: list = []

    def start(self, model, optim: Optimizer, restored=None) -> None:
        """Start ranks 1..W-1 with copies of `model`'s weights and `optim`'s state (as restored), join their group."""
        import ray

        what = "the data-parallel trainer ranks"
        self._store, rendezvous = rank_store(what)  # this process hosts it (rank 0) for the group's life
        self.workers, joined = start_workers(self.cfg, self.world, rendezvous, options=self.options)
        device = next(model.parameters()).device
        join_group("nccl" if device.type == "cuda" else "gloo", rendezvous, 0, self.world, what, store=self._store)
        ray.get(joined)
        weights = ray.put({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
        ray.get([w.load.remote(weights, optim.state_dict()) for w in self.workers])

    def checkpoint_parts(self) -> None:
        """None: rank 0's weights and optimizer are the checkpoint's."""
        return None

    def __call__(
        self,
        model,
        optim: Optimizer,
        groups: list[Group],
        cfg: Config,
        pad_id: int,
        step: int,
        ref_model=None,
        advantages: torch.Tensor | None = None,
    ) -> dict[str, float] | None:
        import ray

        shards = plan_shards(groups, cfg, self.world, advantages)
        if shards is None:
            return None
        pending = [w.step.remote(shards[rank], step) for rank, w in enumerate(self.workers, start=1)]
        row = shard_step(model, optim, shards[0], cfg, pad_id, step, reduce=all_reduce)
        ray.get(pending)
        return row

    def close(self) -> None:
        import ray

        if not self.workers:  # never started
            return
        for w in self.workers:
            ray.kill(w, no_restart=True)
        dist.destroy_process_group()
