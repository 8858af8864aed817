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


def run(args: argparse.Namespace) -> int:
    from scalerl.errors import ScaleRLError
    from scalerl.scaling import comparison_table, fit_curve, fit_seeds, plot_fits, read_metrics, summary

    data = {path: read_metrics(path, args.x, args.y) for path in args.paths}
    kw = dict(model=args.model, fit_min=args.fit_min, fit_max=args.fit_max, fit_r0=args.fit_r0,
              n_bootstrap=args.bootstrap, seed=args.seed, method=args.method,
              a_range=tuple(args.a_range) if args.a_range else None)
    fits = {}
    try:
        if args.seeds_of_one:
            where = ", ".join(args.paths)
            fits[where] = fit_seeds([(x, y) for x, y, _ in data.values()], **kw)
            fits[where].warnings[:0] = [w for _, _, ws in data.values() for w in ws]
        else:
            for path, (x, y, warns) in data.items():
                where = path
                fits[path] = fit_curve(x, y, **kw)
                fits[path].warnings[:0] = warns
    except ScaleRLError as exc:
        raise ScaleRLError(f"{where}: {exc}") from exc

    if args.plot:
        plot = Path(args.plot)
        runs = [(_label(p), *data[p][:2], fits[p]) for p in args.paths if p in fits]
        if args.seeds_of_one:
            x_all = [v for x, _, _ in data.values() for v in x]
            y_all = [v for _, y, _ in data.values() for v in y]
            import numpy as np
            runs = [("seeds", np.asarray(x_all), np.asarray(y_all), fits[where])]
        linear = plot.with_name(f"{plot.stem}_linearised{plot.suffix}") if args.model == "sigmoid" else None
        plot_fits(runs, plot, linear, xlabel=args.x, ylabel=args.y,
                  extend_to=max(args.predict) if args.predict else None)

    if args.json:
        if args.seeds_of_one:  # one pooled object for all the PATHs
            print(json.dumps({**fits[where].to_dict(args.predict), "paths": list(args.paths)}, indent=2))
        elif len(args.paths) == 1:
            print(json.dumps(fits[args.paths[0]].to_dict(args.predict), indent=2))
        else:
            print(json.dumps([{**f.to_dict(args.predict), "path": p} for p, f in fits.items()], indent=2))
        return 0
    for p, f in fits.items():
        print(summary(_label(p), f, args.predict, x_name=args.x, y_name=args.y))
        print()
    if len(fits) > 1:
        print(comparison_table([(_label(p), f) for p, f in fits.items()]))
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0
