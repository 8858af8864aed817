"""The rollout engine: our own batched decoding loop with a KV cache and continuous batching.

The `Engine` holds what every decoding loop shares: the public API (`generate`, `stream`,
`update_weights`, `reseed`), the weights and their in-flight updates, the LM head (FP32 when
asked), sampling, and the per-row bookkeeping of a step (`_advance`: recording tokens,
log-probs and versions, forcing the interruption phrase, the stop conditions), all tensor ops
on the device. Two loops decode with it (`rollout.decode`):

- `static.py` (the default where the model allows, `forward.unsupported`): fixed shapes. K/V
  preallocated per slot to its longest span, written by position, attention under a per-row
  length, the model's layers run by our own small forward; the host synchronises once every
  `static.SYNC_EVERY` steps; on CUDA each step shape is captured as a CUDA graph.
- `eager.py` (the reference, and any other model): the `transformers` forward over a cache on
  one shared time axis, one host synchronisation a step.

A finished row is refilled with the next (prompt, sample) request. New weights
(`update_weights`) are applied at a step boundary with in-place copies; sequences continue on
their old KV cache (PipelineRL).

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

import random
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F

from scalerl.config import InterruptConfig, LocalEngineConfig, RolloutConfig
from scalerl.errors import ScaleRLError
from scalerl.models import cache_kwarg
from scalerl.rollout.eager import EagerLoop
from scalerl.rollout.forward import unsupported
from scalerl.rollout.length import check_budget, phrase_ids
from scalerl.rollout.registry import EngineNeeds, register
from scalerl.rollout.slots import auto_slots, capacity_for, kv_budget, kv_bytes_per_token
from scalerl.rollout.state import _NEVER, IDLE_SLEEP_S, Request, Rows
from scalerl.rollout.static import StaticLoop
from scalerl.types import Completion, FinishReason, Prompt

THINK_END = "</think>"
GREEDY_BELOW = 1e-4  # temperatures below this decode greedily
_REASONS: tuple[FinishReason, ...] = ("eos", "length", "interrupted_eos", "interrupted_budget", "interrupted_length")
_HEAD32 = "\0fp32 head"  # staged-weights key of the head's fp32 copy (a bf16 engine with fp32_head)


@register(LocalEngineConfig, EngineNeeds())  # any host, its own copy of the model, any device, LoRA
class Engine:
    """Batched sampler over a `transformers` causal LM; implements `scalerl.rollout.Generator`.

    `model` is a `*ForCausalLM` whose `base_model` returns the last hidden state and whose
    output embedding is the LM head. The static loop runs Llama-family models
    (`forward.unsupported` says why another cannot); the eager loop any model with `eager` or
    `sdpa` attention (it passes a 4D additive attention mask). `rollout.decode` picks the loop
    (`auto`: static where it can), `rollout.capture` whether CUDA graphs replay the static
    step (`auto`: on CUDA). `greedy=True` (or temperature < 1e-4) takes the argmax;
    `ignore_eos=True` decodes to the budget (fixed-length benchmarks). The engine never changes the
    model's mode: a generator's own copy is in eval mode (`scalerl.models.load_model`,
    `scalerl.assembly.generator`), and the loop's evaluation puts the trainer's model in eval mode for
    its duration only.
    """

    def __init__(
        self,
        model,
        tokenizer,
        cfg: RolloutConfig,
        fp32_head: bool = True,
        seed: int = 0,
        greedy: bool = False,
        ignore_eos: bool = False,
    ):
        self.model, self.tokenizer, self.cfg, self.seed = model, tokenizer, cfg, seed
        self.greedy = greedy or cfg.temperature < GREEDY_BELOW
        self.base = model.base_model
        self._cache_kw = cache_kwarg(self.base)  # `cache` or, before transformers 5, `past_key_values`
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
        self._lock = threading.Lock()  # the staged update
        self._staging = threading.Lock()  # held while an update is copied in, and while a CUDA graph is captured
        self._pending: tuple[dict[str, torch.Tensor], int] | None = None
        self._version = 0
        self._version_t = torch.zeros((), dtype=torch.long, device=self.device)  # the same, for the device
        self._serial = 0
        why = unsupported(model)
        if cfg.decode == "static" and why is not None:
            raise ScaleRLError(
                f"rollout.decode = static: {why}; use rollout.decode=eager (or auto, which picks eager for this model)"
            )
        self.decode = "static" if cfg.decode == "static" or (cfg.decode == "auto" and why is None) else "eager"
        capture = (
            cfg.capture == "auto"
            and self.device.type == "cuda"
            and threading.current_thread() is threading.main_thread()
        )  # see static.py
        self._loop = StaticLoop(self, capture) if self.decode == "static" else EagerLoop(self)

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
        encoded = [(p, self._encode(p.text, special=True)) for p in prompts]
        requests = (r for p, tokens in encoded for r in self._samples(p, tokens, n))
        context = max((len(t) - 1 for _, t in encoded), default=0)
        try:
            out = sorted(self._run(requests, len(prompts) * n, None, None, context), key=lambda rc: rc[0].serial)
        finally:
            self._forget_prefills()  # nothing of a finished call is asked for again (the evaluation engine waits)
        return [c for _, c in out]

    def stream(
        self,
        prompts: Iterable[Prompt],
        n: int,
        stop: threading.Event | None = None,
        hold: threading.Event | None = None,
    ) -> Iterator[Completion]:
        """Continuous batching over `prompts` (possibly endless): yields completions as they
        finish; returns when the prompts run out, or when `stop` is set (in-flight ones dropped).
        `prompts` may yield None: no prompt may start now; the engine keeps decoding the
        sequences in flight (or waits, when none is) and asks again at the next step."""
        self._sync_head()
        self._forget_prefills()  # weights may have changed in place since the last call (the evaluation engine)
        stall = self.cfg.engine.stall_s if isinstance(self.cfg.engine, LocalEngineConfig) else 0.0
        for _, completion in self._run(self._requests(prompts, n), None, stop, hold):
            yield completion
            if stall:
                time.sleep(stall)  # an emulated slower generator (rollout.engine.stall_s): decoding waits too

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Stage new weights (copied now, so the caller may keep training); they are applied at
        the next decode-step boundary and tokens from then on carry `version`. Each is cast to
        this engine's dtype (a bf16 engine decodes fp32 trainer weights in bf16); the fp32 head
        (`fp32_head` on a bf16 engine) takes the published head weight before that cast."""
        with self._staging:  # a CUDA graph capture (static.py) must not see these copies start
            staged = self._stage(state_dict)
        with self._lock:
            if self._pending is not None:  # a newer update supersedes (and extends) an unapplied one
                staged = {**self._pending[0], **staged}
            self._pending = (staged, version)

    def _stage(self, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        staged = {}
        for name, value in state_dict.items():
            if name not in self._targets:
                raise ScaleRLError(f"update_weights: unknown parameter {name!r} for this model")
            target = self._targets[name]
            if tuple(value.shape) != tuple(target.shape):
                raise ScaleRLError(
                    f"update_weights: {name!r} has shape {tuple(value.shape)}, expected {tuple(target.shape)}"
                )
            staged[name] = value.detach().to(device=target.device, dtype=target.dtype, copy=True)
            if self._w32 is not None and target is self._head.weight and _HEAD32 not in staged:
                staged[_HEAD32] = value.detach().to(device=target.device, dtype=torch.float32, copy=True)
        return staged

    # ------------------------------------------------------------------ shared by the loops
    def _run(
        self,
        requests: Iterator[Request],
        limit: int | None,
        stop: threading.Event | None,
        hold: threading.Event | None,
        context: int = 0,
    ):
        """The loop in use: (request, completion) as sequences finish. At most `limit` rows (None:
        the slots); `context`: the longest context expected (0: unknown)."""
        if self.decode == "static":
            return self._loop.run(requests, limit, stop, hold, context)
        if self.cfg.batch_slots == "auto":  # the rule of slots.py, for the context known or one column round
            per_token = kv_bytes_per_token(self._n_layers, self._kv_heads, self._head_dim, self.dtype)
            slot = per_token * capacity_for(context, self.cfg.max_new_tokens)
            rows = auto_slots(kv_budget(self.cfg.kv_budget_mb, self.device), slot, self.device)
        else:
            rows = self.cfg.batch_slots
        return self._loop.run(requests, rows if limit is None else max(1, min(rows, limit)), stop, hold)

    def _step(self, state: Rows, cache):
        """One decode step of the loop in use (the eager one returns (done, reasons); the static
        one marks them in `state`). Tests wrap it to count steps or stage weights mid-sequence."""
        return self._loop.step(state, cache)

    def _held(self) -> None:
        """One turn of a held stream (`hold` set: the trainer evaluates): no step, the rows keep their
        caches. Tests wrap it to count the turns held."""
        time.sleep(IDLE_SLEEP_S)

    def _idle(self) -> None:
        """One turn with nothing in flight and no prompt that may start (the PipelineRL window: the trainer
        is the slower). Tests wrap it to step a trainer once the generator waits at the window."""
        time.sleep(IDLE_SLEEP_S)

    def _forget_prefills(self) -> None:
        """Drop every prefilled K/V the loop keeps (the weights changed)."""
        self._loop.forget()

    def _requests(self, prompts: Iterable[Prompt], n: int) -> Iterator[Request]:
        for prompt in prompts:
            if prompt is None:  # the source has no prompt that may start now (see `stream`)
                yield None
                continue
            yield from self._samples(prompt, self._encode(prompt.text, special=True), n)

    def _samples(self, prompt: Prompt, tokens: list[int], n: int) -> Iterator[Request]:
        if not tokens:
            raise ScaleRLError(f"prompt {prompt.id!r}: the text tokenises to nothing")
        for k in range(n):
            self._serial += 1
            yield Request(prompt, k, tokens, self._serial)

    def _start_rows(self, state: Rows, rows: torch.Tensor, reqs: list[Request], lens: torch.Tensor) -> None:
        """Initialise the state of rows `rows` for new requests whose contexts (all but the last
        prompt token) are `lens` long and already in the K/V; the last token is fed next."""
        k = len(reqs)
        state.active[rows] = True
        state.next_input[rows] = torch.tensor([req.tokens[-1] for req in reqs], device=self.device)
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

    def _advance(self, state: Rows, tokens: torch.Tensor, logprobs: torch.Tensor):
        """Record this step's tokens (forcing the interruption phrase where due) and update the
        thinking / answer-budget state, in place (a captured step writes the same buffers each
        replay). Rows not in progress write only to the scratch column and change nothing a
        completion reads. Returns (done, reason index into _REASONS)."""
        cfg, rows = self.cfg, torch.arange(tokens.shape[0], device=self.device)
        active = state.active
        forcing = state.force_idx >= 0
        state.interrupted.logical_or_(forcing)
        if self._phrase is not None:
            tokens = torch.where(forcing, self._phrase[state.force_idx.clamp(min=0)], tokens)
            logprobs = torch.where(forcing, 0.0, logprobs)
        col = torch.where(active, state.n_gen, cfg.max_new_tokens)  # (R,) column max_new: scratch
        state.tokens[rows, col] = tokens
        state.logprobs[rows, col] = logprobs
        state.versions[rows, col] = self._version_t
        state.forced[rows, col] = forcing
        state.n_gen.add_(active.long())
        state.pos.add_(active.long())
        state.next_input.copy_(tokens)

        n_phrase = 0 if self._phrase is None else len(self._phrase)
        phrase_done = forcing & (state.force_idx + 1 == n_phrase)
        state.force_idx.copy_(torch.where(phrase_done, -1, torch.where(forcing, state.force_idx + 1, state.force_idx)))
        closes = (state.thinking & ~forcing & self._ends_with(state, self._think_end)) | phrase_done
        state.thinking.logical_and_(~closes)
        if self._interrupt is not None:
            state.answer_end.copy_(torch.where(closes, state.n_gen + self._interrupt.answer_budget, state.answer_end))
            due = state.thinking & (state.force_idx < 0) & (state.n_gen >= state.trigger)
            state.force_idx.masked_fill_(due, 0)

        eos = torch.isin(tokens, self._eos) & ~forcing
        spent = state.n_gen >= state.answer_end  # the whole answer budget was used
        done = active & (eos | spent | (state.n_gen >= cfg.max_new_tokens))
        after = torch.where(eos, 2, torch.where(spent, 3, 4))  # interrupted_eos / _budget / _length
        reasons = torch.where(state.interrupted, after, torch.where(eos, 0, 1))
        return done, reasons

    @staticmethod
    def _ends_with(state: Rows, suffix: torch.Tensor) -> torch.Tensor:
        """(R,) bool: the generated tokens of each row end with `suffix`."""
        k = len(suffix)
        idx = (state.n_gen[:, None] - k + torch.arange(k, device=suffix.device)).clamp(min=0)  # (R, k)
        return (state.tokens.gather(1, idx) == suffix).all(dim=1) & (state.n_gen >= k)

    def _finish(self, state: Rows, held: list[Request | None], idx: torch.Tensor, reasons: torch.Tensor):
        """Turn rows `idx` (ended, with `reasons`) into `Completion`s and free their rows: one
        device-to-host copy per field."""
        lengths, why = state.n_gen[idx].tolist(), reasons.tolist()
        toks, lps = state.tokens[idx].tolist(), state.logprobs[idx].tolist()
        vers, forced = state.versions[idx].tolist(), state.forced[idx].tolist()
        state.active[idx] = False
        for i, row in enumerate(idx.tolist()):
            req, n = held[row], lengths[i]
            yield (
                row,
                Completion(
                    id=f"{req.prompt.id}/{req.sample}@{self.seed}.{req.serial}",
                    prompt_id=req.prompt.id,
                    prompt_tokens=list(req.tokens),
                    tokens=toks[i][:n],
                    logprobs=lps[i][:n],
                    versions=vers[i][:n],
                    text=self.tokenizer.decode(toks[i][:n], skip_special_tokens=True),
                    finish_reason=_REASONS[why[i]],
                    forced_mask=forced[i][:n],
                ),
            )

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
        self._version_t.fill_(version)
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
