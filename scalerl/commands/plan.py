"""`scalerl plan`: which configuration to spend a compute budget on, from the fitted curves of
runs, seeds or a study's results folder; see docs/forecasting.md ("Plan the next unit of compute")."""

from __future__ import annotations

import argparse
import json

from scalerl.commands.fit import add_fitting_arguments, add_reading_arguments, options

HELP = "which configuration reaches the highest pass rate at a compute budget, where curves cross, gains at 2x/10x"
DEFAULT_X = "compute/flops"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="run directory (metrics.jsonl), a folder of seed<N>/ runs (one configuration), or a "
        "study's results folder (<config>/seed<N>/)",
    )
    p.add_argument(
        "--budget",
        type=float,
        required=True,
        metavar="C",
        help=f"the compute budget, in the units of --x (default x: {DEFAULT_X})",
    )
    add_reading_arguments(p)
    add_fitting_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a readable plan")


def run(args: argparse.Namespace) -> int:
    from scalerl.scaling.plan import check_budget, find_configs, fit_configs, plan, plan_lines

    check_budget(args.budget)
    if args.x is None and args.preset is None and args.compute is None:
        args.x = DEFAULT_X
    o = options(args)
    configs, skipped = fit_configs(find_configs(args.paths), o)
    first = next(iter(configs[0].runs.values()))
    out = plan(configs, args.budget, skipped, x_name=first.x_name, y_name=first.y_name)
    print(json.dumps(out, indent=2, allow_nan=False) if args.json else "\n".join(plan_lines(out)))
    return 0
