"""`scalerl train`: RL with a recipe, metrics + checkpoints in a run directory, a forecast at the end."""

from __future__ import annotations

import argparse

HELP = "train with a recipe (default: ScaleRL on the tiny model, ~5 min on a CPU) and forecast its curve"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--recipe", default=None, help="preset name (see `scalerl recipes`); default: the --config "
                        "file's `recipe`, else scalerl")
    parser.add_argument("--config", metavar="FILE", help="YAML config applied on top of the recipe")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one field, e.g. --set batch.prompts=16 --set model.name=smollm2-135m")
    parser.add_argument("--run-dir", metavar="DIR", help="run directory (default runs/<recipe>-<timestamp>)")
    parser.add_argument("--max-steps", type=int, metavar="N", help="stop after N optimizer steps (run.max_steps)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its last checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from scalerl.pipeline.launch import run_training

    return run_training(recipe=args.recipe, config_file=args.config, overrides=args.overrides,
                        run_dir=args.run_dir, max_steps=args.max_steps, resume=args.resume,
                        progress=not args.no_progress)
