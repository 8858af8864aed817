"""Curves of known parameters and logs for the forecaster's tests, fast and slow tier (imported as
`scaling_helpers`: tests/ is on sys.path under pytest)."""

import numpy as np

from scalerl.scaling import fit_curve, window_start

AGREE = 0.01
GRID_WARNING = "the paper's grid procedure gives A = "


def eq1(C, A, B, C_mid, R0):
    C = np.asarray(C, dtype=float)
    with np.errstate(divide="ignore"):
        return R0 + (A - R0) / (1 + (C_mid / C) ** B)


def curves(n=40, seed=0):
    """n noisy runs: ((A, B, C_mid, R0), x, y)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        A, B = rng.uniform(0.58, 0.71), rng.uniform(1.1, 2.4)
        C_mid, R0 = float(np.exp(rng.uniform(np.log(1600), np.log(11300)))), rng.uniform(0.3, 0.5)
        x = np.linspace(0, C_mid * rng.uniform(2, 6), int(rng.integers(30, 90)))
        y = eq1(x, A, B, C_mid, R0) + rng.normal(0, rng.uniform(0.005, 0.02), x.size)
        out.append(((A, B, C_mid, R0), x, y))
    return out


def check_one(x, y):
    """The default (checked) fit and the paper's grid, on the window `scalerl fit` uses by default."""
    start = window_start(x, 0.1)
    fit = fit_curve(x, y, fit_min=start, n_bootstrap=0, check_grid=True)
    grid = fit_curve(x, y, fit_min=start, n_bootstrap=0, method="grid")
    warned = [w for w in fit.warnings if w.startswith(GRID_WARNING)]
    if abs(fit.A - grid.A) > AGREE:
        assert warned, (fit.A, grid.A, fit.warnings)
        assert f"A = {grid.A:.3f}, this fit A = {fit.A:.3f}" in warned[0] and "trust this fit" in warned[0]
        assert fit.rmse <= grid.rmse + 1e-12  # the one it says to trust has the lower error
    else:
        assert not warned, warned
    return fit, grid


def synthetic(A, B, C_mid, R0, final, dx, seed, noise=0.01):
    x = np.arange(0, final + 1, dx, dtype=float)
    with np.errstate(divide="ignore"):
        truth = R0 + (A - R0) / (1 + (C_mid / x) ** B)  # Eq. 1 written out; C = 0 gives R0
    return x, truth + np.random.default_rng(seed).normal(0, noise, x.size)


def write_tb(folder, scalars):
    """scalars: [(step, wall_time, tag, value)] -> one event file."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    for step, wall, tag, value in scalars:
        summ = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(event_pb2.Event(step=step, wall_time=wall, summary=summ))
    writer.close()
    return folder
