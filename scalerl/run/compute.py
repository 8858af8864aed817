"""Compute accounting: the x-axis of every scaling fit (`FIT_X`: analytic FLOPs).

Per optimizer step the meter records
- device-seconds = the step's wall-clock x the devices the run holds (paper: GPU-hours of the
  whole job). A device is a GPU, or on a CPU one core (the threads the run is given); one GPU
  shared by generator and trainer counts once; on Ray every actor's devices count
  (`split_threads` and `ray_devices` in scalerl.assembly.resources say what a run holds);
- tokens generated and trained, and the analytic FLOPs 2*N*generated + 6*N*trained
  (N = parameter count; forward = 2N per token, forward + backward = 6N). Generated tokens
  include every generation the step cost: groups the zero-variance filter dropped, batches
  skipped because nothing in them could train, groups dropped as too stale;
- their running sums, which survive a resume through `state_dict()`.

The fits of a scalerl run (its final fit, the live forecast, the study report) use `FIT_X`,
the analytic FLOPs: two runs of one config give the same x for the same tokens whatever else the
machine ran, where device-hours stretch with the load (docs/study.md measured both).
Device-hours stay logged, and `scalerl fit --x compute/device_hours` fits them.

Departures from the paper:
1. The paper's x-axis is GPU-hours; scalerl's fits use FLOPs (above).
2. The paper's x-axis is GPU-hours of the whole RL job; here `compute/device_hours` counts the
   training steps only: start-up (model build, the generator process's start), evaluation and
   checkpointing are logged as times, not compute, so a run's curve does not depend on how
   often it is evaluated or resumed.
"""

from __future__ import annotations

from dataclasses import dataclass

FIT_X = "compute/flops"  # the x axis of every fit of a scalerl run: independent of the machine's load
FIT_X_LABEL = "compute (FLOPs)"


@dataclass
class StepCompute:
    wall_seconds: float  # wall-clock of the step (generation and training, whatever overlapped)
    devices: float  # devices the run holds meanwhile
    tokens_generated: int  # every token generated for the step (trained or not)
    tokens_trained: int


class ComputeMeter:
    def __init__(self, n_params: int):
        self.n_params = n_params
        self.device_seconds = 0.0
        self.tokens_generated = 0
        self.tokens_trained = 0
        self.flops = 0.0

    def add_generated(self, tokens: int) -> None:
        """Generation that produced no step (a batch skipped whole): its FLOPs count now; its
        wall-clock is part of the next step's."""
        self.tokens_generated += tokens
        self.flops += 2.0 * self.n_params * tokens

    def add(self, s: StepCompute) -> dict[str, float]:
        """Add one step; return its metrics row fragment (per-step values and running sums)."""
        device_s = s.wall_seconds * s.devices
        self.device_seconds += device_s
        self.add_generated(s.tokens_generated)
        self.tokens_trained += s.tokens_trained
        self.flops += 6.0 * self.n_params * s.tokens_trained
        return {
            "compute/step_device_seconds": device_s,
            "compute/devices": s.devices,
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
        return {k: getattr(self, k) for k in ("device_seconds", "tokens_generated", "tokens_trained", "flops")}

    def load_state_dict(self, d: dict[str, float]) -> None:
        for k in ("device_seconds", "tokens_generated", "tokens_trained", "flops"):
            if k in d:
                setattr(self, k, d[k])
