"""`scalerl ablate`: recipe comparisons and leave-one-out ablations, fitted and reported."""

from __future__ import annotations

import argparse
import sys

from scalerl.commands import require_train
from scalerl.run.compute import FIT_X

HELP = "run a study (recipes and/or leave-one-out variants of a base, N seeds), fit each and write a report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _variant_arguments(parser)
    _run_arguments(parser)
    parser.add_argument(
        "--x",
        dest="x_col",
        default=FIT_X,
        help="compute column of the fits (default: %(default)s, independent of the machine's load; "
        "compute/device_hours is the paper's axis)",
    )
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=200,
        metavar="N",
        help="bootstrap replicas per fit (default: %(default)s, as scalerl fit and scalerl train)",
    )
    parser.add_argument("--report-only", action="store_true", help="train nothing; fit and report what is there")
    parser.add_argument("--progress", action="store_true", help="a progress bar per run")
    parser.add_argument(
        "--jobs",
        type=_positive,
        default=1,
        metavar="N",
        help="train N runs at once, each on its own share of the cores (default 1; on a GPU "
        "machine the runs share the GPU)",
    )


def _variant_arguments(parser: argparse.ArgumentParser) -> None:
    """The configurations of the study: the base and what is compared with it."""
    parser.add_argument(
        "--base", default="scalerl", help="recipe the leave-one-out variants start from (default: scalerl)"
    )
    parser.add_argument(
        "--leave-one-out",
        action="store_true",
        help="add the base's leave-one-out variants (one ScaleRL component swapped each, paper Fig. 7)",
    )
    parser.add_argument(
        "--k-sweep",
        action="store_true",
        help="add PipelineRL k = 1, 2, 4, 8 (the base's own k is the base; paper Fig. 4)",
    )
    parser.add_argument(
        "--precision", action="store_true", help="add a bf16 trunk with and without the FP32 head (paper Fig. 5b)"
    )
    parser.add_argument(
        "--axes",
        action="store_true",
        help="add the paper's scaling axes at x0.5 and x2 of the base: prompts per step (batch-16, "
        "batch-64), thinking budget (think-52, think-208), generations per prompt at a fixed "
        "256 completions a step (gens-4, gens-16), model size (model-2m, model-4m); paper "
        "Section 5, docs/study.md",
    )
    parser.add_argument(
        "--controls",
        action="store_true",
        help="the study of the instrument itself: the base (named `base`), a larger model and a "
        "thinking budget too short for the hardest items (effects that exist), and the base "
        "under other seeds (`base-again`: an effect that does not); docs/study.md",
    )
    parser.add_argument(
        "--recipes",
        default="",
        metavar="A,B,...",
        help="recipes to compare with the base, e.g. grpo,dapo,gspo,magistral,minimax (paper Fig. 2)",
    )


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    """How each configuration runs: seeds, budget, overrides, where the runs go."""
    parser.add_argument(
        "--seeds",
        type=int,
        default=5,
        metavar="N",
        help="seeds per configuration (default %(default)s; the paper: 3, which on this testbed cannot "
        "detect differences in A of the paper's size: docs/study.md)",
    )
    parser.add_argument(
        "--budget",
        default=None,
        metavar="STEPS|Xmin",
        help="per run: optimizer steps (e.g. 200) or wall-clock training minutes (e.g. 5min)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override applied to every configuration (before the variant's own), repeatable",
    )
    parser.add_argument(
        "--out",
        default="runs/study",
        metavar="DIR",
        help="study directory (default: %(default)s); rerun with the same DIR to resume",
    )
    parser.add_argument(
        "--results",
        default=None,
        metavar="DIR",
        help="also keep every finished run in small form here (config, done.json, evaluation "
        "rows), and take finished runs from here: commit it to carry a study across machines",
    )
    parser.add_argument("--only", default="", metavar="A,B,...", help="train only these configurations this time")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number of at least 1")
    return value


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def run(args: argparse.Namespace) -> int:
    from scalerl.config import recipe_path
    from scalerl.study.study import ablate, command_line

    if not args.report_only:
        require_train("ablate")
    recipes = _names(args.recipes)
    for name in [args.base, *recipes]:
        recipe_path(name)  # a clear error for an unknown recipe before anything runs
    report = ablate(
        args.out,
        base=args.base,
        leave_one_out=args.leave_one_out,
        recipes=recipes,
        k_sweep=args.k_sweep,
        precision=args.precision,
        controls=args.controls,
        axes=args.axes,
        seeds=args.seeds,
        budget=args.budget,
        overrides=args.overrides,
        only=_names(args.only),
        x_col=args.x_col,
        n_bootstrap=args.bootstrap,
        report_only=args.report_only,
        progress=args.progress,
        command=command_line(sys.argv[1:]),
        jobs=args.jobs,
        results=args.results,
    )
    failed = [f"{c['name']} seed {r['seed']}" for c in report["configs"] for r in c["runs"] if r["failed"]]
    if failed:
        print(
            f"scalerl: {len(failed)} run(s) failed ({', '.join(failed)}): see failed.json in their run directories "
            "and report.md; rerun the same command to retry them",
            file=sys.stderr,
        )
        return 1
    return 0
