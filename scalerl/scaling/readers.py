"""Read (compute, metric) pairs from run directories, JSONL, CSV, W&B CSV exports and TensorBoard.

    read_metrics(path, x, y) -> (x ndarray, y ndarray, warnings)

- A directory means `<dir>/metrics.jsonl`, or the TensorBoard event files under it if there is none.
- JSONL: one object per line; nested objects are flattened with "/" (`{"val": {"pass_rate": 1}}`
  is `val/pass_rate`); verl's file logger's `{"step": N, "data": {...}}` is read as `{"step": N,
  ...}`. An invalid *last* line is a torn write (a writer killed or still writing): skipped with a
  warning; an invalid line before it is an error naming the line. A row without the x or y key is
  another kind of row (a train row beside eval rows) and is ignored silently; a row with the key
  but a null / NaN / inf / non-numeric value is skipped and counted in a warning.
- CSV: a header row. A W&B export names its columns `<run> - <metric>` (plus `__MIN`/`__MAX`);
  `y="<metric>"` selects the one `... - <metric>` column when that is unambiguous. An empty cell
  is a metric the row lacks (sparse columns are normal in W&B and TRL exports): the row is
  ignored silently for that metric; a cell that holds something other than a finite number is
  skipped and counted in a warning.
- TensorBoard: scalars via `scalerl.scaling.events` (no tensorboard package needed); x is `step` or
  another scalar tag joined on step.

    read_table(path) -> Table(path, rows, columns, warnings)

every row of a file as a flat dict, for `scalerl.scaling.sources` (framework presets, derived
compute); TensorBoard gives one row per scalar event, `{"step", <tag>, "wall_time"}`.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scalerl.errors import ScaleRLError

Columns = tuple[np.ndarray, np.ndarray, list[str]]
WALL_TIME = "wall_time"  # the column TensorBoard event times are read into


@dataclass
class Table:
    """Every row of one log, flat; `warnings` about what was skipped while reading."""

    path: Path
    rows: list[dict]
    columns: list[str]
    warnings: list[str]


def _file_of(path: str | Path) -> Path:
    """The file (or TensorBoard folder) `path` means; one-line errors for what cannot be read."""
    path = Path(path)
    if not path.exists():
        raise ScaleRLError(f"{path}: no such file or directory")
    if path.is_dir():
        path = _resolve_dir(path)
    if path.name.startswith("events.out.tfevents") or path.is_dir():
        return path
    if path.stat().st_size == 0 or not path.read_text(encoding="utf-8", errors="replace").strip():
        raise ScaleRLError(f"{path}: the file is empty")
    if path.suffix.lower() not in (".jsonl", ".json", ".ndjson", ".csv", ".tsv"):
        raise ScaleRLError(
            f"{path}: unknown file type (expected .jsonl, .csv, a run directory or TensorBoard event files)"
        )
    return path


def read_metrics(path: str | Path, x: str, y: str) -> Columns:
    """The finite (x, y) pairs of `path`, sorted by x, and the warnings about skipped rows."""
    path = _file_of(path)
    if path.name.startswith("events.out.tfevents") or path.is_dir():
        return _read_tensorboard(path, x, y)
    if path.suffix.lower() in (".csv", ".tsv"):
        rows, columns = _csv_rows(path)
        x, y = _wandb_column(path, columns, x), _wandb_column(path, columns, y)
        return _pairs(path, rows, columns, x, y)
    rows, columns, warns = _jsonl_rows(path)
    xs, ys, more = _pairs(path, rows, columns, x, y)
    return xs, ys, warns + more


def read_column_at(path: str | Path, x: str, column: str, at: np.ndarray) -> np.ndarray | None:
    """`column` at each of the points `at` that `read_metrics(path, x, ...)` gave, or None where the
    file has no such column or no value at every one of them (an optional column, such as
    `val/pass_rate_se`, that older runs did not log)."""
    try:
        xs, values, _ = read_metrics(path, x, column)
    except ScaleRLError:
        return None
    return values if np.array_equal(xs, at) else None


def read_table(path: str | Path) -> Table:
    """All rows of `path` (see the module docstring)."""
    path = _file_of(path)
    if path.name.startswith("events.out.tfevents") or path.is_dir():
        series = _tensorboard_series(path)
        rows = [
            {"step": step, tag: value, WALL_TIME: wall}
            for tag, events in series.items()
            for step, wall, value in events
        ]
        return Table(path, rows, ["step", WALL_TIME, *sorted(series)], [])
    if path.suffix.lower() in (".csv", ".tsv"):
        return _wandb_table(path, *_csv_rows(path))
    return Table(path, *_jsonl_rows(path))


def _wandb_table(path: Path, rows: list[dict], columns: list[str]) -> Table:
    """A W&B chart export (`Step`, `<run> - <metric>`, its `__MIN`/`__MAX`) as `step`, `<metric>`;
    another CSV as it is. With several runs in one export the names stay as they are."""
    plain = [c for c in columns if not c.endswith(("__MIN", "__MAX"))]
    names = {c: c.split(" - ", 1)[1] if " - " in c else c for c in plain}
    runs = {c.split(" - ", 1)[0] for c in plain if " - " in c}
    if not runs or len(runs) > 1 or len(set(names.values())) < len(names):
        return Table(path, rows, columns, [])
    names = {c: ("step" if n == "Step" else n) for c, n in names.items()}
    return Table(path, [{names[k]: v for k, v in r.items() if k in names} for r in rows], list(names.values()), [])


def _resolve_dir(path: Path) -> Path:
    if (path / "metrics.jsonl").is_file():
        return path / "metrics.jsonl"
    if any(path.rglob("events.out.tfevents*")):
        return path
    raise ScaleRLError(f"{path}: directory has no metrics.jsonl and no TensorBoard event files")


def flatten(row: dict, sep: str = "/", prefix: str = "") -> dict:
    """Nested dicts as one level: {"a": {"b": 1}} -> {"a/b": 1} (keys joined by `sep`)."""
    out = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(flatten(value, sep, f"{prefix}{key}{sep}"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _jsonl_rows(path: Path) -> tuple[list[dict], list[str], list[str]]:
    """Rows, columns and warnings; an invalid last line is a torn write, skipped with a warning."""
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ScaleRLError(f"{path}: not UTF-8 text (byte {exc.start}); expected JSON lines") from exc
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    rows, columns, warns = [], {}, []
    for i, (lineno, line) in enumerate(numbered):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(numbered) - 1:
                warns.append(
                    f"{path}:{lineno}: skipped a torn last line (not valid JSON: {exc.msg}); "
                    "its writer was interrupted or is still writing"
                )
                break
            raise ScaleRLError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise ScaleRLError(f"{path}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
        if set(row) == {"step", "data"} and isinstance(row["data"], dict):  # verl's FileLogger
            row = {"step": row["step"], **row["data"]}
        row = flatten(row)
        columns.update(dict.fromkeys(row))
        rows.append(row)
    if not rows:
        raise ScaleRLError(f"{path}: no complete JSON line")
    return rows, list(columns), warns


def _csv_rows(path: Path) -> tuple[list[dict], list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:  # -sig: spreadsheets write a BOM
        reader = csv.DictReader(f, delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
        columns = list(reader.fieldnames or [])
        # an empty cell is a metric the row lacks (W&B and TRL leave cells empty where nothing was
        # logged): left out of the row, as a JSONL row leaves out a key, so it is never "skipped"
        rows = [{k: v for k, v in r.items() if v not in ("", None)} for r in reader]
    if not rows:
        raise ScaleRLError(f"{path}: the file has a header but no rows")
    return rows, columns


def _wandb_column(path: Path, columns: list[str], name: str) -> str:
    """`name` itself, or the unique W&B column `<run> - <name>` (not its __MIN/__MAX)."""
    if name in columns:
        return name
    hits = [c for c in columns if c.endswith(f" - {name}")]
    if len(hits) > 1:
        raise ScaleRLError(f"{path}: column {name!r} is ambiguous, it matches {hits}; pass the full name")
    return hits[0] if hits else name


def _number(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _pairs(path: Path, rows: list[dict], columns: list[str], x: str, y: str) -> Columns:
    for name in (x, y):
        if name not in columns:
            shown = ", ".join(columns[:40]) + (", ..." if len(columns) > 40 else "")
            raise ScaleRLError(f"{path}: no column {name!r}; columns are: {shown}")
    xs, ys, skipped, numeric = [], [], 0, {x: False, y: False}
    for row in rows:
        if x not in row or y not in row:
            continue  # another kind of row (e.g. a train row without the eval metric)
        vx, vy = _number(row[x]), _number(row[y])
        numeric[x] |= vx is not None
        numeric[y] |= vy is not None
        if vx is None or vy is None:
            skipped += 1
            continue
        xs.append(vx)
        ys.append(vy)
    for name, ok in numeric.items():
        if not ok:
            example = next((r[name] for r in rows if r.get(name) is not None), None)
            raise ScaleRLError(f"{path}: column {name!r} has no numeric value (e.g. {example!r})")
    warnings = []
    if skipped:
        warnings.append(f"{path}: skipped {skipped} row(s) with a missing or non-finite {x!r} or {y!r}")
    order = np.argsort(xs, kind="stable")
    return np.asarray(xs)[order], np.asarray(ys)[order], warnings


def _tensorboard_series(path: Path) -> dict[str, list[tuple[int, float, float]]]:
    """tag -> [(step, wall time, value)] over the event files of `path`; a step logged twice
    (a resumed run) keeps its last value."""
    from scalerl.scaling.events import read_scalars

    files = [path] if path.is_file() else sorted(path.rglob("events.out.tfevents*"))
    series: dict[str, dict[int, tuple[float, float]]] = {}
    for f in files:
        for tag, events in read_scalars(f).items():
            series.setdefault(tag, {}).update({step: (wall, value) for step, wall, value in events})
    if not series:
        raise ScaleRLError(f"{path}: no TensorBoard scalars found (the event files are empty)")
    return {tag: sorted((s, w, v) for s, (w, v) in d.items()) for tag, d in series.items()}


def _read_tensorboard(path: Path, x: str, y: str) -> Columns:
    series = {tag: {s: v for s, _, v in events} for tag, events in _tensorboard_series(path).items()}
    columns = ["step", *sorted(series)]
    rows = []
    for step, value in series.get(y, {}).items():
        row = {"step": step, y: value}
        if x in series and step in series[x]:
            row[x] = series[x][step]
        elif x in series:
            row[x] = None  # logged y at a step with no x: counted as skipped
        rows.append(row)
    return _pairs(path, rows, columns, x, y)
