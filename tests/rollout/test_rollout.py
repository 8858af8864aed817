"""Rollout engine on a random-init tiny Llama with a character tokenizer.

References are computed independently of the engine: a fresh full forward of the model
(`model(ids).logits`), `transformers` `generate`, and the old/new-weights forward over a
`DynamicCache` for the in-flight update.
"""

from __future__ import annotations

import itertools
import threading

import pytest
import torch
from transformers import DynamicCache

from rollout_helpers import TEXTS, char_tokenizer, prompts, tiny_llama
from scalerl.config import InterruptConfig, NoLengthControl, RolloutConfig
from scalerl.errors import ScaleRLError
from scalerl.rollout import Engine, Generator
from scalerl.rollout.cache import SlotCache
from scalerl.rollout.eager import EagerLoop
from scalerl.rollout.sampling import sample, top_p_filter
from scalerl.rollout.static import StaticLoop

BOTH = pytest.mark.parametrize("decode", ["static", "eager"])  # the fixed-shape loop and the reference


@pytest.fixture(scope="module")
def tok():
    return char_tokenizer()


def fresh_logprobs(model, prompt_tokens: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) of `tokens` under one full forward over prompt + tokens."""
    ids = torch.tensor([prompt_tokens + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0].float() / temperature  # (L, V)
    steps = logits[len(prompt_tokens) - 1 : -1]  # the positions that predicted `tokens`
    return torch.log_softmax(steps, -1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def bias_tokens(model, tok, **bias: float) -> None:
    ids = {"eos": tok.eos_token_id, "think_end": tok.convert_tokens_to_ids("</think>")}
    with torch.no_grad():
        for name, value in bias.items():
            model.lm_head.bias[ids[name]] = value


@pytest.mark.parametrize("decode,attn", [("static", "sdpa"), ("eager", "sdpa"), ("eager", "eager")])
def test_logprobs_equal_fresh_forward_with_refilled_rows(tok, decode, attn, monkeypatch):
    model = tiny_llama(len(tok), seed=1, attn=attn)
    moved, resized, grown = [], [], []
    monkeypatch.setattr(SlotCache, "_move", lambda self, s, f=SlotCache._move: (moved.append(s), f(self, s)))
    monkeypatch.setattr(SlotCache, "_resize", lambda self, c, f=SlotCache._resize: (resized.append(c), f(self, c)))
    monkeypatch.setattr(StaticLoop, "_grow", lambda self, c, f=StaticLoop._grow: (grown.append(c), f(self, c)))
    cfg = RolloutConfig(temperature=0.7, max_new_tokens=16, batch_slots=3, length=NoLengthControl(), decode=decode)
    texts = ["a", *TEXTS, "a much longer prompt that arrives late, longer than a column round: " + "1234567890" * 2]
    engine = Engine(model, tok, cfg, seed=3)
    assert engine.decode == decode
    # a stream does not know its prompts ahead: the long one comes last, with rows in flight
    out = engine.generate(prompts(texts[:-1]), n=2) + list(engine.stream(iter(prompts(texts)), n=2))

    assert len(out) == 2 * (2 * len(texts) - 1) and len({c.id for c in out}) == len(out)
    assert {c.finish_reason for c in out} == {"eos", "length"}  # rows finished at different steps
    if decode == "eager":
        assert moved and resized  # the run exercised compaction / shifting and growth of the cache
    else:
        assert grown  # the late long prompt made every slot longer, the rows in flight kept
    for c in out:
        assert c.tokens[-1] == tok.eos_token_id if c.finish_reason == "eos" else len(c.tokens) == 16
        ref = fresh_logprobs(model, c.prompt_tokens, c.tokens, 0.7)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4), c.id
        assert c.versions == [0] * len(c.tokens) and not any(c.forced_mask)


def test_greedy_matches_hf_generate(tok):
    model = tiny_llama(len(tok), seed=2)
    cfg = RolloutConfig(max_new_tokens=24, batch_slots=3, length=NoLengthControl())
    out = Engine(model, tok, cfg, greedy=True).generate(prompts(TEXTS), n=1)
    for c, text in zip(out, TEXTS):
        ids = torch.tensor([tok(text)["input_ids"]])
        ref = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=24,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )[0, ids.shape[1] :]
        assert c.tokens == ref.tolist()
    assert any(c.finish_reason == "eos" for c in out) and any(c.finish_reason == "length" for c in out)


@BOTH
def test_in_flight_update_uses_new_weights_on_stale_cache(tok, decode, monkeypatch):
    old, new = tiny_llama(len(tok), seed=3, head_bias=True), tiny_llama(len(tok), seed=4, head_bias=True)
    bias_tokens(old, tok, eos=-30.0)
    bias_tokens(new, tok, eos=-30.0)
    reference_old = tiny_llama(len(tok), seed=3, head_bias=True)
    reference_old.load_state_dict(old.state_dict())
    cfg = RolloutConfig(max_new_tokens=14, batch_slots=2, length=NoLengthControl(), decode=decode)
    engine = Engine(old, tok, cfg, seed=0)
    calls = itertools.count(1)
    real_step = engine._step

    def step(state, cache):  # staged during decode step 5: the swap lands in the middle of both sequences
        if next(calls) == 5:
            engine.update_weights(new.state_dict(), 7)
        return real_step(state, cache)

    monkeypatch.setattr(engine, "_step", step)
    out = engine.generate(prompts(["12+7=", "What is 3*4?"]), n=1)

    assert engine.version == 7
    for c in out:
        s = c.versions.index(7)
        assert 0 < s < len(c.tokens) and c.versions == [0] * s + [7] * (len(c.tokens) - s)
        seq, split = c.prompt_tokens + c.tokens, len(c.prompt_tokens) - 1 + s  # inputs before `split`: old K/V
        with torch.no_grad():
            cache = DynamicCache(config=new.config)
            reference_old(torch.tensor([seq[:split]]), past_key_values=cache, use_cache=True)
            logits = new(torch.tensor([seq[split:-1]]), past_key_values=cache, use_cache=True).logits[0]
        ref = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(c.tokens[s:])[:, None])[:, 0]
        got = torch.tensor(c.logprobs[s:])
        assert torch.allclose(got, ref, atol=1e-4)
        assert torch.allclose(
            torch.tensor(c.logprobs[:s]), fresh_logprobs(reference_old, c.prompt_tokens, c.tokens[:s], 1.0), atol=1e-4
        )
        # not what a fresh forward under the new weights would give: the cache really was stale
        assert (got - fresh_logprobs(new, c.prompt_tokens, c.tokens, 1.0)[s:]).abs().max() > 1e-3


PHRASE = "Time is up. </think>"


@BOTH
def test_forced_interruption_phrase_then_the_whole_answer_budget(tok, decode):
    model = tiny_llama(len(tok), seed=5, head_bias=True)
    bias_tokens(model, tok, eos=-30.0, think_end=-30.0)  # the model never stops or closes thinking itself
    phrase = tok(PHRASE, add_special_tokens=False)["input_ids"]
    p, budget = len(phrase), 5
    assert p == len("Time is up. ") + 1  # one token a character, one for </think>
    max_new = 8 + p + budget  # exactly what the check allows
    cfg = RolloutConfig(
        max_new_tokens=max_new,
        batch_slots=12,
        length=InterruptConfig(think_min=4, think_max=8, answer_budget=budget, phrase=PHRASE),
        decode=decode,
    )
    out = Engine(model, tok, cfg, seed=0).generate(prompts(["12+7=", "99-1="]), n=6)
    triggers = set()
    for c in out:
        t = c.forced_mask.index(True)  # where the phrase starts = the drawn trigger
        triggers.add(t)
        assert 4 <= t <= 8 and c.forced_mask == [False] * t + [True] * p + [False] * budget
        assert c.tokens[t : t + p] == phrase and all(lp == 0.0 for lp in c.logprobs[t : t + p])
        assert all(lp < 0.0 for lp in c.logprobs[:t] + c.logprobs[t + p :])
        assert c.finish_reason == "interrupted_budget" and c.interrupted and c.interrupt_answered
        assert not c.truncated and len(c.tokens) == t + p + budget
        assert PHRASE in c.text and c.text.index(PHRASE) + len(PHRASE) < len(c.text)  # an answer follows
    assert len(triggers) > 1  # the trigger is drawn, not fixed


def test_interrupted_answer_that_ends_by_eos(tok):
    model = tiny_llama(len(tok), seed=8, head_bias=True)
    bias_tokens(model, tok, eos=4.0, think_end=-30.0)  # EOS likely at every step
    cfg = RolloutConfig(
        max_new_tokens=1 + 3 + 6,
        batch_slots=16,
        length=InterruptConfig(think_min=1, think_max=1, answer_budget=6, phrase="ok</think>"),
    )
    out = Engine(model, tok, cfg, seed=0).generate(prompts(["1+1="]), n=32)
    by_reason = {}
    for c in out:
        by_reason.setdefault(c.finish_reason, []).append(c)
    # EOS as the first token: before the interruption; otherwise the phrase (3 tokens) follows token 1
    assert all(c.tokens == [tok.eos_token_id] for c in by_reason["eos"])
    for c in by_reason["interrupted_eos"]:
        assert c.forced_mask[1:4] == [True] * 3 and c.tokens[-1] == tok.eos_token_id and 5 <= len(c.tokens) <= 10
        assert tok.eos_token_id not in c.tokens[:-1] and c.interrupt_answered
    for c in by_reason.get("interrupted_budget", []):
        assert len(c.tokens) == 1 + 3 + 6 and tok.eos_token_id not in c.tokens
    assert {"eos", "interrupted_eos"} <= set(by_reason) and "length" not in by_reason


@pytest.mark.parametrize("think_max,phrase,answer,max_new", [(8, PHRASE, 5, 8 + 13 + 5 - 1), (2, "xy", 3, 6)])
def test_a_budget_that_cuts_the_answer_is_refused_naming_the_numbers(tok, think_max, phrase, answer, max_new):
    n_phrase = len(tok(phrase, add_special_tokens=False)["input_ids"])
    cfg = RolloutConfig(
        max_new_tokens=max_new,
        length=InterruptConfig(think_min=1, think_max=think_max, answer_budget=answer, phrase=phrase),
    )
    expected = (
        rf"think_max \({think_max}\) \+ interruption phrase \({n_phrase} tokens with this tokenizer\) "
        rf"\+ answer_budget \({answer}\) = {think_max + n_phrase + answer} > rollout.max_new_tokens \({max_new}\)"
    )
    with pytest.raises(ScaleRLError, match=expected):
        Engine(tiny_llama(len(tok)), tok, cfg)
    Engine(tiny_llama(len(tok)), tok, cfg.model_copy(update={"max_new_tokens": max_new + 1}))  # one more fits


def test_a_phrase_the_tokenizer_cannot_write_is_refused(tok):
    cfg = RolloutConfig(max_new_tokens=200, length=InterruptConfig(phrase="Zeit ist um. \u00fc </think>"))
    with pytest.raises(ScaleRLError, match=r"rollout.length.phrase = .*does not know"):
        Engine(tiny_llama(len(tok)), tok, cfg)


def test_thinking_closed_by_the_model_gets_the_answer_budget(tok):
    model = tiny_llama(len(tok), seed=6, head_bias=True)
    bias_tokens(model, tok, eos=-30.0, think_end=30.0)  # closes `</think>` at once, never EOS
    cfg = RolloutConfig(
        max_new_tokens=40,
        batch_slots=2,
        length=InterruptConfig(think_min=10, think_max=12, answer_budget=3, phrase=PHRASE),
    )
    for c in Engine(model, tok, cfg).generate(prompts(["1+1="]), n=2):
        assert c.tokens[0] == tok.convert_tokens_to_ids("</think>")
        assert len(c.tokens) == 1 + 3 and c.finish_reason == "length" and not any(c.forced_mask)
        assert c.truncated and not c.interrupted


def test_stream_refills_slots_and_stops_on_event(tok):
    model = tiny_llama(len(tok), seed=7)
    cfg = RolloutConfig(max_new_tokens=8, batch_slots=2, length=NoLengthControl())
    engine = Engine(model, tok, cfg)
    assert isinstance(engine, Generator)
    endless = (prompts([f"{i}+{i}="])[0].__class__(id=f"q{i}", text=f"{i}+{i}=", answer="") for i in itertools.count())
    stop, seen = threading.Event(), []
    for c in engine.stream(endless, n=2, stop=stop):
        seen.append(c)
        if len(seen) == 9:
            stop.set()
    assert len(seen) == 9 and len({c.id for c in seen}) == 9  # more completions than slots: rows were refilled
    assert sum(c.prompt_id == "q0" for c in seen) == 2


@BOTH
def test_seeded_sampling_is_reproducible(tok, decode):
    model = tiny_llama(len(tok), seed=8)
    cfg = RolloutConfig(max_new_tokens=10, batch_slots=4, length=NoLengthControl(), decode=decode)
    runs = [[c.tokens for c in Engine(model, tok, cfg, seed=s).generate(prompts(TEXTS[:3]), 2)] for s in (1, 1, 2)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_top_p_filter_by_hand():
    probs = torch.tensor([[0.05, 0.5, 0.15, 0.3]])
    # sorted: 0.5 (mass before 0) 0.3 (0.5) 0.15 (0.8) 0.05 (0.95): keep the first two at top_p 0.7
    assert torch.equal(top_p_filter(probs, 0.7), torch.tensor([[0.0, 0.5, 0.0, 0.3]]))
    assert torch.equal(top_p_filter(probs, 0.4), torch.tensor([[0.0, 0.5, 0.0, 0.0]]))


def test_sample_frequencies_and_recorded_logprob():
    logits = torch.log(torch.tensor([0.2, 0.8])).repeat(20000, 1)  # (N, 2)
    tokens, logprobs = sample(logits, temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert abs(tokens.float().mean().item() - 0.8) < 0.01  # binomial sd 0.003
    assert torch.allclose(logprobs, torch.log(torch.tensor([0.2, 0.8]))[tokens])
    # temperature 2: the recorded value is log_softmax(logits / 2): p = sqrt(.2), sqrt(.8) renormalised
    _, lp = sample(logits[:1], temperature=2.0, greedy=True)
    q = torch.tensor([0.2, 0.8]).sqrt()
    assert torch.allclose(lp, torch.log(q[1] / q.sum()))


def test_inverse_cdf_never_picks_zero_probability_tokens():
    probs = torch.tensor([[0.0, 0.3, 0.0, 0.7, 0.0]]).repeat(50000, 1)
    from scalerl.rollout.sampling import inverse_cdf

    tokens = inverse_cdf(probs, torch.Generator().manual_seed(1))
    assert set(tokens.tolist()) == {1, 3} and abs((tokens == 3).float().mean().item() - 0.7) < 0.01  # sd 0.002


@BOTH
def test_bf16_model_with_fp32_head_follows_weight_updates(tok, decode):
    model = tiny_llama(len(tok), seed=9).to(torch.bfloat16)
    new = tiny_llama(len(tok), seed=10).to(torch.bfloat16)
    cfg = RolloutConfig(max_new_tokens=8, batch_slots=2, length=NoLengthControl(), decode=decode)
    engine = Engine(model, tok, cfg, fp32_head=True)
    engine.update_weights(new.state_dict(), 1)  # applied before the first step: every token is version 1
    for c in engine.generate(prompts(TEXTS[:2]), n=1):
        assert c.versions == [1] * len(c.tokens)
        ids = torch.tensor([c.prompt_tokens + c.tokens])
        with torch.no_grad():
            hidden = new.model(ids).last_hidden_state[0, len(c.prompt_tokens) - 1 : -1]  # (L, H) bf16
        ref = torch.log_softmax(hidden.float() @ new.lm_head.weight.float().T, -1)
        ref = ref.gather(-1, torch.tensor(c.tokens)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=0.05)  # bf16 body: batched vs single rows


def test_the_default_interruption_fits_the_tiny_tokenizer():
    from scalerl.config import DEFAULT_PHRASE
    from scalerl.models.tiny import build_tokenizer
    from scalerl.rollout.length import check_budget, phrase_ids

    n = len(phrase_ids(build_tokenizer(), DEFAULT_PHRASE))
    assert n == len(" Time is up. ") + 1  # one token a character, one for </think>
    cfg = RolloutConfig()
    assert cfg.length.think_max + n + cfg.length.answer_budget == 104 + 14 + 32 <= cfg.max_new_tokens == 160
    check_budget(cfg, n)


@BOTH
def test_reseed_repeats_the_samples_of_unchanged_weights(tok, decode):
    model = tiny_llama(len(tok), seed=4)
    engine = Engine(
        model, tok, RolloutConfig(max_new_tokens=8, batch_slots=4, length=NoLengthControl(), decode=decode), seed=11
    )
    first = [c.tokens for c in engine.generate(prompts(TEXTS), n=2)]
    assert [c.tokens for c in engine.generate(prompts(TEXTS), n=2)] != first  # the stream moved on
    engine.reseed()
    assert [c.tokens for c in engine.generate(prompts(TEXTS), n=2)] == first  # common random numbers


@BOTH
def test_idle_rows_are_given_up_while_no_prompt_may_start_and_taken_back_after(tok, decode, monkeypatch):
    """While the source says "no prompt may start" (None) the engine decodes only about as many
    rows as are in flight, and grows back to `batch_slots` when prompts come again; sequences
    that lived through both keep exact log-probabilities (a fresh full forward)."""
    model = tiny_llama(len(tok), seed=11)
    widths = []
    real_step = Engine._step
    monkeypatch.setattr(
        Engine,
        "_step",
        lambda self, state, cache: (widths.append(state.active.shape[0]), real_step(self, state, cache))[1],
    )
    cfg = RolloutConfig(temperature=1.0, max_new_tokens=16, batch_slots=8, length=NoLengthControl(), decode=decode)
    ps = prompts([f"{i}+{i}=" for i in range(16)])
    ps = [p.__class__(id=f"q{i}", text=p.text, answer="") for i, p in enumerate(ps)]
    staggered = [x for p in ps[:8] for x in (p, None)]  # one prompt starts per step: rows end apart
    source = iter([*staggered, *[None] * 30, *ps[8:]])
    out = list(Engine(model, tok, cfg, seed=5, ignore_eos=True).stream(source, n=1))

    assert sorted(c.prompt_id for c in out) == sorted(p.id for p in ps)
    assert max(widths) == 8 and min(widths) <= 2  # rows given up while only the last ones ran ...
    assert widths[-16] == 8  # ... and taken back for the eight late prompts
    for c in out:
        assert len(c.tokens) == 16
        ref = fresh_logprobs(model, c.prompt_tokens, c.tokens, 1.0)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4), c.id


SHARED = "you are a careful calculator; answer with digits only. "  # > MIN_SHARED_PREFIX characters


def prefill_widths(monkeypatch) -> list[tuple[int, int]]:
    """The (rows, columns) of every prefill that starts at a context's first token (not after a
    shared prefix), in order, on either loop."""
    widths = []
    eager, static = EagerLoop._prefill, StaticLoop.prefill
    monkeypatch.setattr(
        EagerLoop, "_prefill", lambda self, ids, lens: (widths.append(tuple(ids.shape)), eager(self, ids, lens))[1]
    )

    def static_prefill(self, rows, ids, start):
        if start == 0:
            widths.append(tuple(ids.shape))
        return static(self, rows, ids, start)

    monkeypatch.setattr(StaticLoop, "prefill", static_prefill)
    return widths


@BOTH
def test_a_prefix_shared_by_the_prompts_is_prefilled_once_with_exact_logprobs(tok, decode, monkeypatch):
    """Prompts that share a long prefix (a system prompt, few-shot examples): the prefix is run
    through the model once, each prompt's own tokens after it; the log-probabilities equal a fresh
    full forward, across an in-flight weight update (which invalidates the prefix)."""
    model = tiny_llama(len(tok), seed=12)
    widths = prefill_widths(monkeypatch)
    texts = [SHARED + q for q in ["1+1=", "22+2=", "3+333=", "4+4="]]
    cfg = RolloutConfig(temperature=1.0, max_new_tokens=12, batch_slots=4, length=NoLengthControl(), decode=decode)
    engine = Engine(model, tok, cfg, seed=2)
    out = engine.generate(prompts(texts), n=2)
    assert widths == [(1, len(SHARED))]  # one prefill: the shared prefix; the rest ran after it
    for c in out:
        ref = fresh_logprobs(model, c.prompt_tokens, c.tokens, 1.0)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4), c.id

    new = tiny_llama(len(tok), seed=13)
    engine.update_weights(new.state_dict(), version=1)
    widths.clear()
    out = engine.generate(prompts(texts), n=1)
    assert widths and widths[0] == (1, len(SHARED))  # recomputed under the new weights
    for c in out:
        assert c.versions[0] == 1
        ref = fresh_logprobs(new, c.prompt_tokens, c.tokens, 1.0)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4), c.id


@BOTH
def test_an_in_flight_weight_update_invalidates_the_shared_prefix_within_one_stream(tok, decode, monkeypatch):
    """One `stream` call (as the PipelineRL generator runs it, endlessly): weights staged while it
    runs must drop the shared prefix's K/V, since no new call will. Prompts admitted after the
    update find the prefix recomputed under the new weights: exact log-probs against a fresh
    forward of the new model (a stale prefix K/V would make them differ)."""
    old, new = tiny_llama(len(tok), seed=12), tiny_llama(len(tok), seed=13)
    widths = prefill_widths(monkeypatch)
    texts = [SHARED + q for q in ["1+1=", "22+2=", "3+333=", "4+4="]]
    cfg = RolloutConfig(temperature=1.0, max_new_tokens=12, batch_slots=2, length=NoLengthControl(), decode=decode)
    engine = Engine(old, tok, cfg, seed=2)
    every = prompts(texts)
    first, later = every[:2], every[2:]

    def feed():
        yield from first  # admitted under version 0
        engine.update_weights(new.state_dict(), version=1)  # staged mid-stream
        for _ in range(3):
            yield None  # a few decode-step boundaries: it is applied
        yield from later

    out = list(engine.stream(feed(), n=1))
    assert len(out) == 4
    assert widths.count((1, len(SHARED))) == 2  # the prefix, once under each weights version
    late = [c for c in out if c.prompt_id in {p.id for p in later}]
    assert len(late) == 2
    for c in late:
        assert set(c.versions) == {1}
        ref = fresh_logprobs(new, c.prompt_tokens, c.tokens, 1.0)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4), c.id


@BOTH
def test_the_samples_of_a_prompt_admitted_one_by_one_are_prefilled_once_per_weights_version(tok, decode, monkeypatch):
    """With one row, each of a prompt's n samples is admitted only when the previous one finished:
    its prompt is run through the model once per weights version, not once per sample, and every
    log-prob still equals a fresh full forward of the weights it was sampled with. A weight update
    staged during the first sample makes the next samples prefill again, under the new weights."""
    old, new = tiny_llama(len(tok), seed=21), tiny_llama(len(tok), seed=22)
    widths = prefill_widths(monkeypatch)
    cfg = RolloutConfig(temperature=1.0, max_new_tokens=6, batch_slots=1, length=NoLengthControl(), decode=decode)
    engine = Engine(old, tok, cfg, seed=4, ignore_eos=True)
    texts = ["12+3=", "7+8="]
    out = engine.generate(prompts(texts), n=3)
    assert len(out) == 6 and sorted(widths) == sorted((1, len(tok(t)["input_ids"]) - 1) for t in texts)
    for c in out:
        assert torch.allclose(torch.tensor(c.logprobs), fresh_logprobs(old, c.prompt_tokens, c.tokens, 1.0), atol=1e-4)

    widths.clear()
    steps = itertools.count(1)
    real_step = engine._step

    def step(state, cache):
        if next(steps) == 3:  # during the first sample (6 steps long)
            engine.update_weights(new.state_dict(), version=1)
        return real_step(state, cache)

    monkeypatch.setattr(engine, "_step", step)
    first, *rest = engine.generate(prompts(texts[:1]), n=3)
    assert first.versions == [0, 0, 0, 1, 1, 1] and widths == [(1, len(first.prompt_tokens) - 1)] * 2
    for c in rest:  # admitted under version 1: its prefill, exact
        assert c.versions == [1] * 6
        assert torch.allclose(torch.tensor(c.logprobs), fresh_logprobs(new, c.prompt_tokens, c.tokens, 1.0), atol=1e-4)


@BOTH
def test_a_held_stream_takes_no_step_and_then_yields_what_it_would_have(tok, decode, monkeypatch):
    """`stream(..., hold=event)`: while the event is set (the trainer evaluates) the engine takes
    no decode step; released, it finishes the sequences in flight exactly as an unheld stream
    with the same seed does (the held rows keep their caches and random streams)."""
    model = tiny_llama(len(tok), seed=4)
    cfg = RolloutConfig(
        temperature=1.0, max_new_tokens=16, batch_slots=8, length=NoLengthControl(), decode=decode
    )  # rows to spare:
    unheld = list(Engine(model, tok, cfg, seed=9, ignore_eos=True).stream(prompts(TEXTS[:2]), n=2))

    steps = []
    real = Engine._step
    monkeypatch.setattr(Engine, "_step", lambda self, state, cache: (steps.append(1), real(self, state, cache))[1])
    real_held, hold, turns = Engine._held, threading.Event(), []

    def held(self):  # each turn held: the steps taken so far; released after 50 turns
        turns.append(len(steps))
        if len(turns) == 50:
            hold.clear()
        real_held(self)

    monkeypatch.setattr(Engine, "_held", held)

    def feed():
        yield from prompts(TEXTS[:2])
        hold.set()  # asked for a third prompt with both admitted: hold them in flight

    held_out = list(Engine(model, tok, cfg, seed=9, ignore_eos=True).stream(feed(), n=2, hold=hold))
    assert len(turns) == 50 and len(set(turns)) == 1 and turns[0] < 16  # held: not one step in 50 turns
    assert [(c.id, c.tokens, c.logprobs) for c in held_out] == [(c.id, c.tokens, c.logprobs) for c in unheld]


def test_stall_slows_the_training_stream_once_per_completion_and_not_the_evaluation(tok, monkeypatch):
    """rollout.engine.stall_s (an emulated slower generator): `stream` sleeps that long after each
    completion it yields, with the same tokens as without it; `generate` (the evaluation) never sleeps."""
    from scalerl.config import LocalEngineConfig
    from scalerl.rollout import engine as engine_module

    slept: list[float] = []
    monkeypatch.setattr(engine_module.time, "sleep", slept.append)
    model = tiny_llama(len(tok), seed=2)

    def run(stall: float, how: str) -> list[list[int]]:
        cfg = RolloutConfig(
            max_new_tokens=12, batch_slots=2, length=NoLengthControl(), engine=LocalEngineConfig(stall_s=stall)
        )
        eng = Engine(model, tok, cfg, greedy=True)
        out = eng.generate(prompts(TEXTS), n=2) if how == "generate" else list(eng.stream(prompts(TEXTS), 2))
        return sorted(c.tokens for c in out)

    plain = run(0.0, "stream")
    assert slept == []
    assert run(0.25, "stream") == plain
    assert slept == [0.25] * (2 * len(TEXTS))
    slept.clear()
    assert run(0.25, "generate") == plain and slept == []
