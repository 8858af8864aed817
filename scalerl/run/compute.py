"""Compute accounting: the x-axis of every scaling fit.

Per optimizer step the meter records
- device-seconds of generation and of training = wall-clock of the stage x devices it holds
  (a CPU "device" is one core: the threads a stage is given; a GPU is one device);
- tokens generated and trained, and the analytic FLOPs 2*N*generated + 6*N*trained
  (N = parameter count; forward = 2N per token, forward + backward = 6N);
- their running sums, which survive a resume through `state_dict()`.

Departures from the paper:
1. The paper's x-axis is GPU-hours of the whole RL job; here `compute/device_hours` counts the
   generation and training stages only (evaluation and checkpointing are logged as times, not
   compute), so a run's curve does not depend on how often it is evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StepCompute:
    gen_seconds: float        # wall-clock the generator devices were held for this step
    train_seconds: float      # wall-clock the trainer devices were held for this step
    gen_devices: float
    train_devices: float
    tokens_generated: int
    tokens_trained: int


class ComputeMeter:
    def __init__(self, n_params: int):
        self.n_params = n_params
        self.device_seconds = 0.0
        self.gen_device_seconds = 0.0
        self.train_device_seconds = 0.0
        self.tokens_generated = 0
        self.tokens_trained = 0
        self.flops = 0.0

    def add(self, s: StepCompute) -> dict[str, float]:
        """Add one step; return its metrics row fragment (per-step values and running sums)."""
        gen_ds = s.gen_seconds * s.gen_devices
        train_ds = s.train_seconds * s.train_devices
        flops = 2.0 * self.n_params * s.tokens_generated + 6.0 * self.n_params * s.tokens_trained
        self.gen_device_seconds += gen_ds
        self.train_device_seconds += train_ds
        self.device_seconds += gen_ds + train_ds
        self.tokens_generated += s.tokens_generated
        self.tokens_trained += s.tokens_trained
        self.flops += flops
        return {
            "compute/gen_device_seconds": gen_ds,
            "compute/train_device_seconds": train_ds,
            "compute/device_hours": self.device_seconds / 3600.0,
            "compute/flops": self.flops,
            "compute/tokens_generated": self.tokens_generated,
            "compute/tokens_trained": self.tokens_trained,
            "tokens/generated": s.tokens_generated,
            "tokens/trained": s.tokens_trained,
        }

    def totals(self) -> dict[str, float]:
        return {"compute/device_hours": self.device_seconds / 3600.0, "compute/flops": self.flops}

    def state_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in (
            "device_seconds", "gen_device_seconds", "train_device_seconds",
            "tokens_generated", "tokens_trained", "flops")}

    def load_state_dict(self, d: dict[str, float]) -> None:
        for k, v in d.items():
            setattr(self, k, v)
