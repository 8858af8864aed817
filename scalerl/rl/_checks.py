"""Input checks shared by the RL functions: one ScaleRLError naming the argument and value."""

from __future__ import annotations

import torch

from scalerl.errors import ScaleRLError


def check_shape(name: str, x: torch.Tensor, shape: tuple[int, ...]) -> None:
    if tuple(x.shape) != tuple(shape):
        raise ScaleRLError(f"{name}: expected shape {tuple(shape)}, got {tuple(x.shape)}")


def check_ndim(name: str, x: torch.Tensor, ndim: int) -> None:
    if x.dim() != ndim:
        raise ScaleRLError(f"{name}: expected a {ndim}-d tensor, got shape {tuple(x.shape)}")


def check_finite(name: str, x: torch.Tensor, where: torch.Tensor | None = None) -> None:
    """Raise on the first NaN/inf of `x` (only at positions where `where` is true)."""
    bad = ~torch.isfinite(x)
    if where is not None:
        bad = bad & where
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise ScaleRLError(f"{name}: non-finite value {x[index].item()} at index {index}")
