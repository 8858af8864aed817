"""Resuming a run: pick the newest intact checkpoint and check the metrics it vouches for.

Every file a resume reads is validated before any training (`restore_checkpoint`):
1. each checkpoint, newest first, is checked (checksums, state.json, RNG, optimizer, weights);
   a damaged one is named, moved aside to `checkpoints/damaged-step_N`, and the next older one
   is tried; the run says which it resumed from;
2. `metrics.jsonl` up to the byte offset that checkpoint recorded must be whole rows, else the
   run stops with the file and the line number;
3. no intact checkpoint while the run has trained steps (or had checkpoints) is an error that
   points to `--restart`; a run stopped before its first checkpoint starts from step 0, saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from scalerl.errors import ScaleRLError
from scalerl.run.checkpoint import (
    DamagedCheckpoint,
    TrainState,
    load_checkpoint,
    read_state,
    remove_partial,
    set_aside,
    verify_checksums,
)
from scalerl.run.metrics import METRICS_FILE, check_metrics
from scalerl.run.rundir import checkpoints

RESTART = "--restart starts the run over under its config.yaml (what it wrote moves to previous-N/)"


def newest_step(run_dir: Path) -> int:
    """The step of the newest checkpoint that passes its checksums (0 if none): where a resume would start.

    Also checks metrics.jsonl against it, so a damaged file stops the resume before anything is written.
    """
    for path in reversed(checkpoints(run_dir)):
        try:
            verify_checksums(path)
            state = read_state(path)
        except DamagedCheckpoint:
            continue
        check_metrics(run_dir, state.metrics_offset, f"checkpoint {path.name}")
        return state.step
    return 0


def _trained_steps(run_dir: Path) -> bool:
    """Whether metrics.jsonl holds a train row (so the run once had checkpoints)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return any(b'"kind": "train"' in line for line in f)


def restore_checkpoint(
    run_dir: Path, model: torch.nn.Module, log: Callable[[str], None] = print
) -> tuple[dict, TrainState, Path] | None:
    """Load the newest intact checkpoint into `model`: (optimizer state, TrainState, its path), or None.

    None means the run has not reached its first checkpoint (it starts from step 0).
    Damaged checkpoints are reported through `log` and set aside; metrics.jsonl is checked
    against the chosen one. Raises ScaleRLError when nothing intact can be resumed.
    """
    run_dir = Path(run_dir)
    remove_partial(run_dir)
    damaged: list[str] = []
    for path in reversed(checkpoints(run_dir)):
        try:
            opt_state, state = load_checkpoint(path, model)
        except DamagedCheckpoint as exc:
            moved = set_aside(path)
            damaged.append(f"{path.name} ({exc.file.name}: {exc.problem})")
            log(
                f"resume: checkpoint {path} is damaged ({exc.file.name}: {exc.problem}); moved it to "
                f"{moved.name} and trying the next older one"
            )
            continue
        check_metrics(run_dir, state.metrics_offset, f"checkpoint {path.name}")
        note = f" (newer, damaged: {', '.join(damaged)})" if damaged else ""
        log(f"resume: continuing from checkpoint {path.name}, step {state.step}{note}")
        return opt_state, state, path
    if damaged:
        raise ScaleRLError(f"no intact checkpoint in {run_dir / 'checkpoints'}: {'; '.join(damaged)}; {RESTART}")
    if _trained_steps(run_dir):
        raise ScaleRLError(
            f"{run_dir / METRICS_FILE} has trained steps but {run_dir / 'checkpoints'} holds no "
            f"checkpoint (deleted?): the run cannot continue where it stopped; {RESTART}"
        )
    log(f"resume: {run_dir} has no checkpoint yet (stopped during start-up): starting from step 0")
    return None
