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
    custom     J_t = the user's function (`loss.function`, docs/losses.md): called as
               fn(logprobs=, gen_logprobs=, advantages=, mask=, **loss.options) -> (N, T)

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

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable, Hashable

import torch

from scalerl.config import CispoLoss, CustomLoss, GSPOLoss, LossConfig, PPOClipLoss, ReinforceLoss
from scalerl.errors import ScaleRLError, UserCodeError
from scalerl.rl._checks import check_finite, check_ndim, check_shape
from scalerl.user_code import load_function


@dataclass(frozen=True)
class LossInputs:
    logprobs: torch.Tensor  # (N, T) trainer, with grad; 0 where masked
    gen_logprobs: torch.Tensor  # (N, T) generator; 0 where masked
    advantages: torch.Tensor  # (N,)
    mask: torch.Tensor  # (N, T) float 0/1

    @property
    def log_ratio(self) -> torch.Tensor:
        return self.logprobs - self.gen_logprobs  # (N, T)

    @property
    def adv(self) -> torch.Tensor:
        return self.advantages.unsqueeze(1)  # (N, 1)


@dataclass(frozen=True)
class TokenTerms:
    objective: torch.Tensor  # (N, T) per-token objective J_t, to maximise
    clipped: torch.Tensor  # (N, T) bool: ratio truncated / clipped at this token
    extra: dict[str, torch.Tensor] = field(default_factory=dict)  # (N, T) extra per-token metrics


LossFn = Callable[..., TokenTerms]
LOSSES: dict[type, LossFn] = {}
"""Each loss is registered against its config class (`scalerl.config`) and called with it; the
config checks the bounds of its parameters when it is built."""


def register(config_cls: type) -> Callable[[LossFn], LossFn]:
    def add(fn: LossFn) -> LossFn:
        LOSSES[config_cls] = fn
        return fn

    return add


def _clipped_away(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """Where min(rho A, clip(rho) A) takes the clipped branch: zero gradient."""
    return ((ratio > 1 + eps_high) & (adv > 0)) | ((ratio < 1 - eps_low) & (adv < 0))


@register(CispoLoss)
def cispo(x: LossInputs, cfg: CispoLoss, ref_logprobs: torch.Tensor | None = None) -> TokenTerms:
    ratio = x.log_ratio.exp()
    weight = ratio.clamp(max=cfg.eps_max).detach()  # sg(min(rho, eps_max))
    return TokenTerms(weight * x.adv * x.logprobs, ratio > cfg.eps_max)


@register(PPOClipLoss)
def ppo_clip(x: LossInputs, cfg: PPOClipLoss, ref_logprobs: torch.Tensor | None = None) -> TokenTerms:
    if cfg.kl_beta > 0 and ref_logprobs is None:
        raise ScaleRLError(f"loss 'ppo_clip': kl_beta = {cfg.kl_beta} needs ref_logprobs (reference-policy log-probs)")
    ratio = x.log_ratio.exp()
    objective = torch.minimum(ratio * x.adv, ratio.clamp(1 - cfg.eps_low, 1 + cfg.eps_high) * x.adv)
    extra = {}
    if cfg.kl_beta > 0:
        check_shape("ref_logprobs", ref_logprobs, tuple(x.logprobs.shape))
        check_finite("ref_logprobs", ref_logprobs, x.mask > 0)
        d = torch.where(x.mask > 0, ref_logprobs.to(x.logprobs.dtype), 0.0) - x.logprobs
        extra["kl"] = d.exp() - d - 1  # k3, >= 0
        objective = objective - cfg.kl_beta * extra["kl"]
    return TokenTerms(objective, _clipped_away(ratio, x.adv, cfg.eps_low, cfg.eps_high), extra)


@register(GSPOLoss)
def gspo(x: LossInputs, cfg: GSPOLoss, ref_logprobs: torch.Tensor | None = None) -> TokenTerms:
    lengths = x.mask.sum(dim=1).clamp_min(1)  # (N,)
    seq_ratio = ((x.log_ratio * x.mask).sum(dim=1) / lengths).exp()  # (N,) exp(mean_t log rho)
    adv = x.advantages
    seq = torch.minimum(seq_ratio * adv, seq_ratio.clamp(1 - cfg.eps_low, 1 + cfg.eps_high) * adv)
    clipped = _clipped_away(seq_ratio, adv, cfg.eps_low, cfg.eps_high)
    shape = x.logprobs.shape
    return TokenTerms(
        seq.unsqueeze(1).expand(shape),
        clipped.unsqueeze(1).expand(shape),  # (N,) -> (N, T)
        {"seq_ratio": seq_ratio.detach().unsqueeze(1).expand(shape)},
    )


@register(ReinforceLoss)
def reinforce(x: LossInputs, cfg: ReinforceLoss, ref_logprobs: torch.Tensor | None = None) -> TokenTerms:
    return TokenTerms(x.adv * x.logprobs, torch.zeros_like(x.mask, dtype=torch.bool))


@functools.lru_cache(maxsize=None)
def _user_loss(spec: str) -> Callable:
    return load_function(spec, "loss.function")


@register(CustomLoss)
def custom(x: LossInputs, cfg: CustomLoss, ref_logprobs: torch.Tensor | None = None) -> TokenTerms:
    """The user's objective; what it raises is theirs (`UserCodeError`: one line, then their frames)."""
    fn = _user_loss(cfg.function)
    try:
        objective = fn(
            logprobs=x.logprobs, gen_logprobs=x.gen_logprobs, advantages=x.advantages, mask=x.mask, **cfg.options
        )
    except Exception as e:  # the user's code: told as theirs
        raise UserCodeError(f"loss.function {cfg.function!r}: {getattr(fn, '__name__', 'it')}", e) from None
    if not isinstance(objective, torch.Tensor) or objective.shape != x.logprobs.shape:
        got = tuple(objective.shape) if isinstance(objective, torch.Tensor) else type(objective).__name__
        raise ScaleRLError(
            f"loss.function {cfg.function!r} returned {got}; expected the per-token objective, a "
            f"tensor of shape {tuple(x.logprobs.shape)} (completions x tokens)"
        )
    return TokenTerms(objective, torch.zeros_like(x.mask, dtype=torch.bool))


# ---------------------------------------------------------------- aggregation
Aggregator = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _token_mean(values: torch.Tensor, mask: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum()


def _sample_mean(values: torch.Tensor, mask: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    totals, lengths = (values * mask).sum(dim=1), mask.sum(dim=1)  # (N,)
    has = lengths > 0
    return (totals[has] / lengths[has]).mean()


def _prompt_mean(values: torch.Tensor, mask: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    P = int(group.max()) + 1
    totals = values.new_zeros(P).index_add(0, group, (values * mask).sum(dim=1))  # (P,)
    lengths = mask.new_zeros(P).index_add(0, group, mask.sum(dim=1))  # (P,)
    has = lengths > 0
    return (totals[has] / lengths[has]).mean()


AGGREGATIONS: dict[str, Aggregator] = {"prompt": _prompt_mean, "sample": _sample_mean, "token": _token_mean}


# ---------------------------------------------------------------- entry point
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
    out = {
        "loss": loss.item(),
        "ratio_mean": ratio.mean().item(),
        "ratio_max": ratio.max().item(),
        "clip_frac": terms.clipped[on].float().mean().item(),
        "adv_abs_mean": x.advantages.abs().mean().item(),
        "tokens": float(on.sum().item()),
        "completions": float(x.mask.shape[0]),
        "prompts": float(group.unique().numel()),
    }
    out.update({k: v.detach()[on].mean().item() for k, v in terms.extra.items()})
    return out


def _empty(logprobs: torch.Tensor, on: torch.Tensor, n: int) -> tuple[torch.Tensor, dict[str, float]]:
    zero = torch.where(on, logprobs, 0.0).sum() * 0.0
    return zero, {
        "loss": 0.0,
        "ratio_mean": 1.0,
        "ratio_max": 1.0,
        "clip_frac": 0.0,
        "adv_abs_mean": 0.0,
        "tokens": 0.0,
        "completions": float(n),
        "prompts": 0.0,
    }


def uses_reference(cfg: LossConfig) -> bool:
    """Whether the loss needs the reference (initial) policy's log-probs: PPO-clip's KL penalty."""
    return isinstance(cfg, PPOClipLoss) and cfg.kl_beta > 0


def policy_loss(
    cfg: LossConfig,
    logprobs: torch.Tensor,
    gen_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    prompt_ids: torch.Tensor | Sequence[Hashable],
    ref_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss to minimise (-aggregated objective) and plain-float metrics.

    `cfg` is the loss's config (`CispoLoss`, `PPOClipLoss`, `GSPOLoss`, `ReinforceLoss`, `CustomLoss`): it picks
    the loss and carries its parameters and aggregation. Shapes: logprobs, gen_logprobs, mask,
    ref_logprobs (N, T); advantages, prompt_ids (N,). `ref_logprobs` (the reference policy's)
    is needed only for a KL penalty. No unmasked token at all gives a zero loss with
    metrics["tokens"] == 0.
    """
    fn = LOSSES.get(type(cfg))
    if fn is None:
        raise ScaleRLError(
            f"no loss is registered for {type(cfg).__name__} (expected one of {', '.join(c.__name__ for c in LOSSES)})"
        )
    aggregate = AGGREGATIONS[cfg.aggregation]
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
    x = LossInputs(
        torch.where(on, logprobs, 0.0),
        torch.where(on, gen_logprobs.to(dtype), 0.0),
        advantages.to(dtype).detach(),
        on.to(dtype),
    )
    terms = fn(x, cfg, ref_logprobs)
    loss = -aggregate(terms.objective, x.mask, group)
    return loss, _metrics(x, terms, loss, group)
