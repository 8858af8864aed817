"""The fp64 reference of the chunked FP32-head log-probs and its inputs, for their CPU and CUDA tests (imported as
`logprob_helpers`: tests/ is on sys.path under pytest)."""

import torch


def reference(h, w, t, temperature=1.0, b=None):
    """Plain fp64 log-softmax over the full logits, and the entropy."""
    z = h.double() @ w.double().T
    if b is not None:
        z = z + b.double()
    logp_all = torch.log_softmax(z / temperature, dim=-1)
    ent = -(logp_all.exp() * logp_all).sum(-1)
    return logp_all.gather(-1, t[..., None]).squeeze(-1), ent


def inputs(dtype=torch.float32, N=3, T=7, H=16, V=1000, seed=0):
    """Hidden states, head weight and bias (leaves that take gradients) and target tokens, seeded."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, T, H, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(V, H, generator=g) * 0.5).to(dtype).requires_grad_()
    b = (torch.randn(V, generator=g) * 0.1).to(dtype).requires_grad_()
    t = torch.randint(0, V, (N, T), generator=g)
    return h, w, b, t
