"""docs/config-reference.md is what scripts/config_reference.py writes from the schema, and names every key."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import yaml

from scalerl.config import Config, dump_config

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "config-reference.md"


def _generator():
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "scripts" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _keys(tree: dict, prefix: str = "") -> list[str]:
    out = []
    for name, value in tree.items():
        key = f"{prefix}{name}"
        out += (
            _keys(value, key + ".")
            if isinstance(value, dict) and value and name not in ("columns", "options")
            else [key]
        )
    return out


def test_committed_page_is_the_generated_one():
    assert PAGE.read_text() == _generator().render(), (
        "docs/config-reference.md differs from the schema: run `python scripts/config_reference.py` and commit it"
    )


def test_check_mode_fails_on_a_stale_page(tmp_path, monkeypatch):
    generator = _generator()
    stale = tmp_path / "config-reference.md"
    stale.write_text(PAGE.read_text().replace("| `optim.lr` |", "| `optim.learning_rate` |"))
    monkeypatch.setattr(generator, "PAGE", stale)
    assert generator.main(["--check"]) == 1
    stale.write_text(generator.render())
    assert generator.main(["--check"]) == 0


def test_every_key_of_the_default_config_has_a_row_with_its_default():
    """Independent of the renderer: the keys and values of the default config as `scalerl recipes show` dumps it."""
    text = PAGE.read_text()
    dumped = yaml.safe_load(dump_config(Config()))
    rows = {
        m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w.]+)` \| [^|]*(?:\\\|[^|]*)* \| ([^|]*) \|", text, re.M)
    }
    for key in _keys(dumped):
        assert key in rows or f"# `{key}`\n" in text, f"{key}: no row or section in docs/config-reference.md"
    assert rows["optim.lr"].strip() == f"`{dumped['optim']['lr']!r}`"
    assert rows["batch.prompts"].strip() == f"`{dumped['batch']['prompts']!r}`"
    assert rows["loss.eps_max"].strip() == f"`{dumped['loss']['eps_max']!r}`"


def test_the_script_runs_as_documented():
    done = subprocess.run(
        [sys.executable, "scripts/config_reference.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
