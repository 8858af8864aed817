"""Opening a run directory for `scalerl train`: resolve the config, lock, create or reopen.

`open_run(...)` is a context manager over one run:
- a new run: the config is resolved and checked (device included) before anything is
  written; the directory is made, locked, and given its config.yaml; if the start fails before
  a metrics row or a checkpoint is recorded, what it created is removed again;
- `--resume`: the recorded config.yaml is read whole (an empty or invalid one is refused);
  `--max-steps` / `--set` changes are printed field by field and recorded; a `--max-steps`
  below the steps already done is refused; a run whose checkpoints folder is gone is refused;
- `--restart`: the run starts over from step 0 under its recorded config, what it wrote moved
  to `previous-N/`.
The lock (scalerl.run.lock) is held until the context exits.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from scalerl.errors import ScaleRLError
from scalerl.run.lock import RunLock
from scalerl.run.rundir import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    default_run_dir,
    discard_failed_start,
    has_rows,
    prepare_dir,
    read_run_config,
    set_aside_outputs,
    write_config,
)
from scalerl.scaling.readers import flatten


@dataclass
class Run:
    path: Path
    cfg: object  # scalerl.config.Config
    resume: bool  # continue from a checkpoint (False: a fresh start, or --restart)


def config_changes(old: dict, new: dict) -> list[str]:
    """`key: old -> new` for every field that differs between two config dumps."""
    a, b = flatten(old, "."), flatten(new, ".")
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def new_config(recipe: str | None, config_file: str | None, overrides: list[str], max_steps: int | None):
    from scalerl.configure import load_config

    cfg = load_config(recipe=recipe, config_file=config_file, overrides=tuple(overrides))
    if max_steps is not None:
        cfg.run.max_steps = _check_max_steps(max_steps)
    return cfg


def _check_max_steps(max_steps: int) -> int:
    if max_steps < 1:
        raise ScaleRLError(f"--max-steps {max_steps}: expected a positive number of steps")
    return max_steps


def resumed_config(run_dir: Path, overrides: list[str], max_steps: int | None, log: Callable[[str], None]):
    """The run's recorded config with `--set` / `--max-steps` applied; changes printed and recorded."""
    from scalerl.config import Config, dump_config
    from scalerl.configure import load_config
    from scalerl.run.resume import newest_step

    recorded = read_run_config(run_dir)
    cfg = load_config(recipe=None, config_file=Path(run_dir) / CONFIG_FILE, overrides=tuple(overrides))
    if max_steps is not None:
        cfg.run.max_steps = _check_max_steps(max_steps)
    done = newest_step(run_dir)
    if cfg.run.max_steps < done:
        raise ScaleRLError(
            f"run.max_steps {cfg.run.max_steps}: the run in {run_dir} has already done {done} steps "
            f"(its config: run.max_steps={recorded['run'].get('max_steps')}); pass a --max-steps of "
            f"at least {done} to continue it (config.yaml left as it was)"
        )
    recorded_cfg = Config.model_validate(recorded).model_dump(mode="json")
    changes = config_changes(recorded_cfg, cfg.model_dump(mode="json"))
    if changes:
        write_config(run_dir, dump_config(cfg))
        log(f"resume: config changed ({'; '.join(changes)}); recorded in {Path(run_dir) / CONFIG_FILE}")
    return cfg


def _check_device(cfg) -> None:
    from scalerl.models import resolve_device

    resolve_device(cfg.model.device)


@contextlib.contextmanager
def open_run(
    recipe: str | None = None,
    config_file: str | None = None,
    overrides: list[str] = (),
    run_dir: str | Path | None = None,
    max_steps: int | None = None,
    resume: bool = False,
    restart: bool = False,
    log: Callable[[str], None] = print,
) -> Iterator[Run]:
    """The run directory of one `scalerl train`, locked for the life of the `with` block."""
    if resume or restart:
        with _reopen(config_file, list(overrides), run_dir, max_steps, restart, log) as run:
            yield run
        return
    cfg = new_config(recipe, config_file, list(overrides), max_steps)
    _check_device(cfg)
    path = Path(run_dir) if run_dir else default_run_dir(cfg.recipe)
    made_dir = not path.exists()
    prepare_dir(path)
    with RunLock(path):
        prepare_dir(path)  # again under the lock: another start may have won the race
        try:
            from scalerl.config import dump_config

            write_config(path, dump_config(cfg))
            (path / CHECKPOINT_DIR).mkdir(exist_ok=True)
            yield Run(path, cfg, resume=False)
        except BaseException:
            discard_failed_start(path, made_dir)
            raise


@contextlib.contextmanager
def _reopen(config_file, overrides, run_dir, max_steps, restart, log) -> Iterator[Run]:
    flag = "--restart" if restart else "--resume"
    if run_dir is None:
        raise ScaleRLError(f"{flag} needs --run-dir DIR (the run to continue)")
    if config_file is not None:
        raise ScaleRLError(
            f"{flag} continues the run with its own config.yaml; drop --config "
            "(use --set KEY=VALUE or --max-steps to change a field)"
        )
    path = Path(run_dir)
    if not (path / CONFIG_FILE).is_file():
        what = "start over" if restart else "continue"
        raise ScaleRLError(
            f"{flag} {path}: no {CONFIG_FILE} there, so no run to {what}; drop {flag} to start a new "
            "run in that directory"
        )
    read_run_config(path)  # refused before anything else if empty or invalid
    with RunLock(path) as lock:
        note = lock.took_over()
        if note:
            log(note)
        if restart:
            aside = set_aside_outputs(path)
            log("restart: starting over from step 0" + (f"; what the run wrote is kept in {aside}" if aside else ""))
        elif not (path / CHECKPOINT_DIR).is_dir() and has_rows(path):
            raise ScaleRLError(
                f"cannot resume {path}: its {CHECKPOINT_DIR}/ folder is missing but metrics.jsonl has "
                "rows, so it cannot continue where it stopped; pass --restart to start it over from "
                "step 0 under its config.yaml (what it wrote is kept in previous-N/)"
            )
        cfg = resumed_config(path, overrides, max_steps, log)
        _check_device(cfg)
        yield Run(path, cfg, resume=not restart)
