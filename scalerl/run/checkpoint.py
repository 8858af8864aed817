"""Checkpoints: written atomically (temp dir + rename), checksummed, the last good ones kept.

Layout of `<run_dir>/checkpoints/step_000025/`:
    model.safetensors   trainer weights (safetensors; tied weights stored once)
    optimizer.pt        AdamW + lr-scheduler state (torch.save)
    rng.pt              python / numpy / torch RNG states
    state.json          step (= policy version), compute counters, curriculum, prompt-sampler state,
                        byte length of metrics.jsonl at this step, generator seed
    adapter.safetensors a LoRA run's adapters (model.lora): what resume loads, over the base model;
                        model.safetensors then holds the merged weights (base names), what
                        `scalerl export` and a run started from this one read
    dcp/                `trainer.strategy: fsdp` only: the ranks' shards of the weights, AdamW's
                        state and the lr schedule (torch.distributed.checkpoint, each rank writes
                        its part; loadable by any number of ranks, or by one process); what a
                        resume loads the optimizer from (optimizer.pt is then the unused driver's);
                        model.safetensors holds the same weights, gathered, for `scalerl export`
    checksums.json      sha256 of the files above, written last

A checkpoint directory only ever appears complete: it is written under `.tmp-step_N` and
renamed, so after a `kill -9` or a full disk at any moment no partial `step_*` directory
exists (a full disk removes the temp folder and stops the run with one line). On resume
each file is checked against `checksums.json` and loaded; a damaged checkpoint (truncated,
garbled, missing a file) is named, moved aside to `damaged-step_N`, and the next older one
is used. Checkpoints written before `checksums.json` existed are checked by loading alone.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from scalerl.errors import ScaleRLError
from scalerl.lora import adapter_state_dict, has_lora, load_adapters, merged_state_dict, unique_storage
from scalerl.run.rundir import CHECKPOINT_DIR, checkpoints

CHECKSUMS = "checksums.json"
FILES = ("model.safetensors", "optimizer.pt", "rng.pt", "state.json")
ADAPTER_FILE = "adapter.safetensors"  # LoRA runs only
KEEP = 2


@dataclass
class TrainState:
    """Everything besides tensors that a resumed run needs to carry on where it stopped."""

    step: int = 0  # optimizer steps done (== trainer policy version)
    compute: dict[str, float] = field(default_factory=dict)  # ComputeMeter.state_dict()
    curriculum: dict[str, Any] = field(default_factory=dict)  # NoPositiveResampling.state_dict()
    sampler: dict[str, int] = field(default_factory=dict)  # CurriculumSampler.state_dict()
    metrics_offset: int = 0  # byte length of metrics.jsonl when saved
    counters: dict[str, int] = field(default_factory=dict)  # skipped/dropped/stale totals


class DamagedCheckpoint(ScaleRLError):
    """A checkpoint file that is missing, truncated or garbled; `file` names it."""

    def __init__(self, file: Path, problem: str):
        super().__init__(f"{file}: {problem}")
        self.file = Path(file)
        self.problem = problem


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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


SHARDS = "dcp"  # the sharded state's folder in a checkpoint (trainer.strategy fsdp)


def _write_files(
    tmp: Path,
    model: torch.nn.Module,
    optimizer_state: dict,
    state: TrainState,
    shards: Callable[[Path], None] | None = None,
) -> None:
    files = FILES
    if shards is not None:  # every rank writes its part first; each file then checksummed like the others
        shards(tmp / SHARDS)
        files = (*files, *sorted(str(f.relative_to(tmp)) for f in (tmp / SHARDS).rglob("*") if f.is_file()))
    if has_lora(model):
        save_file(unique_storage(merged_state_dict(model)), str(tmp / "model.safetensors"))
        save_file(adapter_state_dict(model), str(tmp / ADAPTER_FILE))
        files = (*files, ADAPTER_FILE)
    else:
        save_model(model, str(tmp / "model.safetensors"))
    torch.save(optimizer_state, tmp / "optimizer.pt")
    torch.save(_rng_state(), tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps(state.__dict__, indent=1))
    for name in files:
        with open(tmp / name, "rb") as fh:
            os.fsync(fh.fileno())
    sums = {name: _sha256(tmp / name) for name in files}
    with open(tmp / CHECKSUMS, "w") as fh:
        fh.write(json.dumps(sums, indent=1))
        fh.flush()
        os.fsync(fh.fileno())


def save_checkpoint(
    run_dir: Path,
    model: torch.nn.Module,
    optimizer_state: dict,
    state: TrainState,
    shards: Callable[[Path], None] | None = None,
) -> Path:
    """Write checkpoint `step_<state.step>` atomically; prune all but the newest KEEP. `shards(folder)`:
    the FSDP ranks write their parts of the weights and optimizer state to `dcp/` (every rank at once).

    A failure to write (a full disk, a quota) removes the temp folder and raises a one-line
    ScaleRLError: the newest complete checkpoint is still the one a resume picks.
    """
    root = Path(run_dir) / CHECKPOINT_DIR
    final = root / f"step_{state.step:06d}"
    tmp = root / f".tmp-step_{state.step:06d}"
    try:
        root.mkdir(exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        _write_files(tmp, model, optimizer_state, state, shards)
    except (OSError, RuntimeError) as exc:  # torch.save reports a full disk as a RuntimeError
        shutil.rmtree(tmp, ignore_errors=True)
        raise ScaleRLError(_write_failure(final, exc)) from None
    old = root / f".old-step_{state.step:06d}"
    if final.exists():  # the same step saved twice (e.g. at the end of a run): swap, then drop the old one
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync_dir(root)
    shutil.rmtree(old, ignore_errors=True)
    for stale in sorted(root.glob("step_*"))[:-KEEP]:
        shutil.rmtree(stale)
    return final


def _write_failure(final: Path, exc: BaseException) -> str:
    cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT) or "unexpected pos" in str(exc):
        cause = "no space left on the device"
    newest = latest_checkpoint(final.parent.parent)
    keep = f"the newest complete checkpoint, {newest.name}, is intact" if newest else "no earlier checkpoint exists"
    return (
        f"could not write checkpoint {final} ({cause}); nothing partial was left behind and {keep}: "
        "free some space, then continue with --resume"
    )


def latest_checkpoint(run_dir: Path) -> Path | None:
    done = [p for p in checkpoints(run_dir) if (p / "state.json").exists()]
    return done[-1] if done else None


def verify_checksums(path: Path) -> None:
    sums_file = path / CHECKSUMS
    if not sums_file.exists():
        return  # written before checksums existed: loading is the check
    try:
        sums = json.loads(sums_file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedCheckpoint(sums_file, f"garbled ({exc.__class__.__name__})") from None
    listed = [n for n in sums if n == ADAPTER_FILE or n.startswith(f"{SHARDS}/")] if isinstance(sums, dict) else []
    for name in (*FILES, *listed):
        if not (path / name).is_file():
            raise DamagedCheckpoint(path / name, "missing")
        if not isinstance(sums, dict) or sums.get(name) != _sha256(path / name):
            raise DamagedCheckpoint(path / name, "checksum mismatch (truncated or garbled)")


def read_state(path: Path) -> TrainState:
    """The validated `state.json` of checkpoint `path`."""
    file = path / "state.json"
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise DamagedCheckpoint(file, "missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedCheckpoint(file, f"not valid JSON ({exc.__class__.__name__})") from None
    names = {f.name: f for f in fields(TrainState)}
    if isinstance(data, dict):
        data.pop("generator_seed", None)  # written by earlier versions, never read
        data.pop("evals", None)  # likewise: the evaluation curve is read from metrics.jsonl
    if not isinstance(data, dict) or set(data) - set(names):
        raise DamagedCheckpoint(file, f"unexpected content (expected the keys {sorted(names)})")
    for key in ("step", "metrics_offset"):
        if key in data and (not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] < 0):
            raise DamagedCheckpoint(file, f"{key} = {data[key]!r}: expected a non-negative integer")
    expected_step = int(path.name.split("_")[-1]) if path.name.split("_")[-1].isdigit() else None
    if expected_step is not None and data.get("step") != expected_step:
        raise DamagedCheckpoint(file, f"step = {data.get('step')!r} does not match the folder name {path.name}")
    return TrainState(**data)


def _torch_load(file: Path) -> Any:
    if not file.is_file():
        raise DamagedCheckpoint(file, "missing")
    try:
        return torch.load(file, weights_only=False, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means the file is damaged; it is reported
        raise DamagedCheckpoint(file, f"cannot be read ({' '.join(str(exc).split())[:120]})") from None


def load_checkpoint(path: Path, model: torch.nn.Module) -> tuple[dict, TrainState]:
    """Check and load checkpoint `path`: weights into `model` (a LoRA model: its adapters), RNG states restored.

    Returns (optimizer state, TrainState); raises DamagedCheckpoint naming the damaged file,
    before touching the RNG (the model's weights may be partly overwritten: load another).
    """
    path = Path(path)
    verify_checksums(path)
    state = read_state(path)
    rng = _torch_load(path / "rng.pt")
    if not isinstance(rng, dict) or set(rng) != {"python", "numpy", "torch"}:
        raise DamagedCheckpoint(path / "rng.pt", "unexpected content")
    optimizer_state = _torch_load(path / "optimizer.pt")
    if not isinstance(optimizer_state, dict):
        raise DamagedCheckpoint(path / "optimizer.pt", "unexpected content")
    weights = path / (ADAPTER_FILE if has_lora(model) else "model.safetensors")
    if not weights.is_file():
        raise DamagedCheckpoint(
            weights,
            "missing"
            if weights.name != ADAPTER_FILE
            else "missing (a LoRA run's checkpoint holds its adapters; was model.lora changed?)",
        )
    try:
        if has_lora(model):  # the base weights are the run's model.name, frozen: only the adapters trained
            load_adapters(model, load_file(str(weights), device=str(next(model.parameters()).device)))
        else:
            load_model(model, str(weights))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types; reported with the file
        raise DamagedCheckpoint(weights, f"cannot be loaded ({' '.join(str(exc).split())[:120]})") from None
    _set_rng_state(rng)
    return optimizer_state, state


def set_aside(path: Path) -> Path:
    """Move a damaged checkpoint to `damaged-step_N` (kept for inspection, never picked again)."""
    target = path.with_name(f"damaged-{path.name}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"damaged-{path.name}.{n}")
    os.rename(path, target)
    return target


def remove_partial(run_dir: Path) -> None:
    """Clear what a `kill -9` mid-save left: `.tmp-step_*` folders (never complete checkpoints) and
    `.old-step_*` ones (a replaced checkpoint, restored if its replacement never landed)."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return
    for old in root.glob(".old-step_*"):  # killed between the two renames of a re-save: put it back
        final = root / old.name.removeprefix(".old-")
        if not final.exists():
            os.rename(old, final)
    for p in [*root.glob(".tmp-step_*"), *root.glob(".old-step_*")]:
        shutil.rmtree(p, ignore_errors=True)
