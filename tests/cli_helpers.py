"""Shared by the run-directory and robustness tests: a small `scalerl train` through the CLI on
tiny-random with the parity reward, and the one-line error check."""

import pytest

import scalerl.assembly.run as build_mod
from doubles import tiny_random_components
from scalerl.cli import main
from train_helpers import SMALL as TRAIN_SMALL

SMALL = [
    "rollout.length.think_min=4",
    "rollout.length.think_max=6",
    "rollout.length.answer_budget=4",
    "rollout.length.phrase=</think>",  # the forced-interruption path inside a 12-token budget
    *TRAIN_SMALL,  # the loop tests' small run (train_helpers)
]
SETS = [a for s in SMALL for a in ("--set", s)]


@pytest.fixture(autouse=True)
def fake_model(monkeypatch):
    """tiny-random + parity reward instead of the configured model/reward (no model build, a few seconds a run)."""
    monkeypatch.setattr(build_mod, "build_components", lambda cfg, device: tiny_random_components(cfg, device))


def train_cli(capsys, *args):
    code = main(["train", "--no-progress", *args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("scalerl: error: "), err
    return lines[0]
