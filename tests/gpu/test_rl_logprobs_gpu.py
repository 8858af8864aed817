"""Chunked FP32-head log-probs on CUDA in bf16: bounded memory, the values of the fp64 reference
(tests/rl/test_rl_logprobs.py holds the rest)."""

import importlib.util
import pathlib

import pytest
import torch

from logprob_helpers import inputs, reference
from scalerl.rl.logprobs import token_logprobs


@pytest.mark.gpu
def test_cuda_bf16_memory_bounded_and_values_match():
    path = pathlib.Path(__file__).parents[2] / "benchmarks" / "fp32_head_memory.py"
    spec = importlib.util.spec_from_file_location("fp32_head_memory", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    V, M, H, chunk = 49152, 4096, 1024, 1024
    r = bench.measure("chunked", V, M, H, chunk, dtype="bf16", device="cuda")
    bound = (5 * chunk * V * 4 + 5 * V * H * 4) / 2**20 + 32
    assert r["delta_mib"] < bound, r
    h, w, b, t = (
        x.cuda() if x.dtype == torch.long else x.detach().cuda().requires_grad_() for x in inputs(torch.bfloat16)
    )
    ref_lp, _ = reference(h.detach().cpu(), w.detach().cpu(), t.cpu())
    assert (token_logprobs(h, w, t, chunk_size=8).double().cpu() - ref_lp).abs().max() < 1e-5
