"""Where generator and trainer run: `pipeline` (the off-policy mode, its staleness bound, the transport),
`ray` (actors, resources, how weights reach them) and `trainer` (single, ddp or fsdp ranks)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from scalerl.config.base import _Section


class PipelineConfig(_Section):
    mode: Literal["pipeline_rl", "ppo_off_policy"] = Field(
        "pipeline_rl", description="PipelineRL-k streaming or PPO-off-policy-k (paper 3.1)"
    )
    k: int = Field(8, ge=1, description="max staleness (PipelineRL) / optimizer steps per batch (PPO-off-policy)")
    max_kl: float | None = Field(
        0.01,
        gt=0,
        description="PipelineRL: the staleness bound follows the policy's change: draws started on a "
        "version may be as stale as keeps the estimated per-token KL(behaviour || trainer) of their tokens within "
        "this (between 1 and k; scalerl/rl/staleness.py); none: every draw may be k steps stale (the paper's rule)",
    )
    transport: Literal["auto", "process", "thread"] = Field(
        "auto", description="PipelineRL generator in its own process or a thread (auto: process on a multi-core CPU)"
    )
    backend: Literal["local", "ray"] = Field(
        "local", description="local: generator + trainer on this machine (see transport); ray: actors (see `ray`)"
    )


class RayConfig(_Section):
    address: str | None = Field(None, description="Ray cluster address ('auto', 'HOST:6379'); none: start a local Ray")
    generators: int = Field(
        2, ge=1, description="generator actors (each a full engine; prompts are sharded between them)"
    )
    trainers: int = Field(
        1, ge=1, description="data-parallel trainer workers (torch.distributed; rank 0 is the driver)"
    )
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a locally started Ray (default: all cores)")
    generator_cpus: float = Field(1.0, ge=0, description="CPUs reserved per generator actor (also its torch threads)")
    generator_gpus: float = Field(0.0, ge=0, description="GPUs per generator actor (0 on a CPU cluster)")
    trainer_cpus: float = Field(1.0, ge=0, description="CPUs reserved per trainer worker actor (ranks 1..W-1)")
    trainer_gpus: float = Field(0.0, ge=0, description="GPUs per trainer worker actor")
    generator_resources: dict[str, float] = Field(
        default_factory=dict,
        description="custom Ray resources each generator actor asks for (a node started with "
        "`ray start --resources '{\"gen_node\": 4}'` then holds the generators: {gen_node: 1})",
    )
    trainer_resources: dict[str, float] = Field(
        default_factory=dict, description="custom Ray resources each trainer rank actor asks for ({train_node: 1})"
    )
    max_restarts: int = Field(3, ge=0, description="restarts of a generator actor that dies before the run fails")
    placement: Literal["none", "pack", "spread"] = Field(
        "none", description="none: per-actor resource requests; pack/spread: one placement group for all actors"
    )
    publish: Literal["object_store", "broadcast"] = Field(
        "object_store",
        description="how new weights reach the generator actors: object_store (one ray.put per "
        "version, each actor copies it), broadcast (torch.distributed broadcast from the trainer process to the "
        "actors over a group of their own, bucket by bucket: gloo on CPU, nccl on CUDA; formed again after an "
        "actor's restart)",
    )
    publish_bucket_mb: float = Field(64.0, gt=0, description="ray.publish broadcast: MiB per broadcast bucket")
    publish_timeout_s: float = Field(
        300.0,
        gt=0,
        description="ray.publish broadcast: seconds to form the group, "
        "for each bucket's broadcast and for a dead actor's restart before the run fails",
    )


class TrainerConfig(_Section):
    strategy: Literal["auto", "single", "ddp", "fsdp"] = Field(
        "auto",
        description="how the optimizer step runs over `ray.trainers` ranks: single (one process), ddp (a full "
        "copy of the model, its gradients and AdamW state on every rank, gradients all-reduced), fsdp (FSDP2: each "
        "of those sharded over the ranks, every rank a Ray actor, docs/scale-out.md); auto: single for one "
        "trainer, ddp for more",
    )

    def resolved(self, trainers: int) -> str:
        """The strategy that runs with `trainers` ranks (auto resolved)."""
        if self.strategy == "auto":
            return "single" if trainers == 1 else "ddp"
        return self.strategy

    def actors(self, trainers: int) -> int:
        """Trainer rank actors: every rank under fsdp; ranks 1..W-1 otherwise (rank 0 is the driver)."""
        return trainers if self.resolved(trainers) == "fsdp" else trainers - 1
