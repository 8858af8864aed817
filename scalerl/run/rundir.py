"""The run directory: created once, never overwritten; reopened only with `--resume`.

    <run_dir>/config.yaml          the resolved config (every field, after presets and --set)
    <run_dir>/metrics.jsonl        one row per step / evaluation (see metrics.py)
    <run_dir>/tb/                  TensorBoard event files
    <run_dir>/checkpoints/step_N/  the last good checkpoints (see checkpoint.py)
    <run_dir>/fit.json, fit.png    the sigmoid fitted to the validation curve at the end
    <run_dir>/.lock                the PID of the process writing the run (see lock.py)
    <run_dir>/previous-N/          what a run had written before `--restart` started it over

`config.yaml` is written atomically (temp file + rename) and only ever read back whole: an
empty, unreadable or incomplete one is refused, never replaced by defaults. A start that
fails before it records anything (no metrics row, no checkpoint) removes what it created,
so the corrected command can use the same `--run-dir`.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from scalerl.errors import ScaleRLError
from scalerl.run.lock import LOCK_FILE
from scalerl.run.metrics import METRICS_FILE, ROLLED_BACK_FILE

CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"
OUTPUTS = (CHECKPOINT_DIR, METRICS_FILE, ROLLED_BACK_FILE, "tb", "fit.json", "fit.png")  # what --restart sets aside


def default_run_dir(recipe: str) -> Path:
    return Path("runs") / f"{recipe}-{time.strftime('%Y%m%d-%H%M%S')}"


def _mkdir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScaleRLError(f"cannot create run directory {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ScaleRLError(f"cannot write to run directory {path}: permission denied")


def prepare_dir(path: Path) -> Path:
    """Make `path` (and its parents) for a new run; a directory that holds anything but a lock is refused."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ScaleRLError(f"--run-dir {path} is a file, not a directory")
    if path.is_dir() and any(p.name != LOCK_FILE for p in path.iterdir()):
        raise ScaleRLError(
            f"run directory {path} already exists; pass --resume to continue it, "
            "or choose another --run-dir (a run is never overwritten)"
        )
    _mkdir(path)
    return path


def write_config(path: Path, config_yaml: str) -> None:
    """Write `<path>/config.yaml` atomically: a reader sees the old file or the new one, never a part."""
    final, tmp = Path(path) / CONFIG_FILE, Path(path) / f".{CONFIG_FILE}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(config_yaml)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ScaleRLError(f"cannot write {final}: {exc.strerror}") from None


def create_run_dir(path: Path, config_yaml: str) -> Path:
    """Make a fresh run directory and write the resolved config (and an empty checkpoints/) into it."""
    path = prepare_dir(path)
    write_config(path, config_yaml)
    (path / CHECKPOINT_DIR).mkdir(exist_ok=True)
    return path


def open_run_dir(path: Path) -> Path:
    """An existing run directory to resume; its config.yaml must be there, whole (see `read_run_config`)."""
    read_run_config(path)
    return Path(path)


def read_run_config(path: Path) -> dict:
    """The recorded config of run `path` as a mapping; refused if missing, empty, unreadable or incomplete."""
    import yaml

    from scalerl.config import Config

    file = Path(path) / CONFIG_FILE
    keep = "it is never rewritten from defaults: restore it, or start a new run in another --run-dir"
    if not file.is_file():
        raise ScaleRLError(f"cannot resume {path}: no {CONFIG_FILE} there (not a scalerl run directory)")
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScaleRLError(f"{file}: not UTF-8 text (byte {exc.start}); {keep}") from None
    if not text.strip():
        raise ScaleRLError(f"{file} is empty: the run's config is lost; {keep}")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScaleRLError(f"{file}: not valid YAML ({' '.join(str(exc).split())}); {keep}") from None
    if not isinstance(data, dict):
        raise ScaleRLError(f"{file}: expected a mapping of config keys, got {type(data).__name__}; {keep}")
    missing = [k for k in Config.model_fields if k not in data]
    if missing:
        raise ScaleRLError(
            f"{file}: incomplete, the sections {', '.join(missing)} are missing (a resolved config "
            f"has them all); {keep}"
        )
    return data


def checkpoints(run_dir: Path) -> list[Path]:
    """Every `step_*` checkpoint directory, oldest first."""
    root = Path(run_dir) / CHECKPOINT_DIR
    return sorted(p for p in root.glob("step_*") if p.is_dir()) if root.is_dir() else []


def has_rows(path: Path) -> bool:
    metrics = Path(path) / METRICS_FILE
    return metrics.is_file() and metrics.stat().st_size > 0


def set_aside_outputs(path: Path) -> Path | None:
    """`--restart`: move checkpoints, metrics, TensorBoard and fit files to `previous-N/` (nothing is deleted)."""
    present = [Path(path) / name for name in OUTPUTS if (Path(path) / name).exists()]
    if not present:
        return None
    n = 1
    while (Path(path) / f"previous-{n}").exists():
        n += 1
    target = Path(path) / f"previous-{n}"
    target.mkdir()
    for item in present:
        os.rename(item, target / item.name)
    (Path(path) / CHECKPOINT_DIR).mkdir()
    return target


def discard_failed_start(path: Path, made_dir: bool) -> None:
    """Remove what a new run created if it failed before recording a metrics row or a checkpoint."""
    path = Path(path)
    if has_rows(path) or checkpoints(path):
        return
    for name in (CONFIG_FILE, METRICS_FILE, "tb", CHECKPOINT_DIR):
        item = path / name
        if item.is_dir():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)
    if made_dir and [p.name for p in path.iterdir()] in ([], [LOCK_FILE]):
        shutil.rmtree(path, ignore_errors=True)
