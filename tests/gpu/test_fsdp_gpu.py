"""FSDP2 trainer ranks on CUDA over NCCL against one process (tests/trainer/test_fsdp.py: the same over gloo on the
CPU)."""

from __future__ import annotations

import pytest
import torch

from fsdp_helpers import CASES, TOL, fsdp_cfg, fsdp_groups, max_diff
from scalerl.models import load_model
from scalerl.trainer.sharded import FSDPRank, spawn_ranks
from scalerl.trainer.step import Optimizer, plan_shards, train_step


def _cuda_ranks(rank: int, world: int, rendezvous: str) -> list | None:
    out = []
    for overrides, n in CASES[:6]:
        cfg = fsdp_cfg([*overrides, "model.device=cuda", "model.compute_dtype=fp32"])
        r = FSDPRank(cfg, rank, world, rendezvous)
        out.append((r.step(plan_shards(fsdp_groups()[:n], cfg, world)[rank], 1), r.full_weights()))
    return out if rank == 0 else None


@pytest.mark.gpu
def test_two_fsdp_ranks_over_nccl_take_the_single_process_step_on_cuda():
    """tests/trainer/test_fsdp.py's equality on CUDA with NCCL, fp32 (two ranks share the GPU when there is one)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    results = spawn_ranks(_cuda_ranks, 2, timeout_s=600)[0]
    for (overrides, n), (row, weights) in zip(CASES[:6], results):
        cfg = fsdp_cfg([*overrides, "model.device=cuda", "model.compute_dtype=fp32"])
        torch.manual_seed(cfg.run.seed)
        model, tokenizer = load_model("tiny-random", device="cuda")
        model.train()
        one = train_step(model, Optimizer(model, cfg), fsdp_groups()[:n], cfg, tokenizer.pad_token_id, 1)
        assert max_diff(weights, {k: v.cpu() for k, v in model.state_dict().items()}) < TOL, overrides
        assert abs(row["train/loss"] - one["train/loss"]) < TOL, overrides
