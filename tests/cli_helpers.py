"""Shared by the run-directory and robustness tests: a small `scalerl train` through the CLI on
tiny-random with the parity reward, and the one-line error check."""

import pytest

import scalerl.assembly.run as build_mod
from doubles import tiny_random_components
from scalerl.cli import main

SMALL = [
    "rollout.length.think_min=4",
    "rollout.length.think_max=6",
    "rollout.length.answer_budget=4",
    "rollout.length.phrase=</think>",  # the forced-interruption path inside a 12-token budget
    "model.name=tiny-random",
    "batch.prompts=2",
    "batch.generations=4",
    "rollout.max_new_tokens=12",
    "rollout.batch_slots=8",
    "eval.every=2",
    "eval.prompts=4",
    "eval.samples=2",
    "run.checkpoint_every=2",
    "optim.warmup_steps=1",
    "pipeline.transport=thread",
    "run.threads=1",
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
