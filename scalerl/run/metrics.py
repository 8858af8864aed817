"""Append-only metrics: `metrics.jsonl` (the source of truth) + TensorBoard events beside it.

Every row is one JSON object with `step` and `kind` ("train" or "eval"), written and flushed
(and fsync'ed) at once, so a `kill -9` can tear at most the last line. On resume the run is
rolled back to its last checkpoint: the checkpoint records the byte length of
`metrics.jsonl` at the moment it was taken, and every byte after it (the rows of steps that
will be redone, plus any torn line) moves to `metrics.rolledback.jsonl`. `metrics.jsonl` then
has no duplicate and no gap when those steps are redone, and no written row is lost.

Before a resumed run trains, `check_metrics` reads the part a checkpoint vouches for (its
first `offset` bytes): a missing or shorter file, bytes that are not UTF-8, or a line that is
not a JSON row is reported with its line number, and the run does not start.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from scalerl.errors import ScaleRLError

METRICS_FILE = "metrics.jsonl"
ROLLED_BACK_FILE = "metrics.rolledback.jsonl"


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every reader can parse the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsWriter:
    """Writes rows to `<run_dir>/metrics.jsonl` and scalars to TensorBoard under `<run_dir>/tb`."""

    def __init__(self, run_dir: Path, tensorboard: bool = True):
        self.path = Path(run_dir) / METRICS_FILE
        self._file = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(Path(run_dir) / "tb"))

    def write(self, row: dict[str, Any]) -> None:
        if "step" not in row or "kind" not in row:
            raise ValueError(f"metrics row needs 'step' and 'kind': {sorted(row)}")
        row = {k: _clean(v) for k, v in row.items()}
        try:
            self._file.write(json.dumps(row, sort_keys=False) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:  # a full disk: at most a torn last line, which a resume moves aside
            raise ScaleRLError(
                f"cannot append to {self.path} ({exc.strerror}): free some space, then continue "
                "with --resume (the run restarts from its last checkpoint)"
            ) from None
        if self._tb is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and "/" in key:
                    self._tb.add_scalar(key, value, global_step=row["step"])
            self._tb.flush()

    def offset(self) -> int:
        """Byte length of the file: stored in each checkpoint for the rollback on resume."""
        self._file.flush()
        return self._file.tell()

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def read_rows(path: Path) -> list[dict[str, Any]]:
    """All complete rows of a metrics file (a torn last line is ignored)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            rows.append(json.loads(line))
    return rows


def roll_back(run_dir: Path, offset: int) -> int:
    """Move everything after byte `offset` of metrics.jsonl to metrics.rolledback.jsonl.

    Returns the number of bytes moved. A torn last line is moved too, completed with a newline
    so the archive stays one JSON object (or one marked fragment) per line.
    """
    path = Path(run_dir) / METRICS_FILE
    size = path.stat().st_size if path.exists() else 0
    if size < offset:
        raise ScaleRLError(f"{path} is shorter ({size} B) than its checkpoint says ({offset} B)")
    if size == offset:
        return 0
    with open(path, "rb") as f:
        f.seek(offset)
        tail = f.read()
    lines = tail.split(b"\n")
    archived = []
    for line in lines:
        if not line:
            continue
        try:
            json.loads(line)
            archived.append(line)
        except json.JSONDecodeError:
            archived.append(json.dumps({"torn_line": line.decode("utf-8", "replace")}).encode())
    with open(Path(run_dir) / ROLLED_BACK_FILE, "ab") as f:
        f.write(b"".join(x + b"\n" for x in archived))
        f.flush()
        os.fsync(f.fileno())
    with open(path, "r+b") as f:
        f.truncate(offset)
        f.flush()
        os.fsync(f.fileno())
    return size - offset


def _line_problem(line: bytes) -> str | None:
    """Why one line of metrics.jsonl is not a row, or None."""
    try:
        row = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte {exc.start} of the line)"
    except json.JSONDecodeError as exc:
        return f"not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(row, dict) or "step" not in row or "kind" not in row:
        return "not a metrics row (a JSON object with 'step' and 'kind')"
    return None


def check_metrics(run_dir: Path, offset: int, checkpoint: str) -> None:
    """Raise a one-line ScaleRLError if the first `offset` bytes of metrics.jsonl are not intact rows.

    `checkpoint` names the checkpoint that recorded `offset` (for the message).
    """
    path = Path(run_dir) / METRICS_FILE
    redo = "restore the file from a copy, or start the run over with --restart (what it wrote is kept aside)"
    if offset == 0:
        return
    if not path.is_file():
        raise ScaleRLError(f"{path} is missing, but {checkpoint} recorded {offset} B of rows in it: {redo}")
    size = path.stat().st_size
    if size < offset:
        raise ScaleRLError(
            f"{path} is shorter ({size} B) than the {offset} B {checkpoint} recorded: rows were lost; {redo}"
        )
    with open(path, "rb") as f:
        head = f.read(offset)
    lines = head.split(b"\n")
    if lines[-1]:
        raise ScaleRLError(
            f"{path} line {len(lines)}: ends in the middle of a row at the {offset} B "
            f"{checkpoint} recorded (the file was changed); {redo}"
        )
    for number, line in enumerate(lines[:-1], 1):
        problem = _line_problem(line)
        if problem is not None:
            raise ScaleRLError(f"{path} line {number}: {problem}; {redo}")
