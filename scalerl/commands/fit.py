"""`scalerl fit`: fit the compute-performance curve to runs' metrics and forecast it.

Reads scalerl runs and other frameworks' logs
(`--from trl|verl|openrlhf|skyrl|prime-rl|nemo-rl|areal|slime|scalerl`), with
compute from a column (`--x`) or derived (`--compute wall|tokens|steps`); see docs/forecasting.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "fit the sigmoid compute-performance curve (paper Eq. 1) to metrics and forecast it"
PRESETS = ("trl", "verl", "openrlhf", "skyrl", "prime-rl", "nemo-rl", "areal", "slime", "scalerl")


def add_reading_arguments(p: argparse.ArgumentParser) -> None:
    """What to read and how compute is derived (shared with `scalerl watch`)."""
    p.add_argument(
        "--from",
        dest="preset",
        choices=PRESETS,
        default=None,
        help="the framework that wrote the logs: picks its validation metric, steps, wall time, tokens",
    )
    p.add_argument(
        "--x",
        default=None,
        help="compute column (default: compute/flops for a scalerl run directory or the metrics.jsonl in "
        "one, the axis `scalerl train` fits; compute/device_hours otherwise; or derived with --compute)",
    )
    p.add_argument(
        "--y",
        "--metric",
        dest="y",
        default=None,
        help="metric column (default: val/pass_rate, or the --from preset's; val/pass_rate/<domain> fits "
        "one domain of a mixed task, e.g. val/pass_rate/code)",
    )
    p.add_argument(
        "--compute",
        choices=["wall", "tokens", "steps"],
        default=None,
        help="derive compute: wall (device-hours, with --devices), tokens (FLOPs, with --params), "
        "steps (with --per-step)",
    )
    p.add_argument("--devices", type=float, default=None, metavar="N", help="devices the run used (--compute wall)")
    p.add_argument("--params", type=float, default=None, metavar="N", help="model parameters (--compute tokens)")
    p.add_argument("--per-step", type=float, default=None, metavar="X", help="compute of one step (--compute steps)")
    p.add_argument(
        "--pause-threshold",
        type=float,
        default=None,
        metavar="S",
        help="gaps between log events longer than this many seconds are pauses, left out of wall "
        "time (default: max(600, 30 x the median gap))",
    )
    p.add_argument("--reward-to-pass", action="store_true", help="map a reward in [-1, 1] to a pass rate: (r + 1) / 2")


def add_fitting_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fit-min", type=float, default=None, metavar="C", help="drop points below this compute")
    p.add_argument("--fit-max", type=float, default=None, metavar="C", help="drop points above this compute")
    p.add_argument(
        "--fit-min-frac",
        type=float,
        default=0.1,
        metavar="F",
        help="without --fit-min, leave out the first F of the compute, as the paper does (default: "
        "%(default)s; 0 keeps every point)",
    )
    p.add_argument("--model", choices=["sigmoid", "powerlaw"], default="sigmoid")
    p.add_argument("--fit-r0", action="store_true", help="fit R0 instead of fixing it to the measured start")
    p.add_argument(
        "--method",
        choices=["fast", "grid"],
        default="fast",
        help="fast (default): coarse grid + bounded least squares, checked against the paper's grid; "
        "grid: the paper's full grid",
    )
    p.add_argument(
        "--no-grid-check", action="store_true", help="skip the check of the fast fit against the paper's grid (faster)"
    )
    p.add_argument("--bootstrap", type=int, default=200, metavar="N", help="bootstrap replicas (default: 200)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap random seed")
    p.add_argument(
        "--a-range",
        type=float,
        nargs=2,
        default=None,
        metavar=("LO", "HI"),
        help="search range of A (default: max metric - 0.1 .. 1.0)",
    )


def add_decision_arguments(p: argparse.ArgumentParser) -> None:
    """What a user asks of the forecast (shared with `scalerl watch`)."""
    p.add_argument(
        "--target",
        type=float,
        nargs="+",
        default=[],
        metavar="T",
        help="the compute at which the run reaches this pass rate, with its 90%% interval (or: not before the ceiling)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="C",
        help="the compute you could run to: the gain left from the last evaluation to it, and the stop rule",
    )
    p.add_argument(
        "--stop-when",
        type=float,
        default=0.02,
        metavar="GAIN",
        dest="stop_when",
        help="with --budget: stop when the upper end of the 90%% interval of the gain left is below "
        "GAIN (default: %(default)s, the paper's margin between recipes)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="run directory (metrics.jsonl or TensorBoard events), .jsonl, .csv or W&B CSV export",
    )
    add_reading_arguments(p)
    add_fitting_arguments(p)
    p.add_argument("--predict", type=float, nargs="+", default=[], metavar="C", help="forecast at these computes")
    add_decision_arguments(p)
    p.add_argument(
        "--plot",
        default=None,
        metavar="FILE.png",
        help="write the plot here (and the linearised view beside it, FILE_linearised.png)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a readable summary")
    p.add_argument(
        "--seeds-of-one",
        action="store_true",
        help="the PATHs are seeds of one configuration: one pooled fit plus their spread",
    )


def options(args: argparse.Namespace):
    """The parsed arguments as `scalerl.scaling.forecast.Options`, checked."""
    from scalerl.scaling.forecast import Options
    from scalerl.scaling.sources import Compute

    compute = None
    if args.compute:
        compute = Compute(
            args.compute,
            devices=args.devices,
            params=args.params,
            per_step=args.per_step,
            pause_threshold=args.pause_threshold,
        )
    o = Options(
        y=args.y,
        x=args.x,
        preset=args.preset,
        compute=compute,
        reward_to_pass=args.reward_to_pass,
        fit_min=args.fit_min,
        fit_max=args.fit_max,
        fit_min_frac=args.fit_min_frac,
        model=args.model,
        fit_r0=args.fit_r0,
        method=args.method,
        n_bootstrap=args.bootstrap,
        seed=args.seed,
        a_range=tuple(args.a_range) if args.a_range else None,
        check_grid=not args.no_grid_check,
        predict=tuple(getattr(args, "predict", ()) or ()),
        **_answers(args),
    )
    o.check()
    return o


def _answers(args: argparse.Namespace) -> dict:
    """`scalerl fit`'s questions (--target, --budget, --stop-when) as Options fields; none for a command
    that shares only the fitting options (`scalerl plan`, whose --budget is another question)."""
    if not hasattr(args, "stop_when"):
        return {}
    return {"targets": tuple(args.target or ()), "budget": args.budget, "stop_below": args.stop_when}


def check_plot_path(plot: str | None) -> None:
    """A plot that cannot be written is a one-line error before any fitting."""
    if plot is None:
        return
    from scalerl.errors import ScaleRLError
    from scalerl.scaling.plots import supported_formats

    path = Path(plot)
    if not path.parent.is_dir():
        raise ScaleRLError(f"--plot {plot}: folder {path.parent} does not exist")
    ext = path.suffix.lower().lstrip(".")
    if ext not in supported_formats():
        raise ScaleRLError(
            f"--plot {plot}: unknown image type {path.suffix or '(none)'!r} "
            f"(expected one of {', '.join('.' + e for e in sorted(supported_formats()))})"
        )


def labels(paths) -> dict[str, str]:
    """A short name per PATH for tables and plots: a run directory's own name, lengthened by its
    parent folders until no two PATHs share it (runs/a/seed0 and runs/b/seed0 -> a/seed0, b/seed0);
    a file keeps its path as given."""
    paths = list(dict.fromkeys(paths))
    parts = {p: Path(p).resolve().parts if Path(p).is_dir() else None for p in paths}
    depth = {p: 1 for p in paths}
    while True:
        out = {p: "/".join(parts[p][-depth[p] :]) if parts[p] else p for p in paths}
        clash = {p for p in paths if parts[p] and list(out.values()).count(out[p]) > 1 and depth[p] < len(parts[p])}
        if not clash:
            return out
        for p in clash:
            depth[p] += 1


def _fit_all(args: argparse.Namespace, o, data: dict) -> dict:
    """PATH (or all PATHs joined, with --seeds-of-one) -> FitResult."""
    from scalerl.errors import ScaleRLError
    from scalerl.scaling.forecast import fit_pooled, fit_series

    if args.seeds_of_one:
        try:
            return {", ".join(args.paths): fit_pooled(list(data.values()), o)}
        except ScaleRLError as exc:
            raise ScaleRLError(f"{', '.join(args.paths)}: {exc}") from exc
    fits = {}
    for where, series in data.items():
        try:
            fits[where] = fit_series(series, o)
        except ScaleRLError as exc:
            raise ScaleRLError(f"{where}: {exc}") from exc
    return fits


def _plot(args: argparse.Namespace, data: dict, fits: dict) -> None:
    import numpy as np

    from scalerl.scaling import plot_fits

    if args.seeds_of_one:
        (fit,) = fits.values()
        x = np.concatenate([s.x for s in data.values()])
        runs = [("seeds", x, np.concatenate([s.y for s in data.values()]), fit)]
    else:
        names = labels(data)
        runs = [(names[p], data[p].x, data[p].y, fits[p]) for p in data]
    plot = Path(args.plot)
    linear = plot.with_name(f"{plot.stem}_linearised{plot.suffix}") if args.model == "sigmoid" else None
    first = next(iter(data.values()))
    plot_fits(
        runs,
        plot,
        linear,
        xlabel=first.x_name,
        ylabel=first.y_name,
        extend_to=max(args.predict) if args.predict else None,
    )


def _json(args: argparse.Namespace, o, data: dict, fits: dict) -> str:
    from scalerl.scaling.forecast import finite_json, forecast_dict

    if args.seeds_of_one:  # one pooled object for all the PATHs
        from scalerl.scaling.power import detectable_difference

        (fit,) = fits.values()
        first, spread = next(iter(data.values())), fit.seed_spread()
        out = finite_json(
            {
                **fit.to_dict(o.predict),
                "paths": list(args.paths),
                "x": first.x_name,
                "detectable": {p: detectable_difference(spread["std"][p], spread["n_seeds"]) for p in ("A", "B")}
                if spread
                else None,
                "y": first.y_name,
                "compute": first.how,
                "window": list(fit.window),
            }
        )
    elif len(fits) == 1:
        ((p, fit),) = fits.items()
        out = forecast_dict(data[p], fit, o)
    else:
        out = [{**forecast_dict(data[p], f, o), "path": p} for p, f in fits.items()]
    return json.dumps(out, indent=2, allow_nan=False)


def run(args: argparse.Namespace) -> int:
    from scalerl.scaling import comparison_table, summary
    from scalerl.scaling.forecast import forecast_dict, read
    from scalerl.scaling.power import power_text
    from scalerl.scaling.report import first_half_line, outlook_lines, verdict_lines

    o = options(args)
    check_plot_path(args.plot)
    data = {path: read(path, o) for path in dict.fromkeys(args.paths)}
    fits = _fit_all(args, o, data)
    if args.plot:
        _plot(args, data, fits)
    if args.json:
        print(_json(args, o, data, fits))
        return 0
    names = labels(data)
    for p, f in fits.items():
        s = data.get(p) or next(iter(data.values()))
        d = forecast_dict(s, f, o) if p in data else None
        print(
            summary(
                names.get(p, p),
                f,
                () if d else o.predict,
                x_name=s.x_name,
                y_name=s.y_name,
                ceiling=d.get("ceiling") if d else None,
            )
        )
        if d:
            print("\n".join(outlook_lines(d, s.x_name, s.y_name)))
        if args.seeds_of_one and power_text(f.seed_spread()):
            print(f"  {power_text(f.seed_spread())}")
        if d:
            if d["compute"].get("kind") != "column":
                print(f"  compute: {_how(d['compute'])}")
            if "verdict" in d:
                print("\n".join(verdict_lines(d["verdict"], s.x_name)))
            print("\n".join(decision_lines(d)))
            if d.get("first_half_fit") and "error" in d["first_half_fit"]:
                print(first_half_line(d["first_half_fit"]))
        print()
    if len(fits) > 1:
        print(comparison_table([(names[p], f) for p, f in fits.items()]))
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


def decision_lines(d: dict) -> list[str]:
    """The --target and --budget answers of one `forecast_dict`, in plain words."""
    lines = [f"  target: {t['text']}" for t in d.get("targets", [])]
    if "budget" in d:
        lines.append(f"  budget: {d['budget']['text']}")
    return lines


def _how(how: dict) -> str:
    if how["kind"] == "wall":
        paused = f", {len(how['pauses'])} pause(s) left out" if how.get("pauses") else ""
        return f"{how['unit']} = wall time x {how['devices']:g} device(s), from {how['source']}{paused}"
    if how["kind"] == "tokens":
        cols = "; ".join(" x ".join(c["columns"]) for c in how["columns"])
        return f"FLOPs = {how['rule']}, N = {how['params']:g}, tokens from {cols}"
    return f"step x {how['per_step']:g}"
