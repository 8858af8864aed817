"""The recipes, YAML presets of `Config` under `scalerl/recipes/`, and the resolved config as YAML."""

from __future__ import annotations

import difflib
from pathlib import Path

import yaml

from scalerl.config.run import Config
from scalerl.errors import ScaleRLError

RECIPES_DIR = Path(__file__).parent.parent / "recipes"


def list_recipes() -> list[str]:
    """Names of the shipped presets, `scalerl` first."""
    return sorted((p.stem for p in RECIPES_DIR.glob("*.yaml")), key=lambda n: (n != "scalerl", n))


def recipe_path(name: str) -> Path:
    path = RECIPES_DIR / f"{name}.yaml"
    if not path.is_file():
        names = list_recipes()
        hint = difflib.get_close_matches(name, names, n=2)
        more = f"; did you mean {' or '.join(repr(h) for h in hint)}?" if hint else ""
        raise ScaleRLError(f"unknown recipe {name!r} (available: {', '.join(names)}){more}")
    return path


def dump_config(cfg: Config) -> str:
    """The resolved config as YAML; `load_config(config_file=...)` (scalerl.configure) reads it back to the
    same Config."""
    body = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, default_flow_style=False)
    return f"# scalerl resolved config (recipe: {cfg.recipe})\n{body}"
