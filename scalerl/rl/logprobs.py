"""Chosen-token log-probabilities through an FP32 LM head, chunked over positions (paper
Section 3.2, Fig. 5b: "FP32 precision in the LM head" on generator and trainer).

    logits = (h W^T + b) / temperature     in fp32 even when h and W are bf16
    logp_t = logits[target_t] - logsumexp(logits)
    H_t    = logsumexp(logits) - sum_v softmax(logits)_v logits_v      (optional entropy)

A custom autograd Function computes the logits of `chunk_size` positions at a time. When the
(M, V) log-softmax fits in `SAVE_BYTES` it is kept for the backward (one (C, V) x (V, H)
matmul per chunk less: a quarter of the head's FLOPs); otherwise only the (M,) log-sum-exp is
kept and the backward recomputes each chunk's logits, so peak memory stays about three
(chunk_size, V) fp32 buffers plus an fp32 copy of W. Gradients of W and b are accumulated in
fp32 over chunks and cast back to the weight's dtype once.

Departures from the paper:
1. The temperature divides the logits before the log-softmax, so the log-probs are those of the
   distribution the generator sampled from (docs/design.md, "The maths"), on both sides.
2. `fp32=False` (the ablation) runs the matmul and log-softmax in the hidden states' dtype
   (bf16 in a bf16 model); the returned log-probs are still fp32 tensors. fp64 inputs compute
   in fp64 (for gradient checks).
"""

from __future__ import annotations

import torch

from scalerl.errors import ScaleRLError
from scalerl.rl._checks import check_ndim, check_shape

SAVE_BYTES = 512 << 20  # keep the forward's log-softmax for the backward up to this size


def _logits(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, temperature: float) -> torch.Tensor:
    z = h @ w.T  # (C, V)
    if b is not None:
        z += b
    return z.div_(temperature) if temperature != 1.0 else z


class _ChunkedHeadLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk, cdt, want_entropy):
        M = hidden.shape[0]
        out_dtype = torch.promote_types(cdt, torch.float32)
        w = weight.to(cdt)
        b = None if bias is None else bias.to(cdt)
        lse = torch.empty(M, dtype=cdt, device=hidden.device)
        logp = torch.empty(M, dtype=out_dtype, device=hidden.device)
        ent = torch.empty(M if want_entropy else 0, dtype=out_dtype, device=hidden.device)
        keep = M * weight.shape[0] * lse.element_size() <= SAVE_BYTES
        kept = []  # (C, V) log-softmax chunks
        for s in range(0, M, chunk):
            z = _logits(hidden[s : s + chunk].to(cdt), w, b, temperature)  # (C, V)
            lse[s : s + chunk] = torch.logsumexp(z, dim=-1)
            logp[s : s + chunk] = z.gather(1, targets[s : s + chunk, None]).squeeze(1) - lse[s : s + chunk]
            if want_entropy:
                p = (z - lse[s : s + chunk, None]).exp_()
                ent[s : s + chunk] = lse[s : s + chunk] - p.mul_(z).sum(dim=-1)
            if keep:
                kept.append(z.sub_(lse[s : s + chunk, None]))
        ctx.kept = kept
        ctx.save_for_backward(hidden, weight, bias, targets, lse, ent)
        ctx.temperature, ctx.chunk, ctx.cdt = temperature, chunk, cdt
        ctx.set_materialize_grads(False)
        if not want_entropy:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        hidden, weight, bias, targets, lse, ent = ctx.saved_tensors
        T, chunk, cdt = ctx.temperature, ctx.chunk, ctx.cdt
        acc = torch.promote_types(cdt, torch.float32)
        w = weight.to(cdt)
        b = None if bias is None else bias.to(cdt)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=acc, device=weight.device) if need_b else None
        kept, ctx.kept = ctx.kept, None
        for i, s in enumerate(range(0, hidden.shape[0], chunk)):
            h = hidden[s : s + chunk].to(cdt)
            if kept:  # (C, V) log softmax
                logp_v, kept[i] = kept[i], None
            else:
                logp_v = _logits(h, w, b, T).sub_(lse[s : s + chunk, None])
            p = logp_v.exp()
            gz = None  # dL/dz, z = logits
            if g_ent is not None and ent.numel():  # dH/dz = -p (log p + H)
                e = ent[s : s + chunk, None].to(cdt)
                gz = logp_v.add_(e).mul_(p).mul_(-g_ent[s : s + chunk, None].to(cdt))
            if g_logp is not None:  # dlogp/dz = onehot - p
                g = g_logp[s : s + chunk, None].to(cdt)
                gz = p.mul_(-g) if gz is None else gz.sub_(p.mul_(g))
                gz.scatter_add_(1, targets[s : s + chunk, None], g)
            del logp_v, p
            if gz is None:
                continue
            if T != 1.0:
                gz.div_(T)
            if need_h:
                grad_h[s : s + chunk] = (gz @ w).to(hidden.dtype)
            if need_w:
                grad_w += (gz.T @ h).to(acc)
            if need_b:
                grad_b += gz.sum(dim=0).to(acc)
        grad_w = grad_w.to(weight.dtype) if need_w else None
        grad_b = grad_b.to(bias.dtype) if need_b else None
        return grad_h, grad_w, grad_b, None, None, None, None, None


def token_logprobs(
    hidden: torch.Tensor,
    head_weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    fp32: bool = True,
    chunk_size: int = 1024,
    head_bias: torch.Tensor | None = None,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (N, T) of `targets` under softmax((hidden @ W^T + b) / temperature).

    hidden (N, T, H), head_weight (V, H), targets (N, T) int in [0, V). With
    `return_entropy`, also the entropy (N, T) of each position's distribution (differentiable).
    """
    check_ndim("hidden", hidden, 3)
    check_ndim("head_weight", head_weight, 2)
    N, T, H = hidden.shape
    V = head_weight.shape[0]
    check_shape("head_weight", head_weight, (V, H))
    check_shape("targets", targets, (N, T))
    if head_bias is not None:
        check_shape("head_bias", head_bias, (V,))
    if not temperature > 0:
        raise ScaleRLError(f"token_logprobs: temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ScaleRLError(f"token_logprobs: chunk_size must be >= 1, got {chunk_size}")
    flat_targets = targets.reshape(N * T).long()  # (M,)
    if flat_targets.numel() and (flat_targets.min() < 0 or flat_targets.max() >= V):
        raise ScaleRLError(
            f"targets: token ids must be in [0, {V}), got range [{int(flat_targets.min())}, {int(flat_targets.max())}]"
        )
    cdt = torch.promote_types(torch.float32, hidden.dtype) if fp32 else hidden.dtype
    logp, ent = _ChunkedHeadLogprobs.apply(
        hidden.reshape(N * T, H),
        head_weight,
        head_bias,
        flat_targets,
        float(temperature),
        int(chunk_size),
        cdt,
        return_entropy,
    )
    logp = logp.reshape(N, T)  # (M,) -> (N, T)
    return (logp, ent.reshape(N, T)) if return_entropy else logp
