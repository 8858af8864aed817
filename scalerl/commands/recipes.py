"""`scalerl recipes`: list the shipped presets, or print one resolved (`show NAME --set k=v`)."""

from __future__ import annotations

import argparse

HELP = "list the recipe presets (scalerl, grpo, dapo, ...) or show one resolved as YAML"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.add_parser("list", help="one line per recipe: name, loss, aggregation, normalisation, mode (the default)")
    show = sub.add_parser("show", help="print a recipe resolved over the defaults, as YAML")
    show.add_argument("name", help="recipe name (see `scalerl recipes`)")
    show.add_argument("--config", default=None, metavar="FILE", help="YAML config file applied over the recipe")
    show.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dotted override, e.g. --set loss.eps_max=8 (repeatable)",
    )


def summary(name: str) -> str:
    """`name  loss=...  aggregation=...  norm=...  mode=...` for one recipe."""
    from scalerl.configure import load_config

    cfg = load_config(name)
    params = ",".join(
        f"{k}={v:g}"
        for k, v in cfg.loss.model_dump().items()
        if k not in ("type", "aggregation") and not (k == "kl_beta" and v == 0)
    )
    loss = f"{cfg.loss.type}({params})" if params else cfg.loss.type
    return (
        f"{name:<10} loss={loss:<41} aggregation={cfg.loss.aggregation:<7} norm={cfg.advantage.norm:<7}"
        f"mode={cfg.pipeline.mode}-{cfg.pipeline.k}"
    )


def run(args: argparse.Namespace) -> int:
    from scalerl.config import dump_config, list_recipes
    from scalerl.configure import load_config

    if args.action == "show":
        print(dump_config(load_config(args.name, args.config, args.overrides)), end="")
        return 0
    for name in list_recipes():
        print(summary(name))
    return 0
