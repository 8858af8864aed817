"""The package's layers (pyproject.toml, [tool.importlinter]; docs/design.md, "Layers") hold:
no import runs up a layer, no import circle, and a generator process reaches nothing of the training loop."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_import_runs_up_a_layer():
    from importlinter.cli import lint_imports

    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    assert code == 0, "lint-imports found an import that runs up a layer or closes a circle (its report is above)"


def _lint_a_copy(tmp_path: Path, module: str, added: str) -> subprocess.CompletedProcess:
    """lint-imports over a copy of the package and its contracts, `added` appended to `module` (a path
    under scalerl/)."""
    import os
    import shutil

    shutil.copytree(ROOT / "scalerl", tmp_path / "scalerl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    changed = tmp_path / "scalerl" / module
    changed.write_text(changed.read_text() + added)
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )


def test_the_contract_catches_an_upward_import(tmp_path):
    """A control: the same contract over a copy of the package with one upward import added (inside a
    function, at the bottom layer) is broken, and the report names it."""
    out = _lint_a_copy(tmp_path, "errors.py", "\n\ndef _up():\n    from scalerl.loop import train  # noqa: F401\n")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "scalerl.errors is not allowed to import scalerl.loop" in out.stdout


def test_the_contract_catches_an_import_circle(tmp_path):
    """A control: a lazy import that closes a circle inside one layer (scalerl/config/base.py, imported by
    scalerl/config/run.py, importing it back in a function) breaks the acyclic contract, and the report
    names the package."""
    out = _lint_a_copy(
        tmp_path, "config/base.py", "\n\ndef _back():\n    from scalerl.config.run import Config  # noqa: F401\n"
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "scalerl layers KEPT" in out.stdout
    assert "No cycles are allowed in scalerl.config." in out.stdout


def test_a_generator_process_imports_nothing_of_the_loop():
    """What a spawned generator unpickles (`build_generator`) and runs (the process transport's main)
    pulls in no module of the loop's layer or above."""
    code = (
        "import sys, pickle; from scalerl.assembly.generator import build_generator; "
        "import scalerl.transport.local; pickle.loads(pickle.dumps(build_generator)); "
        "bad = sorted(m for m in sys.modules if m.split('.')[:2] in (['scalerl', 'loop'], ['scalerl', 'launch'], "
        "['scalerl', 'study'], ['scalerl', 'commands'], ['scalerl', 'monitor'])); print(bad); sys.exit(bool(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
