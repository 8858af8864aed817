"""The fixed-shape decode path (`rollout.decode: static`) against the eager reference and
against independent references: `transformers`' own forward of the whole sequence, the same
prompt decoded alone, and the slot rule's arithmetic done by hand.

The CPU tests run a 2-layer model of the tiny shape and one of SmolLM2-135M's shape (width 576,
9 query / 3 K/V heads, head dim 64, MLP 1536, a 49,152-token vocabulary) with 2 layers instead of
30. The `gpu` tier (tests/gpu/test_rollout_gpu.py) runs the same checks on CUDA, where the static step
is captured as CUDA graphs (`rollout.capture: auto`)."""

from __future__ import annotations

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM

from rollout_helpers import LONG_AND_SHORT, MODELS, TEXTS, char_tokenizer, prompts, smollm2_shape, tiny_llama
from scalerl.config import InterruptConfig, NoLengthControl, RolloutConfig
from scalerl.errors import ScaleRLError
from scalerl.rollout import Engine
from scalerl.rollout import static as static_mod
from scalerl.rollout.slots import CONTEXT_ROUND, SLOTS_MAX
from scalerl.rollout.static import StaticLoop

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tok():
    return char_tokenizer()


def fresh_logprobs(model, prompt_tokens: list[int], tokens: list[int], temperature: float = 1.0) -> torch.Tensor:
    """log_softmax(logits / T) of `tokens` under one full `transformers` forward of the sequence."""
    device = model.get_output_embeddings().weight.device
    ids = torch.tensor([prompt_tokens + tokens], device=device)
    with torch.no_grad():
        logits = model(ids).logits[0].float() / temperature
    steps = logits[len(prompt_tokens) - 1 : -1]
    return torch.log_softmax(steps, -1).gather(-1, torch.tensor(tokens, device=device)[:, None])[:, 0].cpu()


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_tokens_equal_on_the_static_and_eager_paths(tok, name):
    model = MODELS[name](len(tok))
    cfg = RolloutConfig(max_new_tokens=20, batch_slots=3, length=NoLengthControl())
    static = Engine(model, tok, cfg, greedy=True)
    eager = Engine(model, tok, cfg.model_copy(update={"decode": "eager"}), greedy=True)
    assert static.decode == "static" and eager.decode == "eager"
    a, b = static.generate(prompts(LONG_AND_SHORT), n=2), eager.generate(prompts(LONG_AND_SHORT), n=2)
    assert [c.tokens for c in a] == [c.tokens for c in b]
    assert [c.finish_reason for c in a] == [c.finish_reason for c in b]
    for x, y in zip(a, b):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)


def test_attention_output_in_any_memory_layout_decodes_the_same(tok, monkeypatch):
    """CUDA's SDPA kernels may return their output with the last two dims' strides not row-major
    (seen on an H100, 2026-11-26: the static path's `.view` of it failed on its first GPU run). On
    the CPU the same layout is made by hand: the static path's SDPA here returns its values in a
    (B, L, H, d) buffer seen as (B, H, L, d); greedy tokens and log-probs must equal the eager path's."""
    import torch.nn.functional as real_f

    from scalerl.rollout import forward as forward_mod

    class StridedSdpa:
        def __getattr__(self, name):
            return getattr(real_f, name)

        @staticmethod
        def scaled_dot_product_attention(*args, **kwargs):
            out = real_f.scaled_dot_product_attention(*args, **kwargs)
            strided = out.transpose(1, 2).contiguous().transpose(1, 2)
            calls.append(strided.is_contiguous())
            return strided

    calls: list[bool] = []
    monkeypatch.setattr(forward_mod, "F", StridedSdpa())
    model = smollm2_shape(len(tok))  # fp32: the static path takes SDPA on a CPU too
    cfg = RolloutConfig(max_new_tokens=12, batch_slots=3, length=NoLengthControl())
    a = Engine(model, tok, cfg, greedy=True).generate(prompts(LONG_AND_SHORT[:3]), n=1)
    b = Engine(model, tok, cfg.model_copy(update={"decode": "eager"}), greedy=True).generate(
        prompts(LONG_AND_SHORT[:3]), n=1
    )
    assert calls and not all(calls)  # the prefill's attention did come back strided
    assert [c.tokens for c in a] == [c.tokens for c in b]
    for x, y in zip(a, b):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)


@pytest.mark.parametrize("name", list(MODELS))
def test_sampled_logprobs_equal_a_fresh_forward(tok, name):
    model = MODELS[name](len(tok))
    out = Engine(
        model, tok, RolloutConfig(temperature=0.8, max_new_tokens=16, batch_slots=4, length=NoLengthControl()), seed=3
    ).generate(prompts(LONG_AND_SHORT), n=2)
    assert len({tuple(c.tokens) for c in out}) > len(LONG_AND_SHORT)  # sampled, not one answer per prompt
    for c in out:
        ref = fresh_logprobs(model, c.prompt_tokens, c.tokens, 0.8)
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4), c.id


def test_bf16_generator_log_probs_are_what_the_bf16_trainer_recomputes(tok):
    """The paper's regime: a bf16 generator copy with the FP32 head, the trainer's bf16 forward on
    its fp32 weights (`completion_logprobs`, the consumer of these numbers). The static path
    agrees with the trainer at least as well as the eager reference does (its attention is the
    trainer's kernel on a CPU)."""
    import copy

    from doubles import scored
    from scalerl.models import cast_model
    from scalerl.trainer.forward import completion_logprobs, match_trainer_attention
    from scalerl.trainer.step import collate, logprob_mismatch

    model = smollm2_shape(len(tok))  # the trainer's fp32 weights
    generator = match_trainer_attention(cast_model(copy.deepcopy(model), "bf16"))
    mismatch = {}
    for decode in ("static", "eager"):
        engine = Engine(
            generator,
            tok,
            RolloutConfig(max_new_tokens=8, batch_slots=4, length=NoLengthControl(), decode=decode),
            fp32_head=True,
            seed=1,
        )
        engine.update_weights(model.state_dict(), 0)
        ps = prompts(LONG_AND_SHORT[:4])
        out = engine.generate(ps, 2)
        groups = [scored(p, out[2 * i : 2 * i + 2], [0.0, 0.0]) for i, p in enumerate(ps)]
        batch = collate(groups, tok.pad_token_id)
        with torch.no_grad():
            trainer = completion_logprobs(model, batch, 1.0, fp32_head=True, compute_dtype="bf16")
        total, n = logprob_mismatch(groups, batch, trainer, 0)
        mismatch[decode] = total / n
    assert mismatch["static"] < 0.01 and mismatch["static"] <= 1.5 * mismatch["eager"], mismatch


def test_a_reused_slot_does_not_see_its_previous_occupant(tok):
    """Two slots, eight prompts of very different lengths: every row is reused, a short prompt
    lands where a long sequence was. Each completion equals the same prompt decoded alone."""
    model = tiny_llama(len(tok), seed=6)
    cfg = RolloutConfig(max_new_tokens=24, batch_slots=2, length=NoLengthControl())
    together = Engine(model, tok, cfg, greedy=True).generate(prompts(LONG_AND_SHORT), n=1)
    alone = [Engine(model, tok, cfg, greedy=True).generate(prompts([t]), n=1)[0] for t in LONG_AND_SHORT]
    assert [c.tokens for c in together] == [c.tokens for c in alone]
    for x, y in zip(together, alone):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5)


def test_the_host_synchronises_once_every_few_steps(tok, monkeypatch):
    model = tiny_llama(len(tok), seed=7)
    steps, collects = [], []
    real_step, real_collect = Engine._step, StaticLoop._collect
    monkeypatch.setattr(Engine, "_step", lambda self, s, c: (steps.append(1), real_step(self, s, c))[1])
    monkeypatch.setattr(StaticLoop, "_collect", lambda self, held: (collects.append(1), real_collect(self, held))[1])
    cfg = RolloutConfig(max_new_tokens=40, batch_slots=4, length=NoLengthControl())
    out = Engine(model, tok, cfg, ignore_eos=True).generate(prompts(TEXTS[:4]), n=1)
    assert all(len(c.tokens) == 40 for c in out)
    assert len(steps) >= 40 and len(collects) <= len(steps) // static_mod.SYNC_EVERY + 1


def test_interruption_and_eos_on_the_static_path_match_eager(tok):
    """Forcing the phrase, the answer budget and EOS are device-side on the static path: the same
    completions and finish reasons as the eager reference, greedy."""
    model = tiny_llama(len(tok), seed=8, head_bias=True)
    with torch.no_grad():
        model.lm_head.bias[tok.eos_token_id] = 1.5
    length = InterruptConfig(think_min=3, think_max=6, answer_budget=4, phrase="ok</think>")
    out = {
        d: Engine(
            model, tok, RolloutConfig(max_new_tokens=16, batch_slots=3, length=length, decode=d), greedy=True, seed=2
        ).generate(prompts(LONG_AND_SHORT), n=2)
        for d in ("static", "eager")
    }
    assert [(c.tokens, c.forced_mask, c.finish_reason) for c in out["static"]] == [
        (c.tokens, c.forced_mask, c.finish_reason) for c in out["eager"]
    ]
    assert {"interrupted_budget", "eos"} & {c.finish_reason for c in out["static"]}


def test_batch_slots_auto_follows_the_kv_budget_by_hand(tok, monkeypatch):
    """tiny_llama: 2 layers, 2 K/V heads of 16, fp32: 2 x 2 x 2 x 16 x 4 = 512 bytes a token. A
    5-token context rounds up to 64 columns, + 16 new: 80 columns, 40,960 bytes a slot; a 1 MiB
    budget holds 25 slots, and the cache holds no more than the budget. One new token: 65
    columns, rounded up to 80."""
    model = tiny_llama(len(tok), seed=9)
    seen = []
    real = StaticLoop._allocate
    monkeypatch.setattr(
        StaticLoop,
        "_allocate",
        lambda self, s, c: (seen.append((s, c)), real(self, s, c), seen.append(self.kv.nbytes()))[1],
    )
    cfg = RolloutConfig(max_new_tokens=16, kv_budget_mb=1.0, length=NoLengthControl())
    assert cfg.batch_slots == "auto"
    out = Engine(model, tok, cfg, ignore_eos=True).generate(prompts(["12+34="]), n=40)
    assert len(out) == 40
    assert seen[0] == (25, CONTEXT_ROUND + 16) and seen[1] == 25 * 80 * 512 <= 2**20
    seen.clear()
    Engine(model, tok, cfg.model_copy(update={"kv_budget_mb": 1e4, "max_new_tokens": 1}), ignore_eos=True).generate(
        prompts(["1+2="]), n=300
    )
    assert seen[0] == (SLOTS_MAX["cpu"], 80)  # a large budget stops at the CPU's cap
    seen.clear()
    Engine(model, tok, cfg, ignore_eos=True).generate(prompts(["1+2="]), n=3)
    assert seen[0][0] == 3  # never more rows than the call has requests


def test_batch_slots_must_be_a_positive_number_or_auto():
    assert RolloutConfig(batch_slots="12").batch_slots == 12 and RolloutConfig().batch_slots == "auto"
    for bad in ("many", 0, "-3"):
        with pytest.raises(ValueError, match="batch_slots"):
            RolloutConfig(batch_slots=bad)


def test_a_model_the_static_path_cannot_run_is_refused_or_decoded_eagerly(tok):
    torch.manual_seed(0)
    mistral = MistralForCausalLM(
        MistralConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            sliding_window=16,
            eos_token_id=1,
            pad_token_id=0,
            bos_token_id=None,
            attn_implementation="sdpa",
        )
    ).eval()
    with pytest.raises(ScaleRLError, match=r"rollout.decode = static: sliding-window attention \(sliding_window=16\)"):
        Engine(mistral, tok, RolloutConfig(max_new_tokens=4, length=NoLengthControl(), decode="static"))
    auto = Engine(mistral, tok, RolloutConfig(max_new_tokens=4, length=NoLengthControl()))
    assert auto.decode == "eager" and len(auto.generate(prompts(["1+1="]), n=2)) == 2


def test_a_lora_wrapped_model_decodes_with_its_adapters(tok):
    """The evaluation engine decodes the trainer's model, whose projections may be LoRA layers:
    the static path calls them as modules, so the adapters count."""
    from scalerl.config import LoraConfig
    from scalerl.lora import apply_lora

    model = apply_lora(tiny_llama(len(tok), seed=10), LoraConfig(r=4, targets=["q_proj", "v_proj"])).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # adapters that change the output
    out = Engine(
        model, tok, RolloutConfig(max_new_tokens=10, batch_slots=2, length=NoLengthControl()), seed=4
    ).generate(prompts(TEXTS[:3]), n=2)
    for c in out:
        assert torch.allclose(torch.tensor(c.logprobs), fresh_logprobs(model, c.prompt_tokens, c.tokens), atol=1e-4)
