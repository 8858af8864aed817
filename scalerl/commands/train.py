"""`scalerl train`: RL with a recipe, metrics + checkpoints in a run directory, a forecast at the end."""

from __future__ import annotations

import argparse
import json

from scalerl.commands import require_train

HELP = "train with a recipe (default: ScaleRL on the ladder-1m model and the arith ladder, CPU) and forecast its curve"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--recipe",
        default=None,
        help="preset name (see `scalerl recipes`); default: the --config file's `recipe`, else scalerl",
    )
    parser.add_argument("--config", metavar="FILE", help="YAML config applied on top of the recipe")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one field, e.g. --set batch.prompts=16 --set model.name=smollm2-135m",
    )
    parser.add_argument("--run-dir", metavar="DIR", help="run directory (default runs/<recipe>-<timestamp>)")
    parser.add_argument("--max-steps", type=int, metavar="N", help="stop after N optimizer steps (run.max_steps)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir from its newest intact "
        "checkpoint, under its recorded config.yaml (--max-steps / --set changes are printed and recorded)",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="start the run in --run-dir over from step 0 under its "
        "config.yaml; what it wrote (checkpoints, metrics) is kept in <run-dir>/previous-N/",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    ray = parser.add_argument_group("scale out (docs/ray.md)")
    ray.add_argument("--backend", choices=["local", "ray"], help="pipeline.backend: local (default) or ray actors")
    ray.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="ray.address of a running cluster (default: start a local Ray and stop it at the end)",
    )
    ray.add_argument("--generators", type=int, metavar="N", help="ray.generators: generator actors")
    ray.add_argument("--trainers", type=int, metavar="W", help="ray.trainers: data-parallel trainer workers")


def scale_out_overrides(args: argparse.Namespace) -> list[str]:
    """--backend/--ray-address/--generators/--trainers as --set overrides (applied after the others)."""
    address = None if args.ray_address is None else json.dumps(args.ray_address)  # a YAML string, never a number
    pairs = [
        ("pipeline.backend", args.backend),
        ("ray.address", address),
        ("ray.generators", args.generators),
        ("ray.trainers", args.trainers),
    ]
    return [f"{key}={value}" for key, value in pairs if value is not None]


def run(args: argparse.Namespace) -> int:
    require_train("train")
    from scalerl.launch import run_training

    return run_training(
        recipe=args.recipe,
        config_file=args.config,
        overrides=args.overrides + scale_out_overrides(args),
        run_dir=args.run_dir,
        max_steps=args.max_steps,
        resume=args.resume,
        progress=not args.no_progress,
        restart=args.restart,
    )
