"""The run directory: created once, never overwritten; reopened only with `--resume`.

    <run_dir>/config.yaml          the resolved config (every field, after presets and --set)
    <run_dir>/metrics.jsonl        one row per step / evaluation (see metrics.py)
    <run_dir>/tb/                  TensorBoard event files
    <run_dir>/checkpoints/step_N/  the last good checkpoints (see checkpoint.py)
    <run_dir>/fit.json, fit.png    the sigmoid fitted to the validation curve at the end
"""

from __future__ import annotations

import time
from pathlib import Path

from scalerl.errors import ScaleRLError

CONFIG_FILE = "config.yaml"


def default_run_dir(recipe: str) -> Path:
    return Path("runs") / f"{recipe}-{time.strftime('%Y%m%d-%H%M%S')}"


def create_run_dir(path: Path, config_yaml: str) -> Path:
    """Make a fresh run directory and write the resolved config into it."""
    path = Path(path)
    if path.exists() and any(path.iterdir()):
        raise ScaleRLError(
            f"run directory {path} already exists; pass --resume to continue it, "
            "or choose another --run-dir (a run is never overwritten)")
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG_FILE).write_text(config_yaml)
    return path


def open_run_dir(path: Path) -> Path:
    """An existing run directory to resume; its config.yaml is the run's config."""
    path = Path(path)
    if not (path / CONFIG_FILE).exists():
        raise ScaleRLError(f"cannot resume {path}: no {CONFIG_FILE} there (not a scalerl run directory)")
    return path
