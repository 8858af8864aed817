"""Where a SmolLM2 optimizer step's memory peak comes from: the trainer's resident high-water mark
(Linux's VmHWM, reset before each phase) over the micro-batches' forwards and backwards, and over
clipping plus AdamW, for steps of 1, 2 and 3 groups (one group a micro-batch). Groups are made of
random tokens of the run's shapes (a 301-token prompt, 8 completions of 13 tokens): activations
depend on shapes, not values. One thread; `--trim` collects and trims glibc's heap before each
micro-batch's forward, which tells memory still in use from memory freed but kept by the heap.

    PYTHONPATH=. .venv/bin/python benchmarks/step_peak.py [--trim] [--set batch.recompute=never ...]

`--set` takes config overrides as `scalerl train` does (for example `batch.recompute=never`
against the default `auto`, which recomputes a group whose activations pass the budget).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import random
import time

import torch

from scalerl.configure import load_config
from scalerl.models import load_model
from scalerl.run.memory import tune_malloc
from scalerl.trainer import step as S
from scalerl.types import Completion, Group, Prompt, Score


def memory() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    fields = dict(line.split(":", 1) for line in open("/proc/self/status", encoding="utf-8"))
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def reset() -> None:
    """Free what is garbage, hand glibc's free pages back, and restart the high-water mark."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w", encoding="utf-8") as f:
        f.write("5")


def group(seed: int, prompt: int = 301, length: int = 13, size: int = 8) -> Group:
    rng = random.Random(seed)
    tokens = [rng.randrange(100, 40_000) for _ in range(prompt)]
    comps = [
        Completion(
            id=f"{seed}/{j}",
            prompt_id=str(seed),
            prompt_tokens=tokens,
            tokens=[rng.randrange(100, 40_000) for _ in range(length)],
            logprobs=[-1.0] * length,
            versions=[0] * length,
            text="",
            finish_reason="eos",
            forced_mask=[False] * length,
        )
        for j in range(size)
    ]
    rewards = [1.0, -1.0] * (size // 2)
    return Group(Prompt(str(seed), "", ""), comps, [Score(r, r > 0) for r in rewards], 0)


def one_step(model, opt: S.Optimizer, cfg, n: int) -> str:
    """A step of `n` groups; its phases' peaks over the resident memory before it."""
    shard = S.plan_shards([group(10 + i) for i in range(n)], cfg, 1, None)[0]
    reset()
    base, _ = memory()
    model.train()
    opt.opt.zero_grad(set_to_none=True)
    start = time.time()
    parts, _, _, _, recomputed = S._backward(model, shard, cfg, 0, 2, None)
    _, backward = memory()
    reset()
    for p in opt.params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    torch.nn.utils.clip_grad_norm_(opt.params, 1.0)
    opt.opt.step()
    _, update = memory()
    opt.opt.zero_grad(set_to_none=True)
    return (
        f"{n} group(s), {len(parts)} micro-batch(es), {recomputed} recomputed: before {base:.0f} MiB; "
        "peak over the backward "
        f"+{backward - base:.0f}, over clip + AdamW +{update - base:.0f}; {time.time() - start:.0f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trim", action="store_true", help="collect and trim before each micro-batch's forward")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override")
    a = ap.parse_args()
    torch.set_num_threads(1)
    tune_malloc()
    forward = S.completion_logprobs

    def logged(model, batch, *args, **kwargs):
        if a.trim:
            gc.collect()
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        rss, hwm = memory()
        print(f"  before a micro-batch's forward: resident {rss:.0f} MiB (high-water {hwm:.0f})", flush=True)
        return forward(model, batch, *args, **kwargs)

    S.completion_logprobs = logged
    cfg = load_config(
        "scalerl", overrides=["model.name=smollm2-135m", "batch.prompts=8", "batch.generations=8", *a.set]
    )
    model, _ = load_model("smollm2-135m")
    opt = S.Optimizer(model, cfg)
    print("AdamW's state (a first step):", one_step(model, opt, cfg, 1))
    for n in (1, 2, 3, 1, 2):
        print(one_step(model, opt, cfg, n), flush=True)


if __name__ == "__main__":
    main()
