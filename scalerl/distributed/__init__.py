"""Scale-out on Ray: generator actors (`rollouts`), data-parallel trainer ranks (`data_parallel`),
and the `pipeline.backend: ray` mode that ties them into the training loop (`backend`).

Ray is an optional dependency (`pip install 'scalerl[ray]'`)."""

from scalerl.errors import ScaleRLError


def require_ray() -> None:
    """Raise a ScaleRLError naming the install command when Ray is missing."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ScaleRLError("pipeline.backend 'ray' needs Ray, which is not installed: "
                           "pip install 'scalerl[ray]' (or set pipeline.backend=local)") from None
