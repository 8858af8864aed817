"""FSDP2 trainer ranks (`trainer.strategy: fsdp`): parameters, gradients and AdamW state sharded.

Each rank wraps its copy of the model with `torch.distributed.fsdp.fully_shard`: every decoder
layer is one unit, and the root unit (`Policy`: the embeddings, the final norm, the LM head)
wraps the trainer's log-prob forward, so that FSDP's hooks gather each unit's parameters just
before it runs and free them after, and reduce-scatter its gradients in the backward. A rank
then holds 1/W of the parameters (fp32 master weights), of their gradients and of AdamW's two
moments, plus one unit's full parameters at a time.

The step is the data-parallel step (`scalerl.trainer.step.shard_step`, data_parallel.py):
whole groups per rank, advantages on the whole batch, each rank's loss scaled by U_w / U. FSDP
reduce-scatters with a *sum* (`set_gradient_divide_factor(1.0)`), so the ranks' gradients add
up to the whole-batch gradient as under the all-reduce. Every rank runs the same number of
forward/backward passes (the collectives must pair up): a rank with fewer micro-batches, or no
group at all, repeats one with weight 0 (`FSDPSync.pad`).

Mixed precision (`model.compute_dtype` bf16, the default on a bf16 GPU): the decoder layers
compute on bf16 casts of the fp32 shards (FSDP's `MixedPrecisionPolicy(param_dtype=bf16)`, which
also casts each layer's input: a bf16 residual stream, as forward.py's `_trunks`), the root unit
in fp32: the LM head and the log-softmax run on the fp32 weight (paper Section 3.2). Gradients
are reduced in fp32. Only fp32 was run here (a CPU); the bf16 path is not yet measured.

Departures from the single-process step:
1. The prompt is not shared between a group's completions (`model.share_prompt` is off under
   FSDP: the shared path swaps parameters through `functional_call`, which FSDP's gathered
   parameters do not survive); the loss and gradients are the same (forward.py checks the
   two paths agree), the trunk runs more tokens.
2. Activation recomputation (`batch.recompute`, decided per micro-batch as today) is
   transformers' checkpointing of each decoder layer (`gradient_checkpointing`, non-reentrant),
   with the layer's FSDP hooks inside: the replay runs on the parameters FSDP's pre-backward
   gather brought back, instead of forward.py's `_recomputed` (which swaps parameters in).
3. The KL penalty (`kl_beta > 0`) is not supported (no sharded reference model), nor LoRA.
4. The `scalerl train` process is no rank (`ShardedStep`): it keeps the full weights, gathered
   on rank 0 after each step, to publish and evaluate.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from scalerl.config import Config
from scalerl.errors import ScaleRLError, located
from scalerl.run.ports import host_store, join_group
from scalerl.trainer.forward import Batch, completion_logprobs
from scalerl.trainer.step import Shard

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Policy(torch.nn.Module):
    """The root FSDP unit: the model, and the forward that gives the completion tokens' log-probs
    (called as a module, so that FSDP gathers the root's parameters, the LM head's among them)."""

    def __init__(self, model: torch.nn.Module, cfg: Config):
        super().__init__()
        self.model = model
        self.temperature = cfg.rollout.temperature
        self.fp32_head = cfg.model.fp32_head

    def forward(self, batch: Batch, recompute: bool = False) -> torch.Tensor:  # (N, T)
        """`recompute`: each decoder layer checkpointed by transformers (`gradient_checkpointing`),
        its FSDP hooks inside the checkpoint: the pre-backward gather serves the replay."""
        for layer in decoder_layers(self.model):
            layer.gradient_checkpointing = recompute
        return completion_logprobs(
            self.model, batch, self.temperature, fp32_head=self.fp32_head, compute_dtype="fp32", share_prompt=False
        )


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers (transformers' `GradientCheckpointingLayer`s), in order."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise ScaleRLError(
            f"trainer.strategy=fsdp: {type(model).__name__} has no transformers decoder layers "
            "(GradientCheckpointingLayer) to shard; use trainer.strategy=ddp"
        )
    return layers


def shard(model: torch.nn.Module, cfg: Config) -> Policy:
    """`model` (fp32) sharded over the default process group: one FSDP unit per decoder layer
    (computing in `model.compute_dtype`), the root `Policy` computing in fp32; gradients summed."""
    if next(model.parameters()).dtype != torch.float32:
        raise ScaleRLError(
            "trainer.strategy=fsdp keeps fp32 master weights: load the model in fp32 "
            "(model.compute_dtype sets the layers' compute dtype)"
        )
    from scalerl.models import compute_dtype

    layer_policy = MixedPrecisionPolicy(param_dtype=DTYPES[compute_dtype(cfg.model)], reduce_dtype=torch.float32)
    for layer in decoder_layers(model):  # checkpointing is switched on per micro-batch (`Policy.forward`)
        layer._gradient_checkpointing_func = partial(checkpoint, use_reentrant=False)
        layer.gradient_checkpointing = False
        fully_shard(layer, mp_policy=layer_policy)
    policy = Policy(model, cfg)
    fully_shard(policy, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32))
    for unit in policy.modules():
        if isinstance(unit, FSDPModule):
            unit.set_gradient_divide_factor(1.0)  # a sum over ranks: each rank's loss is its share already
            unit.set_force_sum_reduction_for_comms(True)  # gloo has no pre-multiplied sum
    return policy


@dataclass(frozen=True)
class FSDPSync:
    """What an FSDP step's ranks agree on (`shard_step`'s `sync`, a `scalerl.trainer.step.ShardSync`):
    the forward to run (the root unit) and how many micro-batches every rank runs."""

    policy: Policy

    def forward(self, batch: Batch, recompute: bool) -> torch.Tensor:
        return self.policy(batch, recompute)

    def pad(self, plan: list[tuple[list[int], bool]]) -> list[tuple[list[int], bool, float]]:
        """`plan` (micro-batches, recompute) with weight 1, then repeats of its first with weight 0
        up to the largest count of any rank (a rank's group-less shard holds one group, weight 0)."""
        n = torch.tensor([len(plan)], dtype=torch.long)
        dist.all_reduce(n, op=dist.ReduceOp.MAX)
        return [(p, r, 1.0) for p, r in plan] + [(plan[0][0], plan[0][1], 0.0)] * (int(n.item()) - len(plan))


def check_config(cfg: Config) -> None:
    """Refuse what the FSDP step cannot run, in one line each."""
    from scalerl.rl.losses import uses_reference

    if uses_reference(cfg.loss):
        raise ScaleRLError(
            "loss.kl_beta > 0 is not supported with trainer.strategy=fsdp (no sharded reference "
            "model); set loss.kl_beta=0 or trainer.strategy=single"
        )
    if cfg.model.lora is not None:
        raise ScaleRLError(
            "model.lora is not supported with trainer.strategy=fsdp (adapters are small: use trainer.strategy=ddp)"
        )


def all_reduce(flat: torch.Tensor) -> None:
    """`shard_step`'s reducer: sum over every rank, in place (the counters; FSDP reduced the gradients)."""
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)


class FSDPRank:
    """One FSDP trainer rank: its shards of the model and of AdamW's state, its part of each step,
    and the collectives every rank joins at once: the full weights gathered on rank 0, the
    checkpoint each rank writes its part of, and the load of one (written by any number of ranks)."""

    def __init__(self, cfg: Config | str, rank: int, world: int, rendezvous: str, threads: int = 1):
        from scalerl.models import load_model, resolve_device
        from scalerl.trainer.step import Optimizer

        cfg = Config.model_validate_json(cfg) if isinstance(cfg, str) else cfg
        check_config(cfg)
        torch.set_num_threads(threads)
        device = resolve_device(cfg.model.device)
        if device == "cuda":  # one GPU per rank where there are enough (a Ray actor sees its own as cuda:0)
            torch.cuda.set_device(rank % torch.cuda.device_count())
        torch.manual_seed(cfg.run.seed)
        model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype, device=device)
        self.cfg, self.rank, self.world, self.pad_id = cfg, rank, world, tokenizer.pad_token_id
        if not dist.is_initialized():  # through the store its starter hosts (`host_store`: no port to collide)
            backend = "nccl" if device.startswith("cuda") else "gloo"
            join_group(backend, rendezvous, rank, world, "the FSDP trainer ranks")
        self.policy = shard(model.train(), cfg)
        self.optim = Optimizer(self.policy, cfg)

    def ready(self) -> int:
        return self.rank

    def node(self) -> str:
        """The Ray node this rank runs on (an actor only)."""
        import ray

        return f"{ray.util.get_node_ip_address()}/{ray.get_runtime_context().get_node_id()[:8]}"

    def step(self, shard_: Shard, step: int) -> dict[str, float]:
        from scalerl.trainer.step import shard_step

        return shard_step(
            self.policy.model,
            self.optim,
            shard_,
            self.cfg,
            self.pad_id,
            step,
            reduce=all_reduce,
            sync=FSDPSync(self.policy),
        )

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The model's full state dict on rank 0 (CPU), gathered unit by unit; {} on the others."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(self.policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k.removeprefix("model."): v for k, v in full.items()}

    def set_full_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Take the full weights given to rank 0 ({} on the others), broadcast and sharded."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(
            self.policy,
            {f"model.{k}": v for k, v in weights.items()},
            options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
        )

    def _state(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optim = get_state_dict(self.policy, self.optim.opt)
        return {"model": model, "optim": optim, "sched": self.optim.sched.state_dict()}

    def save(self, path: str) -> None:
        """Write this rank's shards of the weights and AdamW state to the DCP folder `path`."""
        import torch.distributed.checkpoint as dcp

        dcp.save(self._state(), checkpoint_id=path)

    def load(self, path: str) -> None:
        """Load the DCP folder `path` (any number of ranks wrote it) into this rank's shards."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = self._state()
        dcp.load(state, checkpoint_id=path)
        set_state_dict(self.policy, self.optim.opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.optim.sched.load_state_dict(state["sched"])

    def memory(self) -> dict[str, int]:
        """Bytes this rank holds of parameters, gradients and optimizer state (its shards)."""

        def local(t: torch.Tensor) -> int:
            t = t.to_local() if isinstance(t, DTensor) else t
            return t.numel() * t.element_size()

        params = list(self.policy.parameters())
        state = [v for s in self.optim.opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        return {
            "params": sum(local(p) for p in params),
            "grads": sum(local(p.grad) for p in params if p.grad is not None),
            "optimizer": sum(local(v) for v in state),
        }

    def close(self) -> None:
        dist.destroy_process_group()


def load_shards(folder, model: torch.nn.Module, optim, cfg: Config) -> None:
    """A DCP folder written by any number of FSDP ranks (a checkpoint's `dcp/`) loaded into one
    process's unsharded `model` and its `Optimizer` (no process group): resuming on one rank."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    holder = Policy(model, cfg)  # the ranks' names: model.<name>
    weights, moments = get_state_dict(holder, optim.opt)
    state = {"model": weights, "optim": moments, "sched": optim.sched.state_dict()}
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(holder, optim.opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    optim.sched.load_state_dict(state["sched"])


class ShardedStep:
    """`train_step`'s drop-in over W FSDP rank actors (`ray.trainers`), placed by Ray. This process
    is no rank: it keeps the full weights the generators and the evaluation decode (`model`),
    loaded after each step from the ranks' shards gathered on rank 0 (`FSDPRank.full_weights`),
    under the transport's `step_guard`; its own optimizer never steps."""

    def __init__(self, cfg: Config, options: Callable[[int], dict] | None = None):
        check_config(cfg)
        self.cfg, self.options = cfg, options
        self.world = cfg.ray.trainers
        self.ranks: list = []

    def start(self, model, optim, restored: Path | None = None) -> None:
        """Start the W rank actors from checkpoint `restored`'s shards (its `dcp/`), else from `model`'s weights
        (a new run, a warm start); a checkpoint of another strategy with AdamW state is refused."""
        import ray

        from scalerl.run.checkpoint import SHARDS
        from scalerl.trainer.data_parallel import placed, rank_store

        cfg = self.cfg
        shards = restored / SHARDS if restored is not None and (restored / SHARDS).is_dir() else None
        if restored is not None and shards is None and optim.opt.state:
            raise ScaleRLError(
                f"{restored} was written by a trainer.strategy other than fsdp (no dcp/ folder): its "
                "AdamW state cannot be sharded; resume with that strategy, or start a new run from "
                "its weights (model.name=<run dir>)"
            )
        self._store, rendezvous = rank_store("the FSDP trainer ranks")  # kept for the group's life
        cls = ray.remote(FSDPRank)
        threads = max(1, int(cfg.ray.trainer_cpus))
        self.ranks = [
            cls.options(
                num_cpus=cfg.ray.trainer_cpus,
                num_gpus=cfg.ray.trainer_gpus,
                **(self.options(rank) if self.options else {}),
            ).remote(cfg.model_dump_json(), rank, self.world, rendezvous, threads)
            for rank in range(self.world)
        ]
        placed(cfg, self.ranks)
        print(
            f"trainer.strategy fsdp: {self.world} rank actors on Ray node(s) "
            f"{', '.join(ray.get([r.node.remote() for r in self.ranks]))}"
        )
        if shards is not None:  # the checkpoint's shards, written by any number of ranks
            ray.get([r.load.remote(str(shards)) for r in self.ranks])
        else:  # the driver's weights (a warm start, a checkpoint of another strategy)
            full = ray.put({k: v.detach().to("cpu") for k, v in model.state_dict().items()})
            ray.get([r.set_full_weights.remote(full if i == 0 else {}) for i, r in enumerate(self.ranks)])

    def __call__(
        self,
        model,
        optim,
        groups: list,
        cfg: Config,
        pad_id: int,
        step: int,
        ref_model=None,
        advantages: torch.Tensor | None = None,
    ) -> dict[str, float] | None:
        import ray

        from scalerl.trainer.step import plan_shards

        shards = plan_shards(groups, cfg, self.world, advantages)
        if shards is None:
            return None
        rows = ray.get([r.step.remote(shards[i], step) for i, r in enumerate(self.ranks)])
        self.pull(model, optim, step)
        return rows[0]

    def pull(self, model, optim, step: int) -> None:
        """Load the ranks' weights, gathered on rank 0, into `model` (under `optim.step_guard`)."""
        import ray

        weights = ray.get([r.full_weights.remote() for r in self.ranks])[0]
        with optim.step_guard(step), torch.no_grad():
            model.load_state_dict(weights)

    def checkpoint_parts(self) -> Callable[[Path], None]:
        """The ranks' shards go into every checkpoint (`save`)."""
        return self.save

    def save(self, path) -> None:
        """Each rank writes its shards to the DCP folder `path` (a checkpoint's `dcp/`)."""
        import ray

        ray.get([r.save.remote(str(path)) for r in self.ranks])

    def memory(self) -> list[dict[str, int]]:
        import ray

        return ray.get([r.memory.remote() for r in self.ranks])

    def close(self) -> None:
        import ray

        for r in self.ranks:
            ray.kill(r, no_restart=True)


def _rank_main(target: Callable, rank: int, world: int, rendezvous: str, args: tuple, out) -> None:
    import io

    buf = io.BytesIO()
    try:
        torch.save(("ok", target(rank, world, rendezvous, *args)), buf)
    except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it as one line
        torch.save(("error", str(exc) if isinstance(exc, ScaleRLError) else located(exc, anywhere=True)), buf)
    out.put((rank, buf.getvalue()))


def spawn_ranks(target: Callable, world: int, *args, timeout_s: float = 600) -> list:
    """`target(rank, world, rendezvous, *args)` in `world` spawned processes (one gloo/NCCL group through
    the store this process hosts at `rendezvous`, host:port); their return values in rank order. A rank that
    raises, dies or is still running after `timeout_s` seconds stops them all with a ScaleRLError naming it.
    """
    import io
    import queue as queue_mod

    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    store = host_store("127.0.0.1", f"{world} trainer ranks")  # bound here and kept until they end
    rendezvous = f"127.0.0.1:{store.port}"
    procs = [
        ctx.Process(target=_rank_main, args=(target, r, world, rendezvous, args, out), daemon=True)
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    try:
        for _ in range(world):
            try:
                rank, data = out.get(timeout=timeout_s)
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs) if not p.is_alive() and r not in results]
                raise ScaleRLError(
                    f"{world} trainer ranks: no answer within {timeout_s:g} s from rank(s) "
                    f"{sorted(set(range(world)) - set(results))} (dead: {dead})"
                ) from None
            status, value = torch.load(io.BytesIO(data), weights_only=False)
            if status == "error":
                raise ScaleRLError(f"trainer rank {rank} of {world} failed: {value}")
            results[rank] = value
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    return [results[r] for r in range(world)]


__all__ = [
    "FSDPRank",
    "ShardedStep",
    "load_shards",
    "spawn_ranks",
    "Policy",
    "FSDPSync",
    "shard",
    "decoder_layers",
    "check_config",
]
