"""Run bookkeeping: run directory (and its lock), metrics.jsonl + TensorBoard, checkpoints, resume, compute."""

from scalerl.run.compute import ComputeMeter, StepCompute
from scalerl.run.lock import RunDirInUse, RunLock
from scalerl.run.metrics import MetricsWriter, read_rows, roll_back
from scalerl.run.rundir import create_run_dir, default_run_dir, open_run_dir

__all__ = [
    "ComputeMeter",
    "StepCompute",
    "MetricsWriter",
    "read_rows",
    "roll_back",
    "create_run_dir",
    "default_run_dir",
    "open_run_dir",
    "RunLock",
    "RunDirInUse",
]
