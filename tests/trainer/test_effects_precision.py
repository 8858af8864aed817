"""The FP32 head takes effect in a real run: `train/logprob_mismatch` through `scalerl train`.

Under the paper's precision (`model.compute_dtype=bf16`: a bf16 trunk on both sides, computed
alike), the generator and the trainer agree to 1e-5 per token or better with the FP32 head
(measured 0 and 0 here); with the head in bf16 the trainer's log-softmax rounds to bf16 and the
mismatch grows to about 5e-3 (measured 5.2e-3 and 5.1e-3, seed spread 1.8e-4). The test
measures both settings on two seeds each and asserts that the gap exceeds the
seed-to-seed spread of either. (On a CPU `compute_dtype: auto`, the default, resolves to fp32,
where the head is fp32 either way: see docs/training.md.)
"""

import pytest

from scalerl.cli import main
from scalerl.run.metrics import read_rows

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.filterwarnings("ignore:step 1. truncation rate"),
]  # 32-token budget

# PPO-off-policy-1: every step trains on completions of the weights it holds, so each step
# has the metric; interruption-free 32-token completions keep the bf16 CPU steps short
RUN = [
    "model.name=tiny",
    "model.compute_dtype=bf16",
    "batch.prompts=2",
    "batch.generations=4",
    "rollout.length.type=none",
    "rollout.max_new_tokens=32",
    "pipeline.mode=ppo_off_policy",
    "pipeline.k=1",
    "pipeline.transport=thread",
    "run.threads=1",
    "run.max_steps=1",
    "eval.every=100",
    "eval.prompts=2",
    "eval.samples=1",
    "filter.zero_variance=false",
    "curriculum.no_positive_resampling=false",
]


def _mismatch(tmp_path, fp32_head: bool, seed: int) -> float:
    run = tmp_path / f"head{fp32_head}-seed{seed}"
    sets = [*RUN, f"model.fp32_head={str(fp32_head).lower()}", f"run.seed={seed}"]
    assert main(["train", "--no-progress", "--run-dir", str(run), *(a for s in sets for a in ("--set", s))]) == 0
    rows = [r for r in read_rows(run / "metrics.jsonl") if r["kind"] == "train"]
    assert rows and all("train/logprob_mismatch" in r for r in rows)
    return sum(r["train/logprob_mismatch"] for r in rows) / len(rows)


def test_fp32_head_lowers_the_generator_trainer_mismatch(tmp_path):
    on = [_mismatch(tmp_path, True, seed) for seed in (0, 1)]
    off = [_mismatch(tmp_path, False, seed) for seed in (0, 1)]
    noise = max(abs(on[0] - on[1]), abs(off[0] - off[1]))
    print(f"logprob_mismatch: FP32 head {on}, bf16 head {off}, seed spread {noise:.2e}")  # -s shows the figures
    assert min(off) - max(on) > noise
    assert max(on) < 1e-4 < 1e-3 < min(off)  # the head on: trunks alike to ~1e-5; off: bf16 log-softmax
