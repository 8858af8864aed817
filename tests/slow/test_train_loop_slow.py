"""The training loop end to end, slow tier: the process transport, and the reward going up on `tiny`."""

import json

import pytest

from scalerl.cli import main
from scalerl.loop import train
from scalerl.run.metrics import read_rows
from scalerl.transport.protocol import GeneratorBuild
from train_helpers import fake_components, small_cfg

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.slow  # spawning the generator process costs ~10-20 s of imports on a busy 2-core machine
def test_process_transport_trains(tmp_path, two_cores):
    from doubles import build_fake

    cfg = small_cfg(extra=["run.max_steps=3", "pipeline.transport=process", "run.threads=2", "eval.every=100"])
    comps, _ = fake_components(cfg)
    comps.build = GeneratorBuild(build_fake, (list(range(5, 40)), (3, 8), 8, 0.001))
    train(cfg, tmp_path, comps=comps, progress=False)
    rows = [r for r in read_rows(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["staleness/max"] <= cfg.pipeline.k for r in rows)


# ------------------------------------------------------------------ slow: reward goes up
@pytest.mark.slow
def test_reward_goes_up_on_tiny(tmp_path):
    code = main(
        [
            "train",
            "--no-progress",
            "--run-dir",
            str(tmp_path / "r"),
            "--set",
            "run.max_steps=40",
            "--set",
            "batch.prompts=16",
            "--set",
            "eval.every=8",
            "--set",
            "eval.prompts=128",
            "--set",
            "eval.samples=4",
        ]
    )
    assert code == 0
    rows = read_rows(tmp_path / "r" / "metrics.jsonl")
    evals = [r["val/pass_rate"] for r in rows if r["kind"] == "eval"]
    rewards = [r["train/reward_mean"] for r in rows if r["kind"] == "train"]
    assert len(evals) == 6 and len(rewards) == 40
    assert evals[-1] > evals[0] + 0.1  # validation pass rate rose
    assert sum(rewards[-10:]) / 10 > sum(rewards[:10]) / 10 + 0.2  # so did the training reward
    fit = json.loads((tmp_path / "r" / "fit.json").read_text())
    assert 0 < fit["A"] <= 1 and fit["B"] > 0 and fit["C_mid"] > 0
