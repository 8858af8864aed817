"""The whole training path on a CUDA device: `scalerl train` through the CLI with tiny-random and
the parity reward (some completions pass, so every step has a gradient), over both local
transports (a thread, and a spawned generator process holding its own CUDA copy of the weights).
Skipped without a GPU (`make test-gpu`)."""

import json
import math

import pytest

import scalerl.assembly.run as build_mod
from doubles import tiny_random_components
from scalerl.cli import main

pytestmark = pytest.mark.gpu

RUN = [
    "model.name=tiny-random",
    "model.device=cuda",
    "batch.prompts=4",
    "batch.generations=4",
    "rollout.max_new_tokens=12",
    "rollout.length.type=none",
    "eval.every=2",
    "eval.prompts=8",
    "eval.samples=2",
    "run.checkpoint_every=2",
    "run.max_steps=4",
    "optim.warmup_steps=1",
    "filter.zero_variance=false",
]


@pytest.mark.parametrize("transport", ["thread", "process"])
def test_train_on_cuda_bf16_trunk_fp32_head(tmp_path, capsys, monkeypatch, transport):
    monkeypatch.setattr(build_mod, "build_components", lambda cfg, device: tiny_random_components(cfg, device))
    out = tmp_path / "run"
    sets = [a for s in [*RUN, f"pipeline.transport={transport}"] for a in ("--set", s)]
    assert main(["train", "--no-progress", "--run-dir", str(out), *sets]) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    # auto precision on CUDA: a bf16 trunk, and generator and trainer agree on the sampled tokens'
    # log-probs up to bf16 rounding (a device mix-up or a stale copy shows as a large mismatch)
    config = (out / "config.yaml").read_text()
    assert "compute_dtype: auto" in config
    for r in train:
        assert math.isfinite(r["train/loss"]) and 0 < r["train/grad_norm"] < math.inf
    mismatch = [r["train/logprob_mismatch"] for r in train if "train/logprob_mismatch" in r]
    assert mismatch and all(0 <= m < 0.05 for m in mismatch), mismatch  # present when tokens came from current weights
    flops = [r["compute/flops"] for r in train]
    assert all(b > a for a, b in zip(flops, flops[1:]))
    assert (out / "checkpoints").is_dir()
