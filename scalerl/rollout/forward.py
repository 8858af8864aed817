"""The model's forward on fixed shapes: K/V preallocated per slot, written by position.

`StaticKV` holds, per layer, keys and values of shape (slots, kv_heads, capacity, head_dim).
Row `b` is one sequence from column 0: its token at position `p` has its K/V in column `p`, so
a decode step writes each row's new K/V at its own position and attends over columns
`[0, pos]` of its own row (a mask from the per-row position; everything right of it is masked,
which is why a reused row never sees its previous occupant: every column left of `pos` was
written by the current one, by its prefill or its decode steps).

`Decoder` runs the model's layers on those buffers with the model's own modules and weights
(a Llama-family decoder layer: RMSNorm, q/k/v/o projections, RoPE, the MLP module), as
gpt-fast and nano-vLLM do, instead of the `transformers` forward: no cache object, no mask
construction, no per-call Python beyond one loop over the layers, and shapes that do not change
from step to step, so that a step can be captured (CUDA graphs). Every weight is read from its
module at each call: in-place updates (`Engine.update_weights`, an optimizer step on the
evaluation engine's model) are seen at once; a LoRA-wrapped projection is called as a module.

Attention groups the query heads by their K/V head (GQA without copying K/V to every head):
queries (B, Hq, T, d) -> (B, Hkv, (Hq / Hkv) * T, d) against keys (B, Hkv, L, d). A bf16 model on
a CPU runs the trainer's own kernel (`scalerl.trainer.forward._grouped_attention`: matmul,
additive mask, softmax in fp32), so a bf16 generator and the bf16 trainer round alike; fp32 and
CUDA run `scaled_dot_product_attention` on the grouped shapes (the CPU's flash kernel, CUDA's
memory-efficient one; both take the mask), 10-30% faster on a CPU at decode sizes.
The numerics are those of the `transformers` forward the eager path runs (the same modules,
the same RoPE values, the same order of operations); tests/rollout/test_rollout_static.py checks
greedy tokens and log-probs against it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SUPPORTED_TYPES = ("llama", "qwen2", "qwen3", "mistral")


def unsupported(model) -> str | None:
    """Why `Decoder` cannot run `model` (None: it can): a Llama-family decoder (llama, qwen2,
    qwen3, mistral) with full causal attention and a RoPE that does not depend on the length."""
    text = model.config.get_text_config()
    kind = getattr(text, "model_type", None)
    if kind not in SUPPORTED_TYPES:
        return f"model type {kind!r} is not one of {', '.join(SUPPORTED_TYPES)}"
    window = getattr(text, "sliding_window", None)
    if window and getattr(text, "use_sliding_window", True):
        return f"sliding-window attention (sliding_window={window})"
    base = model.base_model
    rope = getattr(getattr(base, "rotary_emb", None), "rope_type", None)
    if rope is None or "dynamic" in rope or rope == "longrope":
        return f"RoPE type {rope!r} (the fixed-shape path precomputes the rotation of each position)"
    layer = base.layers[0]
    attn = getattr(layer, "self_attn", None)
    needed = ("q_proj", "k_proj", "v_proj", "o_proj")
    if attn is None or not all(hasattr(attn, n) for n in needed) or not hasattr(layer, "mlp"):
        return f"decoder layer {type(layer).__name__} is not a Llama-style layer (self_attn.{{q,k,v,o}}_proj, mlp)"
    return None


class StaticKV:
    """Per layer keys and values (slots, kv_heads, capacity, head_dim); see the module docstring."""

    def __init__(
        self,
        n_layers: int,
        slots: int,
        kv_heads: int,
        head_dim: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device,
    ):
        shape = (slots, kv_heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]

    @property
    def slots(self) -> int:
        return self.keys[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def nbytes(self) -> int:
        return sum(t.nbytes for t in (*self.keys, *self.values))

    def take(self, row: int, cols: int) -> list[torch.Tensor]:
        """A copy of row `row`'s first `cols` columns, every layer's K then V (one row each)."""
        return [t[row : row + 1, :, :cols].clone() for t in (*self.keys, *self.values)]

    def put(self, rows: torch.Tensor, saved: list[torch.Tensor]) -> None:
        """Write a `take` copy into the first columns of every row in `rows`."""
        cols = saved[0].shape[2]
        for t, s in zip((*self.keys, *self.values), saved):
            t[rows, :, :cols] = s

    def copy_rows(self, dst: torch.Tensor, src: torch.Tensor, cols: int) -> None:
        """Columns [0, cols) of rows `src` into rows `dst` (index tensors of one length)."""
        for t in (*self.keys, *self.values):
            t[dst, :, :cols] = t[src, :, :cols]

    def resized(self, slots: int, capacity: int) -> StaticKV:
        """A new cache of `slots` x `capacity` holding this one's rows and columns that fit."""
        k = self.keys[0]
        out = StaticKV(len(self.keys), slots, k.shape[1], k.shape[3], capacity, k.dtype, k.device)
        r, c = min(slots, self.slots), min(capacity, self.capacity)
        for new, old in zip((*out.keys, *out.values), (*self.keys, *self.values)):
            new[:r, :, :c] = old[:r, :, :c]
        return out


def _linear(module):
    """A plain Linear as `F.linear` on its current weight (cheaper than a module call); anything
    else (a LoRA-wrapped layer) as the module itself."""
    if type(module) is torch.nn.Linear:
        return lambda x: F.linear(x, module.weight, module.bias)
    return module


def _norm(module, dtype: torch.dtype):
    """An RMSNorm as one fused `F.rms_norm` on fp32 activations (the same values as the `transformers`
    module, which upcasts to fp32, normalises and multiplies by the weight: checked bit for bit);
    in any other dtype the module itself, whose two roundings a fused kernel would not repeat."""
    eps = getattr(module, "variance_epsilon", None)
    if module is None or dtype != torch.float32 or eps is None or "RMSNorm" not in type(module).__name__:
        return module
    return lambda x: F.rms_norm(x, (x.shape[-1],), module.weight, eps)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """`x * cos + rotate_half(x) * sin` as `transformers` computes it, with rotate_half(x) * sin =
    roll(x, half) * sin_signed (sin with its first half negated): the same products, one kernel
    fewer."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin_signed


class _Layer:
    def __init__(self, layer, dtype: torch.dtype):
        attn = layer.self_attn
        self.q, self.k, self.v, self.o = (_linear(getattr(attn, n)) for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
        self.q_norm = _norm(getattr(attn, "q_norm", None), dtype)  # qwen3
        self.k_norm = _norm(getattr(attn, "k_norm", None), dtype)
        self.ln1, self.ln2 = _norm(layer.input_layernorm, dtype), _norm(layer.post_attention_layernorm, dtype)
        self.mlp = layer.mlp


class Decoder:
    """The fixed-shape forward of a Llama-family `*ForCausalLM` (see the module docstring)."""

    def __init__(self, model):
        base = model.base_model
        text = model.config.get_text_config()
        self.embed, self.rotary = base.get_input_embeddings(), base.rotary_emb
        dtype = self.embed.weight.dtype
        self.norm = _norm(base.norm, dtype)
        self.layers = [_Layer(layer, dtype) for layer in base.layers[: text.num_hidden_layers]]
        self.heads, self.kv_heads = text.num_attention_heads, text.num_key_value_heads
        self.head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        self.scaling = getattr(base.layers[0].self_attn, "scaling", self.head_dim**-0.5)
        # the trainer's kernel where rounding must match it (bf16 on a CPU), else the fused one
        self.sdpa = self.embed.weight.device.type == "cuda" or dtype == torch.float32

    def rope(self, capacity: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin_signed (capacity, head_dim) of positions 0..capacity-1, as the model's rotary
        embedding computes them (in the activation dtype); sin_signed has its first half negated
        (`_rope`)."""
        device = self.embed.weight.device
        positions = torch.arange(capacity, device=device)[None]
        cos, sin = self.rotary(torch.zeros((), dtype=dtype, device=device), positions)
        half = self.head_dim // 2
        return cos[0], torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)

    def decode(
        self, ids: torch.Tensor, pos: torch.Tensor, kv: StaticKV, cols: int, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        """One token per row for rows [0, B) (`ids`, `pos` (B,)); attends over columns [0, cols).
        Writes each row's K/V at `pos`; returns the final hidden states (B, H)."""
        B = ids.shape[0]
        cols_range = torch.arange(cols, device=ids.device)
        dtype = kv.keys[0].dtype
        mask = torch.zeros((B, 1, 1, cols), dtype=dtype, device=ids.device)
        mask.masked_fill_(cols_range[None, None, None, :] > pos[:, None, None, None], torch.finfo(dtype).min)
        c, s = cos[pos][:, None, None, :], sin[pos][:, None, None, :]  # (B, 1, 1, d)
        h, cap, d = self.kv_heads, kv.capacity, self.head_dim
        # where each row's new K/V goes in a layer's buffer seen as (slots * h * capacity, d)
        heads = torch.arange(h, device=ids.device)
        at = (((torch.arange(B, device=ids.device) * h)[:, None] + heads) * cap + pos[:, None]).view(-1)  # (B * h,)
        x = F.embedding(ids, self.embed.weight)  # (B, H)
        for i, L in enumerate(self.layers):
            h = L.ln1(x)
            q = self._heads(L.q(h), L.q_norm, B, 1, self.heads)  # (B, Hq, 1, d)
            k = self._heads(L.k(h), L.k_norm, B, 1, self.kv_heads)  # (B, Hkv, 1, d)
            v = L.v(h).view(B, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = _rope(q, c, s), _rope(k, c, s)
            K, V = kv.keys[i], kv.values[i]
            K.view(-1, d).index_copy_(0, at, k.reshape(-1, d))
            V.view(-1, d).index_copy_(0, at, v.reshape(-1, d))
            o = self._attend(q, K[:B, :, :cols], V[:B, :, :cols], mask)  # (B, Hq, 1, d)
            x = x + L.o(o.reshape(B, -1))
            x = x + L.mlp(L.ln2(x))
        return self.norm(x)

    def prefill(
        self, ids: torch.Tensor, rows: torch.Tensor, start: int, kv: StaticKV, cos: torch.Tensor, sin: torch.Tensor
    ) -> None:
        """Run `ids` (k, W), right-padded, at positions start..start+W-1 of rows `rows`, whose
        columns [0, start) already hold a shared prefix; writes their K/V. A padded row's columns
        past its own tokens get values that its decode steps overwrite before attending to them."""
        k_rows, W = ids.shape
        end = start + W
        dtype = kv.keys[0].dtype
        q_pos = torch.arange(start, end, device=ids.device)
        mask = torch.zeros((1, 1, W, end), dtype=dtype, device=ids.device)
        mask.masked_fill_(torch.arange(end, device=ids.device)[None, :] > q_pos[:, None], torch.finfo(dtype).min)
        c, s = cos[start:end][None, None], sin[start:end][None, None]  # (1, 1, W, d)
        x = F.embedding(ids, self.embed.weight)  # (k, W, H)
        for i, L in enumerate(self.layers):
            h = L.ln1(x)
            q = self._heads(L.q(h), L.q_norm, k_rows, W, self.heads)  # (k, Hq, W, d)
            k = self._heads(L.k(h), L.k_norm, k_rows, W, self.kv_heads)
            v = L.v(h).view(k_rows, W, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = _rope(q, c, s), _rope(k, c, s)
            K, V = kv.keys[i], kv.values[i]
            K[rows, :, start:end] = k
            V[rows, :, start:end] = v
            o = self._attend(q, K[rows, :, :end], V[rows, :, :end], mask)  # (k, Hq, W, d)
            x = x + L.o(o.transpose(1, 2).reshape(k_rows, W, -1))
            x = x + L.mlp(L.ln2(x))

    def _heads(self, x: torch.Tensor, norm, B: int, T: int, n: int) -> torch.Tensor:
        """(B, T, n * d) -> (B, n, T, d), with the per-head norm of qwen3."""
        x = x.view(B, T, n, self.head_dim)
        if norm is not None:
            x = norm(x)
        return x.transpose(1, 2)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Softmax attention with the query heads grouped by K/V head. q (B, Hq, T, d), k/v
        (B, Hkv, L, d), mask additive (B or 1, 1, T, L). Returns (B, Hq, T, d)."""
        B, H, T, d = q.shape
        h, L = k.shape[1], k.shape[2]
        r = H // h
        qg = q.reshape(B, h, r * T, d)  # query head j*r + i -> group j, row i*T + t
        if self.sdpa:
            m = mask if T == 1 else mask[:, :, None].expand(-1, -1, r, -1, -1).reshape(mask.shape[0], 1, r * T, L)
            out = F.scaled_dot_product_attention(qg, k, v, attn_mask=m, scale=self.scaling)
        else:
            scores = (torch.matmul(qg, k.transpose(-1, -2)) * self.scaling).view(B, h, r, T, L)
            scores = scores + mask[:, :, None]  # (B|1, 1, 1, T, L)
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(probs.view(B, h, r * T, L), v)  # (B, h, r*T, d)
        # reshape, not view: CUDA's SDPA kernels may return (B, h, r*T, d) with its last two dims' strides
        # not row-major (the same values; a view of it is refused: the first GPU run of this path, 2026-11-26)
        return out.reshape(B, H, T, d)
