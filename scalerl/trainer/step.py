"""The optimizer step: scored groups -> tensors -> advantages -> loss -> AdamW.

Departures from the paper (Section 4 and Appendix A.3):
1. Zero-variance groups are dropped and the step runs on the rest (not resampled, as in the
   paper); a step whose every group was dropped is skipped and counted (`train/skipped_batches`),
   the policy version does not advance.
2. Learning rate: linear warm-up then constant, as the paper, but the value is the small
   testbed's (`optim.lr`: 5e-5 by default, in every recipe; a model other than the built-in ones
   gets one derived from its size, `scalerl.configure.derived_lr`; the paper's 8B used 5e-7).
3. Log-probabilities are recomputed only at completion positions, and each group's prompt is
   run once for its G completions (forward.py; exact): the (FP32) head never runs over prompt
   tokens.
4. `train/logprob_mismatch` (the generator-trainer mismatch the FP32 head reduces, Section 3.2)
   counts a token only when it and every completion token before it were generated with the
   weights the trainer holds: under in-flight updates, a later token's context was computed by
   older weights, which is policy lag, not numerical mismatch.
5. The batch is processed in length-sorted micro-batches of whole groups with gradient
   accumulation; the weights make the accumulated loss equal to the one-batch loss (the paper
   does not say how its trainer batches; this is about padding, not maths).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, ContextManager, Protocol

import psutil
import torch
from torch.distributed.tensor import DTensor

from scalerl.config import Config
from scalerl.errors import ScaleRLError
from scalerl.rl.staleness import kappa
from scalerl.run.memory import MB
from scalerl.trainer.forward import Batch, can_recompute, completion_logprobs, forward_options
from scalerl.types import Completion, Group, rollout_stats

__all__ = [
    "ActivationCost",
    "plan_micro_batches",
    "micro_batch_sizes",
    "Batch",
    "Optimizer",
    "batch_advantages",
    "Shard",
    "aggregation_units",
    "collate",
    "completion_logprobs",
    "forward_options",
    "logprob_mismatch",
    "micro_batches",
    "plan_shards",
    "shard_step",
    "train_step",
]


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
    prompt_ids = torch.arange(len(groups)).repeat_interleave(G)  # (N,)
    prompt_lens = torch.tensor([len(c.prompt_tokens) for c in completions])  # (N,)
    same_prompt = all(c.prompt_tokens == g.completions[0].prompt_tokens for g in groups for c in g.completions)
    return Batch(
        input_ids, attention_mask, positions, targets, gen_logprobs, mask, prompt_ids, prompt_lens, same_prompt
    )


def logprob_mismatch(groups: list[Group], batch: Batch, logprobs: torch.Tensor, version: int) -> tuple[float, int]:
    """(sum, count) of |log pi_trainer - log pi_generator| over the trained tokens (`batch.mask`)
    that the generator produced with weights `version`, their whole completion prefix included
    (so the prompt's and earlier tokens' keys/values came from the same weights). `batch` is
    `collate(groups)`, `logprobs` (N, T) the trainer's."""
    N, T = batch.mask.shape
    same = torch.zeros((N, T), dtype=torch.float32)
    for i, c in enumerate(c for g in groups for c in g.completions):
        v = torch.tensor(c.versions, dtype=torch.long)  # (t,)
        same[i, : len(v)] = torch.cumprod((v == version).float(), dim=0)  # prefix all `version`
    on = batch.mask * same.to(batch.mask.device)  # (N, T)
    diff = (logprobs.detach().float() - batch.gen_logprobs.to(logprobs.device)).abs() * on
    return float(diff.sum().item()), int(on.sum().item())


def offpolicy_kl(groups: list[Group], batch: Batch, logprobs: torch.Tensor, version: int) -> list[float]:
    """`scalerl.rl.staleness.kl_sums` of the trained tokens: their estimated KL(behaviour || trainer)
    and staleness (`version`, the trainer's, minus the version that sampled each token)."""
    from scalerl.rl.staleness import kl_sums

    N, T = batch.mask.shape
    stale = torch.zeros((N, T), dtype=torch.long)
    for i, c in enumerate(c for g in groups for c in g.completions):
        stale[i, : len(c.versions)] = version - torch.tensor(c.versions, dtype=torch.long)
    logratio = logprobs.detach().float() - batch.gen_logprobs.to(logprobs.device)
    return list(kl_sums(logratio, stale.to(batch.mask.device), batch.mask))


class Optimizer:
    """AdamW (paper: eps 1e-15, weight decay 0.01) with linear warm-up then constant lr.

    `step_guard(version)`: the context AdamW's step runs in (the only moment the parameters
    change). Nothing by default; when the parameters are also the weights a generator process
    decodes from (the process transport's aliased buffer, scalerl.transport.weights), the
    transport's lock, so that they change between two decode steps and carry `version`."""

    def __init__(self, model: torch.nn.Module, cfg: Config):
        o = cfg.optim
        self.params = [p for p in model.parameters() if p.requires_grad]
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in self.params)  # ~3x faster step
        self.opt = torch.optim.AdamW(
            self.params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay, fused=fused or None
        )
        warm = o.warmup_steps
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        self.grad_clip = o.grad_clip
        self.step_guard: Callable[[int], ContextManager] = lambda version: nullcontext()

    def state_dict(self) -> dict:
        return {"opt": self.opt.state_dict(), "sched": self.sched.state_dict()}

    def load_state_dict(self, d: dict) -> None:
        self.opt.load_state_dict(d["opt"])
        self.sched.load_state_dict(d["sched"])


MICRO_BATCH_TOKENS = 8192  # padded (sequence x length) tokens per forward/backward pass
# The default activation budget (batch.activation_budget_mb unset). On a CPU, 512 MiB: a real
# model's group is then recomputed (SmolLM2-135M's keeps 772 MiB), as verl checkpoints its actor's
# activations by default, while the tiny testbed's groups (about 1 MiB) never are; at most a
# twentieth of the memory available. On a GPU an eighth of the device's memory.
ACTIVATION_BUDGET_CPU_MB = 512
ACTIVATION_BUDGET_GPU_FRACTION = 1 / 8


def activation_budget(budget_mb: float | None, device: torch.device) -> float:
    """The activation budget in bytes: `budget_mb` MiB, or the default for `device` (above)."""
    if budget_mb is not None:
        return budget_mb * MB
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory * ACTIVATION_BUDGET_GPU_FRACTION
    return float(min(ACTIVATION_BUDGET_CPU_MB * MB, psutil.virtual_memory().available // 20))


@dataclass(frozen=True)
class ActivationCost:
    """Bytes a forward keeps for its backward, estimated from the model's shape: per token (each
    layer's saved inputs, 8 x hidden + 4 x intermediate values), per (query, key) pair of
    attention (scores and probabilities, every head, fp32) and per trained token (the head's kept
    fp32 log-softmax row, rl/logprobs.py). Measured on SmolLM2-135M (autograd's saved tensors,
    prompt 100-300 and completions 16-64 tokens): 1.28 MB a token and 1.1 kB a pair; this
    estimate, 1.29 MB and 2.2 kB."""

    per_token: float
    per_pair: float
    per_trained: float

    @classmethod
    def of(cls, model, recompute: bool = False) -> ActivationCost:
        """The cost of a plain forward, or with `recompute` (batch.recompute, forward.py's
        `_recomputed`): every layer keeps only its input (hidden values) and the prompt K/V it
        reads (2 x K/V width), and one layer's activations at a time are rebuilt in the backward."""
        c = model.config.get_text_config()
        width = model.get_input_embeddings().weight.element_size()
        inter = getattr(c, "intermediate_size", None) or 4 * c.hidden_size
        layer_token = (8 * c.hidden_size + 4 * inter) * width
        layer_pair = c.num_attention_heads * 2 * 4
        if not recompute:
            return cls(
                per_token=c.num_hidden_layers * layer_token,
                per_pair=c.num_hidden_layers * layer_pair,
                per_trained=c.vocab_size * 4,
            )
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        kv = (getattr(c, "num_key_value_heads", None) or c.num_attention_heads) * head_dim
        return cls(
            per_token=c.num_hidden_layers * (c.hidden_size + 2 * kv) * width + layer_token,
            per_pair=layer_pair,
            per_trained=c.vocab_size * 4,
        )

    def bytes(self, tokens: int, pairs: int, trained: int) -> float:
        """Bytes kept for the backward by a forward of these sizes (`micro_batch_sizes`)."""
        return tokens * self.per_token + pairs * self.per_pair + trained * self.per_trained


def micro_batch_sizes(groups: list[Group], shared: bool) -> tuple[int, int, int]:
    """(padded tokens, attention pairs, completion tokens) of one forward over these groups;
    `shared`: each prompt runs once and its completions attend to it (forward.py)."""
    rows = sum(len(g.completions) for g in groups)
    T = max(len(c.tokens) for g in groups for c in g.completions)
    if not shared:
        L = max(max(len(c.prompt_tokens) + len(c.tokens) for c in g.completions) for g in groups)
        return rows * L, rows * L * L, rows * T
    prompt = max(len(g.completions[0].prompt_tokens) for g in groups)
    return len(groups) * prompt + rows * T, len(groups) * prompt * prompt + rows * T * (prompt + T), rows * T


def micro_batches(
    groups: list[Group],
    max_tokens: int = MICRO_BATCH_TOKENS,
    shared: bool = False,
    activations: ActivationCost | None = None,
    max_bytes: float = math.inf,
) -> list[list[int]]:
    """Group indices packed into micro-batches of similar length (whole groups, sorted by their
    longest sequence), each at most `max_tokens` padded tokens and, given the model's
    `activations`, at most `max_bytes` of activations kept for the backward (the run's
    `batch.activation_budget_mb`), unless one group alone is larger. Completions of one prompt
    are alike in length while prompts differ a lot (a 2-digit sum vs an interrupted 16-digit
    one), so this removes most of the padding of one big batch. `shared`: the forward runs each
    prompt once (forward.py), so a group costs its prompt
    once plus its completions (which attend to it). The byte bound is what keeps a model with long
    prompts (SmolLM2 with three worked examples: ~300 tokens) from holding gigabytes of
    activations: 8192 tokens of SmolLM2 keep about 10 GB."""

    def longest(g: Group) -> int:
        return max(len(c.prompt_tokens) + len(c.tokens) for c in g.completions)

    def fits(part: list[int]) -> bool:
        tokens, pairs, trained = micro_batch_sizes([groups[i] for i in part], shared)
        if tokens > max_tokens:
            return False
        return activations is None or activations.bytes(tokens, pairs, trained) <= max_bytes

    order = sorted(range(len(groups)), key=lambda i: longest(groups[i]))
    out: list[list[int]] = []
    for i in order:
        if out and fits(out[-1] + [i]):
            out[-1].append(i)
        else:
            out.append([i])
    return out


@dataclass
class Shard:
    """One worker's part of a step: whole groups, their rows of the whole batch's advantages,
    and the aggregation units of the whole batch (so that the workers' losses add up to it)."""

    groups: list[Group]
    advantages: torch.Tensor  # (P_w, G) rows of the whole batch's advantages
    total_units: int  # aggregation units of the whole batch (aggregation_units)
    weight: float = 1.0  # 0: a stand-in group for a rank that got none (FSDP ranks all run passes)


def trainable_tokens(c: Completion) -> int:
    """Tokens of a completion the loss trains on (injected interruption tokens are not)."""
    return len(c.tokens) - sum(c.forced_mask)


def aggregation_units(groups: list[Group], aggregation: str) -> int:
    """How many terms the loss averages over: prompts with a trainable token (`prompt`),
    completions with one (`sample`), or trainable tokens (`token`). A completion or group
    without a trainable token is no unit: the losses' means skip it (rl/losses.py)."""
    if aggregation == "prompt":
        return sum(any(trainable_tokens(c) for c in g.completions) for g in groups)
    if aggregation == "sample":
        return sum(trainable_tokens(c) > 0 for g in groups for c in g.completions)
    if aggregation == "token":
        return sum(trainable_tokens(c) for g in groups for c in g.completions)
    raise ScaleRLError(f"unknown aggregation {aggregation!r} (expected prompt, sample or token)")


def batch_advantages(groups: list[Group], cfg: Config) -> torch.Tensor:
    """The step's (P, G) advantages over its kept groups (`advantage.baseline` within each group,
    `advantage.norm` over the whole batch or each prompt: scalerl.rl.advantages)."""
    from scalerl.rl.advantages import group_advantages

    rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float32)  # (P, G)
    return group_advantages(rewards, cfg.advantage.norm, cfg.advantage.baseline)  # (P, G)


def plan_shards(
    groups: list[Group], cfg: Config, world: int, advantages: torch.Tensor | None = None
) -> list[Shard] | None:
    """`world` round-robin shards of whole groups with their rows of the whole batch's advantages
    (`batch_advantages` when not given); None if nothing trains. A rank left without a group
    (fewer groups than ranks) gets the first group with weight 0: every FSDP rank must run the
    same passes, and a data-parallel rank adds nothing from it."""
    total = aggregation_units(groups, cfg.loss.aggregation)
    if total == 0:
        return None
    adv = batch_advantages(groups, cfg) if advantages is None else advantages  # (P, G)
    return [
        Shard([groups[i] for i in range(rank, len(groups), world)], adv[rank::world], total)
        if rank < len(groups)
        else Shard(groups[:1], adv[:1], total, weight=0.0)
        for rank in range(world)
    ]


def _combine(parts: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """Loss metrics of micro-batches combined: weighted means, sums of counts, max of maxima."""
    if not parts:
        return {}
    weight = sum(w for w, _ in parts) or 1.0
    out: dict[str, float] = {}
    for key in parts[0][1]:
        values = [(w, m[key]) for w, m in parts]
        if key.endswith("_max"):
            out[key] = max(v for _, v in values)
        elif key in ("tokens", "completions", "prompts"):
            out[key] = sum(v for _, v in values)
        else:
            out[key] = sum(w * v for w, v in values) / weight
    return out


Reducer = Callable[[torch.Tensor], None]


class ShardSync(Protocol):
    """What the ranks of a sharded step agree on, `shard_step`'s `sync` (FSDP ranks: the
    implementation is scalerl.trainer.sharded.FSDPSync)."""

    def forward(self, batch: Batch, recompute: bool) -> torch.Tensor:
        """The forward every rank runs (the root FSDP unit): the completion tokens' log-probs, (N, T)."""

    def pad(self, plan: list[tuple[list[int], bool]]) -> list[tuple[list[int], bool, float]]:
        """`plan` (micro-batches, recompute) with a weight each, padded to as many micro-batches as
        every other rank runs."""


def no_reduce(flat: torch.Tensor) -> None:
    """One worker: its gradients are the batch's."""


def train_step(
    model,
    optim: Optimizer,
    groups: list[Group],
    cfg: Config,
    pad_id: int,
    step: int,
    ref_model=None,
    advantages: torch.Tensor | None = None,
) -> dict[str, float] | None:
    """One optimizer step on already-filtered groups and their (P, G) `advantages` (computed here
    when not given), one worker; None (no step) when no token is trainable. `DataParallelStep`
    (scalerl.trainer.data_parallel) runs `shard_step` on W workers."""
    shards = plan_shards(groups, cfg, 1, advantages)
    return None if shards is None else shard_step(model, optim, shards[0], cfg, pad_id, step, ref_model)


def plan_micro_batches(groups: list[Group], cfg: Config, model) -> list[tuple[list[int], bool]]:
    """The step's micro-batches (group indices) and whether each recomputes its activations
    (`batch.recompute`): `never` packs by the plain cost; `auto` too, and recomputes a
    micro-batch whose plain cost passes the activation budget (`activation_budget`: a group
    alone larger than the budget), so that no micro-batch keeps more than the budget while a recomputed one fits
    it; `always` packs by the recomputed cost and recomputes all. A model without transformers'
    checkpointable decoder layers never recomputes (`always` is then refused)."""
    device = model.get_output_embeddings().weight.device
    mode, shared = cfg.batch.recompute, cfg.model.share_prompt
    budget = activation_budget(cfg.batch.activation_budget_mb, device)
    able = mode != "never" and can_recompute(model)
    if mode == "always":
        if not able:
            raise ScaleRLError(
                f"batch.recompute=always: {type(model).__name__} has no transformers "
                "GradientCheckpointingLayer to recompute; set batch.recompute=auto or never"
            )
        parts = micro_batches(
            groups, MICRO_BATCH_TOKENS, shared=shared, activations=ActivationCost.of(model, True), max_bytes=budget
        )
        return [(part, True) for part in parts]
    plain = ActivationCost.of(model)
    parts = micro_batches(groups, MICRO_BATCH_TOKENS, shared=shared, activations=plain, max_bytes=budget)
    return [
        (part, able and plain.bytes(*micro_batch_sizes([groups[i] for i in part], shared)) > budget) for part in parts
    ]


def _backward(
    model, shard: Shard, cfg: Config, pad_id: int, step: int, ref_model, sync: ShardSync | None = None
) -> tuple[list, float, float, list, int]:
    """Accumulate the shard's weighted micro-batch losses' gradients; (metrics parts, loss, tokens,
    logprob mismatch (sum, tokens), micro-batches recomputed). `sync` (FSDP): the forward through
    the root unit, and as many micro-batches as every other rank (repeats with weight 0)."""
    from scalerl.rl.losses import policy_loss, uses_reference

    kl = uses_reference(cfg.loss)
    parts, total, tokens, mismatch, recomputed = [], 0.0, 0.0, [0.0, 0, 0.0, 0.0, 0.0, 0.0], 0
    # mismatch: |log-prob gap| (sum, tokens) on fresh tokens, then offpolicy_kl's four sums
    device = model.get_output_embeddings().weight.device
    advantages = shard.advantages.to(device)
    plan = plan_micro_batches(shard.groups, cfg, model)
    plan = sync.pad(plan) if sync is not None else [(part, recompute, 1.0) for part, recompute in plan]
    for part, recompute, weight in plan:
        weight *= shard.weight
        groups = [shard.groups[i] for i in part]
        batch = collate(groups, pad_id).to(device)
        ref = None
        if kl:
            with torch.no_grad():
                ref = completion_logprobs(ref_model, batch, cfg.rollout.temperature, **forward_options(cfg))
        if sync is not None:
            logprobs = sync.forward(batch, recompute)
        else:
            logprobs = completion_logprobs(
                model, batch, cfg.rollout.temperature, **forward_options(cfg), recompute=recompute
            )
        loss, metrics = policy_loss(
            cfg.loss, logprobs, batch.gen_logprobs, advantages[part].reshape(-1), batch.mask, batch.prompt_ids, ref
        )  # adv (p, G) -> (p*G,)
        if not torch.isfinite(loss):
            model.zero_grad(set_to_none=True)
            raise ScaleRLError(
                f"non-finite loss ({loss.item()}) at step {step}: training stopped; "
                "the last good checkpoint is kept (lower optim.lr or check the rewards)"
            )
        w = weight * aggregation_units(groups, cfg.loss.aggregation) / shard.total_units
        (loss * w).backward()
        if not weight:  # a stand-in pass: its gradients are 0, it adds no loss, token or metric
            continue
        diff_sum, diff_n = logprob_mismatch(groups, batch, logprobs, step - 1)  # the trainer holds step - 1
        for i, value in enumerate([diff_sum, diff_n, *offpolicy_kl(groups, batch, logprobs, step - 1)]):
            mismatch[i] += value
        total += w * loss.item()
        tokens += metrics["tokens"]
        parts.append((w, metrics))
        recomputed += recompute
    return parts, total, tokens, mismatch, recomputed


def shard_step(
    model,
    optim: Optimizer,
    shard: Shard,
    cfg: Config,
    pad_id: int,
    step: int,
    ref_model=None,
    reduce: Reducer = no_reduce,
    sync: ShardSync | None = None,
) -> dict[str, float]:
    """This worker's part of one optimizer step (every worker of a data-parallel step calls it).

    The loss is accumulated over length-sorted micro-batches (`micro_batches`), each weighted by
    its aggregation units over the whole batch's, so that the sum over micro-batches and
    workers is the whole-batch loss and its gradient (batch-level normalisation: the
    advantages come from the whole batch). `reduce` sums the flattened gradients, loss and
    token count over the workers (an all-reduce; nothing for one worker); clipping and AdamW
    then run on identical gradients everywhere. Raises ScaleRLError on a non-finite loss or
    gradient, before the weights change, so the last checkpoint stays the last good state.
    `ref_model`: the frozen initial policy, needed only for a KL penalty. `sync` (FSDP ranks,
    scalerl.trainer.sharded): FSDP reduce-scatters the gradients in the backward (a sum), so
    `reduce` sums only the counters.
    """
    model.train()
    optim.opt.zero_grad(set_to_none=True)
    parts, total, tokens, mismatch, recomputed = _backward(model, shard, cfg, pad_id, step, ref_model, sync)
    for p in optim.params:
        if p.grad is None:  # AdamW still decays it, as on a worker where it had a gradient
            p.grad = torch.zeros_like(p)
    if reduce is not no_reduce and sync is None:
        _reduce_gradients(optim, reduce)
    counters = torch.tensor([total, tokens, *mismatch], dtype=torch.float64, device=optim.params[0].device)
    reduce(counters)
    loss_total, tokens_total, diff_sum, diff_n, kl_sum, kl_n, kl_stale, stale_s2 = counters.tolist()
    tokens_total = int(tokens_total)
    grad_norm = torch.nn.utils.clip_grad_norm_(optim.params, optim.grad_clip)
    if isinstance(grad_norm, DTensor):  # FSDP: the norm over every rank's shards
        grad_norm = grad_norm.full_tensor()
    if not (math.isfinite(loss_total) and torch.isfinite(grad_norm)):
        optim.opt.zero_grad(set_to_none=True)
        raise ScaleRLError(
            f"non-finite loss or gradient norm at step {step}: training stopped; the last good checkpoint is kept"
        )
    lr = optim.sched.get_last_lr()[0]
    with optim.step_guard(step):  # the parameters change here, and only here
        optim.opt.step()
    optim.sched.step()
    out = {
        "train/loss": loss_total,
        "train/grad_norm": grad_norm.item(),
        "train/lr": lr,
        "train/micro_batches": len(parts),
        "train/recomputed": recomputed,
        "tokens/trained_step": tokens_total,
    }
    out.update(_mismatch_metrics(diff_sum, diff_n, kl_sum, kl_n, kl_stale, stale_s2))
    out.update({f"loss/{k}": float(v) for k, v in _combine(parts).items()})
    out["loss/loss"] = loss_total
    return out


def _reduce_gradients(optim: Optimizer, reduce: Reducer) -> None:
    """Sum every parameter's gradient over the workers through one flat buffer (a second copy of the gradients)."""
    flat = torch.cat([p.grad.reshape(-1) for p in optim.params])  # (n_params,)
    reduce(flat)
    offset = 0
    for p in optim.params:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()


def _mismatch_metrics(diff_sum, diff_n, kl_sum, kl_n, kl_stale, stale_s2) -> dict[str, float]:
    """The step's logprob mismatch and off-policy KL, each absent when no trained token measured it."""
    out = {}
    if diff_n:  # absent when no trained token came from the weights the trainer holds
        out["train/logprob_mismatch"] = diff_sum / diff_n
    if kl_n:  # the off-policy KL the step trained with (scalerl.rl.staleness)
        out["pipeline/kl"] = kl_sum / kl_n
    if (per_version2 := kappa(kl_stale, stale_s2)) is not None:  # None: every trained token was fresh
        out["pipeline/kl_per_version2"] = per_version2
    return out


def group_stats(groups: list[Group]) -> dict[str, float]:
    """Reward / pass / length / length-control metrics of the groups generated for a step.

    Kept apart (see `scalerl.types.FinishReason`): `train/truncation_rate` is the share cut by a
    budget without an interruption; `train/interrupted_rate` the share interrupted;
    `train/interrupted_answered_rate` the share of the interrupted ones that got their whole
    answer budget or ended by EOS within it (absent when none was interrupted);
    `train/length_penalised_rate` the share whose reward the overlong length penalty lowered (0
    without one: `rollout.length.type=penalty` only).
    """
    comps = [c for g in groups for c in g.completions]
    scores = [s for g in groups for s in g.scores]
    interrupted = [c for c in comps if c.interrupted]
    row = rollout_stats(comps, scores, "train")
    row.update(
        {
            "train/reward_errors": sum(s.error is not None for s in scores),
            "train/reward_slow": sum(s.slow for s in scores),
            "train/length_penalised_rate": sum(s.penalty < 0 for s in scores) / max(1, len(scores)),
        }
    )
    if interrupted:
        row["train/interrupted_answered_rate"] = sum(c.interrupt_answered for c in interrupted) / len(interrupted)
    return row
