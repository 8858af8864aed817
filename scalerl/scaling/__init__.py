"""Compute-performance scaling curves (paper Eq. 1): fit, forecast with intervals, plot; other
frameworks' logs (presets, derived compute) and the verdict on a run in progress.

Torch-free: numpy, scipy and matplotlib only (event files read by `scalerl.scaling.events`). See docs/forecasting.md.
"""

from scalerl.scaling.curves import PowerLaw, Sigmoid, linearise, power_law, sigmoid
from scalerl.scaling.fit import (
    FitResult,
    fall_warning,
    find_fall,
    first_half_check,
    first_half_prediction,
    fit_curve,
    fit_seeds,
    subset_first_half_prediction,
    window_start,
)
from scalerl.scaling.plots import plot_fits
from scalerl.scaling.readers import read_metrics
from scalerl.scaling.report import comparison_table, summary, verdict
from scalerl.scaling.sources import PRESETS, Compute, read_run

__all__ = [
    "PRESETS",
    "Compute",
    "FitResult",
    "PowerLaw",
    "Sigmoid",
    "comparison_table",
    "fall_warning",
    "find_fall",
    "first_half_check",
    "first_half_prediction",
    "fit_curve",
    "fit_seeds",
    "subset_first_half_prediction",
    "linearise",
    "plot_fits",
    "power_law",
    "read_metrics",
    "read_run",
    "sigmoid",
    "summary",
    "verdict",
    "window_start",
]
