"""LoRA against full fine-tuning on SmolLM2-135M: the trainer's step time, its memory, and the publish.

    .venv/bin/python benchmarks/lora.py [--model smollm2-135m] [--steps 4] [--rounds 2]

Each variant runs in a fresh interpreter, alternating (full, lora, full, lora, ...) so that a
change of load on the machine falls on both: the model loaded in fp32 on the CPU, LoRA applied
as `model.lora={r: 8, alpha: 16, targets: [q_proj, v_proj]}` does (`scalerl.lora`), the
trainer's own `Optimizer` and `train_step` on a fixed batch of random groups (8 prompts x 8
completions, 150-token prompts sharing their K/V as the trainer does, 32-token completions:
about the first-hour run of docs/your-data.md), one warm-up step, then `--steps` timed steps.
Reported per variant: the median step (seconds), the trainable parameters, the optimizer state
(bytes), the process's peak resident set (ru_maxrss) and its growth over the loaded model, and
the publish: what the generator is sent after a step (`merged_state_dict` for LoRA: W + BA per
adapted layer; the state dict itself for full fine-tuning). Ratios are LoRA / full from this one
invocation. `smollm2-shape-random` stands in where the SmolLM2 package is not installed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, random, resource, sys, time
import torch
from scalerl.config import LoraConfig
from scalerl.configure import load_config
from scalerl.lora import apply_lora, merged_state_dict, trainable_params
from scalerl.models import load_model
from scalerl.trainer.step import Optimizer, train_step
from scalerl.types import Completion, Group, Prompt, Score

mode, name, steps, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
model, tok = load_model(name, "fp32", "cpu")
loaded = rss()
cfg = load_config("scalerl", overrides=[f"model.name={name}", "model.device=cpu"]
                  + (["model.lora={r: 8, alpha: 16, targets: [q_proj, v_proj]}"] if mode == "lora" else []))
if mode == "lora":
    model = apply_lora(model, cfg.model.lora)
model.train()
optim = Optimizer(model, cfg)
rng = random.Random(0)
vocab = model.config.vocab_size
groups = []
for p in range(8):
    prompt = [rng.randrange(3, vocab) for _ in range(150)]
    comps = [Completion(id=f"{p}/{g}", prompt_id=str(p), prompt_tokens=prompt,
                        tokens=[rng.randrange(3, vocab) for _ in range(32)], logprobs=[-2.0] * 32,
                        versions=[0] * 32, text="", finish_reason="eos") for g in range(8)]
    groups.append(Group(Prompt(str(p), "", ""), comps, [Score(1.0 if g % 2 else -1.0, g % 2 == 1) for g in range(8)]))
pad = tok.pad_token_id if tok.pad_token_id is not None else 0

def publish():
    t0 = time.perf_counter()
    state = merged_state_dict(model) if mode == "lora" else {k: v.detach() for k, v in model.state_dict().items()}
    return time.perf_counter() - t0, sum(v.numel() * v.element_size() for v in state.values())

train_step(model, optim, groups, cfg, pad, 0)                  # warm-up: allocator, kernels, optimizer state
times, pubs = [], []
for s in range(steps):
    t0 = time.perf_counter()
    train_step(model, optim, groups, cfg, pad, s + 1)
    times.append(time.perf_counter() - t0)
    pubs.append(publish()[0])
state_bytes = sum(t.numel() * t.element_size() for st in optim.opt.state.values() for t in st.values()
                  if torch.is_tensor(t))
print(json.dumps({"mode": mode, "steps": times, "publish": pubs, "trainable": trainable_params(model),
                  "optim_bytes": state_bytes, "peak_mb": rss(), "loaded_mb": loaded}))
"""


def measure(mode: str, model: str, steps: int, threads: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, model, str(steps), str(threads)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="alternating full/lora pairs")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    runs = {"full": [], "lora": []}
    for _ in range(a.rounds):
        for mode in ("full", "lora"):
            runs[mode].append(measure(mode, a.model, a.steps, a.threads))
    print(
        f"{a.model}, fp32, CPU, {a.threads} threads; 8 x 8 completions (150-token prompts, 32-token completions); "
        f"{a.rounds} rounds x {a.steps} timed steps per variant"
    )
    summary = {}
    for mode, rs in runs.items():
        step = statistics.median(t for r in rs for t in r["steps"])
        pub = statistics.median(t for r in rs for t in r["publish"])
        peak = statistics.median(r["peak_mb"] for r in rs)
        growth = statistics.median(r["peak_mb"] - r["loaded_mb"] for r in rs)
        summary[mode] = (step, pub, peak, growth, rs[0]["optim_bytes"])
        print(
            f"{mode:5s} step {step:6.2f} s (median)  publish {pub * 1000:6.0f} ms  "
            f"trainable {rs[0]['trainable']:>12,}  "
            f"optimizer state {rs[0]['optim_bytes'] / 2**20:7.1f} MiB  peak RSS {peak:7.0f} MB "
            f"(+{growth:.0f} MB over the loaded model)"
        )
    f, lo = summary["full"], summary["lora"]
    print(
        f"LoRA / full: step time x{lo[0] / f[0]:.2f}, publish x{lo[1] / f[1]:.2f}, peak RSS x{lo[2] / f[2]:.2f}, "
        f"growth x{lo[3] / f[3]:.2f}, optimizer state x{lo[4] / f[4]:.4f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
