"""`pip install scalerl` is the forecaster: no torch. The import contract (what `scalerl fit` and the
CLI import, in a fresh interpreter), the `train` extra's list, and a wheel built from this checkout
installed into a fresh venv, run as a user runs it."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scalerl.commands import TRAIN_MODULES

ROOT = Path(__file__).resolve().parents[2]
TRL = ROOT / "tests" / "fixtures" / "trl_grpo"
FIT_TRL = ["fit", str(TRL), "--from", "trl", "--compute", "wall", "--devices", "1", "--bootstrap", "20"]

# The forecaster's side of the package, each module imported, then `scalerl --help` and `scalerl fit` run.
FORECASTER = """
import importlib, json, sys
for name in ("scalerl.scaling", "scalerl.scaling.plan", "scalerl.scaling.power", "scalerl.scaling.events",
             "scalerl.commands.fit", "scalerl.commands.watch", "scalerl.commands.plan", "scalerl.commands.check",
             "scalerl.study.band", "scalerl.demo"):
    importlib.import_module(name)
from scalerl.cli import build_parser, main
build_parser()
assert main(FIT_ARGS) == 0
EXTRA
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in TRAIN)))
"""


def imported_train_modules(extra: str = "") -> list[str]:
    code = (
        FORECASTER.replace("FIT_ARGS", repr(FIT_TRL)).replace("TRAIN", repr(set(TRAIN_MODULES))).replace("EXTRA", extra)
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_forecaster_imports_none_of_the_train_extra():
    assert imported_train_modules() == []


def test_control_the_contract_sees_a_torch_import():
    """The same check with one trainer module imported beside: it names torch."""
    assert "torch" in imported_train_modules("import scalerl.run.checkpoint")


def test_forecast_callback_needs_only_the_forecaster_of_scalerl():
    """`pip install scalerl trl` is enough for ForecastCallback: of scalerl it imports the forecaster alone."""
    pytest.importorskip("transformers")
    code = (
        "import sys, json, scalerl.integrations.trl; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('scalerl.'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ours = json.loads(done.stdout.strip().splitlines()[-1])
    assert "scalerl.integrations.trl" in ours
    assert [m for m in ours if not m.startswith(("scalerl.scaling", "scalerl.errors", "scalerl.integrations"))] == []


@pytest.mark.parametrize("argv", [["train"], ["generate"], ["export", "run", "out"], ["ablate", "--recipes", "grpo"]])
def test_a_trainer_command_without_the_extra_says_what_to_install(argv, monkeypatch, capsys):
    import importlib.util

    from scalerl.cli import main

    real = importlib.util.find_spec
    gone = ("torch", "peft")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in gone else real(name, *a))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.endswith(
        f"`scalerl {argv[0]}` needs the train extra (torch, peft not installed): pip install 'scalerl[train]'"
    )


def test_train_modules_are_the_train_extra():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].replace("-", "_") for req in extras["train"]}
    assert names == set(TRAIN_MODULES)
    for extra in ("ray", "trl", "vllm", "vllm-cpu"):
        assert "scalerl[train]" in extras[extra], extra


# ------------------------------------------------------- a wheel of this checkout in a fresh venv
NETWORK_ERRORS = (
    "NewConnectionError",
    "Network is unreachable",
    "Temporary failure in name resolution",
    "ConnectionError",
    "No route to host",
)


def user_env() -> dict[str, str]:
    """The environment a user's shell has: not this checkout on the path, not this test's venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def offline_build() -> list[str]:
    """Build with this interpreter's setuptools where it meets pyproject's build requirement (no download)."""
    try:
        import setuptools
    except ImportError:
        return []
    return ["--no-build-isolation"] if int(setuptools.__version__.split(".")[0]) >= 68 else []


def build_wheel(tmp_path: Path) -> Path:
    """A wheel of the checkout's sources (a copy: no stale build/ of the checkout leaks into it)."""
    import shutil

    src = tmp_path / "src"
    shutil.copytree(ROOT / "scalerl", src / "scalerl", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            *offline_build(),
            str(src),
            "-w",
            str(tmp_path / "wheel"),
        ],
        check=True,
        capture_output=True,
        env=user_env(),
        timeout=300,
    )
    (wheel,) = (tmp_path / "wheel").glob("scalerl-*.whl")
    return wheel


def fresh_venv_with(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=user_env(), timeout=300)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        env=user_env(),
        timeout=600,
    )
    if done.returncode and any(e in done.stdout + done.stderr for e in NETWORK_ERRORS):
        pytest.skip(
            "no package index reachable for the wheel's dependencies (pip: "
            f"{(done.stderr.strip().splitlines() or [''])[-1][:200]})"
        )
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin"


def in_venv(bin_dir: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**user_env(), "MPLBACKEND": "Agg", "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [str(bin_dir / argv[0]), *argv[1:]], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def test_a_wheel_in_a_fresh_venv_forecasts_without_torch_and_ships_its_data(tmp_path):
    bin_dir = fresh_venv_with(tmp_path, build_wheel(tmp_path))
    cwd = tmp_path / "work"
    cwd.mkdir()  # not the checkout: the venv's scalerl, not this one's
    where = in_venv(bin_dir, "python", "-c", "import scalerl, sys; print(scalerl.__file__); import torch", cwd=cwd)
    assert str(tmp_path / "venv") in where.stdout and "No module named 'torch'" in where.stderr
    fit = in_venv(bin_dir, "scalerl", *FIT_TRL, cwd=cwd)
    assert fit.returncode == 0 and "A " in fit.stdout, fit.stderr
    synthetic = in_venv(
        bin_dir,
        "scalerl",
        "fit",
        str(ROOT / "examples" / "synthetic-8b"),
        "--fit-min",
        "1500",
        "--fit-max",
        "8000",
        "--predict",
        "16000",
        "32000",
        "--bootstrap",
        "20",
        cwd=cwd,
    )
    assert synthetic.returncode == 0 and "compute/device_hours = 16,000" in synthetic.stdout, synthetic.stderr
    train = in_venv(bin_dir, "scalerl", "train", cwd=cwd)
    assert train.returncode == 2 and train.stderr.strip().endswith("pip install 'scalerl[train]'"), train.stderr
    assert len(train.stderr.strip().splitlines()) == 1
    recipes = in_venv(bin_dir, "scalerl", "recipes", cwd=cwd)
    assert recipes.returncode == 0 and all(r in recipes.stdout for r in ("scalerl", "grpo", "dapo", "minimax"))
    sums = in_venv(bin_dir, "python", "-c", SHIPPED_WEIGHTS, cwd=cwd)
    assert sums.returncode == 0 and sums.stdout.split() == ["ladder-1m", "ok"], sums.stderr


SHIPPED_WEIGHTS = """
import hashlib, pathlib, scalerl
folder = pathlib.Path(scalerl.__file__).parent / "models" / "weights" / "ladder-1m"
want, name = (folder / "SHA256SUMS").read_text().split()
assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == want
print(folder.name, "ok")
"""
