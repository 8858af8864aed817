"""Policy losses and their aggregation (paper Eq. 2-4, Section 3.2 and Section 4).

Every loss gets the trainer's per-token log-probs `log pi` (N, T) (with grad), the generator's
log-probs `log pi_gen` recorded at sampling time (N, T), per-completion advantages A (N,), a
token mask (N, T) (0 on padding and injected interruption tokens) and the prompt of each
completion (N,). With rho = pi / pi_gen per token, each loss is a per-token objective J_t that
is maximised (the returned loss is -aggregate(J)):

    cispo      J_t = sg(min(rho, eps_max)) * A * log pi                            (Eq. 4)
    ppo_clip   J_t = min(rho A, clip(rho, 1-eps_low, 1+eps_high) A) - beta k3      (Eq. 2)
               k3  = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1
    gspo       s   = exp(mean_t log rho) per completion; J = min(s A, clip(s, ...) A),
               the same value at each of the completion's tokens
    reinforce  J_t = A * log pi                                    (no off-policy correction)

Aggregation (Section 3.2, A.9): `prompt` = sum of a prompt's token terms / its tokens, then the
mean over prompts (ScaleRL); `sample` = per completion, then over completions; `token` = over
every token of the batch.

Departures from the paper:
1. CISPO has no lower truncation (the paper found none needed); MiniMax-M1's eps_low is not
   offered.
2. GSPO's sequence objective is spread over the completion's tokens so that the aggregation
   modes apply to it too; with `sample` aggregation it is exactly GSPO's 1/G sum_i.
3. A batch without a single unmasked token is not an error: the loss is a graph-connected 0
   and `metrics["tokens"] == 0`, the defined "empty" outcome the trainer skips and counts.
4. `clip_frac` is the share of tokens whose gradient the loss changed: ratio truncated
   (cispo: rho > eps_max, gradient scaled) or clipped to exactly zero gradient (ppo_clip,
   gspo: rho beyond the bound on the side of the advantage's sign).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable, Hashable

import torch

from scalerl.errors import ScaleRLError
from scalerl.rl._checks import check_finite, check_ndim, check_positive, check_shape


@dataclass(frozen=True)
class LossInputs:
    logprobs: torch.Tensor       # (N, T) trainer, with grad; 0 where masked
    gen_logprobs: torch.Tensor   # (N, T) generator; 0 where masked
    advantages: torch.Tensor     # (N,)
    mask: torch.Tensor           # (N, T) float 0/1

    @property
    def log_ratio(self) -> torch.Tensor:
        return self.logprobs - self.gen_logprobs                               # (N, T)

    @property
    def adv(self) -> torch.Tensor:
        return self.advantages.unsqueeze(1)                                    # (N, 1)


@dataclass(frozen=True)
class TokenTerms:
    objective: torch.Tensor      # (N, T) per-token objective J_t, to maximise
    clipped: torch.Tensor        # (N, T) bool: ratio truncated / clipped at this token
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # (N, T) extra per-token metrics


LossFn = Callable[..., TokenTerms]
LOSSES: dict[str, LossFn] = {}


def register(name: str) -> Callable[[LossFn], LossFn]:
    def add(fn: LossFn) -> LossFn:
        LOSSES[name] = fn
        return fn
    return add


def _clip_bounds(owner: str, eps_low: float, eps_high: float) -> None:
    check_positive(owner, "eps_low", eps_low)
    check_positive(owner, "eps_high", eps_high)
    if eps_low >= 1:
        raise ScaleRLError(f"{owner}: eps_low must be < 1, got {eps_low}")


def _clipped_away(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """Where min(rho A, clip(rho) A) takes the clipped branch: zero gradient."""
    return ((ratio > 1 + eps_high) & (adv > 0)) | ((ratio < 1 - eps_low) & (adv < 0))


@register("cispo")
def cispo(x: LossInputs, eps_max: float = 5.0) -> TokenTerms:
    check_positive("loss 'cispo'", "eps_max", eps_max)
    ratio = x.log_ratio.exp()
    weight = ratio.clamp(max=eps_max).detach()                                 # sg(min(rho, eps_max))
    return TokenTerms(weight * x.adv * x.logprobs, ratio > eps_max)


@register("ppo_clip")
def ppo_clip(x: LossInputs, eps_low: float = 0.2, eps_high: float = 0.2, kl_beta: float = 0.0,
             ref_logprobs: torch.Tensor | None = None) -> TokenTerms:
    _clip_bounds("loss 'ppo_clip'", eps_low, eps_high)
    if kl_beta < 0:
        raise ScaleRLError(f"loss 'ppo_clip': kl_beta must be >= 0, got {kl_beta}")
    if kl_beta > 0 and ref_logprobs is None:
        raise ScaleRLError(f"loss 'ppo_clip': kl_beta = {kl_beta} needs ref_logprobs (reference-policy log-probs)")
    ratio = x.log_ratio.exp()
    objective = torch.minimum(ratio * x.adv, ratio.clamp(1 - eps_low, 1 + eps_high) * x.adv)
    extra = {}
    if ref_logprobs is not None:
        check_shape("ref_logprobs", ref_logprobs, tuple(x.logprobs.shape))
        check_finite("ref_logprobs", ref_logprobs, x.mask > 0)
        d = torch.where(x.mask > 0, ref_logprobs.to(x.logprobs.dtype), 0.0) - x.logprobs
        extra["kl"] = d.exp() - d - 1                                          # k3, >= 0
        objective = objective - kl_beta * extra["kl"]
    return TokenTerms(objective, _clipped_away(ratio, x.adv, eps_low, eps_high), extra)


@register("gspo")
def gspo(x: LossInputs, eps_low: float = 3e-4, eps_high: float = 4e-4) -> TokenTerms:
    _clip_bounds("loss 'gspo'", eps_low, eps_high)
    lengths = x.mask.sum(dim=1).clamp_min(1)                                   # (N,)
    seq_ratio = ((x.log_ratio * x.mask).sum(dim=1) / lengths).exp()            # (N,) exp(mean_t log rho)
    adv = x.advantages
    seq = torch.minimum(seq_ratio * adv, seq_ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    clipped = _clipped_away(seq_ratio, adv, eps_low, eps_high)
    shape = x.logprobs.shape
    return TokenTerms(seq.unsqueeze(1).expand(shape), clipped.unsqueeze(1).expand(shape),  # (N,) -> (N, T)
                      {"seq_ratio": seq_ratio.detach().unsqueeze(1).expand(shape)})


@register("reinforce")
def reinforce(x: LossInputs) -> TokenTerms:
    return TokenTerms(x.adv * x.logprobs, torch.zeros_like(x.mask, dtype=torch.bool))


# ---------------------------------------------------------------- aggregation
Aggregator = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _token_mean(values: torch.Tensor, mask: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum()


def _sample_mean(values: torch.Tensor, mask: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    totals, lengths = (values * mask).sum(dim=1), mask.sum(dim=1)              # (N,)
    has = lengths > 0
    return (totals[has] / lengths[has]).mean()


def _prompt_mean(values: torch.Tensor, mask: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    P = int(group.max()) + 1
    totals = values.new_zeros(P).index_add(0, group, (values * mask).sum(dim=1))   # (P,)
    lengths = mask.new_zeros(P).index_add(0, group, mask.sum(dim=1))               # (P,)
    has = lengths > 0
    return (totals[has] / lengths[has]).mean()


AGGREGATIONS: dict[str, Aggregator] = {"prompt": _prompt_mean, "sample": _sample_mean, "token": _token_mean}


# ---------------------------------------------------------------- entry point
def _lookup(kind: str, table: dict, what: str):
    if kind not in table:
        hint = difflib.get_close_matches(str(kind), list(table), n=1)
        more = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ScaleRLError(f"unknown {what} {kind!r} (expected one of {', '.join(table)}){more}")
    return table[kind]


def _check_params(kind: str, fn: LossFn, params: dict) -> None:
    allowed = [p for p in inspect.signature(fn).parameters if p != "x"]
    unknown = [p for p in params if p not in allowed]
    if unknown:
        raise ScaleRLError(f"loss {kind!r}: unknown parameter {unknown[0]!r} (expected: {', '.join(allowed) or 'none'})")


def group_index(prompt_ids: torch.Tensor | Sequence[Hashable], n: int) -> torch.Tensor:
    """(N,) prompt ids (ints or any hashables) -> (N,) dense indices 0..P-1."""
    if isinstance(prompt_ids, torch.Tensor):
        check_shape("prompt_ids", prompt_ids, (n,))
        return torch.unique(prompt_ids, return_inverse=True)[1].reshape(n)
    if len(prompt_ids) != n:
        raise ScaleRLError(f"prompt_ids: expected {n} ids, got {len(prompt_ids)}")
    dense: dict[Hashable, int] = {}
    return torch.tensor([dense.setdefault(p, len(dense)) for p in prompt_ids], dtype=torch.long)


def _metrics(x: LossInputs, terms: TokenTerms, loss: torch.Tensor, group: torch.Tensor) -> dict[str, float]:
    on = x.mask > 0
    ratio = x.log_ratio.detach().exp()[on]
    out = {"loss": loss.item(), "ratio_mean": ratio.mean().item(), "ratio_max": ratio.max().item(),
           "clip_frac": terms.clipped[on].float().mean().item(),
           "adv_abs_mean": x.advantages.abs().mean().item(), "tokens": float(on.sum().item()),
           "completions": float(x.mask.shape[0]), "prompts": float(group.unique().numel())}
    out.update({k: v.detach()[on].mean().item() for k, v in terms.extra.items()})
    return out


def _empty(logprobs: torch.Tensor, on: torch.Tensor, n: int) -> tuple[torch.Tensor, dict[str, float]]:
    zero = torch.where(on, logprobs, 0.0).sum() * 0.0
    return zero, {"loss": 0.0, "ratio_mean": 1.0, "ratio_max": 1.0, "clip_frac": 0.0, "adv_abs_mean": 0.0,
                  "tokens": 0.0, "completions": float(n), "prompts": 0.0}


def policy_loss(kind: str, logprobs: torch.Tensor, gen_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, prompt_ids: torch.Tensor | Sequence[Hashable], aggregation: str = "prompt",
                **params) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss to minimise (-aggregated objective) and plain-float metrics.

    Shapes: logprobs, gen_logprobs, mask (N, T); advantages, prompt_ids (N,). Extra `params` go
    to the loss (cispo: eps_max; ppo_clip: eps_low, eps_high, kl_beta, ref_logprobs; gspo:
    eps_low, eps_high). No unmasked token at all gives a zero loss with metrics["tokens"] == 0.
    """
    fn = _lookup(kind, LOSSES, "loss")
    aggregate = _lookup(aggregation, AGGREGATIONS, "aggregation")
    _check_params(kind, fn, params)
    check_ndim("logprobs", logprobs, 2)
    N, T = logprobs.shape
    check_shape("gen_logprobs", gen_logprobs, (N, T))
    check_shape("mask", mask, (N, T))
    check_shape("advantages", advantages, (N,))
    group = group_index(prompt_ids, N).to(logprobs.device)
    on = mask != 0
    check_finite("logprobs", logprobs.detach(), on)
    check_finite("gen_logprobs", gen_logprobs, on)
    check_finite("advantages", advantages)
    if not bool(on.any()):
        return _empty(logprobs, on, N)
    dtype = logprobs.dtype
    x = LossInputs(torch.where(on, logprobs, 0.0), torch.where(on, gen_logprobs.to(dtype), 0.0),
                   advantages.to(dtype).detach(), on.to(dtype))
    terms = fn(x, **params)
    loss = -aggregate(terms.objective, x.mask, group)
    return loss, _metrics(x, terms, loss, group)
