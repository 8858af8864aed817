"""The fixed-shape decoding loop (`rollout.decode: static`, the default where the model allows).

Slots: `slots` rows, each holding one sequence from column 0 of a K/V cache preallocated to
`capacity` columns (`forward.StaticKV`; `slots.py` sizes both). A decode step runs the model's
layers (`forward.Decoder`) on rows [0, B), writes each row's K/V at its position, attends over
columns [0, cols) under a per-row length mask, and then, still on the device, samples, forces
the interruption phrase, checks the stop conditions and marks the rows that ended
(`Engine._advance`): nothing in a step reads a value back to the host.

The host synchronises once every `SYNC_EVERY` steps: it collects the rows that ended (one
device-to-host copy), admits new requests into free rows (their prompts prefilled straight into
the rows, a shared prefix and the prompts of the last admissions reused), and picks the shape of
the next steps: B rows (the highest row in use; rows are compacted downwards when at most half
are in use) and the columns each step attends over (on a CPU the furthest any row can have
reached at that step; under capture the furthest it can reach before the next synchronisation).
A row that ends between two synchronisations idles until the next one (at most SYNC_EVERY - 1
steps; its outputs are frozen on the device).

On CUDA (`rollout.capture: auto`), in a process's main thread (a capture cannot share the device
with CUDA work another thread issues meanwhile: the thread transport's generator beside its
trainer decodes uncaptured), each step shape is captured once as a CUDA graph and replayed:
B is rounded up to a power of two (at most `slots`) and `cols` to 64 x a power of two (at most
`capacity`), so a run holds a few graphs (one per bucket it meets). The uniform draws of the
sampler are made outside the graph (`Generator.uniform_` into a buffer the graph reads), the
weights are updated in place between replays, and the K/V, the state and the graphs persist
across `generate` / `stream` calls. A new bucket is captured when first met, with the state
saved before its warm-up step and restored after. On a CPU the step runs as it is: measured, it
is not worth compiling there (docs/rollout.md, "Captured steps").
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterator

import torch

from scalerl.errors import ScaleRLError
from scalerl.rollout.forward import Decoder, StaticKV
from scalerl.rollout.sampling import sample
from scalerl.rollout.slots import auto_slots, capacity_for, kv_budget, kv_bytes_per_token
from scalerl.rollout.state import _END, RECENT_PREFILLS, Request, Rows, shared_prefix

SYNC_EVERY = 4  # decode steps between two host synchronisations
GRAPH_COLS = 64  # under capture the attention columns are GRAPH_COLS x 2^k (or the capacity)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class _Source:
    """The request iterator with a queue in front of it for requests taken but not admitted."""

    def __init__(self, requests: Iterator[Request]):
        self.requests, self.back, self.exhausted = requests, deque(), False

    def take(self, k: int) -> tuple[list[Request], bool]:
        """Up to `k` requests, and whether the source said "none may start now" (None)."""
        out: list[Request] = []
        while len(out) < k:
            if self.back:
                out.append(self.back.popleft())
                continue
            if self.exhausted:
                break
            req = next(self.requests, _END)
            if req is _END:
                self.exhausted = True
                break
            if req is None:
                return out, True
            out.append(req)
        return out, False

    def give_back(self, reqs: list[Request]) -> None:
        self.back.extendleft(reversed(reqs))

    @property
    def done(self) -> bool:
        return self.exhausted and not self.back


class StaticLoop:
    """The fixed-shape decoding loop of an `Engine` (see the module docstring)."""

    def __init__(self, engine, capture: bool):
        self.e = engine
        self.decoder = Decoder(engine.model)
        self.capture = capture
        self.per_token = kv_bytes_per_token(engine._n_layers, engine._kv_heads, engine._head_dim, engine.dtype)
        self.kv: StaticKV | None = None
        self.state: Rows | None = None
        self.cols = GRAPH_COLS  # the attention columns of the next step
        self._reach = 0  # CPU: the furthest position a row held at the last synchronisation
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None
        self._u: torch.Tensor | None = None
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._views: dict[int, Rows] = {}
        self._pool = None
        self._prefix: tuple[tuple[int, ...], list[torch.Tensor]] | None = None  # see _shared_prefix
        self._recent: OrderedDict[tuple[int, ...], list[torch.Tensor]] = OrderedDict()  # see _admit
        self._last_context: tuple[int, ...] = ()
        self._running = False  # one `generate` / `stream` at a time: the slots are the loop's

    def forget(self) -> None:
        """Drop every kept K/V (the weights changed)."""
        self._prefix = None
        self._recent.clear()

    # ------------------------------------------------------------------ sizes
    def slots_for(self, capacity: int, limit: int | None) -> int:
        """Slots for `capacity` columns: `rollout.batch_slots`, or the rule of `slots.py`; at most
        `limit` (the requests of a `generate` call)."""
        cfg, e = self.e.cfg, self.e
        if cfg.batch_slots == "auto":
            slots = auto_slots(kv_budget(cfg.kv_budget_mb, e.device), self.per_token * capacity, e.device)
        else:
            slots = cfg.batch_slots
        return slots if limit is None else max(1, min(slots, limit))

    def _allocate(self, slots: int, capacity: int) -> None:
        """K/V, state and RoPE tables for `slots` x `capacity`, reusing what is there when it fits
        (under capture the buffers persist: the graphs hold their addresses)."""
        e = self.e
        fits = self.kv is not None and self.kv.slots >= slots and self.kv.capacity >= capacity
        if fits and self.capture:
            self.state.active.zero_()  # nothing of an earlier call (a stopped stream) is in flight
            self.state.finished.zero_()
            return
        if self.kv is not None and self.capture:  # outgrown: new buffers, new graphs
            slots, capacity = max(slots, self.kv.slots), max(capacity, self.kv.capacity)
        self._graphs.clear()
        self._views.clear()
        with torch.inference_mode():
            self.kv = StaticKV(e._n_layers, slots, e._kv_heads, e._head_dim, capacity, e.dtype, e.device)
            self._rope = self.decoder.rope(capacity, e.dtype)
        self.state = Rows.empty(slots, e.cfg.max_new_tokens, e.device)
        self._u = torch.zeros((slots, 1), dtype=torch.float32, device=e.device)

    def _grow(self, capacity: int) -> None:
        """More columns (a longer prompt came); every row keeps its K/V."""
        e = self.e
        self._graphs.clear()
        with torch.inference_mode():
            self.kv = self.kv.resized(self.kv.slots, capacity)
            self._rope = self.decoder.rope(capacity, e.dtype)

    # ------------------------------------------------------------------ the loop
    def run(
        self,
        requests: Iterator[Request],
        limit: int | None,
        stop: threading.Event | None,
        hold: threading.Event | None = None,
        context: int = 0,
    ):
        """Yields (request, completion) as sequences finish; while `hold` is set, waits. `limit`:
        at most this many rows (None: the slots); `context`: the longest context expected."""
        self._claim()
        e, source = self.e, _Source(requests)
        held: list[Request | None] = []
        hpos: list[int] = []  # per row: a bound on the position its next step writes
        slots, width, steps, due = 0, 0, 0, True
        try:
            while not (stop is not None and stop.is_set()):
                if hold is not None and hold.is_set():
                    e._held()  # held (the trainer evaluates): no step, the rows keep their K/V
                    continue
                e._apply_pending()  # step boundary: new weights serve this step's prefill and decode
                if due:  # the host synchronises: collect, admit, pick the next shape
                    for r in range(width):
                        hpos[r] = min(hpos[r] + steps, self.kv.capacity - 1)
                    steps = width = 0
                    if held:
                        for req, completion in self._collect(held):
                            if stop is not None and stop.is_set():
                                return
                            yield req, completion
                    else:  # first admission: size the slots from the first context
                        first, _ = source.take(1)
                        if not first:
                            if source.done:
                                return
                            e._idle()  # no prompt may start yet: wait for the trainer
                            continue
                        source.give_back(first)
                        slots, held, hpos = self._size(max(context, len(first[0].tokens) - 1), limit)
                    slots = self._admit_free(source, held, hpos, slots, limit)
                    occupied = [r for r, h in enumerate(held) if h is not None]
                    if not occupied:
                        if source.done:
                            return
                        e._idle()  # nothing in flight and no prompt may start: wait for the trainer
                        continue
                    width = self._arrange(held, hpos, occupied)
                    due = False
                if not self.capture:  # exactly the columns a row can have reached at this step
                    self.cols = min(self.kv.capacity, self._reach + steps + 1)
                with torch.inference_mode():
                    e._step(self._view(width), self.kv)
                steps += 1
                due = steps >= SYNC_EVERY
        finally:
            self._running = False
            if not self.capture:
                self.kv = self.state = None  # a CPU engine keeps no K/V between calls
                self._views.clear()

    def _claim(self) -> None:
        """One `generate` / `stream` at a time: the slots are the loop's."""
        if self._running:
            raise ScaleRLError(
                "rollout: this engine is already decoding (a `stream` still open): one `generate` or "
                "`stream` at a time per engine; close the stream first, or use another engine"
            )
        self._running = True

    def _size(self, context: int, limit: int | None) -> tuple[int, list, list]:
        """At the first admission: the K/V sized for `context` tokens of prompt (all the slots a captured graph
        may use, else `limit`'s); (slots in use, the rows' requests, their position bounds)."""
        capacity = capacity_for(context, self.e.cfg.max_new_tokens)
        slots = self.slots_for(capacity, limit)
        self._allocate(self.slots_for(capacity, None) if self.capture else slots, capacity)
        return slots, [None] * self.kv.slots, [0] * self.kv.slots

    def _collect(self, held: list[Request | None]):
        """Completions of the rows that ended since the last collection (one host sync)."""
        e, state = self.e, self.state
        idx = state.finished.nonzero().flatten()
        if idx.numel() == 0:
            return
        state.finished[idx] = False
        for row, completion in e._finish(state, held, idx, state.reason[idx]):
            req, held[row] = held[row], None
            yield req, completion

    def _admit_free(
        self, source: _Source, held: list[Request | None], hpos: list[int], slots: int, limit: int | None
    ) -> int:
        """Fill free rows below `slots` with new requests; returns the slots (fewer when a longer
        prompt made every slot longer and the budget holds fewer)."""
        e = self.e
        free = [r for r in range(slots) if held[r] is None]
        batch, _ = source.take(len(free))
        if not batch:
            return slots
        need = max(len(r.tokens) - 1 for r in batch)
        if need + e.cfg.max_new_tokens > self.kv.capacity:  # a longer prompt: more columns, maybe fewer slots
            capacity = capacity_for(need, e.cfg.max_new_tokens)
            self._grow(capacity)
            slots = min(self.kv.slots, self.slots_for(capacity, limit))
            free = [r for r in range(slots) if held[r] is None]
            source.give_back(batch[len(free) :])
            batch = batch[: len(free)]
            if not batch:
                return slots
        placed = list(zip(free, batch))
        for row, req in placed:
            held[row], hpos[row] = req, len(req.tokens) - 1
        with torch.inference_mode():
            self._admit(placed)
        return slots

    def _arrange(self, held: list[Request | None], hpos: list[int], occupied: list[int]) -> int:
        """The rows and columns of the next steps (module docstring); compacts rows when at most
        half of those below the highest one are in use. Returns the number of rows B."""
        top = occupied[-1] + 1
        if len(occupied) <= top // 2:
            n = len(occupied)
            src = [r for r in occupied if r >= n]
            dst = [r for r in range(n) if held[r] is None]
            cols = min(self.kv.capacity, max(hpos[r] for r in src) + 1)
            with torch.inference_mode():
                s, d = torch.tensor(src, device=self.e.device), torch.tensor(dst, device=self.e.device)
                self.kv.copy_rows(d, s, cols)
                self.state.move(d, s)
            for a, b in zip(src, dst):
                held[b], hpos[b], held[a] = held[a], hpos[a], None
            top = n
        self._reach = max(hpos[r] for r in range(top) if held[r] is not None)
        if self.capture:
            reach = self._reach + SYNC_EVERY
            self.cols = min(self.kv.capacity, GRAPH_COLS * _pow2_at_least(-(-reach // GRAPH_COLS)))
            return min(self.kv.slots, _pow2_at_least(top))
        return top

    def _view(self, width: int) -> Rows:
        view = self._views.get(width)
        if view is None:
            view = self._views[width] = self.state.head(width)
        return view

    # ------------------------------------------------------------------ one step
    def step(self, state: Rows, kv: StaticKV) -> None:
        """One decode step on rows [0, B) of the state (`state` is their view)."""
        e = self.e
        B = state.active.shape[0]
        u = self._u[:B]
        if not e.greedy:
            u.uniform_(generator=e._gen)  # outside any graph: the draws of `sample`'s inverse CDF
        if not self.capture:
            self._body(state, kv, u, self.cols)
            return
        key = (B, self.cols)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = self._capture(state, kv, u, self.cols)
        graph.replay()

    def _body(self, state: Rows, kv: StaticKV, u: torch.Tensor, cols: int) -> None:
        """What a step computes, all on the device: forward, head, sample, bookkeeping."""
        e = self.e
        cos, sin = self._rope
        pos = state.pos.clamp(max=kv.capacity - 1)
        hidden = self.decoder.decode(state.next_input, pos, kv, cols, cos, sin)
        tokens, logprobs = sample(e._logits(hidden), e.cfg.temperature, e.cfg.top_p, None, e.greedy, u)
        done, reasons = e._advance(state, tokens, logprobs)
        state.reason.copy_(torch.where(done, reasons, state.reason))
        state.finished.logical_or_(done)
        state.active.logical_and_(~done)

    def _capture(self, state: Rows, kv: StaticKV, u: torch.Tensor, cols: int):
        """A CUDA graph of `_body` at this shape. Its warm-up runs the step for real on a side
        stream, so the whole state is saved before and restored after (the K/V it wrote at the
        rows' next positions is written again, with the same values, by the replay). Weights
        staged meanwhile by another thread (`update_weights`) wait for the capture to end."""
        with self.e._staging:
            saved = self.state.snapshot()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._body(state, kv, u, cols)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                self._body(state, kv, u, cols)
            self._pool = graph.pool()
            self.state.restore(saved)
        return graph

    # ------------------------------------------------------------------ admission
    def _admit(self, placed: list[tuple[int, Request]]) -> None:
        """Prefill the new requests' contexts (all but each prompt's last token, which the next
        decode step feeds) straight into their rows. A context admitted in one of the last
        `RECENT_PREFILLS` admissions since the weights changed is copied from a one-row copy
        kept of it (the n samples of a prompt are admitted as rows free up); contexts repeated
        within the batch are run once and copied; a prefix shared by the contexts (a system
        prompt, few-shot examples) is run once per weights version (`_shared_prefix`)."""
        e, kv = self.e, self.kv
        dev = e.device
        want: dict[tuple[int, ...], list[int]] = {}
        for row, req in placed:
            want.setdefault(tuple(req.tokens[:-1]), []).append(row)
        todo = []
        for c, rows in want.items():
            if not c:
                continue
            if c in self._recent:
                kv.put(torch.tensor(rows, device=dev), self._recent[c])
            else:
                todo.append(c)
        if todo:
            self._prefill_contexts(todo, [want[c][0] for c in todo])
            for c in todo:
                rows = want[c]
                if len(rows) > 1:
                    first = torch.tensor([rows[0]] * (len(rows) - 1), device=dev)
                    kv.copy_rows(torch.tensor(rows[1:], device=dev), first, len(c))
        for c in [c for c in want if c][-RECENT_PREFILLS:]:  # the last ones admitted, most recent last
            if c not in self._recent:
                self._recent[c] = kv.take(want[c][0], len(c))
            self._recent.move_to_end(c)
        while len(self._recent) > RECENT_PREFILLS:
            self._recent.popitem(last=False)
        rows = torch.tensor([r for r, _ in placed], device=dev)
        lens = torch.tensor([len(req.tokens) - 1 for _, req in placed], device=dev)
        self.state.finished[rows] = False
        e._start_rows(self.state, rows, [req for _, req in placed], lens)

    def _prefill_contexts(self, contexts: list[tuple[int, ...]], rows: list[int]) -> None:
        """Prefill distinct `contexts` into `rows` (one each): after their shared prefix when they
        have one, right-padded together."""
        e = self.e
        prefix = self._shared_prefix(contexts, rows[0])
        start = 0
        rows_t = torch.tensor(rows, device=e.device)
        if prefix is not None:
            tokens, saved = prefix
            self.kv.put(rows_t, saved)
            start = len(tokens)
        width = max(len(c) - start for c in contexts)
        ids = torch.tensor([list(c[start:]) + [e._pad] * (width - len(c) + start) for c in contexts], device=e.device)
        self.prefill(rows_t, ids, start)

    def prefill(self, rows: torch.Tensor, ids: torch.Tensor, start: int) -> None:
        """Run `ids` (k, W) at positions start.. of `rows` (the one place prompts go through the model)."""
        cos, sin = self._rope
        self.decoder.prefill(ids, rows, start, self.kv, cos, sin)

    def _shared_prefix(self, contexts: list[tuple[int, ...]], row: int):
        """(tokens, one-row K/V copy) of the prefix that `contexts` (and the previous admission's
        first context, so that the samples of one prompt admitted alone still find what every
        prompt shares) have in common, kept while the weights do not change; None when it is
        shorter than `MIN_SHARED_PREFIX`. At least one token of every context is left to run
        after it. A new prefix is run in `row` (one of the rows being admitted)."""
        e = self.e
        tokens, reuse = shared_prefix(contexts, self._prefix and self._prefix[0], self._last_context)
        self._last_context = contexts[0]
        if reuse:
            return self._prefix
        if tokens is None:
            return None
        self.prefill(torch.tensor([row], device=e.device), torch.tensor([tokens], device=e.device), 0)
        self._prefix = (tokens, self.kv.take(row, len(tokens)))
        return self._prefix
