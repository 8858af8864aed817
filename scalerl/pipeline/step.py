"""The optimizer step: scored groups -> tensors -> advantages -> loss -> AdamW.

Departures from the paper (Section 4 and Appendix A.3):
1. Zero-variance groups are dropped and the step runs on the rest (not resampled, as in the
   paper); a step whose every group was dropped is skipped and counted (`train/skipped`),
   the policy version does not advance.
2. Learning rate: linear warm-up then constant, as the paper, but the value is the tiny
   model's (1e-4 by default; the paper's 8B used 5e-7).
3. Log-probabilities are recomputed only at completion positions, and each group's prompt is
   run once for its G completions (forward.py; exact): the (FP32) head never runs over prompt
   tokens.
4. The batch is processed in length-sorted micro-batches of whole groups with gradient
   accumulation; the weights make the accumulated loss equal to the one-batch loss (the paper
   does not say how its trainer batches; this is about padding, not maths).
"""

from __future__ import annotations

import torch

from scalerl.config import Config
from scalerl.errors import ScaleRLError
from scalerl.pipeline.forward import Batch, completion_logprobs, forward_options
from scalerl.types import Group

__all__ = ["Batch", "Optimizer", "collate", "completion_logprobs", "forward_options", "micro_batches", "train_step"]


def collate(groups: list[Group], pad_id: int) -> Batch:
    """P groups of G completions each -> padded tensors (pure function)."""
    completions = [c for g in groups for c in g.completions]
    n = len(completions)
    lengths = [len(c.prompt_tokens) + len(c.tokens) for c in completions]
    L, T = max(lengths), max(1, max(len(c.tokens) for c in completions))
    input_ids = torch.full((n, L), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, L), dtype=torch.long)
    positions = torch.zeros((n, T), dtype=torch.long)
    targets = torch.zeros((n, T), dtype=torch.long)
    gen_logprobs = torch.zeros((n, T), dtype=torch.float32)
    mask = torch.zeros((n, T), dtype=torch.float32)
    for i, c in enumerate(completions):
        p, t = len(c.prompt_tokens), len(c.tokens)
        input_ids[i, : p + t] = torch.tensor(c.prompt_tokens + c.tokens)
        attention_mask[i, : p + t] = 1
        positions[i, :t] = torch.arange(p - 1, p - 1 + t)
        targets[i, :t] = torch.tensor(c.tokens)
        gen_logprobs[i, :t] = torch.tensor(c.logprobs, dtype=torch.float32)
        forced = c.forced_mask or [False] * t
        mask[i, :t] = torch.tensor([0.0 if f else 1.0 for f in forced])
    gen_logprobs = gen_logprobs * mask
    G = len(groups[0].completions)
    rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float32)  # (P, G)
    prompt_ids = torch.arange(len(groups)).repeat_interleave(G)                # (N,)
    prompt_lens = torch.tensor([len(c.prompt_tokens) for c in completions])  # (N,)
    same_prompt = all(c.prompt_tokens == g.completions[0].prompt_tokens for g in groups for c in g.completions)
    return Batch(input_ids, attention_mask, positions, targets, gen_logprobs, mask, rewards, prompt_ids, prompt_lens,
                 same_prompt)


def loss_params(cfg: Config) -> tuple[str, str, dict]:
    """(kind, aggregation, extra params) of the configured loss."""
    params = cfg.loss.model_dump()
    return params.pop("type"), params.pop("aggregation"), params


class Optimizer:
    """AdamW (paper: eps 1e-15, weight decay 0.01) with linear warm-up then constant lr."""

    def __init__(self, model: torch.nn.Module, cfg: Config):
        o = cfg.optim
        self.params = [p for p in model.parameters() if p.requires_grad]
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in self.params)  # ~3x faster step
        self.opt = torch.optim.AdamW(self.params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay,
                                     fused=fused or None)
        warm = o.warmup_steps
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        self.grad_clip = o.grad_clip

    def state_dict(self) -> dict:
        return {"opt": self.opt.state_dict(), "sched": self.sched.state_dict()}

    def load_state_dict(self, d: dict) -> None:
        self.opt.load_state_dict(d["opt"])
        self.sched.load_state_dict(d["sched"])


MICRO_BATCH_TOKENS = 8192  # padded (sequence x length) tokens per forward/backward pass


def micro_batches(groups: list[Group], max_tokens: int = MICRO_BATCH_TOKENS, shared: bool = False) -> list[list[int]]:
    """Group indices packed into micro-batches of similar length (whole groups, sorted by their
    longest sequence), each at most `max_tokens` padded tokens unless one group alone is larger.
    Completions of one prompt are alike in length while prompts differ a lot (a 2-digit sum vs an
    interrupted 16-digit one), so this removes most of the padding of one big batch. `shared`:
    the forward runs each prompt once (forward.py), so a group costs its prompt once plus its
    completions."""
    def longest(g: Group) -> int:
        return max(len(c.prompt_tokens) + len(c.tokens) for c in g.completions)

    def cost(part: list[int]) -> int:
        gs = [groups[i] for i in part]
        rows = sum(len(g.completions) for g in gs)
        if not shared:
            return rows * max(longest(g) for g in gs)
        prompt = max(len(g.completions[0].prompt_tokens) for g in gs)
        return len(gs) * prompt + rows * max(len(c.tokens) for g in gs for c in g.completions)

    order = sorted(range(len(groups)), key=lambda i: longest(groups[i]))
    out: list[list[int]] = []
    for i in order:
        if out and cost(out[-1] + [i]) <= max_tokens:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _weight(aggregation: str, groups: list[Group], part: list[int], n_tokens: list[int]) -> float:
    """Share of a micro-batch in the whole-batch aggregate (the loss is a mean over prompts,
    completions or tokens, so the micro-batch means combine with these weights exactly)."""
    if aggregation == "prompt":
        return len(part) / len(groups)
    if aggregation == "sample":
        return sum(len(groups[i].completions) for i in part) / sum(len(g.completions) for g in groups)
    return sum(n_tokens[i] for i in part) / max(1, sum(n_tokens))


def _combine(parts: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """Whole-batch loss metrics from micro-batch metrics: weighted means, sums of counts, max of maxima."""
    out: dict[str, float] = {}
    for key in parts[0][1]:
        values = [(w, m[key]) for w, m in parts]
        if key.endswith("_max"):
            out[key] = max(v for _, v in values)
        elif key in ("tokens", "completions", "prompts"):
            out[key] = sum(v for _, v in values)
        else:
            out[key] = sum(w * v for w, v in values)
    return out


def train_step(model, optim: Optimizer, groups: list[Group], cfg: Config, pad_id: int, step: int,
               ref_model=None) -> dict[str, float] | None:
    """One optimizer step on already-filtered groups; None (no step) when no token is trainable.

    Advantages are computed over the whole batch (batch-level normalisation), then the loss is
    accumulated over length-sorted micro-batches (`micro_batches`) with weights that make the sum
    equal to the whole-batch loss. Raises ScaleRLError on a non-finite loss or gradient, before
    the weights change, so the last checkpoint stays the last good state. `ref_model`: the
    frozen initial policy, needed only for a KL penalty (ppo_clip with kl_beta > 0).
    """
    from scalerl.rl.advantages import group_advantages
    from scalerl.rl.losses import policy_loss

    rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float32)                  # (P, G)
    adv = group_advantages(rewards, cfg.advantage.norm, cfg.advantage.baseline)              # (P, G)
    kind, aggregation, params = loss_params(cfg)
    n_tokens = [sum(len(c.tokens) - sum(c.forced_mask) for c in g.completions) for g in groups]
    model.train()
    optim.opt.zero_grad(set_to_none=True)
    parts, total = [], 0.0
    for part in micro_batches(groups, MICRO_BATCH_TOKENS, shared=cfg.model.share_prompt):
        batch = collate([groups[i] for i in part], pad_id)
        mb_params = dict(params)
        if params.get("kl_beta", 0.0) > 0:
            with torch.no_grad():
                mb_params["ref_logprobs"] = completion_logprobs(ref_model, batch, cfg.rollout.temperature,
                                                                **forward_options(cfg))
        logprobs = completion_logprobs(model, batch, cfg.rollout.temperature, **forward_options(cfg))
        loss, metrics = policy_loss(kind, logprobs, batch.gen_logprobs, adv[part].reshape(-1), batch.mask,
                                    batch.prompt_ids, aggregation=aggregation, **mb_params)   # adv (p, G) -> (p*G,)
        if not torch.isfinite(loss):
            optim.opt.zero_grad(set_to_none=True)
            raise ScaleRLError(f"non-finite loss ({loss.item()}) at step {step}: training stopped; "
                               "the last good checkpoint is kept (lower optim.lr or check the rewards)")
        w = _weight(aggregation, groups, part, n_tokens)
        (loss * w).backward()
        total += w * loss.item()
        parts.append((w, metrics))
    metrics = _combine(parts)
    if metrics["tokens"] == 0:
        return None
    grad_norm = torch.nn.utils.clip_grad_norm_(optim.params, optim.grad_clip)
    if not torch.isfinite(grad_norm):
        optim.opt.zero_grad(set_to_none=True)
        raise ScaleRLError(f"non-finite gradient norm at step {step}: training stopped; the last good checkpoint is kept")
    lr = optim.sched.get_last_lr()[0]
    optim.opt.step()
    optim.sched.step()
    out = {"train/loss": total, "train/grad_norm": grad_norm.item(), "train/lr": lr,
           "train/micro_batches": len(parts), "tokens/trained_step": int(metrics["tokens"])}
    out.update({f"loss/{k}": float(v) for k, v in metrics.items()})
    return out


def group_stats(groups: list[Group]) -> dict[str, float]:
    """Reward / pass / length / truncation metrics of the groups generated for a step."""
    comps = [c for g in groups for c in g.completions]
    n = max(1, len(comps))
    rewards = [c.reward for c in comps if c.reward is not None]
    return {
        "train/reward_mean": sum(rewards) / max(1, len(rewards)),
        "train/pass_rate": sum(bool(c.passed) for c in comps) / n,
        "train/length_mean": sum(len(c.tokens) for c in comps) / n,
        "train/truncation_rate": sum(c.truncated or c.interrupted for c in comps) / n,
        "train/truncated_rate": sum(c.truncated for c in comps) / n,
        "train/interrupted_rate": sum(c.interrupted for c in comps) / n,
        "train/reward_errors": sum(c.reward_error is not None for c in comps),
        "train/reward_slow": sum(c.reward_slow for c in comps),
    }

