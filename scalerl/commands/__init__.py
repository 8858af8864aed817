"""Subcommands of the `scalerl` CLI.

Each subcommand is a module here with three names:
    HELP: str                       one-line help
    add_arguments(parser) -> None   declares the options (must not import torch)
    run(args) -> int                does the work (imports heavy modules inside)
and is listed in `scalerl.cli.COMMANDS`. Keep `run` thin: parse, validate, call one function.
"""
