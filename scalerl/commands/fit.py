"""`scalerl fit`: fit the compute-performance curve to runs' metrics and forecast it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "fit the sigmoid compute-performance curve (paper Eq. 1) to metrics and forecast it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="run directory (metrics.jsonl or TensorBoard events), .jsonl, .csv or W&B CSV export")
    p.add_argument("--x", default="compute/device_hours", help="compute column (default: %(default)s)")
    p.add_argument("--y", default="val/pass_rate", help="metric column (default: %(default)s)")
    p.add_argument("--fit-min", type=float, default=None, metavar="C", help="drop points below this compute")
    p.add_argument("--fit-max", type=float, default=None, metavar="C", help="drop points above this compute")
    p.add_argument("--predict", type=float, nargs="+", default=[], metavar="C", help="forecast at these computes")
    p.add_argument("--model", choices=["sigmoid", "powerlaw"], default="sigmoid")
    p.add_argument("--fit-r0", action="store_true", help="fit R0 instead of fixing it to the measured start")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="write the plot here (and the linearised view beside it, FILE_linearised.png)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a readable summary")
    p.add_argument("--seeds-of-one", action="store_true",
                   help="the PATHs are seeds of one configuration: one pooled fit plus their spread")
    p.add_argument("--method", choices=["fast", "grid"], default="fast",
                   help="fast (default): coarse grid + bounded least squares; grid: the paper's full grid")
    p.add_argument("--bootstrap", type=int, default=200, metavar="N", help="bootstrap replicas (default: 200)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap random seed")
    p.add_argument("--a-range", type=float, nargs=2, default=None, metavar=("LO", "HI"),
                   help="search range of A (default: max metric - 0.1 .. 1.0)")


def _label(path: str) -> str:
    p = Path(path)
    return p.name if p.is_dir() else str(p)


def _fit_all(args: argparse.Namespace, data: dict) -> dict:
    """PATH (or all PATHs joined, with --seeds-of-one) -> FitResult, read warnings first."""
    from scalerl.errors import ScaleRLError
    from scalerl.scaling import fit_curve, fit_seeds

    kw = dict(model=args.model, fit_min=args.fit_min, fit_max=args.fit_max, fit_r0=args.fit_r0,
              n_bootstrap=args.bootstrap, seed=args.seed, method=args.method,
              a_range=tuple(args.a_range) if args.a_range else None)
    groups = {", ".join(args.paths): list(data)} if args.seeds_of_one else {p: [p] for p in data}
    fits = {}
    for where, paths in groups.items():
        try:
            if args.seeds_of_one:
                fits[where] = fit_seeds([data[p][:2] for p in paths], **kw)
            else:
                fits[where] = fit_curve(*data[where][:2], **kw)
        except ScaleRLError as exc:
            raise ScaleRLError(f"{where}: {exc}") from exc
        fits[where].warnings[:0] = [w for p in paths for w in data[p][2]]
    return fits


def _plot(args: argparse.Namespace, data: dict, fits: dict) -> None:
    import numpy as np

    from scalerl.scaling import plot_fits

    if args.seeds_of_one:
        (where, fit), = fits.items()
        runs = [("seeds", np.concatenate([data[p][0] for p in data]),
                 np.concatenate([data[p][1] for p in data]), fit)]
    else:
        runs = [(_label(p), *data[p][:2], fits[p]) for p in args.paths]
    plot = Path(args.plot)
    linear = plot.with_name(f"{plot.stem}_linearised{plot.suffix}") if args.model == "sigmoid" else None
    plot_fits(runs, plot, linear, xlabel=args.x, ylabel=args.y,
              extend_to=max(args.predict) if args.predict else None)


def run(args: argparse.Namespace) -> int:
    from scalerl.scaling import comparison_table, read_metrics, summary

    data = {path: read_metrics(path, args.x, args.y) for path in dict.fromkeys(args.paths)}
    fits = _fit_all(args, data)
    if args.plot:
        _plot(args, data, fits)
    if args.json:
        if args.seeds_of_one:  # one pooled object for all the PATHs
            (fit,) = fits.values()
            print(json.dumps({**fit.to_dict(args.predict), "paths": list(args.paths)}, indent=2))
        elif len(fits) == 1:
            print(json.dumps(next(iter(fits.values())).to_dict(args.predict), indent=2))
        else:
            print(json.dumps([{**f.to_dict(args.predict), "path": p} for p, f in fits.items()], indent=2))
        return 0
    for p, f in fits.items():
        print(summary(_label(p) if p in data else p, f, args.predict, x_name=args.x, y_name=args.y))
        print()
    if len(fits) > 1:
        print(comparison_table([(_label(p), f) for p, f in fits.items()]))
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0
