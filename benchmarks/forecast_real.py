"""Forecasts of real RL runs against naive baselines, on a development/test split fixed in this file
(docs/forecasting.md, "What a forecast can and cannot tell").

    python benchmarks/forecast_real.py [--real FOLDER] [--studies FOLDER] [--side test|dev|all]
                                       [--json FILE] [--calibrate] [--check-calibration] [--workers 2]

The method, written down (2026-11-28) before any candidate below was run on either half:

Data. Two domains. `real`: every curve of ../shared/real-curves (not `TRAIN_*`: training-batch
rewards), made by other groups; x the step, y the held-out pass rate. `committed`: every run of the
project's studies/ (metrics.jsonl, evaluation rows) with at least 8 evaluations; x compute/flops,
y val/pass_rate.

The split (whole sources to one side). Real: a source is the file name's first `_` field; `REAL_DEV`
(cs336shibuki, verldata, amd, dstackcfg: 28 curves) against the rest (deepgrpo, cs336dequeue,
gpg: 23), chosen from the folder's README alone, before any forecast: the CS336 learning-rate
sweep is the one source with many curves still rising, and the interval must learn from such
curves; another group's runs of the same assignment (cs336dequeue) test whether that transfers.
A source not named here (a curve added later) goes to the test half. Committed: a run's family is
its study folder's name up to the first `-` (default-12evals -> default); a family is on the test
side when sha256("scalerl-split-{salt}:{family}") has an odd first 8 hex digits, salt 0 unless a
side then holds under a third of the runs (then salt 1, 2, ...). Salt 0 gives test = check,
default, fsdp, nzv, study, vllm (101 runs), dev = axes, controls, ksweep, probes, recipes (148).

Forecasts. Each curve is cut at x <= cut * x_last for cut 0.3, 0.5, 0.7; a cut with fewer than 5
evaluations past x = 0, or a flat window, has no forecast (counted). The end is the mean of the
last three evaluations; an error is forecast - end. The horizon h = ln(mean x of the last three /
the cut's last x). Stratum by what came after the cut: `rising` when end - (the mean of the cut's
last three) > 0.02, `fell` when < -0.02, else `flat`.

Candidates for the point forecast (all from the evaluations up to the cut, the window of
`scalerl fit`: from a tenth of the compute so far, moved to keep five evaluations; the fast fit,
without the grid check, for time: the check only changes the fit where the two disagree):
`frozen` (the first-half check's method: window from a tenth of the final x), `sigmoid` (R0 the
measured start), `sigmoid_r0` (R0 fitted), `blend` (the mean of `sigmoid` and the last three),
`blend_r0`, `powerlaw`. Baselines: `last`, `last3` (the mean of the last three), `best`, `ruler`.
The default is the candidate with the lowest mean |error| on the development half, the mean of
the two domains' means (each domain weighs the same).

Identification (scalerl.scaling.identify): the candidates `profile` (A's profile 90% interval
bounded above and at most 0.04 wide), `profile+midpoint` (and the window passed the fitted
C_mid), `profile+tail` (and the window's last third gains under 0.02 per doubling, one-sided
95%), on the chosen candidate's sigmoid. Chosen on the development half: the largest gap between
the within-0.02 rate of the forecasts marked identified and of those not, among rules that mark
at least a fifth of them.

Intervals (scalerl.scaling.calibrate): z = (end - forecast) / s per forecast of the development
half; per group (identified or not x horizon bin), the 5% and 95% conformal quantiles with each
domain weighing the same. The test half reports coverage and median width beside the parameter
bootstrap's interval of the curve (100 replicas here, 200 in `scalerl fit`).

Departures after the first run (docs/history/forecasting.md): a calibration group needs 39 development
forecasts, not 20, to keep its own quantiles (below 39 the 95% conformal quantile is its largest score);
the profile's lower end walks down to the bottom of A's search range.

Ranking: on the test half at cut 0.5, every pair of runs of one source (real) or one study folder
(committed) whose ends differ by more than 0.02: the share ordered right by each predictor.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scalerl.errors import ScaleRLError
from scalerl.scaling.report import SEED_MARGIN

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parent.parent / "shared" / "real-curves"
STUDIES = HERE.parent / "studies"
MARGIN = SEED_MARGIN  # the paper's margin: within 0.02
BOOTSTRAP = 100
CUTS = (0.3, 0.5, 0.7)
MIN_EVALS = 8
REAL_DEV = ("cs336shibuki", "verldata", "amd", "dstackcfg")
CANDIDATES = ("frozen", "sigmoid", "sigmoid_r0", "blend", "blend_r0", "powerlaw")
BASELINES = ("last", "last3", "best", "ruler")


@dataclass
class Curve:
    name: str
    source: str  # the unit of the split: a real source or a committed family
    group: str  # the unit of ranking pairs: a real source or a study folder
    domain: str  # "real" or "committed"
    side: str  # "dev" or "test"
    x: np.ndarray
    y: np.ndarray


def read_curve(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A curve file: `#` lines, a header `x,y`, then numbers; sorted by x."""
    rows = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    if not rows or rows[0].replace(" ", "").lower() != "x,y":
        raise ScaleRLError(f"{path}: expected a header line 'x,y' after the '#' lines")
    try:
        xy = np.array([[float(v) for v in ln.split(",")] for ln in rows[1:]])
    except ValueError as exc:
        raise ScaleRLError(f"{path}: a row is not two numbers 'x,y' ({exc})") from exc
    if xy.ndim != 2 or xy.shape[1] != 2:
        raise ScaleRLError(f"{path}: expected two columns x,y in every row")
    order = np.argsort(xy[:, 0], kind="stable")
    return xy[order, 0], xy[order, 1]


def curve_files(folder: Path, train: bool = False) -> list[Path]:
    """The curve files of `folder`, TRAIN_* (training-batch rewards) only with `train`."""
    files = sorted(f for f in folder.glob("*.csv") if train or not f.name.startswith("TRAIN_"))
    if not files:
        raise ScaleRLError(f"{folder}: no curve files (*.csv) found")
    return files


def family_of(run: Path, studies: Path) -> tuple[str, str]:
    """(family, study folder) of a committed run: the first folder under studies/ (or under
    studies/history/), and its name up to the first '-'."""
    parts = [p for p in run.relative_to(studies).parts if p != "history"]
    return parts[0].split("-")[0], parts[0]


def split_families(families: dict[str, int]) -> set[str]:
    """The committed families on the test side (the salt rule of the module docstring)."""
    total = sum(families.values())
    for salt in range(100):
        test = {
            f for f in families if int(hashlib.sha256(f"scalerl-split-{salt}:{f}".encode()).hexdigest()[:8], 16) % 2
        }
        n = sum(families[f] for f in test)
        if min(n, total - n) * 3 >= total:
            return test
    raise ScaleRLError(f"no salt splits the families {sorted(families)} into thirds")


def real_curves(folder: Path) -> list[Curve]:
    out = []
    for f in curve_files(folder):
        x, y = read_curve(f)
        src = f.stem.split("_")[0]
        out.append(Curve(f.stem, src, src, "real", "dev" if src in REAL_DEV else "test", x, y))
    return out


def committed_curves(studies: Path) -> list[Curve]:
    from scalerl.scaling.sources import read_run

    runs = []
    for m in sorted(studies.rglob("metrics.jsonl")):
        s = read_run(m.parent)
        if (s.x > 0).sum() >= MIN_EVALS and s.x_name == "compute/flops":
            runs.append((m.parent, s))
    where = {run: family_of(run, studies) for run, _ in runs}
    counts: dict[str, int] = {}
    for fam, _ in where.values():
        counts[fam] = counts.get(fam, 0) + 1
    test = split_families(counts)
    out = []
    for run, s in runs:
        fam, folder = where[run]
        order = np.argsort(s.x, kind="stable")
        out.append(
            Curve(
                str(run.relative_to(studies)),
                fam,
                folder,
                "committed",
                "test" if fam in test else "dev",
                s.x[order],
                s.y[order],
            )
        )
    return out


def forecast_task(args: tuple[Curve, float]) -> dict | None:
    """One curve at one cut: every predictor's forecast, the scales, the identification, the
    bootstrap interval (a worker's job)."""
    from forecast_one import forecast_one

    c, cut = args
    try:
        row = forecast_one(c.x, c.y, cut, BOOTSTRAP)
    except ScaleRLError:
        return None
    if row is None:
        return None
    return {**row, "name": c.name, "source": c.source, "group": c.group, "domain": c.domain, "side": c.side}


def run_all(curves: list[Curve], workers: int) -> list[dict]:
    tasks = [(c, cut) for c in curves for cut in CUTS]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            rows = list(pool.map(forecast_task, tasks, chunksize=4))
    else:
        rows = [forecast_task(t) for t in tasks]
    missing = [f"{c.name}@{cut}" for (c, cut), r in zip(tasks, rows) if r is None]
    print(f"{len(tasks) - len(missing)} forecasts of {len(tasks)} ({len(missing)} cuts without a fit)", file=sys.stderr)
    return [r for r in rows if r is not None]


def main(argv: list[str] | None = None) -> int:
    from forecast_tables import analyse, print_report

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", type=Path, default=DEFAULT, help="the real curves' folder")
    ap.add_argument("--studies", type=Path, default=STUDIES, help="the committed runs' folder")
    ap.add_argument("--side", choices=("test", "dev", "all"), default="test", help="the half the tables show")
    ap.add_argument("--json", type=Path, default=None, help="also write every forecast here")
    ap.add_argument("--rows", type=Path, default=None, help="read the forecasts from this --json file instead")
    ap.add_argument("--calibrate", action="store_true", help="write scalerl/scaling/calibration.json from the dev half")
    ap.add_argument(
        "--check-calibration",
        action="store_true",
        help="fail unless the shipped calibration.json is what the dev half gives",
    )
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    if args.rows:
        rows = json.loads(args.rows.read_text())
    else:
        curves = real_curves(args.real) + committed_curves(args.studies)
        rows = run_all(curves, args.workers)
    if args.json:
        args.json.write_text(json.dumps(rows))
    return print_report(analyse(rows), rows, args)


def run(main_fn, name: str) -> None:
    """Run a benchmark's main; a ScaleRLError is its one-line error."""
    try:
        sys.exit(main_fn())
    except ScaleRLError as exc:
        sys.exit(f"{name}: {exc}")


if __name__ == "__main__":
    run(main, "forecast_real")
