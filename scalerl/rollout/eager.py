"""The reference decoding loop (`rollout.decode: eager`): the `transformers` forward over a
shared-time-axis cache (`cache.py`), one host synchronisation a step.

One decode step = one forward of the base model on every row (one token each, a 4D additive
mask from `SlotCache.decode_mask`) + the engine's head, sampling and bookkeeping. A finished row
is refilled at once with the next request: its prompt is prefilled and copied right-aligned into
the shared cache; it joins the next step. Rows are given up while few are in flight and taken
back when prompts may start again. Any model `transformers` runs with `eager` or `sdpa`
attention decodes here; `static.py` is the fixed-shape path that replaces it where it can.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator

import torch

from scalerl.rollout.cache import SlotCache
from scalerl.rollout.sampling import sample
from scalerl.rollout.state import _END, RECENT_PREFILLS, Request, Rows, shared_prefix


class EagerLoop:
    """The eager decoding loop of an `Engine` (`engine`: weights, head, sampling, bookkeeping)."""

    def __init__(self, engine):
        self.e = engine
        self._prefix: tuple[tuple[int, ...], SlotCache] | None = None  # see _shared_prefix
        self._recent: OrderedDict[tuple[int, ...], tuple[SlotCache, int]] = OrderedDict()  # see _prefilled
        self._last_context: tuple[int, ...] = ()

    def forget(self) -> None:
        """Drop every prefilled K/V (the weights changed)."""
        self._prefix = None
        self._recent.clear()

    def run(
        self, requests: Iterator[Request], rows: int, stop: threading.Event | None, hold: threading.Event | None = None
    ):
        """Yields (request, completion) as sequences finish; while `hold` is set, waits."""
        e = self.e
        state = Rows.empty(rows, e.cfg.max_new_tokens, e.device)
        held: list[Request | None] = [None] * rows
        cache: SlotCache | None = None
        exhausted = False
        while not (stop is not None and stop.is_set()):
            if hold is not None and hold.is_set():
                e._held()  # held (the trainer evaluates): no step, the rows keep their K/V
                continue
            e._apply_pending()  # step boundary: new weights serve this step's prefill and decode
            free = [] if exhausted else (~state.active).nonzero().flatten().tolist()
            spare = 0 if exhausted else rows - len(held)  # rows given up while idle, to take back
            batch, idle, limit = [], False, len(free) + spare
            while len(batch) < limit:
                req = next(requests, _END)
                if req is _END:
                    exhausted = True
                    break
                if req is None:  # no prompt may start now (PipelineRL-k window): decode what is in flight
                    idle = True
                    break
                if len(batch) == len(free):  # more requests than free rows: back to the full width
                    free += list(range(len(held), rows))
                    state.grow(rows - len(held))
                    if cache is not None:
                        cache.grow_rows(rows - len(held))
                    held += [None] * (rows - len(held))
                batch.append((free[len(batch)], req))
                held[batch[-1][0]] = req
            if batch:
                with torch.inference_mode():
                    cache = self._admit(state, cache, batch)
            n_active = int(state.active.sum())
            if n_active == 0:
                if not idle:
                    return
                e._idle()  # nothing in flight and no prompt may start: wait for the trainer
                continue
            # decode only about as many rows as are in flight: at the end of the prompts, and while
            # the PipelineRL window lets none start (a long completion would otherwise keep every
            # idle row computing); the rows come back when prompts may start again
            if (exhausted and n_active <= len(held) // 2) or (idle and n_active <= len(held) // 4):
                keep = state.active.nonzero().flatten()
                state.select(keep)
                cache.select_rows(keep)
                held = [held[i] for i in keep.tolist()]
            with torch.inference_mode():
                done, reasons = e._step(state, cache)
            if bool(done.any()):
                idx = done.nonzero().flatten()
                for row, completion in e._finish(state, held, idx, reasons[idx]):
                    if stop is not None and stop.is_set():
                        return
                    yield held[row], completion
                    held[row] = None

    def step(self, state: Rows, cache: SlotCache) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step on every row. Returns (done (R,) bool, reason index (R,))."""
        e = self.e
        cache.reserve(1, state.active)
        cache.start = torch.where(state.active, cache.start, cache.write)  # idle rows see only themselves
        out = e.base(
            input_ids=state.next_input[:, None],
            attention_mask=cache.decode_mask(e.dtype),
            position_ids=state.pos[:, None],
            use_cache=True,
            **{e._cache_kw: cache},
        )
        cache.write += 1
        tokens, logprobs = sample(
            e._logits(out.last_hidden_state[:, -1]), e.cfg.temperature, e.cfg.top_p, e._gen, e.greedy
        )
        return e._advance(state, tokens, logprobs)

    def _admit(self, state: Rows, cache: SlotCache | None, batch: list[tuple[int, Request]]) -> SlotCache:
        """Prefill the new requests (all but each prompt's last token, which the next decode step
        feeds) and place them right-aligned in their rows. Identical prompts (the n samples of
        one prompt) are prefilled once per weights version and copied to each of their rows,
        whether admitted together or step by step (`_prefilled`)."""
        e = self.e
        rows = torch.tensor([r for r, _ in batch], device=e.device)
        ctx = [req.tokens[:-1] for _, req in batch]
        lens = torch.tensor([len(c) for c in ctx], device=e.device)
        width = max(len(c) for c in ctx)
        if cache is None:
            cache = SlotCache(
                e._n_layers,
                state.active.shape[0],
                e._kv_heads,
                e._head_dim,
                width + e.cfg.max_new_tokens + 1,
                e.dtype,
                e.device,
            )
        if width > 0:  # a one-token prompt has no context: its row sees only its own columns
            unique: dict[tuple[int, ...], int] = {}
            src_row = [unique.setdefault(tuple(c), len(unique)) if c else -1 for c in ctx]
            prefilled = self._prefilled(list(unique))
            # a context prefilled earlier beside a longer one is left-padded to that one's width
            cache.reserve_left(max(src.write for src, _ in prefilled), state.active)
            cache.start[rows] = cache.write
            for src, where in prefilled:
                mine = [i for i, u in enumerate(src_row) if u in where]
                cache.place(
                    rows[mine], src, torch.tensor([where[src_row[i]] for i in mine], device=e.device), lens[mine]
                )
        else:
            cache.start[rows] = cache.write
        e._start_rows(state, rows, [req for _, req in batch], lens)
        return cache

    def _prefilled(self, contexts: list[tuple[int, ...]]) -> list[tuple[SlotCache, dict[int, int]]]:
        """The K/V of distinct `contexts`: [(cache, {index into contexts: its row there})]. A context
        prefilled since the weights last changed is not run again: the n samples of a prompt are
        admitted as rows free up, often one or two a step, and each would otherwise prefill the
        same tokens (measured on the default testbed: ~1.6 rows an admission, a quarter of the
        generator's time in prefills). The samples of a prompt are requested one after another, so
        only the last contexts admitted can be asked for again: the last `RECENT_PREFILLS` are kept,
        each as a one-row copy (a prefill batch's other rows are freed), until the weights change.
        Bound: RECENT_PREFILLS rows of the longest prompt's K/V (docs/design.md "Memory")."""
        found = {c: self._recent[c] for c in contexts if c in self._recent}
        missing = [c for c in contexts if c not in found]
        if missing:
            for src, members in self._prefill_contexts(missing):
                for row, m in enumerate(members):
                    found[missing[m]] = (src, row)
        groups: dict[int, tuple[SlotCache, dict[int, int]]] = {}
        for i, c in enumerate(contexts):
            src, row = found[c]
            groups.setdefault(id(src), (src, {}))[1][i] = row
        for c in list(dict.fromkeys(contexts))[-RECENT_PREFILLS:]:  # the last ones admitted, most recent last
            src, row = found[c]
            self._recent[c] = (src, row) if src.rows == 1 else (src.row_copy(row), 0)
            self._recent.move_to_end(c)
        while len(self._recent) > RECENT_PREFILLS:
            self._recent.popitem(last=False)
        return list(groups.values())

    def _prefill_contexts(self, contexts: list[tuple[int, ...]]) -> list[tuple[SlotCache, list[int]]]:
        """Prefill distinct contexts: [(cache, indices of the contexts it holds, in its row order)].
        When they share a prefix of at least `MIN_SHARED_PREFIX` tokens (a system prompt, few-shot
        examples) that prefix is computed once per weights version and each context's own tokens
        are run after it, grouped by length (no padding: a row's columns stay contiguous);
        otherwise they are prefilled together, left-padded."""
        e = self.e
        prefix = self._shared_prefix(contexts)
        if prefix is None:
            width = max(len(c) for c in contexts)
            ids = torch.tensor([[e._pad] * (width - len(c)) + list(c) for c in contexts], device=e.device)
            return [
                (
                    self._prefill(ids, torch.tensor([len(c) for c in contexts], device=e.device)),
                    list(range(len(contexts))),
                )
            ]
        by_len: dict[int, list[int]] = {}
        for i, c in enumerate(contexts):
            by_len.setdefault(len(c), []).append(i)
        return [
            (self._prefill_after(prefix, [contexts[i][prefix.write :] for i in members]), members)
            for members in by_len.values()
        ]

    def _shared_prefix(self, contexts: list[tuple[int, ...]]) -> SlotCache | None:
        """The K/V of the prefix that `contexts` (and the previous call's first context, so that the
        samples of one prompt admitted alone still find what every prompt shares) have in common,
        kept while the weights do not change; None when it is shorter than `MIN_SHARED_PREFIX`.
        At least one token of every context is left to run after it."""
        e = self.e
        tokens, reuse = shared_prefix(contexts, self._prefix and self._prefix[0], self._last_context)
        self._last_context = contexts[0]
        if reuse:
            return self._prefix[1]
        if tokens is None:
            return None
        cached = self._prefill(torch.tensor([tokens], device=e.device), torch.tensor([len(tokens)], device=e.device))
        self._prefix = (tokens, cached)
        return cached

    def _prefill_after(self, prefix: SlotCache, suffixes: list[tuple[int, ...]]) -> SlotCache:
        """Run equal-length `suffixes` after the one-row `prefix` cache: a cache of their rows,
        each holding the prefix then its suffix."""
        e = self.e
        p, (g, length) = prefix.write, (len(suffixes), len(suffixes[0]))
        src = SlotCache(e._n_layers, g, e._kv_heads, e._head_dim, p + length, e.dtype, e.device)
        for dst, pre in zip(src.layers, prefix.layers):
            dst.keys[:, :, :p] = pre.keys[:, :, :p]
            dst.values[:, :, :p] = pre.values[:, :, :p]
        src.write = p
        cols = torch.arange(p + length, device=e.device)
        allowed = cols[None, :] <= (p + torch.arange(length, device=e.device))[:, None]  # (L, P + L)
        mask = torch.zeros(allowed.shape, dtype=e.dtype, device=e.device)
        mask.masked_fill_(~allowed, torch.finfo(e.dtype).min)
        positions = (p + torch.arange(length, device=e.device))[None].expand(g, length)
        e.base(
            input_ids=torch.tensor(suffixes, device=e.device),
            attention_mask=mask[None, None].expand(g, 1, -1, -1),
            position_ids=positions,
            use_cache=True,
            **{e._cache_kw: src},
        )
        src.write = p + length
        return src

    def _prefill(self, ids: torch.Tensor, lens: torch.Tensor) -> SlotCache:
        """Run left-padded contexts `ids` (k, W) through the model into a fresh cache."""
        e = self.e
        k, width = ids.shape
        cols = torch.arange(width, device=e.device)
        pad = width - lens  # (k,)
        positions = (cols[None, :] - pad[:, None]).clamp(min=0)  # (k, W)
        causal = cols[:, None] >= cols[None, :]  # (W, W): query i sees key j <= i
        real_key = cols[None, None, :] >= pad[:, None, None]  # (k, 1, W)
        allowed = causal[None] & (real_key | torch.eye(width, dtype=torch.bool, device=e.device)[None])  # (k, W, W)
        mask = torch.zeros(allowed.shape, dtype=e.dtype, device=e.device)
        mask.masked_fill_(~allowed, torch.finfo(e.dtype).min)
        src = SlotCache(e._n_layers, k, e._kv_heads, e._head_dim, width, e.dtype, e.device)
        e.base(
            input_ids=ids, attention_mask=mask[:, None], position_ids=positions, use_cache=True, **{e._cache_kw: src}
        )
        src.write = width
        return src
