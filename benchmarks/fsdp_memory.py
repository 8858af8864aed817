"""Memory per trainer rank under trainer.strategy=fsdp: 1, 2 and 4 ranks against one process.

Method (fixed before running): SmolLM2-135M's architecture (`smollm2-shape-random`: the same
parameter shapes as SmolLM2-135M, so the same bytes; random weights need no download), fp32
master weights, AdamW. Each configuration takes one optimizer step on the same batch (4 prompts
x 4 completions of 16 tokens); then each rank counts the bytes it holds of parameters, gradients
and optimizer state (the local shards of FSDP's DTensors: `FSDPRank.memory`), and its peak
resident set (ru_maxrss: the whole process, torch and the full model loaded before sharding
included). The baseline is one process without FSDP (`train_step`), counted the same way.
The target (issue 49): every rank's parameters + gradients + optimizer state at most
1/N of the baseline's plus 10%.

    nice -n 19 .venv/bin/python benchmarks/fsdp_memory.py [--ranks 1 2 4]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scalerl.configure import load_config  # noqa: E402
from scalerl.trainer.sharded import FSDPRank, spawn_ranks  # noqa: E402
from scalerl.trainer.step import Optimizer, plan_shards, train_step  # noqa: E402
from scalerl.types import Completion, Group, Prompt, Score  # noqa: E402

MODEL = "smollm2-shape-random"
OVERRIDES = [f"model.name={MODEL}", "model.dtype=fp32", "batch.recompute=never"]
MB = 2**20


def batch() -> list[Group]:
    groups = []
    for p in range(4):
        comps = [
            Completion(
                id=f"p{p}/{i}",
                prompt_id=f"p{p}",
                prompt_tokens=[20 + p, 30, 40],
                tokens=[50 + i + j for j in range(16)],
                logprobs=[-2.0] * 16,
                versions=[0] * 16,
                text="",
                finish_reason="eos",
            )
            for i in range(4)
        ]
        rewards = [1.0, 0.0, 0.0, 1.0] if p % 2 else [0.0, 1.0, 0.0, 0.0]
        scores = tuple(Score(reward=r, passed=r > 0) for r in rewards)
        groups.append(Group(prompt=Prompt(f"p{p}", "x", ""), completions=comps, scores=list(scores)))
    return groups


def _rank(rank: int, world: int, rendezvous: str) -> dict:
    cfg = load_config("scalerl", overrides=OVERRIDES)
    r = FSDPRank(cfg, rank, world, rendezvous, threads=1)
    r.step(plan_shards(batch(), cfg, world)[rank], 1)
    return {**r.memory(), "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def single() -> dict:
    from scalerl.models import load_model

    cfg = load_config("scalerl", overrides=OVERRIDES)
    model, tok = load_model(MODEL)
    model.train()
    optim = Optimizer(model, cfg)
    train_step(model, optim, batch(), cfg, tok.pad_token_id, 1)
    params = list(model.parameters())
    size = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    return {
        "params": size(params),
        "grads": size(p.grad for p in params if p.grad is not None),
        "optimizer": size(v for s in optim.opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)),
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = single()
    total = base["params"] + base["grads"] + base["optimizer"]
    print(f"{MODEL} (SmolLM2-135M's shapes), fp32 + AdamW, one step; load average {os.getloadavg()[0]:.1f}")
    print(
        f"{'ranks':>5} {'params MiB':>10} {'grads MiB':>10} {'AdamW MiB':>10} {'sum MiB':>9} {'x single':>8} "
        f"{'target 1/N+10%':>14} {'peak RSS MiB':>12}"
    )
    print(
        f"{'single':>5} {base['params'] / MB:10.1f} {base['grads'] / MB:10.1f} {base['optimizer'] / MB:10.1f} "
        f"{total / MB:9.1f} {1.0:8.3f} {'':>14} {base['rss'] / MB:12.0f}"
    )
    for world in args.ranks:
        ranks = spawn_ranks(_rank, world, timeout_s=900)
        worst = max(ranks, key=lambda m: m["params"] + m["grads"] + m["optimizer"])
        held = worst["params"] + worst["grads"] + worst["optimizer"]
        ok = "yes" if held <= total / world * 1.1 else "NO"
        print(
            f"{world:>5} {worst['params'] / MB:10.1f} {worst['grads'] / MB:10.1f} {worst['optimizer'] / MB:10.1f} "
            f"{held / MB:9.1f} {held / total:8.3f} {ok:>14} {max(m['rss'] for m in ranks) / MB:12.0f}"
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
