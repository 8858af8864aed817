"""Subcommands of the `scalerl` CLI.

Each subcommand is a module here with three names:
    HELP: str                       one-line help
    add_arguments(parser) -> None   declares the options (must not import torch)
    run(args) -> int                does the work (imports heavy modules inside)
and is listed in `scalerl.cli.COMMANDS`. Keep `run` thin: parse, validate, call one function.
"""

from __future__ import annotations

import importlib.util

# The import names of the `train` extra's packages (pyproject.toml; tests/project/test_light_install.py keeps the two
# alike): what `train`, `generate`, `export` and `ablate` need beyond `pip install scalerl`, the forecaster.
TRAIN_MODULES = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "datasets",
    "math_verify",
    "reasoning_gym",
    "tqdm",
    "gguf",
    "accelerate",
    "peft",
    "psutil",
    "tensorboard",
)


def require_train(command: str) -> None:
    """One line naming what is missing when `command` runs without the `train` extra (before any import fails
    deep inside it)."""
    from scalerl.errors import ScaleRLError

    missing = [name for name in TRAIN_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ScaleRLError(
            f"`scalerl {command}` needs the train extra ({shown} not installed): pip install 'scalerl[train]'"
        )
