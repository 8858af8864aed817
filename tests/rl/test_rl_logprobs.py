"""Chunked FP32-head log-probs: values, gradients, entropy, dtypes, bounded memory."""

import importlib.util
import pathlib

import pytest
import torch

from logprob_helpers import inputs, reference
from scalerl.errors import ScaleRLError
from scalerl.rl.logprobs import token_logprobs


@pytest.mark.parametrize("keep", [True, False])  # log-softmax kept for the backward, or recomputed there
@pytest.mark.parametrize("chunk", [1, 5, 1024])
def test_fp32_matches_fp64_reference_values_and_grads(chunk, keep, monkeypatch):
    from scalerl.rl import logprobs

    monkeypatch.setattr(logprobs, "SAVE_BYTES", logprobs.SAVE_BYTES if keep else 0)
    h, w, b, t = inputs()
    lp, ent = token_logprobs(h, w, t, temperature=0.7, chunk_size=chunk, head_bias=b, return_entropy=True)
    assert lp.dtype == torch.float32 and lp.shape == (3, 7)
    h64, w64, b64 = (x.detach().double().requires_grad_() for x in (h, w, b))
    ref_lp, ref_ent = reference(h64, w64, t, 0.7, b64)
    assert (lp.double() - ref_lp).abs().max() < 1e-5
    assert (ent.double() - ref_ent).abs().max() < 1e-5
    (lp.sum() + 0.3 * ent.sum()).backward()
    (ref_lp.sum() + 0.3 * ref_ent.sum()).backward()
    for mine, ref in ((h.grad, h64.grad), (w.grad, w64.grad), (b.grad, b64.grad)):
        assert (mine.double() - ref).abs().max() < 1e-5


def test_bf16_model_gets_fp32_head():
    h, w, _, t = inputs(torch.bfloat16)
    lp = token_logprobs(h, w, t, chunk_size=4)
    assert lp.dtype == torch.float32
    h64, w64 = (x.detach().double().requires_grad_() for x in (h, w))
    ref_lp, _ = reference(h64, w64, t)  # same bf16 values, full precision maths
    assert (lp.double() - ref_lp).abs().max() < 1e-5
    lp.sum().backward()
    ref_lp.sum().backward()
    assert h.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.bfloat16
    # grads are computed in fp32 and rounded once to bf16 (relative step 2**-8)
    assert torch.allclose(w.grad.double(), w64.grad, rtol=2**-7, atol=1e-6)
    # the bf16 head (the ablation) is measurably worse than the fp32 one
    lp16 = token_logprobs(h, w, t, fp32=False)
    assert (lp16.double() - ref_lp).abs().max() > 10 * (lp.double() - ref_lp).abs().max()


def test_gradcheck_fp64_with_entropy():
    h, w, b, t = inputs(torch.float64, N=2, T=3, H=4, V=9)
    fn = lambda h, w, b: token_logprobs(h, w, t, temperature=1.3, chunk_size=2, head_bias=b, return_entropy=True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (h, w, b))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            dict(targets=torch.full((3, 7), 1000)),
            r"targets: token ids must be in \[0, 1000\), got range \[1000, 1000\]",
        ),
        (dict(targets=torch.zeros(3, 6, dtype=torch.long)), r"targets: expected shape \(3, 7\)"),
        (dict(temperature=0.0), r"temperature must be > 0, got 0.0"),
        (dict(chunk_size=0), r"chunk_size must be >= 1, got 0"),
    ],
)
def test_bad_arguments(kwargs, match):
    h, w, b, t = inputs()
    args = dict(targets=t) | kwargs
    with pytest.raises(ScaleRLError, match=match):
        token_logprobs(h, w, **args)


def test_memory_stays_bounded_for_49k_vocab_4k_positions():
    """Forward + backward over V=49,152 x 4,096 positions in a fresh process: the growth of
    peak RSS must be a few chunk-sized buffers, not the (4096, 49152) logits (768 MiB each)."""
    path = pathlib.Path(__file__).parents[2] / "benchmarks" / "fp32_head_memory.py"
    spec = importlib.util.spec_from_file_location("fp32_head_memory", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    V, M, H, chunk = 49152, 4096, 64, 256
    r = bench.measure("chunked", V, M, H, chunk, threads=2)
    mib = 2**20
    logits = V * M * 4 / mib  # one full fp32 logits tensor
    bound = (5 * chunk * V * 4 + 4 * V * H * 4) / mib + 32  # design: ~3 chunk buffers + W grads + slack
    assert r["delta_mib"] < bound < logits / 2, r
