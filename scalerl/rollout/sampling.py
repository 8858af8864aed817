"""Token sampling on a batch of fp32 logits, with the log-probability that is recorded.

Recorded log-probability: `log_softmax(logits / temperature)` at the chosen token, i.e. the
temperature-scaled full distribution. With `top_p < 1` the token is drawn from the nucleus
(renormalised), but the recorded value is still the full-distribution one: it is what the
trainer recomputes (`token_logprobs(..., temperature)`), so the importance ratio is exactly 1
for on-policy tokens. Departure from the paper (Section 3.2, "the distribution actually sampled
from"): only when `top_p < 1`; the paper's runs use top-p 1, where both coincide.
"""

from __future__ import annotations

import torch


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tail outside the smallest set of tokens whose mass reaches `top_p`. (B, V) -> (B, V)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of strictly more likely tokens
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)  # the top token always stays
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


def inverse_cdf(probs: torch.Tensor, generator: torch.Generator | None = None,
                u: torch.Tensor | None = None) -> torch.Tensor:
    """One draw per row of unnormalised `probs` (B, V) by inverting the CDF at a uniform point:
    one cumulative sum and a binary search (on CPU ~20x cheaper than `torch.multinomial`).
    `u` (B, 1): the uniform draws, made by the caller (a captured step cannot draw its own);
    none: drawn here from `generator` (the same numbers: `torch.rand` of that shape)."""
    cdf = probs.cumsum(dim=-1)  # (B, V)
    total = cdf[:, -1:]
    if u is None:
        u = torch.rand(total.shape, generator=generator, device=probs.device, dtype=probs.dtype)
    u = u * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))  # strictly below the total
    # the first index with cdf > u: never a zero-probability token
    return torch.searchsorted(cdf, u, right=True).squeeze(-1)


def sample(
    logits: torch.Tensor,
    temperature: float,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    greedy: bool = False,
    u: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row of `logits` (B, V). Returns (tokens (B,), logprobs (B,)). `u` (B, 1):
    uniform draws to sample with (see `inverse_cdf`)."""
    scaled = logits.float() if temperature == 1.0 else logits.float() / temperature  # (B, V)
    log_z = torch.logsumexp(scaled, dim=-1, keepdim=True)  # (B, 1)
    if greedy:
        tokens = scaled.argmax(dim=-1)
    else:
        probs = (scaled - log_z).exp_()
        if top_p < 1.0:
            probs = top_p_filter(probs, top_p)
        tokens = inverse_cdf(probs, generator, u)
    return tokens, (scaled.gather(-1, tokens[:, None]) - log_z).squeeze(-1)
