"""Plots of fitted curves (matplotlib, Agg): the paper's Figure 2 and Figure 7 (right) views.

    plot_fits([(label, x, y, FitResult), ...], path, linearised_path=None)

Main view: observed points (hollow outside the fit window), the fitted curve solid over the fit
window and dashed beyond, the asymptote A as a dotted horizontal line, the 90% bootstrap band
shaded, compute on a log axis. Linearised view (sigmoid fits): `log((A - R0)/(R - R0) - 1)`
against log C, where the fitted curve is a straight line of slope -B.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from scalerl.scaling.curves import linearise
from scalerl.scaling.fit import FitResult

Run = tuple[str, np.ndarray, np.ndarray, FitResult]


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt, *plt.subplots(figsize=(7.5, 4.8), dpi=110)


def _label(label: str, f: FitResult) -> str:
    if f.model == "sigmoid":
        return f"{label}: A={f.A:.3f}, B={f.B:.2f}, C_mid={f.C_mid:.4g}"
    return f"{label} (power law): A={f.A:.3f}, B={f.B:.2f}"


def plot_fits(
    runs: Sequence[Run],
    path: str | Path,
    linearised_path: str | Path | None = None,
    xlabel: str = "compute",
    ylabel: str = "pass rate",
    extend_to: float | None = None,
) -> None:
    """Draw every run on one figure at `path`; optionally the linearised view at `linearised_path`."""
    plt, fig, ax = _figure()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    x_hi = max([extend_to or 0.0] + [float(np.max(x)) for _, x, _, _ in runs])
    x_lo = min(float(np.min(x[x > 0])) for _, x, _, _ in runs if (x > 0).any())
    for i, (label, x, y, f) in enumerate(runs):
        c = colors[i % len(colors)]
        inside = (x >= f.window[0]) & (x <= f.window[1])
        ax.scatter(x[inside & (x > 0)], y[inside & (x > 0)], s=10, color=c, alpha=0.7)
        ax.scatter(x[~inside & (x > 0)], y[~inside & (x > 0)], s=10, facecolors="none", edgecolors=c, alpha=0.6)
        grid = np.geomspace(x_lo, x_hi * 1.02, 300)
        fit_part = (grid >= f.window[0]) & (grid <= f.window[1])
        curve = f.predict(grid)
        ax.plot(grid[fit_part], curve[fit_part], color=c, lw=2, label=_label(label, f))
        for part in (grid <= f.window[0], grid >= f.window[1]):
            ax.plot(grid[part], curve[part], color=c, lw=1.5, ls="--")
        if len(f.boot):
            lo, hi = f.predict_interval(grid)
            ax.fill_between(grid, lo, hi, color=c, alpha=0.15, lw=0)
        ax.axhline(f.A, color=c, ls=":", lw=1)
    # the data and the ceilings set the y range (a power law dives to -inf before its window)
    lows = [float(np.min(y)) for _, _, y, _ in runs]
    highs = [max(float(np.max(y)), f.A) for _, _, y, f in runs]
    pad = 0.05 * (max(highs) - min(lows))
    ax.set_ylim(min(lows) - pad, max(highs) + pad)
    ax.set_xscale("log")
    ax.set_xlabel(f"{xlabel} (log scale)")
    ax.set_ylabel(ylabel)
    ax.set_title("fit: solid over the fit window, dashed beyond; band: 90% bootstrap interval; dotted: A", fontsize=8)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    if linearised_path is not None:
        _plot_linearised(runs, linearised_path, xlabel)


def _plot_linearised(runs: Sequence[Run], path: str | Path, xlabel: str) -> None:
    plt, fig, ax = _figure()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, x, y, f) in enumerate(runs):
        if f.model != "sigmoid":
            continue
        c = colors[i % len(colors)]
        keep = x > 0
        lin = linearise(y[keep], f.A, f.R0)
        ax.scatter(x[keep], lin, s=10, color=c, alpha=0.7)
        grid = np.geomspace(float(x[keep].min()), float(x.max()), 100)
        ax.plot(grid, f.B * (np.log(f.C_mid) - np.log(grid)), color=c, lw=2, label=f"{label}: slope -B = {-f.B:.2f}")
    ax.set_xscale("log")
    ax.set_xlabel(f"{xlabel} (log scale)")
    ax.set_ylabel("log((A - R0) / (R - R0) - 1)")
    ax.set_title("linearised view (paper Fig. 7): a straight line of slope -B", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def supported_formats() -> set[str]:
    """The file extensions matplotlib can write (png, pdf, svg, ...)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backend_bases import FigureCanvasBase

    return set(FigureCanvasBase.get_supported_filetypes())
