"""Run bookkeeping: run directory, metrics.jsonl + TensorBoard, checkpoints, compute accounting."""

from scalerl.run.compute import ComputeMeter, StepCompute
from scalerl.run.metrics import MetricsWriter, read_rows, roll_back
from scalerl.run.rundir import create_run_dir, default_run_dir, open_run_dir

__all__ = ["ComputeMeter", "StepCompute", "MetricsWriter", "read_rows", "roll_back",
           "create_run_dir", "default_run_dir", "open_run_dir"]
