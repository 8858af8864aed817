"""Transports between the generator and the trainer: scored groups one way, the trainer's one
message (`TrainerUpdate`: weights, version, retired prompts) the other, under one PipelineRL-k rule.

    protocol      `RolloutSource`, the one seam between the loop and generation; `MiniBatch`, `TrainerUpdate`
    policy        its two policies: PipelineRL-k over a stream (`Streamed`), PPO-off-policy-k (`PPOOffPolicy`)
    window        the PipelineRL-k rule (`Window`), draw order (`InOrder`), group assembly and scoring
    local         `ThreadedRollouts` (a thread), `ProcessRollouts` (a spawned process, which also evaluates)
    weights       the process transport's published weights: one buffer both processes map, its lock
    ray           `RayRollouts`: generator actors behind a hub
    ray_placement where the actors run (placement groups)

Ray is an optional dependency (`pip install 'scalerl[ray]'`); this package init imports neither
Ray nor torch. The Ray session and placement a Ray run needs are started by
scalerl.assembly.ranks."""

from scalerl.errors import ScaleRLError


def require_ray() -> None:
    """Raise a ScaleRLError naming the install command when Ray is missing."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ScaleRLError(
            "pipeline.backend 'ray' needs Ray, which is not installed: "
            "pip install 'scalerl[ray]' (or set pipeline.backend=local)"
        ) from None
