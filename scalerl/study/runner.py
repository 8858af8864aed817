"""Run a study: every (configuration, seed) in its own run directory, resumable.

    <study_dir>/study.json                     the plan: variants, seeds, budget, overrides
    <study_dir>/runs/<config>/seed<k>/         a `scalerl train` run directory (config.yaml,
                                               metrics.jsonl, checkpoints/, tb/)
    <study_dir>/runs/<config>/seed<k>/done.json  written when the run reached its budget
    <study_dir>/runs/<config>/seed<k>/failed.json  the error that stopped it (retried next time)

With a results folder (`scalerl ablate --results DIR`, meant to be committed) every finished
run is also kept there in small form, and a run found there is not trained again:

    <results>/<config>/seed<k>/{config.yaml, done.json, metrics.jsonl}   (evaluation rows and the
                                                                          last training row only)
    <results>/<config>/seed<k>/activity.json   what says whether a swapped component acted, over
                                               every training step (scalerl.study.activity)

A run with `done.json` is never redone; a run directory without it was interrupted and is
continued from its last checkpoint, exactly as `scalerl train --resume --run-dir DIR` does
(`scalerl.loop.train(..., resume=True)`). A run whose planned config differs from
the one in its directory (other `--set` or budget this time) is an error, not a silent mix.
Each run holds its directory's lock (scalerl.run.lock) while it trains: a second `ablate`
(or a `train --resume`) on the same run is refused with the holder's PID, and that refusal
stops the study rather than being recorded as the run's failure.
A run that stops with a training error (`ScaleRLError`: a non-finite loss, no group with
reward variance for 50 batches, ...) is recorded in `failed.json` and reported; the study goes
on with the other runs and the command exits non-zero at the end.

`jobs` > 1 trains that many runs at once, each in its own spawned process pinned to its own
share of the cores (os.sched_setaffinity: a run splits what it is given between its generator
and trainer as a lone run does), on one GPU too: a small model leaves most of one idle.
Runs are still handed out seed-major. Compute is counted per run (FLOPs, and device-hours
from that run's wall-clock and devices), so runs in parallel do not change each other's x axis
in FLOPs; their device-hours stretch as on any loaded machine.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from scalerl.config import Config, dump_config
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.run.lock import RunDirInUse
from scalerl.study.activity import summarise_activity
from scalerl.study.variants import Variant, fit_length_control

DONE_FILE = "done.json"
ACTIVITY_FILE = "activity.json"
FAILED_FILE = "failed.json"
PLAN_FILE = "study.json"


@dataclass
class RunSpec:
    variant: Variant
    seed: int
    run_dir: Path
    cfg: Config
    notes: list[str]


def budget_overrides(budget: str | None) -> list[str]:
    """`--budget`: `N` (optimizer steps per run) or `Xmin` (wall-clock minutes of training per run)."""
    if budget is None:
        return []
    text = budget.strip().lower()
    if re.fullmatch(r"\d+", text) and int(text) > 0:
        return [f"run.max_steps={int(text)}"]
    m = re.fullmatch(r"(\d+(?:\.\d*)?)\s*min", text)
    if m and float(m.group(1)) > 0:
        return [f"run.max_minutes={float(m.group(1))}", "run.max_steps=1000000"]
    raise ScaleRLError(
        f"--budget {budget!r}: expected a number of optimizer steps (e.g. 200) or wall-clock "
        "minutes per run (e.g. 5min)"
    )


def plan_runs(
    variants: Sequence[Variant], seeds: int, study_dir: Path, overrides: Sequence[str] = (), budget: str | None = None
) -> list[RunSpec]:
    """One RunSpec per (variant, seed); configs resolved and validated before anything runs."""
    if seeds < 1:
        raise ScaleRLError(f"--seeds {seeds}: expected at least 1")
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ScaleRLError(f"study configurations must have distinct names, got {names}")
    specs = []
    for v in variants:
        for seed in range(v.seed_offset, v.seed_offset + seeds):
            sets = [*overrides, *v.overrides, *budget_overrides(budget), f"run.seed={seed}"]
            try:
                cfg = load_config(v.recipe, None, sets)
            except ScaleRLError as exc:  # name the configuration: the same --set applies to all of them
                raise ScaleRLError(f"configuration {v.name!r} (recipe {v.recipe!r}): {exc}") from None
            notes = fit_length_control(cfg)
            specs.append(RunSpec(v, seed, Path(study_dir) / "runs" / v.name / f"seed{seed}", cfg, notes))
    return specs


def is_done(run_dir: Path) -> bool:
    return (Path(run_dir) / DONE_FILE).is_file()


def failure(run_dir: Path) -> str | None:
    """The error that stopped the run last time, if it did."""
    path = Path(run_dir) / FAILED_FILE
    return json.loads(path.read_text())["error"] if path.is_file() else None


def _check_same_config(spec: RunSpec) -> None:
    from scalerl.run.rundir import CONFIG_FILE, read_run_config

    # compared as configs, not text: a field added to scalerl since (with its default) is no difference
    saved = Config.model_validate(read_run_config(spec.run_dir)).model_dump(mode="json")
    if saved != spec.cfg.model_dump(mode="json"):
        raise ScaleRLError(
            f"{spec.run_dir / CONFIG_FILE} differs from the config this study now plans for "
            f"{spec.variant.name} seed {spec.seed} (other --set, --budget or recipe than when it started); "
            "rerun with the same options, or choose another --out"
        )


def code_version() -> str:
    """The git commit of the scalerl checkout this process imported (`+dirty` with uncommitted changes to
    the package), else the installed package's version: read once, at the first call (a study's worker
    makes it before its first run), so that a checkout changed under a running study is not recorded as
    the code its workers run."""
    global _CODE_VERSION
    if _CODE_VERSION is None:
        _CODE_VERSION = _read_code_version()
    return _CODE_VERSION


_CODE_VERSION: str | None = None


def _read_code_version() -> str:
    import subprocess

    import scalerl

    top = Path(scalerl.__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(top), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(top), "status", "--porcelain", "--untracked-files=no", "--", "scalerl"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return scalerl.__version__
    if head.returncode != 0:
        return scalerl.__version__
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


class BuildCheck:
    """Refuses to mix runs of two builds of one model in a study: each finished run's done.json
    records the fingerprint of the weights it started from (`model_build`, `scalerl.models.weights_id`);
    a run whose build is not this machine's build of its model is a study-wide error, raised before
    anything is restored or trained. The builds here are fingerprinted only where already in the cache
    (nothing is built to check); runs from before fingerprints were recorded are counted, not checked."""

    def __init__(self):
        self.here: dict[str, str | None] = {}
        self.unrecorded = 0

    def check(self, spec: RunSpec, done_file: Path) -> None:
        if not done_file.is_file():
            return
        recorded = json.loads(done_file.read_text()).get("model_build")
        if recorded is None:
            self.unrecorded += 1
            return
        name = spec.cfg.model.name
        if name not in self.here:
            from scalerl.models import weights_id

            self.here[name] = weights_id(name, build=False)
        here = self.here[name]
        if here is not None and here != recorded:
            raise ScaleRLError(
                f"{done_file} was trained from build {recorded} of model {name}, but this machine's {name} is "
                f"build {here}: a rebuilt model is another starting point (docs/models-and-tasks.md), so one "
                "study's runs must share one build; start another --out/--results, or put that build in the cache"
            )


def run_one(spec: RunSpec, train_fn: Callable | None = None, progress: bool = False) -> str:
    """Train one run to its budget unless done; return 'skipped', 'resumed' or 'started' (its directory locked)."""
    from scalerl.run.lock import RunLock
    from scalerl.run.rundir import prepare_dir

    code_version()  # read before the run's own imports (see code_version)
    if not spec.run_dir.is_dir():
        prepare_dir(spec.run_dir)
    with RunLock(spec.run_dir):
        return _run_locked(spec, train_fn, progress)


def _run_locked(spec: RunSpec, train_fn: Callable | None, progress: bool) -> str:
    from scalerl.models import compute_dtype, weights_id
    from scalerl.run.rundir import CONFIG_FILE, create_run_dir

    if train_fn is None:
        from scalerl.loop import train as train_fn
    (spec.run_dir / FAILED_FILE).unlink(missing_ok=True)
    if (spec.run_dir / CONFIG_FILE).is_file():
        _check_same_config(spec)
        if is_done(spec.run_dir):
            return "skipped"
        status = "resumed"
    else:
        create_run_dir(spec.run_dir, dump_config(spec.cfg))
        status = "started"
    t0 = time.monotonic()
    tr = train_fn(spec.cfg, spec.run_dir, resume=status == "resumed", progress=progress)
    done = {
        "config": spec.variant.name,
        "seed": spec.seed,
        "steps": tr.state.step,
        "compute_dtype": compute_dtype(spec.cfg.model),  # what the trunk computed in, 'auto' resolved here
        "model_build": weights_id(spec.cfg.model.name),
        "code": code_version(),
        "seconds_this_session": time.monotonic() - t0,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "notes": spec.notes,
    }
    (spec.run_dir / DONE_FILE).write_text(json.dumps(done, indent=1))
    return status


def archive_run(run_dir: Path, dest: Path) -> None:
    """Keep a finished run in small form in `dest`: its config, done.json, metrics.jsonl cut to the
    evaluation rows (what the study's fits read) and the last training row (its totals), and
    `ACTIVITY_FILE`, the summary over every training step of what says whether a swapped component
    acted (`scalerl.study.activity.summarise_activity`)."""
    from scalerl.run.metrics import METRICS_FILE, read_rows
    from scalerl.run.rundir import CONFIG_FILE

    rows = read_rows(run_dir / METRICS_FILE)
    train = [r for r in rows if r.get("kind") == "train"]
    kept = [r for r in rows if r.get("kind") == "eval" or (train and r is train[-1])]
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / (METRICS_FILE + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    write_activity(rows, dest)
    for name in (CONFIG_FILE, DONE_FILE):
        (dest / name).write_bytes((run_dir / name).read_bytes())
    tmp.replace(dest / METRICS_FILE)


def write_activity(rows: list[dict], dest: Path) -> None:
    """`ACTIVITY_FILE` in `dest` from a run's full metrics rows (also for a small form kept before the
    file existed, from the run directory it was cut from)."""
    summary = summarise_activity(rows)
    if summary is not None:
        tmp = dest / (ACTIVITY_FILE + ".tmp")
        tmp.write_text(json.dumps(summary, indent=1))
        tmp.replace(dest / ACTIVITY_FILE)


def restore_archived(spec: RunSpec, results: Path, check: bool = True) -> bool:
    """Put a run kept in `results` into its (unfinished or missing) run directory; True if it did.
    Its config must be the one this study plans, as for a run directory (`check=False`: a report of
    committed runs as they were, whatever the defaults are now)."""
    from scalerl.run.metrics import METRICS_FILE
    from scalerl.run.rundir import CONFIG_FILE

    src = archived_dir(spec, results)
    if is_done(spec.run_dir) or not all((src / n).is_file() for n in (CONFIG_FILE, DONE_FILE, METRICS_FILE)):
        return False
    if check:
        _check_same_config(RunSpec(spec.variant, spec.seed, src, spec.cfg, spec.notes))
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    optional = [ACTIVITY_FILE] if (src / ACTIVITY_FILE).is_file() else []
    for name in (CONFIG_FILE, METRICS_FILE, *optional, DONE_FILE):  # done.json last: a copy cut short is not done
        (spec.run_dir / name).write_bytes((src / name).read_bytes())
    return True


def archived_dir(spec: RunSpec, results: Path) -> Path:
    return Path(results) / spec.variant.name / f"seed{spec.seed}"


def write_plan(
    study_dir: Path, specs: Sequence[RunSpec], base: str, overrides: Sequence[str], budget: str | None
) -> None:
    variants = list(dict.fromkeys(s.variant for s in specs))
    plan = {
        "base": base,
        "budget": budget,
        "overrides": list(overrides),
        "seeds": sorted({s.seed for s in specs}),
        "configs": [
            {"name": v.name, "recipe": v.recipe, "swaps": v.swaps, "overrides": list(v.overrides)} for v in variants
        ],
    }
    Path(study_dir).mkdir(parents=True, exist_ok=True)
    (Path(study_dir) / PLAN_FILE).write_text(json.dumps(plan, indent=1))


def run_study(
    specs: Sequence[RunSpec],
    train_fn: Callable | None = None,
    progress: bool = False,
    log: Callable[[str], None] = print,
    jobs: int = 1,
    results: Path | None = None,
) -> dict[str, int]:
    """Every run (finished ones skipped); returns how many were started/resumed/skipped/failed.

    Seed-major order: seed 0 of every configuration, then seed 1 of every one, ..., so a study
    stopped part-way (it resumes later) already has every configuration to compare. `jobs` > 1:
    that many at once, in spawned processes (module docstring; `train_fn` must then be None).
    `results`: the folder of finished runs in small form (module docstring), read and kept up to date.
    """
    counts = {"started": 0, "resumed": 0, "skipped": 0, "failed": 0}
    todo = []
    builds = BuildCheck()
    for spec in specs:  # every run checked before any is restored or trained
        builds.check(spec, spec.run_dir / DONE_FILE)
        if results is not None:
            builds.check(spec, archived_dir(spec, results) / DONE_FILE)
    if builds.unrecorded:
        log(
            f"{builds.unrecorded} finished runs do not record the build of their model (run before builds were "
            "recorded): not checked against this machine's build"
        )
    for i, spec in enumerate(sorted(specs, key=lambda s: s.seed), 1):
        label = f"[{i}/{len(specs)}] {spec.variant.name} seed {spec.seed}"
        if results is not None and restore_archived(spec, results):
            log(f"{label}: finished earlier, taken from {archived_dir(spec, results)}")
        if (spec.run_dir / "config.yaml").is_file():
            _check_same_config(spec)  # before anything else: a mismatch stops the study, it is not a run failure
        if is_done(spec.run_dir) and results is not None and not (archived_dir(spec, results) / DONE_FILE).is_file():
            archive_run(spec.run_dir, archived_dir(spec, results))
        if is_done(spec.run_dir):
            counts["skipped"] += 1
            log(f"{label}: finished earlier, skipped ({spec.run_dir})")
        else:
            todo.append((label, spec))
    if jobs > 1 and len(todo) > 1:
        if train_fn is not None:
            raise ValueError("run_study: jobs > 1 trains in spawned processes, with the default train only")
        outcomes = _run_parallel(todo, min(jobs, len(todo)), progress, log)
    else:
        outcomes = (_outcome(label, spec, lambda s=spec: run_one(s, train_fn, progress), log) for label, spec in todo)
    for label, spec, status, error in outcomes:
        if error is not None:
            (spec.run_dir / FAILED_FILE).write_text(json.dumps({"error": error}, indent=1))
            counts["failed"] += 1
            log(f"{label}: FAILED: {error}")
        else:
            counts[status] += 1
            if results is not None:
                archive_run(spec.run_dir, archived_dir(spec, results))
            log(f"{label}: {status} and finished")
    return counts


def _outcome(label: str, spec: RunSpec, train: Callable[[], str], log: Callable[[str], None]):
    """(label, spec, status, error) of one run; a study-wide problem is raised, not recorded."""
    log(f"{label}: training in {spec.run_dir}")
    try:
        return label, spec, train(), None
    except RunDirInUse:
        raise  # another process trains this run: a study-wide problem, not this run's failure
    except ScaleRLError as exc:
        if not (spec.run_dir / "config.yaml").is_file():
            raise  # the run could not even be set up (e.g. a bad directory): a study-wide problem
        return label, spec, None, str(exc)


def core_shares(cores: Sequence[int], jobs: int) -> list[list[int]]:
    """`cores` dealt into `jobs` disjoint, contiguous shares as even as possible (a job gets at
    least one core: with fewer cores than jobs, shares repeat)."""
    cores = list(cores)
    if jobs > len(cores):
        return [[cores[i % len(cores)]] for i in range(jobs)]
    size, extra = divmod(len(cores), jobs)
    out, at = [], 0
    for j in range(jobs):
        n = size + (j < extra)
        out.append(cores[at : at + n])
        at += n
    return out


def _pin_worker(shares, parent: int) -> None:
    """ProcessPoolExecutor initializer: end with the study (a killed `ablate` leaves no run
    training in the background, holding its directory's lock), and run on one core share alone."""
    from scalerl.transport.local import watch_parent

    watch_parent(parent)
    os.sched_setaffinity(0, shares.get())


def _run_parallel(todo: list[tuple[str, RunSpec]], jobs: int, progress: bool, log: Callable[[str], None]):
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = mp.get_context("spawn")
    shares = ctx.Queue()
    for share in core_shares(sorted(os.sched_getaffinity(0)), jobs):
        shares.put(share)
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_pin_worker, initargs=(shares, os.getpid())) as pool:
        futures = {}
        for label, spec in todo:
            log(f"{label}: queued ({spec.run_dir})")
            futures[pool.submit(run_one, spec, None, progress)] = (label, spec)
        for fut in as_completed(futures):
            label, spec = futures[fut]
            yield _outcome(label, spec, fut.result, lambda _msg: None)
