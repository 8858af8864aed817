"""KV cache for continuous batching: one shared time axis, rows refilled in place.

Layout per layer: `keys`, `values` of shape (rows, kv_heads, capacity, head_dim), allocated once
and grown geometrically (never a `torch.cat` per step). All rows share the write column
`write`: a decode step writes every row's new K/V at column `write`. Row `b` holds its
sequence in columns `[start[b], write)`; columns left of `start[b]` belong to an earlier
occupant of the row (or were never written) and are masked out. A new request's prompt is
prefilled separately and copied right-aligned into its row, ending at `write`.

The layers plug into `transformers` as a `Cache`: attention calls `update(k, v, layer)`, which
stores the new columns and returns the keys/values up to them. The caller supplies a 4D
additive attention mask (`decode_mask`), which `transformers` passes through unchanged.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class SlotLayer(CacheLayerMixin):
    """One layer's preallocated K/V buffers; the write column lives on the owning `SlotCache`."""

    is_sliding = False

    def __init__(self, owner: SlotCache, shape: tuple[int, int, int, int], dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.owner = owner
        self.keys = torch.zeros(shape, dtype=dtype, device=device)  # (rows, kv_heads, capacity, head_dim)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.dtype, self.device = dtype, device
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("SlotLayer buffers are allocated up front")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        w, q = self.owner.write, key_states.shape[-2]
        self.keys[:, :, w : w + q] = key_states
        self.values[:, :, w : w + q] = value_states
        return self.keys[:, :, : w + q], self.values[:, :, : w + q]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.write + query_length, 0

    def get_seq_length(self) -> int:
        return self.owner.write

    def get_max_length(self) -> int:
        return -1


class SlotCache(Cache):
    """K/V buffers of `rows` sequences on one time axis; see the module docstring."""

    def __init__(
        self,
        n_layers: int,
        rows: int,
        kv_heads: int,
        head_dim: int,
        capacity: int,
        dtype: torch.dtype,
        device: torch.device,
    ):
        self.write = 0
        self.start = torch.zeros(rows, dtype=torch.long, device=device)  # (rows,) first valid column
        shape = (rows, kv_heads, capacity, head_dim)
        super().__init__(layers=[SlotLayer(self, shape, dtype, device) for _ in range(n_layers)])

    @property
    def capacity(self) -> int:
        return self.layers[0].keys.shape[2]

    @property
    def rows(self) -> int:
        return self.layers[0].keys.shape[0]

    def decode_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """Additive mask (rows, 1, 1, write + 1) for one decode step (the query sits at `write`)."""
        cols = torch.arange(self.write + 1, device=self.start.device)
        valid = cols[None, :] >= self.start[:, None]  # (rows, write + 1)
        mask = torch.zeros(valid.shape, dtype=dtype, device=valid.device)
        mask.masked_fill_(~valid, torch.finfo(dtype).min)
        return mask[:, None, None, :]

    def reserve(self, columns: int, active: torch.Tensor) -> None:
        """Make room for `columns` more columns at `write`: drop the leading columns that every
        active row masks, and when the live columns would then fill more than three quarters of
        the buffer, grow it to 4/3 of them (so that the next compaction frees a quarter). The
        capacity stays within 4/3 of the longest live span (prompt + max_new_tokens + 1), about
        1.33x, where doubling left up to 2x (docs/design.md "Memory")."""
        if self.write + columns <= self.capacity:
            return
        lead = int(torch.where(active, self.start, self.write).min()) if bool(active.any()) else self.write
        live = self.write - lead + columns
        if lead > 0:
            self._move(-lead)
        if live > self.capacity * 3 // 4:
            self._resize(max(self.capacity + 1, live * 4 // 3 + 1))

    def reserve_left(self, columns: int, active: torch.Tensor) -> None:
        """Make `write >= columns` (a prompt of that length must fit right-aligned before
        `write`), shifting the contents right if needed."""
        if self.write >= columns:
            return
        shift = columns - self.write
        if self.write + shift + 1 > self.capacity:
            self._resize((self.write + shift + 1) * 4 // 3 + 1)
        self._move(shift)

    def place(self, rows: torch.Tensor, src: SlotCache, src_rows: torch.Tensor, lengths: torch.Tensor) -> None:
        """Copy rows `src_rows` of a right-aligned prefill cache `src` into `rows`, ending at
        column `write`; row i's own tokens are the last `lengths[i]` columns."""
        width = src.write
        for dst, s in zip(self.layers, src.layers):
            dst.keys[rows, :, self.write - width : self.write] = s.keys[src_rows, :, :width]
            dst.values[rows, :, self.write - width : self.write] = s.values[src_rows, :, :width]
        self.start[rows] = self.write - lengths

    def row_copy(self, row: int) -> SlotCache:
        """A one-row cache holding a copy of row `row`'s columns up to `write` (a prefilled context
        kept on its own, so that the other rows of its prefill batch can be freed)."""
        layer = self.layers[0]
        one = SlotCache(
            len(self.layers),
            1,
            layer.keys.shape[1],
            layer.keys.shape[3],
            self.write,
            layer.keys.dtype,
            layer.keys.device,
        )
        for dst, src in zip(one.layers, self.layers):
            dst.keys.copy_(src.keys[row : row + 1, :, : self.write])
            dst.values.copy_(src.values[row : row + 1, :, : self.write])
        one.write = self.write
        one.start[0] = self.start[row]
        return one

    def nbytes(self) -> int:
        """Bytes of its K/V buffers."""
        return sum(t.nbytes for layer in self.layers for t in (layer.keys, layer.values))

    def select_rows(self, keep: torch.Tensor) -> None:
        """Keep only the rows `keep` (indices), in that order."""
        for layer in self.layers:
            layer.keys = layer.keys[keep].contiguous()
            layer.values = layer.values[keep].contiguous()
        self.start = self.start[keep]

    def grow_rows(self, extra: int) -> None:
        """Append `extra` empty rows (they see only their own columns until a prompt is placed)."""
        for layer in self.layers:
            for name in ("keys", "values"):
                old = getattr(layer, name)
                setattr(layer, name, torch.cat([old, old.new_zeros((extra, *old.shape[1:]))]))
        self.start = torch.cat([self.start, self.start.new_full((extra,), self.write)])

    def _move(self, shift: int) -> None:
        """Shift every row's columns by `shift` (negative: left), keeping `start` and `write` in step."""
        w = self.write
        lo, hi = (0, w) if shift > 0 else (-shift, w)
        for layer in self.layers:
            for buf in (layer.keys, layer.values):
                buf[:, :, lo + shift : hi + shift] = buf[:, :, lo:hi].clone()
        self.start = (self.start + shift).clamp(min=0)
        self.write = w + shift

    def _resize(self, capacity: int) -> None:
        for layer in self.layers:
            for name in ("keys", "values"):
                old = getattr(layer, name)
                new = old.new_zeros((*old.shape[:2], capacity, old.shape[3]))
                new[:, :, : self.write] = old[:, :, : self.write]
                setattr(layer, name, new)
