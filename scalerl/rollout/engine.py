"""The rollout engine: our own batched decoding loop with a KV cache and continuous batching.

One decode step = one forward of the base model on every row (one token each) + the LM head
at those positions only + sampling, all as tensor ops. A finished row is refilled at once with
the next (prompt, sample) request: its prompt is prefilled and copied right-aligned into the
shared cache (`cache.py`); it joins the next step. New weights (`update_weights`) are applied
at a step boundary with in-place copies; sequences continue on their old KV cache (PipelineRL).

Where this departs from the paper (arXiv 2510.13786):
1. Forced interruption (Section 3.2, "length control"): the trigger is drawn uniformly in
   [think_min, think_max] generated tokens (paper: 10k-12k thinking tokens); the phrase
   (`rollout.length.phrase`, by default the paper's first words " Time is up. </think>", see
   config.py) is tokenised once on its own and its tokens count towards `max_new_tokens`; an
   engine whose `think_max + phrase + answer_budget` exceeds it is refused (`length.py`), so an
   interrupted completion always gets its answer budget. A completion that closes `</think>`
   itself also gets `answer_budget` tokens after it.
2. With top_p < 1 the recorded log-probability is the temperature-scaled full-softmax one, not
   the renormalised nucleus (see `sampling.py`); the paper samples with top_p 1.
3. The LM head is the model's output embedding, optionally in fp32 (Section 3.2 "FP32
   precision at the LM head"); model-specific logit scaling or soft-capping is not applied.
   A bf16 model's fp32 head is a copy: set from the published weights at each update (fp32
   as the trainer holds them), and re-read from the model's own head weight at the start of
   each `generate` / `stream` call when that weight no longer matches it (an engine decoding
   weights that the trainer updates in place, as the evaluation engine does).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from scalerl.config import InterruptConfig, RolloutConfig
from scalerl.errors import ScaleRLError
from scalerl.models import cache_kwarg
from scalerl.rollout.cache import SlotCache
from scalerl.rollout.length import check_budget, phrase_ids
from scalerl.rollout.sampling import sample
from scalerl.types import Completion, FinishReason, Prompt

THINK_END = "</think>"
GREEDY_BELOW = 1e-4  # temperatures below this decode greedily
_REASONS: tuple[FinishReason, ...] = ("eos", "length", "interrupted_eos", "interrupted_budget", "interrupted_length")
_NEVER = 1 << 40
_END = object()           # the prompt iterator ran out
MIN_SHARED_PREFIX = 32     # tokens: a common prefix this long is prefilled once (Engine._shared_prefix)
RECENT_PREFILLS = 4        # prompts whose prefilled K/V (one row each) are kept for their later samples (_prefilled)
IDLE_SLEEP_S = 0.005      # wait between two asks when nothing is in flight and no prompt may start
_HEAD32 = "\0fp32 head"  # staged-weights key of the head's fp32 copy (a bf16 engine with fp32_head)


@dataclass
class _Request:
    prompt: Prompt
    sample: int
    tokens: list[int]
    serial: int


@dataclass
class _Rows:
    """Per-row decoding state, one entry (or row of a (rows, max_new) buffer) per cache row."""

    active: torch.Tensor       # (R,) bool: row holds a sequence in progress
    next_input: torch.Tensor   # (R,) token fed at the next step
    pos: torch.Tensor          # (R,) its position id
    n_gen: torch.Tensor        # (R,) tokens generated so far
    answer_end: torch.Tensor   # (R,) n_gen at which the answer budget runs out
    thinking: torch.Tensor     # (R,) bool: `</think>` not produced yet
    trigger: torch.Tensor      # (R,) n_gen at which thinking is interrupted
    force_idx: torch.Tensor    # (R,) index into the phrase being forced, -1 if none
    interrupted: torch.Tensor  # (R,) bool: the phrase has started (thinking was interrupted)
    tokens: torch.Tensor       # (R, max_new)
    logprobs: torch.Tensor     # (R, max_new) fp32
    versions: torch.Tensor     # (R, max_new)
    forced: torch.Tensor       # (R, max_new) bool

    @classmethod
    def empty(cls, rows: int, max_new: int, device: torch.device) -> _Rows:
        def z(*shape, dtype=torch.long):
            return torch.zeros(shape, dtype=dtype, device=device)

        return cls(z(rows, dtype=torch.bool), z(rows), z(rows), z(rows), z(rows), z(rows, dtype=torch.bool),
                   z(rows), z(rows) - 1, z(rows, dtype=torch.bool), z(rows, max_new),
                   z(rows, max_new, dtype=torch.float32), z(rows, max_new), z(rows, max_new, dtype=torch.bool))

    def select(self, keep: torch.Tensor) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name)[keep])

    def grow(self, extra: int) -> None:
        """Append `extra` idle rows."""
        more = _Rows.empty(extra, self.tokens.shape[1], self.tokens.device)
        for f in fields(self):
            setattr(self, f.name, torch.cat([getattr(self, f.name), getattr(more, f.name)]))


class Engine:
    """Batched sampler over a `transformers` causal LM; implements `scalerl.rollout.Generator`.

    `model` is a `*ForCausalLM` whose `base_model` returns the last hidden state and whose
    output embedding is the LM head; it must use `eager` or `sdpa` attention (the engine passes
    a 4D additive attention mask). `greedy=True` (or temperature < 1e-4) takes the argmax;
    `ignore_eos=True` decodes to the budget (fixed-length benchmarks). The engine never changes the
    model's mode: a generator's own copy is in eval mode (`scalerl.models.load_model`,
    `scalerl.build.generator`), and the loop's evaluation puts the trainer's model in eval mode for
    its duration only.
    """

    def __init__(self, model, tokenizer, cfg: RolloutConfig, fp32_head: bool = True, seed: int = 0,
                 greedy: bool = False, ignore_eos: bool = False):
        self.model, self.tokenizer, self.cfg, self.seed = model, tokenizer, cfg, seed
        self.greedy = greedy or cfg.temperature < GREEDY_BELOW
        self.base = model.base_model
        self._cache_kw = cache_kwarg(self.base)      # `cache` or, before transformers 5, `past_key_values`
        head = model.get_output_embeddings()
        self._head = head
        self.device = head.weight.device
        self.dtype = model.get_input_embeddings().weight.dtype  # activations / KV cache dtype
        self._w32 = head.weight.detach().float().clone() if fp32_head and head.weight.dtype != torch.float32 else None
        self._fp32_head = fp32_head
        text_cfg = model.config.get_text_config()
        self._n_layers = text_cfg.num_hidden_layers
        self._kv_heads = text_cfg.num_key_value_heads
        self._head_dim = getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads
        eos = sorted(_stop_ids(model, tokenizer))
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        self._eos = torch.tensor([] if ignore_eos else eos, dtype=torch.long, device=self.device)
        self._think_end = torch.tensor(self._encode(THINK_END, special=False), device=self.device)
        self._interrupt = cfg.length if isinstance(cfg.length, InterruptConfig) else None
        self._phrase = None
        if self._interrupt is not None:
            self._phrase = torch.tensor(phrase_ids(tokenizer, self._interrupt.phrase), device=self.device)
            check_budget(cfg, len(self._phrase))
        self._targets = model.state_dict(keep_vars=True)
        self._gen = torch.Generator(device=self.device).manual_seed(seed)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._pending: tuple[dict[str, torch.Tensor], int] | None = None
        self._version = 0
        self._serial = 0
        self._prefix: tuple[tuple[int, ...], SlotCache] | None = None  # see _shared_prefix
        self._recent: OrderedDict[tuple[int, ...], tuple[SlotCache, int]] = OrderedDict()  # see _prefilled
        self._last_context: tuple[int, ...] = ()

    # ------------------------------------------------------------------ public API
    @property
    def version(self) -> int:
        return self._version

    def reseed(self) -> None:
        """Restart the sampler's random streams from the engine's seed. The evaluation does this
        before every evaluation, so successive evaluations draw the same random numbers (common
        random numbers): where the weights have not changed a completion's outcome, it repeats,
        and the difference between two evaluations is mostly the policy's, not the sampling's."""
        self._gen.manual_seed(self.seed)
        self._rng.seed(self.seed)

    def generate(self, prompts: Sequence[Prompt], n: int) -> list[Completion]:
        """All `n` samples of every prompt, in prompt order then sample order."""
        self._sync_head()
        self._forget_prefills()  # weights may have changed in place since the last call (the evaluation engine)
        rows = min(self.cfg.batch_slots, len(prompts) * n)
        try:
            out = sorted(self._run(self._requests(prompts, n), rows, None), key=lambda rc: rc[0].serial)
        finally:
            self._forget_prefills()  # nothing of a finished call is asked for again (the evaluation engine waits)
        return [c for _, c in out]

    def stream(self, prompts: Iterable[Prompt], n: int, stop: threading.Event | None = None,
               hold: threading.Event | None = None) -> Iterator[Completion]:
        """Continuous batching over `prompts` (possibly endless): yields completions as they
        finish; returns when the prompts run out, or when `stop` is set (in-flight ones dropped).
        `prompts` may yield None: no prompt may start now; the engine keeps decoding the
        sequences in flight (or waits, when none is) and asks again at the next step."""
        self._sync_head()
        self._forget_prefills()  # weights may have changed in place since the last call (the evaluation engine)
        for _, completion in self._run(self._requests(prompts, n), self.cfg.batch_slots, stop, hold):
            yield completion

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Stage new weights (copied now, so the caller may keep training); they are applied at
        the next decode-step boundary and tokens from then on carry `version`. Each is cast to
        this engine's dtype (a bf16 engine decodes fp32 trainer weights in bf16); the fp32 head
        (`fp32_head` on a bf16 engine) takes the published head weight before that cast."""
        staged = {}
        for name, value in state_dict.items():
            if name not in self._targets:
                raise ScaleRLError(f"update_weights: unknown parameter {name!r} for this model")
            target = self._targets[name]
            if tuple(value.shape) != tuple(target.shape):
                raise ScaleRLError(f"update_weights: {name!r} has shape {tuple(value.shape)}, "
                                   f"expected {tuple(target.shape)}")
            staged[name] = value.detach().to(device=target.device, dtype=target.dtype, copy=True)
            if self._w32 is not None and target is self._head.weight and _HEAD32 not in staged:
                staged[_HEAD32] = value.detach().to(device=target.device, dtype=torch.float32, copy=True)
        with self._lock:
            if self._pending is not None:  # a newer update supersedes (and extends) an unapplied one
                staged = {**self._pending[0], **staged}
            self._pending = (staged, version)

    # ------------------------------------------------------------------ the loop
    def _run(self, requests: Iterator[_Request], rows: int, stop: threading.Event | None,
             hold: threading.Event | None = None):
        """Yields (request, completion) as sequences finish; while `hold` is set, waits."""
        state = _Rows.empty(rows, self.cfg.max_new_tokens, self.device)
        held: list[_Request | None] = [None] * rows
        cache: SlotCache | None = None
        exhausted = False
        while not (stop is not None and stop.is_set()):
            if hold is not None and hold.is_set():
                time.sleep(IDLE_SLEEP_S)  # held (the trainer evaluates): no step, the rows keep their caches
                continue
            self._apply_pending()  # step boundary: new weights serve this step's prefill and decode
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
                time.sleep(IDLE_SLEEP_S)  # nothing in flight and no prompt may start: wait for the trainer
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
                done, reasons = self._step(state, cache)
            if bool(done.any()):
                for row, completion in self._finish(state, held, done, reasons):
                    if stop is not None and stop.is_set():
                        return
                    yield held[row], completion
                    held[row] = None

    def _requests(self, prompts: Iterable[Prompt], n: int) -> Iterator[_Request]:
        for prompt in prompts:
            if prompt is None:  # the source has no prompt that may start now (see `stream`)
                yield None
                continue
            tokens = self._encode(prompt.text, special=True)
            if not tokens:
                raise ScaleRLError(f"prompt {prompt.id!r}: the text tokenises to nothing")
            for k in range(n):
                self._serial += 1
                yield _Request(prompt, k, tokens, self._serial)

    def _admit(self, state: _Rows, cache: SlotCache | None, batch: list[tuple[int, _Request]]) -> SlotCache:
        """Prefill the new requests (all but each prompt's last token, which the next decode step
        feeds) and place them right-aligned in their rows. Identical prompts (the n samples of
        one prompt) are prefilled once per weights version and copied to each of their rows,
        whether admitted together or step by step (`_prefilled`)."""
        rows = torch.tensor([r for r, _ in batch], device=self.device)
        ctx = [req.tokens[:-1] for _, req in batch]
        lens = torch.tensor([len(c) for c in ctx], device=self.device)
        width = max(len(c) for c in ctx)
        if cache is None:
            cache = SlotCache(self._n_layers, state.active.shape[0], self._kv_heads, self._head_dim,
                              width + self.cfg.max_new_tokens + 1, self.dtype, self.device)
        if width > 0:
            unique: dict[tuple[int, ...], int] = {}
            src_row = [unique.setdefault(tuple(c), len(unique)) for c in ctx]
            prefilled = self._prefilled(list(unique))
            # a context prefilled earlier beside a longer one is left-padded to that one's width
            cache.reserve_left(max(src.write for src, _ in prefilled), state.active)
            for src, where in prefilled:
                mine = [i for i, u in enumerate(src_row) if u in where]
                cache.place(rows[mine], src, torch.tensor([where[src_row[i]] for i in mine], device=self.device),
                            lens[mine])
        else:
            cache.start[rows] = cache.write
        k = len(batch)
        state.active[rows] = True
        state.next_input[rows] = torch.tensor([req.tokens[-1] for _, req in batch], device=self.device)
        state.pos[rows] = lens
        state.n_gen[rows] = 0
        state.answer_end[rows] = _NEVER
        state.thinking[rows] = True
        state.force_idx[rows] = -1
        state.interrupted[rows] = False
        if self._interrupt is not None:
            lo, hi = self._interrupt.think_min, self._interrupt.think_max
            state.trigger[rows] = torch.tensor([self._rng.randint(lo, hi) for _ in range(k)], device=self.device)
        else:
            state.trigger[rows] = _NEVER
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
        for c in list(dict.fromkeys(contexts))[-RECENT_PREFILLS:]:   # the last ones admitted, most recent last
            src, row = found[c]
            self._recent[c] = (src, row) if src.rows == 1 else (src.row_copy(row), 0)
            self._recent.move_to_end(c)
        while len(self._recent) > RECENT_PREFILLS:
            self._recent.popitem(last=False)
        return list(groups.values())

    def _forget_prefills(self) -> None:
        """Drop every prefilled K/V (the weights changed)."""
        self._prefix = None
        self._recent.clear()

    def _prefill_contexts(self, contexts: list[tuple[int, ...]]) -> list[tuple[SlotCache, list[int]]]:
        """Prefill distinct contexts: [(cache, indices of the contexts it holds, in its row order)].
        When they share a prefix of at least `MIN_SHARED_PREFIX` tokens (a system prompt, few-shot
        examples) that prefix is computed once per weights version and each context's own tokens
        are run after it, grouped by length (no padding: a row's columns stay contiguous);
        otherwise they are prefilled together, left-padded."""
        prefix = self._shared_prefix(contexts)
        if prefix is None:
            width = max(len(c) for c in contexts)
            ids = torch.tensor([[self._pad] * (width - len(c)) + list(c) for c in contexts], device=self.device)
            return [(self._prefill(ids, torch.tensor([len(c) for c in contexts], device=self.device)),
                     list(range(len(contexts))))]
        by_len: dict[int, list[int]] = {}
        for i, c in enumerate(contexts):
            by_len.setdefault(len(c), []).append(i)
        return [(self._prefill_after(prefix, [contexts[i][prefix.write:] for i in members]), members)
                for members in by_len.values()]

    def _shared_prefix(self, contexts: list[tuple[int, ...]]) -> SlotCache | None:
        """The K/V of the prefix that `contexts` (and the previous call's first context, so that the
        samples of one prompt admitted alone still find what every prompt shares) have in common,
        kept while the weights do not change; None when it is shorter than `MIN_SHARED_PREFIX`.
        At least one token of every context is left to run after it."""
        shortest = min(len(c) for c in contexts) - 1
        if self._prefix is not None:
            tokens, cached = self._prefix
            if len(tokens) <= shortest and all(c[: len(tokens)] == tokens for c in contexts):
                self._last_context = contexts[0]
                return cached
        common = os.path.commonprefix([*contexts, *([self._last_context] if self._last_context else [])])
        self._last_context = contexts[0]
        tokens = tuple(common[:shortest])
        if len(tokens) < MIN_SHARED_PREFIX:
            return None
        cached = self._prefill(torch.tensor([tokens], device=self.device), torch.tensor([len(tokens)], device=self.device))
        self._prefix = (tokens, cached)
        return cached

    def _prefill_after(self, prefix: SlotCache, suffixes: list[tuple[int, ...]]) -> SlotCache:
        """Run equal-length `suffixes` after the one-row `prefix` cache: a cache of their rows,
        each holding the prefix then its suffix."""
        p, (g, length) = prefix.write, (len(suffixes), len(suffixes[0]))
        src = SlotCache(self._n_layers, g, self._kv_heads, self._head_dim, p + length, self.dtype, self.device)
        for dst, pre in zip(src.layers, prefix.layers):
            dst.keys[:, :, :p] = pre.keys[:, :, :p]
            dst.values[:, :, :p] = pre.values[:, :, :p]
        src.write = p
        cols = torch.arange(p + length, device=self.device)
        allowed = cols[None, :] <= (p + torch.arange(length, device=self.device))[:, None]  # (L, P + L)
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        positions = (p + torch.arange(length, device=self.device))[None].expand(g, length)
        self.base(input_ids=torch.tensor(suffixes, device=self.device), attention_mask=mask[None, None].expand(g, 1, -1, -1),
                  position_ids=positions, use_cache=True, **{self._cache_kw: src})
        src.write = p + length
        return src

    def _prefill(self, ids: torch.Tensor, lens: torch.Tensor) -> SlotCache:
        """Run left-padded contexts `ids` (k, W) through the model into a fresh cache."""
        k, width = ids.shape
        cols = torch.arange(width, device=self.device)
        pad = width - lens  # (k,)
        positions = (cols[None, :] - pad[:, None]).clamp(min=0)  # (k, W)
        causal = cols[:, None] >= cols[None, :]  # (W, W): query i sees key j <= i
        real_key = cols[None, None, :] >= pad[:, None, None]  # (k, 1, W)
        allowed = causal[None] & (real_key | torch.eye(width, dtype=torch.bool, device=self.device)[None])  # (k, W, W)
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        src = SlotCache(self._n_layers, k, self._kv_heads, self._head_dim, width, self.dtype, self.device)
        self.base(input_ids=ids, attention_mask=mask[:, None], position_ids=positions, use_cache=True,
                  **{self._cache_kw: src})
        src.write = width
        return src

    def _step(self, state: _Rows, cache: SlotCache) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step on every row. Returns (done (R,) bool, reason index (R,))."""
        cache.reserve(1, state.active)
        cache.start = torch.where(state.active, cache.start, cache.write)  # idle rows see only themselves
        out = self.base(input_ids=state.next_input[:, None], attention_mask=cache.decode_mask(self.dtype),
                        position_ids=state.pos[:, None], use_cache=True, **{self._cache_kw: cache})
        cache.write += 1
        tokens, logprobs = sample(self._logits(out.last_hidden_state[:, -1]), self.cfg.temperature,
                                  self.cfg.top_p, self._gen, self.greedy)
        return self._advance(state, tokens, logprobs)

    def _sync_head(self) -> None:
        """Re-read the fp32 head from the model's head weight if that weight changed in place since
        the copy was made (it then no longer equals the copy rounded to its dtype). The check
        costs one (V, H) comparison per call, not per decode step."""
        if self._w32 is None:
            return
        with torch.no_grad():
            live = self._head.weight
            if not torch.equal(self._w32.to(live.dtype), live):
                self._w32.copy_(live)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head on the sampled positions only: (R, H) -> (R, V), fp32 when `fp32_head`."""
        weight = self._w32 if self._w32 is not None else self._head.weight
        bias = self._head.bias
        if self._fp32_head:
            return F.linear(hidden.float(), weight.float(), None if bias is None else bias.float())
        return F.linear(hidden, weight, bias).float()

    def _advance(self, state: _Rows, tokens: torch.Tensor, logprobs: torch.Tensor):
        """Record this step's tokens (forcing the interruption phrase where due) and update the
        thinking / answer-budget state. Returns (done, reason index into _REASONS)."""
        cfg, rows = self.cfg, torch.arange(tokens.shape[0], device=self.device)
        forcing = state.force_idx >= 0
        state.interrupted |= forcing
        if self._phrase is not None:
            tokens = torch.where(forcing, self._phrase[state.force_idx.clamp(min=0)], tokens)
            logprobs = torch.where(forcing, 0.0, logprobs)
        col = state.n_gen.clamp(max=cfg.max_new_tokens - 1)
        state.tokens[rows, col] = tokens
        state.logprobs[rows, col] = logprobs
        state.versions[rows, col] = self._version
        state.forced[rows, col] = forcing
        state.n_gen += state.active.long()
        state.pos += 1
        state.next_input = tokens

        phrase_done = forcing & (state.force_idx + 1 == (0 if self._phrase is None else len(self._phrase)))
        state.force_idx = torch.where(phrase_done, -1, torch.where(forcing, state.force_idx + 1, state.force_idx))
        closes = (state.thinking & ~forcing & self._ends_with(state, self._think_end)) | phrase_done
        state.thinking &= ~closes
        if self._interrupt is not None:
            state.answer_end = torch.where(closes, state.n_gen + self._interrupt.answer_budget, state.answer_end)
            due = state.thinking & (state.force_idx < 0) & (state.n_gen >= state.trigger)
            state.force_idx = torch.where(due, 0, state.force_idx)

        eos = torch.isin(tokens, self._eos) & ~forcing
        spent = state.n_gen >= state.answer_end                  # the whole answer budget was used
        done = state.active & (eos | spent | (state.n_gen >= cfg.max_new_tokens))
        after = torch.where(eos, 2, torch.where(spent, 3, 4))    # interrupted_eos / _budget / _length
        reasons = torch.where(state.interrupted, after, torch.where(eos, 0, 1))
        return done, reasons

    @staticmethod
    def _ends_with(state: _Rows, suffix: torch.Tensor) -> torch.Tensor:
        """(R,) bool: the generated tokens of each row end with `suffix`."""
        k = len(suffix)
        idx = (state.n_gen[:, None] - k + torch.arange(k, device=suffix.device)).clamp(min=0)  # (R, k)
        return (state.tokens.gather(1, idx) == suffix).all(dim=1) & (state.n_gen >= k)

    def _finish(self, state: _Rows, held: list[_Request | None], done: torch.Tensor, reasons: torch.Tensor):
        """Turn finished rows into `Completion`s and free their rows."""
        idx = done.nonzero().flatten()
        lengths, why = state.n_gen[idx].tolist(), reasons[idx].tolist()
        toks, lps = state.tokens[idx].tolist(), state.logprobs[idx].tolist()
        vers, forced = state.versions[idx].tolist(), state.forced[idx].tolist()
        state.active[idx] = False
        for i, row in enumerate(idx.tolist()):
            req, n = held[row], lengths[i]
            yield row, Completion(
                id=f"{req.prompt.id}/{req.sample}@{self.seed}.{req.serial}", prompt_id=req.prompt.id,
                prompt_tokens=list(req.tokens), tokens=toks[i][:n], logprobs=lps[i][:n], versions=vers[i][:n],
                text=self.tokenizer.decode(toks[i][:n], skip_special_tokens=True),
                finish_reason=_REASONS[why[i]], forced_mask=forced[i][:n])

    def _apply_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return
        weights, version = pending
        with torch.no_grad():
            for name, value in weights.items():
                if name != _HEAD32:
                    self._targets[name].copy_(value)
            if self._w32 is not None:  # the fp32 head from the published weights themselves when they came in fp32
                self._w32.copy_(weights.get(_HEAD32, self._head.weight))
        self._version = version
        self._forget_prefills()  # the K/V prefilled so far belong to the old weights

    def _encode(self, text: str, special: bool) -> list[int]:
        bos = self.tokenizer.bos_token
        add = special and not (bos is not None and text.startswith(bos))
        return self.tokenizer(text, add_special_tokens=add)["input_ids"]


def _stop_ids(model, tokenizer) -> set[int]:
    """EOS ids of the tokenizer and generation config, plus `<|im_end|>` when the vocab has it."""
    ids: set[int] = set()
    for eos in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(eos, int):
            ids.add(eos)
        elif eos is not None:
            ids.update(int(e) for e in eos)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
    if im_end is not None:
        ids.add(im_end)
    if not ids:
        raise ScaleRLError("rollout: the tokenizer has no eos token (set tokenizer.eos_token)")
    return ids
