"""Forecast any run: which metric of a framework's logs is the pass rate, and compute derived from
what those logs hold (wall time, tokens, steps) when they have no compute column.

    read_run(path, y=None, x=None, preset=None, compute=None, reward_to_pass=False) -> Series

`x` names a compute column (as `read_metrics` does); `compute=Compute("wall", devices=N)`,
`Compute("tokens", params=N)` or `Compute("steps", per_step=X)` derives it instead:

- wall: device-hours = seconds x devices / 3600. The seconds come from timestamps (TensorBoard's
  event wall times, or a timestamp column such as W&B's `_timestamp`): the time since the log's
  first event, less every gap between consecutive events longer than the pause threshold (a crash,
  a preemption, a queue: reported). Without timestamps, from the per-step durations the framework
  logs (verl `timing_s/step`, SkyRL `timing/step`, ...), summed over the steps up to the point.
- tokens: FLOPs = 6 N per trained token + 2 N per generated token (N = parameters). A token that
  is both generated and trained on (a completion; TRL's and verl's counts also hold the prompt,
  which the generator prefills) counts 8 N.
- steps: step x per_step (whatever unit per_step is in).

An evaluation logged at step s gets the compute of the steps up to and including s; one logged
before any step (the evaluation before training) gets 0 and only sets R0.

The presets' names are taken from each framework's source (`PRESETS[...].source` says where).

Departures from the paper:
1. The paper's x axis is measured GPU-hours. Wall time x devices counts idle devices too, and the
   FLOPs rule ignores attention and padding; both are monotone in the work done, which is what the
   fit needs (C_mid and forecasts are then in that unit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from scalerl.errors import ScaleRLError
from scalerl.scaling.readers import WALL_TIME, Table, _number, read_metrics, read_table

PAUSE_FLOOR_S = 600.0  # a gap between log events is a pause when longer than this ...
PAUSE_MEDIANS = 30.0  # ... and than this many times the median gap
TIME_COLUMNS = (WALL_TIME, "_timestamp", "timestamp", "time")


@dataclass(frozen=True)
class Tokens:
    """Token counts a framework logs: the product of `columns`, per step or running total."""

    columns: tuple[str, ...]
    cumulative: bool
    trained: bool
    generated: bool


@dataclass(frozen=True)
class Preset:
    name: str
    y: tuple[str, ...]  # regular expressions (full match), tried in order
    steps: tuple[str, ...]  # step columns, the first present is used
    durations: tuple[str, ...]  # per-step seconds, summed
    tokens: tuple[Tokens, ...]
    source: str
    x: str | None = None  # a compute column the framework logs itself


PRESETS: dict[str, Preset] = {
    "trl": Preset(
        "trl",
        y=(r"eval/reward", r"eval_reward"),
        steps=("step", "train/global_step", "global_step"),
        durations=(),
        tokens=(Tokens(("train/num_tokens",), True, True, True),),
        source="trl/trainer/grpo_trainer.py (GRPOTrainer.log: eval metrics prefixed eval_; num_tokens = "
        "state.num_input_tokens_seen, prompt + completion tokens) and transformers' "
        "TensorBoardCallback (rewrite_logs: eval_X -> eval/X, X -> train/X)",
    ),
    "verl": Preset(
        "verl",
        y=(r"val-core/.+/acc/mean@\d+", r"val-core/.+/reward/mean@\d+"),
        steps=("step", "training/global_step"),
        durations=("timing_s/step",),
        tokens=(Tokens(("perf/total_num_tokens",), False, True, True),),
        source="verl/trainer/ppo/ray_trainer.py (_val_metrics_update: val-core/<data_source>/<acc|reward>/"
        "mean@N), verl/trainer/ppo/metric_utils.py (timing_s/step, perf/total_num_tokens = the "
        "batch's attention-mask sum), verl/utils/tracking.py (FileLogger rows {step, data})",
    ),
    "openrlhf": Preset(
        "openrlhf",
        y=(r"eval/eval_.+_pass1",),
        steps=("step", "train/global_step", "eval/global_step"),
        durations=("train/timing/make_experience", "train/timing/ppo_train", "train/timing/broadcast"),
        tokens=(Tokens(("train/rollout/response_length_mean", "train/rollout/num_samples"), False, True, True),),
        source="openrlhf/trainer/ppo_trainer.py (compute_eval_metrics: eval_<ds>_pass1; timing/*; "
        "rollout/response_length_mean, rollout/num_samples) and openrlhf/utils/logging_utils.py "
        "(train/ and eval/ prefixes)",
    ),
    "skyrl": Preset(
        "skyrl",
        y=(r"eval/all/avg_score",),
        steps=("step", "trainer/global_step"),
        durations=("timing/step",),
        tokens=(),
        source="skyrl/train/evaluate.py (eval/all/avg_score, eval/all/pass_at_N) and "
        "skyrl/train/trainer.py (Timer('step') -> timing/step, trainer/global_step)",
    ),
    # The four below were read from each framework's source at the commit named (2026-11-27).
    "prime-rl": Preset(
        "prime-rl",
        y=(r"eval/.+/avg@\d+",),
        steps=("step", "progress/ckpt_step"),
        durations=(),
        tokens=(),
        source="PrimeIntellect-ai/prime-rl src/prime_rl/eval/utils.py (run_eval: eval_metrics avg@<k> = mean "
        "reward, keys prefixed eval/<env>/, logged with 'step' and 'progress/ckpt_step'; commit 004cc0a)",
    ),
    "nemo-rl": Preset(
        "nemo-rl",
        y=(r"validation/accuracy",),
        steps=("step",),
        durations=("timing/train/total_step_time",),
        tokens=(),
        source="NVIDIA/NeMo-RL nemo_rl/algorithms/grpo.py (validate: val_metrics['accuracy'] logged with "
        "prefix='validation', step 0 before training; timing_metrics['total_step_time'] with prefix "
        "'timing/train') and nemo_rl/utils/logger.py (prefix/name keys; commit 54bec9d)",
    ),
    "areal": Preset(
        "areal",
        y=(r"eval-rollout/reward",),
        steps=("step", "global_step"),
        durations=(),
        tokens=(),
        source="inclusionAI/AReaL areal/workflow/rlvr.py (stats_tracker.get(workflow_context.stat_scope())"
        ".scalar(reward=...)), areal/infra/workflow_context.py (stat_scope: 'eval-rollout' in eval "
        "mode), areal/utils/stats_tracker.py (a named tracker prefixes its keys) and "
        "areal/utils/stats_logger.py (commit: W&B / TensorBoard at global_step; commit 4aef98d)",
    ),
    "slime": Preset(
        "slime",
        y=(r"eval/(?!step$)(?!.*-pass@\d+$)[^/]+(?<!-truncated_ratio)",),
        steps=("eval/step", "step", "rollout/step"),
        durations=(),
        tokens=(),
        source="THUDM/slime slime/observability/rollout_metrics.py (log_eval_rollout_data: eval/<dataset> = "
        "mean reward, eval/<dataset>-truncated_ratio, eval/<dataset>-pass@k, step key eval/step) and "
        "slime/observability/wandb_utils.py (eval/* against eval/step; commit 624b824)",
    ),
    "scalerl": Preset(
        "scalerl",
        y=(r"val/pass_rate",),
        steps=("step",),
        durations=("time/step",),
        tokens=(
            Tokens(("compute/tokens_trained",), True, True, False),
            Tokens(("compute/tokens_generated",), True, False, True),
        ),
        source="scalerl/run/compute.py and scalerl/loop.py",
        x="compute/flops",
    ),
}


@dataclass(frozen=True)
class Compute:
    """How to derive compute: kind 'wall' (devices), 'tokens' (params) or 'steps' (per_step)."""

    kind: Literal["wall", "tokens", "steps"]
    devices: float | None = None
    params: float | None = None
    per_step: float | None = None
    pause_threshold: float | None = None  # seconds; default max(600, 30 x median gap)

    def check(self) -> None:
        need = {
            "wall": ("devices", "--devices N (how many devices the run used)"),
            "tokens": ("params", "--params N (the model's parameter count, e.g. 1.5e9)"),
            "steps": ("per_step", "--per-step X (the compute of one step)"),
        }
        if self.kind not in need:
            raise ScaleRLError(f"unknown --compute {self.kind!r} (expected wall, tokens or steps)")
        name, flag = need[self.kind]
        value = getattr(self, name)
        if value is None:
            raise ScaleRLError(f"--compute {self.kind} needs {flag}")
        if not (np.isfinite(value) and value > 0):
            raise ScaleRLError(f"--{name.replace('_', '-')} {value:g}: expected a positive finite number")
        if self.pause_threshold is not None and not (np.isfinite(self.pause_threshold) and self.pause_threshold > 0):
            raise ScaleRLError(f"--pause-threshold {self.pause_threshold:g}: expected a positive number of seconds")


@dataclass
class Series:
    """(compute, metric) points of one run, sorted by compute, with how the compute was derived."""

    x: np.ndarray
    y: np.ndarray
    warnings: list[str]
    how: dict = field(default_factory=dict)
    x_name: str = "compute"
    y_name: str = "metric"


def default_x(path: str | Path) -> str:
    """The compute column when neither --x nor --from names one: a scalerl run directory's own fit
    axis (`compute/flops`, the one `scalerl train` fits, so both give the same numbers), for the
    directory and for the metrics.jsonl inside it (a `config.yaml` beside it), otherwise
    `compute/device_hours` (the paper's GPU-hours)."""
    from scalerl.run.metrics import METRICS_FILE  # torch-free, as this module must stay
    from scalerl.run.rundir import CONFIG_FILE

    p = Path(path)
    if p.is_file() and p.name == METRICS_FILE:
        p = p.parent
    if p.is_dir() and (p / CONFIG_FILE).is_file() and (p / METRICS_FILE).is_file():
        return PRESETS["scalerl"].x
    return "compute/device_hours"


def read_run(
    path: str | Path,
    y: str | None = None,
    x: str | None = None,
    preset: str | None = None,
    compute: Compute | None = None,
    reward_to_pass: bool = False,
) -> Series:
    """The run at `path` as (compute, metric) points; see the module docstring."""
    p = PRESETS.get(preset) if preset else None
    if preset and p is None:
        raise ScaleRLError(f"unknown preset {preset!r} (expected one of {', '.join(PRESETS)})")
    if compute is None and x is None:
        x = p.x if p else default_x(path)
        if x is None:
            raise ScaleRLError(
                f"{preset} logs hold no compute column: pass --compute wall --devices N, "
                "--compute tokens --params N or --compute steps --per-step X (or --x COLUMN)"
            )
    if compute is not None:
        compute.check()
    table = read_table(path) if compute is not None or (p and not y) else None
    y = y or _preset_y(table, p)
    if compute is None:
        xs, ys, warns = read_metrics(path, x, y)
        series = Series(xs, ys, list(warns), {"kind": "column", "column": x}, x, y)
    else:
        series = _derived(table, y, p, compute)
    if reward_to_pass:
        series = _to_pass(series, path)
    return series


def _preset_y(table: Table, p: Preset | None) -> str:
    if p is None:
        return "val/pass_rate"
    for pattern in p.y:
        hits = [c for c in table.columns if re.fullmatch(pattern, c)]
        if len(hits) > 1:
            raise ScaleRLError(
                f"{table.path}: several {p.name} validation metrics match {pattern!r}: "
                f"{', '.join(hits)}; pick one with --y"
            )
        if hits:
            return hits[0]
    present = [c for c in table.columns if re.match(r"(eval|val|test)", c, re.I)] or table.columns
    shown = ", ".join(present[:40]) + (", ..." if len(present) > 40 else "")
    raise ScaleRLError(
        f"{table.path}: no {p.name} validation metric ({' or '.join(p.y)}) in this log; "
        f"metrics present: {shown} (pick one with --y, or another --from)"
    )


def _to_pass(s: Series, path) -> Series:
    if s.y.size and (s.y.min() < -1 or s.y.max() > 1):
        bad = s.y[(s.y < -1) | (s.y > 1)][0]
        raise ScaleRLError(f"{path}: --reward-to-pass maps rewards in [-1, 1] to a pass rate; {s.y_name} has {bad:g}")
    how = {**s.how, "y": f"({s.y_name} + 1) / 2 (--reward-to-pass)"}
    return Series(s.x, (s.y + 1) / 2, s.warnings, how, s.x_name, f"pass rate from {s.y_name}")


# ---------------------------------------------------------------- derived compute
def _step_column(table: Table, p: Preset | None) -> str | None:
    names = (p.steps if p else ()) + ("step", "global_step", "train/global_step", "trainer/global_step")
    return next((c for c in names if c in table.columns), None)


def _rows_by_step(table: Table, step_col: str | None) -> list[tuple[float, dict]]:
    """(step, row) in file order; without a step column the row's position is its step."""
    out = []
    for i, row in enumerate(table.rows):
        s = _number(row.get(step_col)) if step_col else float(i)
        if s is not None:
            out.append((s, row))
    return out


def _derived(table: Table, y: str, p: Preset | None, c: Compute) -> Series:
    if y not in table.columns:
        shown = ", ".join(table.columns[:40]) + (", ..." if len(table.columns) > 40 else "")
        raise ScaleRLError(f"{table.path}: no column {y!r}; columns are: {shown}")
    rows = _rows_by_step(table, _step_column(table, p))
    points = [(s, r) for s, r in rows if y in r]
    values = [_number(r[y]) for _, r in points]
    skipped = sum(v is None for v in values)
    points = [(s, r, v) for (s, r), v in zip(points, values) if v is not None]
    if not points:
        raise ScaleRLError(f"{table.path}: column {y!r} has no numeric value")
    if c.kind == "steps":
        xs, how = (
            [s * c.per_step for s, _, _ in points],
            {"kind": "steps", "per_step": c.per_step, "unit": "steps x per-step"},
        )
    elif c.kind == "tokens":
        xs, how = _token_compute(table, rows, points, p, c)
    else:
        xs, how = _wall_compute(table, rows, points, p, c)
    warns = list(table.warnings)
    if skipped:
        warns.append(f"{table.path}: skipped {skipped} row(s) with a missing or non-finite {y!r}")
    warns += how.pop("_warnings", [])
    x = np.asarray(xs, dtype=float)
    order = np.argsort(x, kind="stable")
    unit = {"wall": "device-hours", "tokens": "FLOPs", "steps": "compute"}[c.kind]
    return Series(x[order], np.asarray([v for _, _, v in points])[order], warns, how, f"{unit} (from {c.kind})", y)


def _running(rows: list[tuple[float, dict]], value, cumulative: bool) -> tuple[np.ndarray, np.ndarray]:
    """(steps, total through each step) of the steps where `value(row)` is a number; the rows of one
    step are merged first (TensorBoard gives one row per scalar)."""
    merged: dict[float, dict] = {}
    for s, r in rows:
        merged.setdefault(s, {}).update(r)
    by_step = {s: v for s, v in ((s, value(r)) for s, r in merged.items()) if v is not None}
    steps = np.array(sorted(by_step), dtype=float)
    vals = np.array([by_step[s] for s in sorted(by_step)], dtype=float)
    return steps, (vals if cumulative else np.cumsum(vals))


def _through(steps: np.ndarray, totals: np.ndarray, s: float) -> float:
    """The running total through step `s` (0 before the first logged step)."""
    i = np.searchsorted(steps, s, side="right")
    return float(totals[i - 1]) if i else 0.0


def _product(columns: tuple[str, ...]):
    def value(row: dict) -> float | None:
        vals = [_number(row.get(col)) for col in columns]
        return None if any(v is None for v in vals) else float(np.prod(vals))

    return value


def _token_compute(table, rows, points, p: Preset | None, c: Compute):
    specs = [t for t in (p.tokens if p else ()) if all(col in table.columns for col in t.columns)]
    if not specs:
        wanted = "; ".join(" x ".join(t.columns) for t in (p.tokens if p else ())) or "none known"
        who = f"the {p.name} preset" if p else "--compute tokens without --from"
        raise ScaleRLError(
            f"{table.path}: --compute tokens needs token counts, and this log has none of "
            f"those of {who} ({wanted}); use --compute wall or --compute steps"
        )
    flops_per = []
    for t in specs:
        steps, totals = _running(rows, _product(t.columns), t.cumulative)
        per_token = 6 * c.params * t.trained + 2 * c.params * t.generated
        flops_per.append((steps, totals, per_token))
    xs = [sum(k * _through(st, tot, s) for st, tot, k in flops_per) for s, _, _ in points]
    how = {
        "kind": "tokens",
        "params": c.params,
        "unit": "FLOPs",
        "rule": "6 N per trained token + 2 N per generated token",
        "columns": [
            {"columns": list(t.columns), "running_total": t.cumulative, "trained": t.trained, "generated": t.generated}
            for t in specs
        ],
    }
    return xs, how


def _wall_compute(table, rows, points, p: Preset | None, c: Compute):
    time_col = next((col for col in TIME_COLUMNS if col in table.columns), None)
    if time_col is not None:
        return _from_timestamps(table, rows, points, time_col, c)
    durations = [
        col
        for col in (p.durations if p else ()) + ("time/step", "timing_s/step", "timing/step")
        if col in table.columns
    ]
    if not durations:
        raise ScaleRLError(
            f"{table.path}: --compute wall needs wall time, and this log has no timestamps "
            f"({', '.join(TIME_COLUMNS)}) and no per-step durations; use --compute steps "
            "--per-step X or --compute tokens --params N"
        )
    durations = list(dict.fromkeys(durations))
    steps, totals = _running(rows, lambda r: _sum_of(r, durations), cumulative=False)
    xs = [_through(steps, totals, s) * c.devices / 3600 for s, _, _ in points]
    how = {
        "kind": "wall",
        "devices": c.devices,
        "unit": "device-hours",
        "source": f"per-step durations summed: {' + '.join(durations)}",
        "pauses": [],
    }
    return xs, how


def _sum_of(row: dict, columns: list[str]) -> float | None:
    vals = [_number(row.get(col)) for col in columns if col in row]
    vals = [v for v in vals if v is not None]
    return float(sum(vals)) if vals else None


def _from_timestamps(table, rows, points, time_col: str, c: Compute):
    times = np.array(sorted(v for v in (_number(r.get(time_col)) for r in table.rows) if v is not None))
    gaps = np.diff(times)
    positive = gaps[gaps > 0]
    threshold = c.pause_threshold or max(
        PAUSE_FLOOR_S, PAUSE_MEDIANS * float(np.median(positive)) if positive.size else PAUSE_FLOOR_S
    )
    is_pause = gaps > threshold
    paused_before = np.concatenate([[0.0], np.cumsum(np.where(is_pause, gaps, 0.0))])
    step_time: dict[float, float] = {}
    for s, r in rows:
        t = _number(r.get(time_col))
        if t is not None:
            step_time[s] = max(step_time.get(s, t), t)
    xs, missing = [], 0
    for s, r, _ in points:
        t = _number(r.get(time_col))
        t = t if t is not None else step_time.get(s)
        if t is None:
            missing += 1
            t = times[0]
        i = np.searchsorted(times, t, side="right") - 1
        elapsed = 0.0 if s == 0 else t - times[0] - paused_before[max(i, 0)]  # step 0: before training
        xs.append(elapsed * c.devices / 3600)
    pauses = [{"after_time": float(times[i]), "seconds": float(gaps[i])} for i in np.flatnonzero(is_pause)]
    warns = (
        [
            f"{table.path}: left out {len(pauses)} pause(s) longer than {threshold:.0f} s from the wall time "
            f"({sum(q['seconds'] for q in pauses) / 3600:.3g} h in all)"
        ]
        if pauses
        else []
    )
    if missing:
        warns.append(f"{table.path}: {missing} evaluation(s) had no timestamp at their step; set to the start")
    how = {
        "kind": "wall",
        "devices": c.devices,
        "unit": "device-hours",
        "source": "TensorBoard event wall times" if time_col == WALL_TIME else f"timestamp column {time_col!r}",
        "pause_threshold_s": threshold,
        "pauses": pauses,
        "_warnings": warns,
    }
    return xs, how
