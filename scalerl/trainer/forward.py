"""The trainer's forward pass: log-probs of the completion tokens, each group's prompt run once.

All G completions of a group continue the same prompt, so the prompt's keys and values are the
same for every one of them. The shared path runs each prompt once (with grad) and lets the G
completions attend to its K/V:

    prompts minus their last token       (P, Lp) left-padded  --forward-->  K/V per layer (P, h, Lp, d)
    K/V rows repeated to their completions                                  (N, h, Lp, d)  [broadcast]
    [last prompt token, completion[:-1]] (N, T) right-padded  --forward over the K/V-->  hidden (N, T, H)
    hidden[:, t] predicts completion token t  -->  FP32 head (scalerl.rl.logprobs)

The backward of the row repetition sums the G completions' gradients into the prompt's K/V, so
the loss and every gradient are those of the unshared computation (N full sequences
prompt + completion, `_unshared`), up to float rounding; tests/trainer/test_train_forward.py checks it.
On SmolLM2's chat template (about 83 prompt and at most 32 completion tokens, G = 8) the
trainer then runs about 2.7k tokens a step instead of 7.2k. On a CPU the shared path's
attention is `_grouped_attention` (query heads grouped by K/V head, no K/V repetition), whose
backward is about 3x faster than sdpa's flash kernel at these sizes; on CUDA the model's own
kernels run.

Mixed precision (`compute_dtype="bf16"`, the paper's regime): the trunk runs on bf16 casts of
the fp32 master weights (`_trunks`: bf16 activations, residual stream and K/V, as the model
writes them for a bf16 checkpoint), which is exactly the computation of the generator's bf16
copy (the same casts, `scalerl.models.cast_model`: RoPE frequencies fp32 on both sides, and the
same attention kernel, `match_trainer_attention`). The gradients flow through the casts into
the fp32 weights, which AdamW updates. The LM head and log-softmax run on the fp32 weight and
fp32 hidden states when `fp32_head` (paper Section 3.2), else in bf16. Measured on the tiny
model (tests/trainer/test_effects_precision.py, docs/training.md): generator and trainer then agree
to about 1e-5 per token with the FP32 head, where torch.autocast (fp32 residual stream and
norms) against a plain bf16 generator copy differed by 1e-2.

Departures from the paper: none in the maths (the paper's trainer runs full sequences; the
sharing is exact). The shared path needs a base model that takes `past_key_values` and a 4D
additive attention mask (eager or sdpa attention) and full causal attention (no sliding
window, no logit soft-capping); otherwise, or when the completions of a group do not share
their prompt tokens, or with `share_prompt=False` (`model.share_prompt`), the unshared path runs.
The head runs only at the tokens the loss uses (mask 1); the returned log-probs are 0 elsewhere.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch.func import functional_call
from torch.utils.checkpoint import checkpoint
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.modeling_layers import GradientCheckpointingLayer

SHARED_ATTENTION = ("eager", "sdpa")  # attention implementations that take our 4D additive mask
GROUPED = "scalerl_grouped"  # the shared path's attention on a CPU (`_grouped_attention`)
GROUPED_DEVICES = ("cpu",)  # elsewhere (CUDA) the model's own eager/sdpa kernels run


@dataclass
class Batch:
    input_ids: torch.Tensor  # (N, L) prompt + completion, right-padded
    attention_mask: torch.Tensor  # (N, L)
    positions: torch.Tensor  # (N, T) index in L of the hidden state predicting targets[:, t]
    targets: torch.Tensor  # (N, T) completion tokens, padded with 0
    gen_logprobs: torch.Tensor  # (N, T) generator logprobs (0 where masked)
    mask: torch.Tensor  # (N, T) 1.0 for sampled completion tokens, 0 for padding/forced
    prompt_ids: torch.Tensor  # (N,) group index 0..P-1 of each completion
    prompt_lens: torch.Tensor  # (N,) prompt length of each completion
    same_prompt: bool = True  # every completion of a group has its group's prompt tokens

    def to(self, device: torch.device) -> "Batch":
        """The same batch with every tensor on `device` (collate builds it on the CPU)."""
        return Batch(
            **{
                f.name: (v.to(device) if isinstance(v := getattr(self, f.name), torch.Tensor) else v)
                for f in fields(self)
            }
        )


def forward_options(cfg) -> dict:
    """The `completion_logprobs` keyword arguments a `Config` sets (its `model` section)."""
    from scalerl.models import compute_dtype

    m = cfg.model
    return {"fp32_head": m.fp32_head, "compute_dtype": compute_dtype(m), "share_prompt": m.share_prompt}


def completion_logprobs(
    model,
    batch: Batch,
    temperature: float,
    fp32_head: bool,
    compute_dtype: str = "fp32",
    share_prompt: bool = True,
    recompute: bool = False,
) -> torch.Tensor:
    """Trainer log-probs (N, T) of the completion tokens under the sampling distribution; 0 where
    `batch.mask` is 0 (padding, forced interruption tokens: the head does not run there).
    `recompute`: each decoder layer keeps only its input for the backward and runs its forward
    again there (`_recomputed`; the same values and gradients, one more forward of the trunk)."""
    from scalerl.rl.logprobs import token_logprobs

    device = model.get_output_embeddings().weight.device
    shared = share_prompt and can_share(model, batch)
    trunk, prompt_trunk, dtype = _trunks(model, compute_dtype, prompt_pass=shared)
    cache = _PromptCache(model.config.get_text_config().num_hidden_layers) if shared else None
    with _recomputed(model, cache) if recompute and torch.is_grad_enabled() else nullcontext():
        if shared:
            with _grouped(model) if device.type in GROUPED_DEVICES else nullcontext():
                hidden = _shared(model, batch, trunk, dtype, cache, prompt_trunk)
        else:
            hidden = _unshared(model, batch, trunk, use_cache=False if recompute else None)
    head = model.get_output_embeddings()
    on = batch.mask > 0  # (N, T) the tokens the loss uses
    logp = token_logprobs(
        hidden[on][None],
        _grad_leaf(head.weight, head.weight.detach()),
        batch.targets[on][None],
        temperature=temperature,
        fp32=fp32_head,
        head_bias=getattr(head, "bias", None),
    )  # (1, M): the head skips padding
    return logp.new_zeros(on.shape).masked_scatter(on, logp[0])  # (N, T), 0 where masked


def can_share(model, batch: Batch) -> bool:
    """The shared path applies: groups share their prompts and the model takes our mask and cache
    (full causal attention everywhere: no sliding window, no logit soft-capping)."""
    return batch.same_prompt and _takes_our_mask(model)


def _takes_our_mask(model) -> bool:
    """eager or sdpa attention, full causal everywhere (no sliding window, no logit soft-capping)."""
    text = model.config.get_text_config()
    return (
        model.config._attn_implementation in SHARED_ATTENTION
        and not getattr(text, "sliding_window", None)
        and not getattr(text, "attn_logit_softcapping", None)
    )


def _trunks(model, compute_dtype: str, prompt_pass: bool = False):
    """(the base model as a callable, the same for the shared path's prompt pass, their activation
    dtype). With `compute_dtype="bf16"` the trunk runs on bf16 casts of the parameters, made once,
    whose gradients are added to the fp32 weights' `.grad` (`_grad_leaf`); the buffers (RoPE
    frequencies) are the model's own, fp32. `prompt_pass` (with grad enabled): the prompt pass
    gets leaves of its own over the same values (the fp32 weights' own storage, or the same
    casts), because the completion pass uses every weight again."""
    base = model.base_model
    bf16 = compute_dtype == "bf16"
    dtype = torch.bfloat16 if bf16 else model.get_input_embeddings().weight.dtype
    prompt_pass = prompt_pass and torch.is_grad_enabled()
    if not bf16 and not prompt_pass:
        return base, base, dtype
    named = list(base.named_parameters())
    values = {name: p.detach().to(dtype) for name, p in named}  # fp32: the weights' own storage

    def on(tensors: dict):
        return lambda **kwargs: functional_call(base, tensors, args=(), kwargs=kwargs)

    def leaves() -> dict:
        return {name: _grad_leaf(p, values[name]) for name, p in named}

    trunk = on(leaves()) if bf16 else base
    return trunk, (on(leaves()) if prompt_pass else trunk), dtype


def _grad_leaf(param: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` (`param`'s, detached: its own storage or a cast) as a leaf of its own whose
    gradient is added to `param.grad` in place as soon as the backward computes it (a
    post-accumulate hook), so no gradient of this use waits in autograd. Why: a weight used
    twice in one graph (the shared path's prompt pass and completion pass; a tied embedding and
    LM head), or through a cast made before the forward, has its gradient held by autograd until
    every use reports, and the nodes made first run last; the completion pass's backward runs
    first, whole, so every layer's weight gradients waited for the prompt pass: measured on
    SmolLM2, 0.68 GiB of weight-shaped gradients alive at once in a later micro-batch's backward.
    The sum is the same, added in another order. Without grad (or a frozen parameter), `values`."""
    if not (param.requires_grad and torch.is_grad_enabled()):
        return values
    leaf = values.detach().requires_grad_(True)

    def add(leaf: torch.Tensor) -> None:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        param.grad.add_(leaf.grad)
        leaf.grad = None

    leaf.register_post_accumulate_grad_hook(add)
    return leaf


def match_trainer_attention(model, share_prompt: bool = True):
    """Give a generator's own copy of the model the attention kernel the trainer's forward runs on
    its device (`_grouped_attention` on a CPU when prompts are shared), so that a bf16 generator
    and the bf16 trainer round alike: measured on the tiny model, sdpa's CPU kernel in the
    generator against the grouped one in the trainer left 7.5e-4 of mean |delta log p|, the
    same kernel 1e-5. Never call it on the trainer's model (its unshared path needs its own kernel)."""
    device = model.get_output_embeddings().weight.device
    if share_prompt and device.type in GROUPED_DEVICES and _takes_our_mask(model):
        model.config._attn_implementation = GROUPED
    return model


@contextmanager
def _grouped(model):
    """Run the model's attention as `_grouped_attention` for the duration (the shared path only:
    it passes its own 4D additive masks)."""
    cfg = model.config
    old = cfg._attn_implementation
    cfg._attn_implementation = GROUPED
    try:
        yield
    finally:
        cfg._attn_implementation = old


def _grouped_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Softmax attention under a 4D additive mask with the query heads grouped by their K/V head
    (GQA) instead of K/V repeated to every query head: (B, h, r*T, d) x (B, h, d, K). The same
    maths as `eager`/`sdpa`; on a CPU its backward at the trainer's sizes (T 32, K 115) is about
    3x faster than sdpa's flash kernel. query (B, H, T, d), key/value (B, h, K, d), H = h * r."""
    B, H, T, d = query.shape
    h = key.shape[1]
    r = H // h
    q = query.reshape(B, h, r * T, d)  # query head kv*r + j -> group kv, row j*T + t
    scores = (torch.matmul(q, key.transpose(-1, -2)) * scaling).view(B, h, r, T, -1)  # (B, h, r, T, K)
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, None]  # (B, 1, 1, T, K)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = F.dropout(probs, p=dropout, training=module.training)
    out = torch.matmul(probs.view(B, h, r * T, -1), value)  # (B, h, r*T, d)
    return out.view(B, H, T, -1).transpose(1, 2).contiguous(), None  # (B, T, H, d_v)


AttentionInterface.register(GROUPED, _grouped_attention)


def can_recompute(model) -> bool:
    """The model's decoder layers are transformers' `GradientCheckpointingLayer`s (`_recomputed`
    wraps them); models built otherwise keep their activations."""
    return bool(_decoder_layers(model))


def _decoder_layers(model) -> list[torch.nn.Module]:
    return [m for m in model.base_model.modules() if isinstance(m, GradientCheckpointingLayer)]


@contextmanager
def _recomputed(model, cache: _PromptCache | None):
    """For the duration, each decoder layer runs under `torch.utils.checkpoint` (non-reentrant):
    its forward keeps only what enters it (the hidden states; the prompt K/V it reads) and runs
    again in the backward to rebuild its activations, so a forward keeps about
    n_layers x hidden values a token instead of every layer's intermediates (ActivationCost).
    transformers' own gradient checkpointing drops the K/V cache, which the shared path needs:
    here the prompt pass's layers write their K/V into `cache` once, and their replay in the
    backward (`_PromptLayer.replaying`) recomputes the same K/V without storing them again; the
    completion pass's layers only read the cache. With bf16 compute (`_trunks`: the trunk runs
    on bf16 casts through `functional_call`, which has ended by the backward) a layer replays on
    the very casts its forward used, so both passes compute alike."""
    layers = _decoder_layers(model)
    if not layers:
        raise ValueError(
            f"{type(model).__name__}: no transformers GradientCheckpointingLayer to recompute "
            "(batch.recompute needs a transformers decoder model; set batch.recompute=never)"
        )

    context_fn = _replay_contexts(model, cache)
    for layer in layers:
        layer.forward = _checkpointed(layer, context_fn)
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward  # back to the class's forward


def _replay_contexts(model, cache: _PromptCache | None):
    """`_recomputed`'s `context_fn` for `torch.utils.checkpoint`: (forward, replay) contexts, the replay keeping
    the forward's attention kernel and storing no prompt K/V."""

    def replay_context():
        attention = model.config._attn_implementation
        prompt_pass = cache is not None and not cache.layers[0].frozen  # the completion pass only reads

        @contextmanager
        def replay():
            old = model.config._attn_implementation
            model.config._attn_implementation = attention
            try:
                with cache.replaying() if prompt_pass else nullcontext():
                    yield
            finally:
                model.config._attn_implementation = old

        return nullcontext(), replay()

    return replay_context


def _checkpointed(layer, context_fn):
    """`layer`'s forward under `torch.utils.checkpoint` (non-reentrant, contexts from `context_fn`) while
    gradients are on: it keeps what enters the layer and runs the layer again in the backward."""
    own = type(layer).forward.__get__(layer)  # the class's forward (no recursion into this wrapper)

    def forward(*args, **kwargs):
        if not torch.is_grad_enabled():
            return own(*args, **kwargs)
        tensors = {**dict(layer.named_parameters()), **dict(layer.named_buffers())}  # the bf16 casts, if any

        def run(*a, **k):  # the forward, and its replay in the backward (after this context may have ended)
            before = layer.__dict__.get("forward")
            layer.forward = own
            try:
                return functional_call(layer, tensors, a, k)
            finally:
                if before is None:
                    del layer.forward
                else:
                    layer.forward = before

        return checkpoint(run, *args, use_reentrant=False, context_fn=context_fn, **kwargs)

    return forward


def _unshared(model, batch: Batch, trunk, use_cache: bool | None = None) -> torch.Tensor:
    """Every completion as a full sequence; hidden states (N, T, H) at the completion positions."""
    hidden = trunk(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        **({} if use_cache is None else {"use_cache": use_cache}),
    ).last_hidden_state
    H = hidden.shape[-1]
    return torch.gather(hidden, 1, batch.positions.unsqueeze(-1).expand(-1, -1, H))  # (N, T, H)


def _shared(model, batch: Batch, trunk, dtype: torch.dtype, prompt_cache: _PromptCache, prompt_trunk) -> torch.Tensor:
    """Each group's prompt once (run by `prompt_trunk`, its K/V recorded in `prompt_cache`), the
    K/V repeated to the group's completions (run by `trunk`); hidden (N, T, H)."""
    from scalerl.models import cache_kwarg

    dev = batch.input_ids.device
    N, T = batch.targets.shape
    ctx = batch.prompt_lens.to(dev) - 1  # (N,) context before the last prompt token
    rows = torch.arange(N, device=dev)
    first = torch.full((int(batch.prompt_ids.max()) + 1,), N, dtype=torch.long, device=dev)
    first = first.scatter_reduce(0, batch.prompt_ids, rows, reduce="amin")  # (P,) first row of each group
    p_ctx = ctx[first]  # (P,)
    Lp = int(p_ctx.max())
    cols = torch.arange(T, device=dev)
    # completion inputs: the last prompt token, then the completion but its last token
    take = (ctx[:, None] + cols[None, :]).clamp(max=batch.input_ids.shape[1] - 1)  # (N, T)
    comp_ids = batch.input_ids.gather(1, take)  # (N, T)
    comp_pos = ctx[:, None] + cols[None, :]  # (N, T)
    causal = cols[:, None] >= cols[None, :]  # (T, T)
    cache = None
    kw = cache_kwarg(model.base_model)  # `cache` or, before transformers 5, `past_key_values`
    if Lp > 0:
        pcols = torch.arange(Lp, device=dev)
        pad = Lp - p_ctx  # (P,) left padding
        src = (pcols[None, :] - pad[:, None]).clamp(min=0)  # (P, Lp)
        prompt_ids = batch.input_ids[first].gather(1, src)  # (P, Lp) left-padded
        real = pcols[None, :] >= pad[:, None]  # (P, Lp) real tokens
        allowed = (pcols[:, None] >= pcols[None, :])[None] & (
            real[:, None, :] | torch.eye(Lp, dtype=torch.bool, device=dev)[None]
        )
        cache = prompt_cache
        prompt_trunk(
            input_ids=prompt_ids,
            attention_mask=_mask(allowed, model, dtype),
            position_ids=src,
            use_cache=True,
            **{kw: cache},
        )  # K/V (P, h, Lp, d)
        cache.expand(batch.prompt_ids)  # K/V (N, h, Lp, d)
        prefix = real[batch.prompt_ids][:, None, :].expand(N, T, Lp)  # (N, T, Lp)
        allowed = torch.cat([prefix, causal[None].expand(N, T, T)], dim=2)  # (N, T, Lp + T)
    else:  # every prompt is one token: nothing to share
        allowed = causal[None].expand(N, T, T)
    out = trunk(
        input_ids=comp_ids,
        attention_mask=_mask(allowed, model, dtype),
        position_ids=comp_pos,
        use_cache=cache is not None,
        **{kw: cache},
    )
    return out.last_hidden_state  # (N, T, H)


def _mask(allowed: torch.Tensor, model, dtype: torch.dtype) -> torch.Tensor:
    """(B, Q, K) bool -> (B, 1, Q, K): as is for sdpa, else an additive mask in the activations'
    `dtype` (0 allowed, min elsewhere). Every query is allowed at least one key (itself)."""
    if model.config._attn_implementation == "sdpa":
        return allowed[:, None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


class _PromptLayer(CacheLayerMixin):
    """One layer's prompt K/V: recorded by the prompt pass, prepended (not stored) in the completion pass."""

    is_sliding = False

    def __init__(self):
        super().__init__()
        self.is_initialized = True
        self.frozen = False
        self.replaying = False  # the backward's replay of the prompt pass (`_recomputed`): store nothing

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("_PromptLayer needs no initialization")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.replaying:  # the prompt pass again, in the backward: the same K/V, already expanded
            return key_states, value_states
        if not self.frozen:  # the prompt pass
            self.keys, self.values = key_states, value_states
            return key_states, value_states
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_seq_length(self) -> int:
        return 0 if self.keys is None or not self.frozen else self.keys.shape[-2]

    def get_max_length(self) -> int:
        return -1


class _PromptCache(Cache):
    """The prompts' K/V with their autograd history, for the completion pass."""

    def __init__(self, n_layers: int):
        super().__init__(layers=[_PromptLayer() for _ in range(n_layers)])

    @contextmanager
    def replaying(self):
        """The prompt pass replayed in the backward (`_recomputed`): `update` returns the K/V it
        is given and keeps the expanded ones."""
        for layer in self.layers:
            layer.replaying = True
        try:
            yield
        finally:
            for layer in self.layers:
                layer.replaying = False

    def expand(self, rows: torch.Tensor) -> None:
        """Repeat the prompt rows to the completions (`rows[i]`: prompt of completion i) and freeze.
        Rows in collate's order (G per prompt, in prompt order) expand by a broadcast, whose
        backward is a sum over G; any other order by `index_select` (backward: scatter-add)."""
        P = self.layers[0].keys.shape[0]
        G = rows.numel() // P
        blocks = rows.numel() == P * G and torch.equal(rows, torch.arange(P, device=rows.device).repeat_interleave(G))
        for layer in self.layers:
            for name in ("keys", "values"):
                kv = getattr(layer, name)  # (P, h, Lp, d)
                kv = (
                    kv[:, None].expand(P, G, *kv.shape[1:]).reshape(P * G, *kv.shape[1:])
                    if blocks
                    else kv.index_select(0, rows)
                )  # (N, h, Lp, d)
                setattr(layer, name, kv)
            layer.frozen = True
