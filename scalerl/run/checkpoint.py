"""Checkpoints: written atomically (temp dir + rename), the last good ones kept.

Layout of `<run_dir>/checkpoints/step_000025/`:
    model.safetensors   trainer weights (safetensors; tied weights stored once)
    optimizer.pt        AdamW + lr-scheduler state (torch.save)
    rng.pt              python / numpy / torch RNG states
    state.json          step (= policy version), compute counters, curriculum, prompt-sampler state,
                        byte length of metrics.jsonl at this step, generator seed

A checkpoint directory only ever appears complete: it is written under `.tmp-step_N` and
renamed, so after a `kill -9` at any moment the newest `step_*` directory is a good one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model

CHECKPOINT_DIR = "checkpoints"
KEEP = 2


@dataclass
class TrainState:
    """Everything besides tensors that a resumed run needs to carry on where it stopped."""

    step: int = 0                         # optimizer steps done (== trainer policy version)
    compute: dict[str, float] = field(default_factory=dict)   # ComputeMeter.state_dict()
    curriculum: dict[str, Any] = field(default_factory=dict)  # NoPositiveResampling.state_dict()
    sampler: dict[str, int] = field(default_factory=dict)     # CurriculumSampler.state_dict()
    metrics_offset: int = 0               # byte length of metrics.jsonl when saved
    generator_seed: int = 0               # seed the generator is (re)built with
    counters: dict[str, int] = field(default_factory=dict)    # skipped/dropped/stale totals
    evals: list[list[float]] = field(default_factory=list)    # (compute, pass rate) so far


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(run_dir: Path, model: torch.nn.Module, optimizer_state: dict, state: TrainState) -> Path:
    """Write checkpoint `step_<state.step>` atomically; prune all but the newest KEEP."""
    root = Path(run_dir) / CHECKPOINT_DIR
    root.mkdir(exist_ok=True)
    final = root / f"step_{state.step:06d}"
    tmp = root / f".tmp-step_{state.step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    torch.save(optimizer_state, tmp / "optimizer.pt")
    torch.save(_rng_state(), tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps(state.__dict__, indent=1))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():  # the same step saved twice (e.g. at the end of a run): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    for old in sorted(root.glob("step_*"))[:-KEEP]:
        shutil.rmtree(old)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    root = Path(run_dir) / CHECKPOINT_DIR
    done = sorted(p for p in root.glob("step_*") if (p / "state.json").exists()) if root.exists() else []
    return done[-1] if done else None


def load_checkpoint(path: Path, model: torch.nn.Module) -> tuple[dict, TrainState]:
    """Load weights into `model`, restore RNG states; return (optimizer state, TrainState)."""
    load_model(model, str(path / "model.safetensors"))
    _set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    optimizer_state = torch.load(path / "optimizer.pt", weights_only=False)
    state = TrainState(**json.loads((path / "state.json").read_text()))
    return optimizer_state, state
