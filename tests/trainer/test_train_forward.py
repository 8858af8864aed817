"""The trainer forward: each group's prompt run once (exact), bf16 mixed precision, bf16 generator."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from doubles import scored
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.models import load_model
from scalerl.trainer.forward import completion_logprobs
from scalerl.trainer.step import Optimizer, collate, logprob_mismatch, micro_batches, train_step
from scalerl.types import Completion, Prompt
from train_helpers import random_groups

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _step(groups, overrides, budget=None, monkeypatch=None):
    from scalerl.trainer import step as step_mod

    if budget is not None:
        monkeypatch.setattr(step_mod, "MICRO_BATCH_TOKENS", budget)
    cfg = load_config(
        "scalerl", overrides=["optim.lr=1e-30", "optim.grad_clip=1e30", "rollout.temperature=0.7", *overrides]
    )
    model, _ = load_model("tiny-random")
    row = train_step(model, Optimizer(model, cfg), groups, cfg, pad_id=0, step=1)
    return row, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


# one micro-batch (prompts of every length together) or one group each; the CPU's grouped
# attention or the model's own sdpa kernel (what runs on CUDA)
@pytest.mark.parametrize("budget,attention", [(10**9, "grouped"), (1, "grouped"), (10**9, "sdpa")])
def test_shared_prompt_gives_the_unshared_loss_and_every_gradient(budget, attention, monkeypatch):
    from scalerl.trainer import forward

    if attention == "sdpa":
        monkeypatch.setattr(forward, "GROUPED_DEVICES", ())
    groups = random_groups()
    shared, g_shared = _step(groups, ["model.share_prompt=true"], budget, monkeypatch)
    full, g_full = _step(groups, ["model.share_prompt=false"], budget, monkeypatch)
    assert shared["tokens/trained_step"] == full["tokens/trained_step"] > 0
    assert shared["train/loss"] == pytest.approx(full["train/loss"], rel=1e-5)
    assert g_shared.keys() == g_full.keys() and len(g_full) == len(list(load_model("tiny-random")[0].parameters()))
    for name, g in g_full.items():
        assert g.norm() > 0, name
        rel = ((g_shared[name] - g).norm() / g.norm()).item()
        assert rel < 1e-5, f"{name}: relative gradient difference {rel:.2e}"


def test_shared_logprobs_match_each_sequence_run_alone():
    """Independent reference: the HF model's own logits over each unpadded prompt + completion."""
    groups = random_groups(seed=1)
    model, _ = load_model("tiny-random")
    batch = collate(groups, pad_id=0)
    with torch.no_grad():
        got = completion_logprobs(model, batch, temperature=0.7, fp32_head=True, share_prompt=True)
        for i, c in enumerate(c for g in groups for c in g.completions):
            ids = torch.tensor([c.prompt_tokens + c.tokens])
            logits = model(input_ids=ids).logits[0].float() / 0.7  # (p + t, V)
            p, t = len(c.prompt_tokens), len(c.tokens)
            want = F.log_softmax(logits[p - 1 : p - 1 + t], dim=-1).gather(1, torch.tensor(c.tokens)[:, None])[:, 0]
            on = batch.mask[i, :t] > 0
            torch.testing.assert_close(got[i, :t][on], want[on], rtol=1e-5, atol=1e-5)
            assert not got[i, :t][~on].any() and not got[i, t:].any()  # 0 where masked (forced, padding)


def test_groups_with_different_prompts_fall_back_to_full_sequences():
    groups = random_groups(seed=2)
    c = groups[1].completions[2]
    groups[1].completions[2] = dataclasses.replace(
        c, prompt_tokens=[7, 7, 7]
    )  # not the group's prompt: nothing to share
    model, _ = load_model("tiny-random")
    batch = collate(groups, pad_id=0)
    assert not batch.same_prompt
    with torch.no_grad():
        auto = completion_logprobs(model, batch, 0.7, True, share_prompt=True)
        full = completion_logprobs(model, batch, 0.7, True, share_prompt=False)
    torch.testing.assert_close(auto, full, rtol=0, atol=0)


def test_shared_micro_batches_count_each_prompt_once():
    groups = random_groups(prompt_lens=[40, 40, 40, 40], completion_lens=[[2] * 4] * 4)
    # full sequences: 4 rows x 42 = 168 tokens a group; shared: 40 + 4 x 2 = 48
    assert len(micro_batches(groups, max_tokens=4 * 48, shared=True)) == 1
    assert len(micro_batches(groups, max_tokens=4 * 48, shared=False)) == 4


def test_bf16_compute_keeps_fp32_weights_and_fp32_head():
    groups = random_groups(seed=3)
    model, _ = load_model("tiny-random")
    batch = collate(groups, pad_id=0)
    with torch.no_grad():
        ref = completion_logprobs(model, batch, 0.7, True, compute_dtype="fp32")
    got = completion_logprobs(model, batch, 0.7, True, compute_dtype="bf16")
    assert got.dtype == torch.float32 and all(p.dtype == torch.float32 for p in model.parameters())
    diff = ((got - ref) * batch.mask).abs().max().item()
    assert 0 < diff < 0.1  # bf16 matmuls in the trunk: close to fp32, not equal
    (got * batch.mask).sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())


def test_bf16_engine_decodes_a_bf16_copy_with_the_published_fp32_head():
    from scalerl.assembly.generator import generator_copy
    from scalerl.rollout import Engine

    cfg = load_config("scalerl", overrides=["model.compute_dtype=bf16"])
    model, tokenizer = load_model("tiny-random")
    engine = Engine(generator_copy(model, cfg), tokenizer, cfg.rollout, fp32_head=True)
    assert engine.model.get_input_embeddings().weight.dtype == torch.bfloat16
    assert model.get_input_embeddings().weight.dtype == torch.float32  # the trainer's copy is untouched
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1e-3 * torch.randn_like(p))  # not representable in bf16
    engine.update_weights(model.state_dict(), 1)
    engine._apply_pending()
    head = model.get_output_embeddings().weight
    assert torch.equal(engine._w32, head)  # fp32 head: exact
    assert torch.equal(engine.model.get_output_embeddings().weight, head.to(torch.bfloat16))
    out = engine.generate([Prompt("p", "1+2=", "3")], 2)
    assert len(out) == 2 and all(c.versions == [1] * len(c.tokens) for c in out)
    assert torch.equal(engine._w32, head)  # the published fp32 head survives the live-weight check


def test_compute_dtype_is_checked():
    with pytest.raises(ScaleRLError, match="compute_dtype"):
        load_config("scalerl", overrides=["model.compute_dtype=fp16"])


def test_prompt_cache_expands_rows_in_any_order():
    from scalerl.trainer.forward import _PromptCache

    for rows in ([0, 0, 0, 1, 1, 1], [1, 0, 1, 0, 0, 1]):  # collate's blocks (broadcast) / any order (index_select)
        cache = _PromptCache(2)
        kv = [torch.randn(2, 3, 5, 4) for _ in range(4)]
        for i, layer in enumerate(cache.layers):
            layer.update(kv[2 * i], kv[2 * i + 1])
        cache.expand(torch.tensor(rows))
        for i, layer in enumerate(cache.layers):
            assert torch.equal(layer.keys, kv[2 * i][rows]) and torch.equal(layer.values, kv[2 * i + 1][rows])
            assert layer.get_seq_length() == 5


def _completion(tokens, versions, forced, gen_lp):
    return Completion(
        id=str(tokens),
        prompt_id="p",
        prompt_tokens=[3, 4],
        tokens=tokens,
        logprobs=gen_lp,
        versions=versions,
        text="",
        finish_reason="eos",
        forced_mask=forced,
    )


def test_logprob_mismatch_counts_trained_tokens_whose_prefix_came_from_the_held_version():
    group = scored(
        Prompt("p", "", ""),
        [
            _completion([5, 6, 7], [3, 3, 3], [False, True, False], [-1.0, 0.0, -1.0]),
            _completion([5, 6, 0], [2, 3, 3], [False] * 3, [-1.0, -1.0, -1.0]),
        ],
        [0.0, 0.0],
    )
    batch = collate([group], pad_id=0)
    trainer = torch.tensor([[-1.5, -9.0, -0.75], [-3.0, -2.0, -1.0]])
    # version 3: completion 0, tokens 0 and 2 (token 1 was forced); completion 1 began under version 2
    assert logprob_mismatch([group], batch, trainer, 3) == (0.5 + 0.25, 2)
    # version 2: completion 1's first token only (its later tokens came from version 3)
    assert logprob_mismatch([group], batch, trainer, 2) == (2.0, 1)
    assert logprob_mismatch([group], batch, trainer, 4) == (0.0, 0)


def _bf16_generation(model, tokenizer, fp32_head: bool):
    from scalerl.assembly.generator import generator_copy
    from scalerl.rollout import Engine

    cfg = load_config(
        "scalerl",
        overrides=[
            "model.compute_dtype=bf16",
            f"model.fp32_head={str(fp32_head).lower()}",
            "rollout.length.type=none",
            "rollout.max_new_tokens=24",
        ],
    )
    engine = Engine(generator_copy(model, cfg), tokenizer, cfg.rollout, fp32_head=fp32_head, seed=3)
    engine.update_weights(model.state_dict(), 0)
    prompts = [Prompt(str(i), f"{i}+{2 * i}=", "") for i in range(4)]
    out = engine.generate(prompts, 4)
    groups = [scored(p, out[4 * i : 4 * i + 4], [0.0] * 4) for i, p in enumerate(prompts)]
    batch = collate(groups, tokenizer.pad_token_id)
    with torch.no_grad():
        logprobs = completion_logprobs(model, batch, cfg.rollout.temperature, fp32_head, compute_dtype="bf16")
    total, n = logprob_mismatch(groups, batch, logprobs, 0)
    return total / n


def test_bf16_trainer_computes_the_bf16_generators_log_probs():
    """Same casts, RoPE in fp32, same attention kernel: with the FP32 head the trainer recomputes
    the generator's log-probs to ~1e-5 (tiny model, measured 8e-6; torch.autocast gave 1e-2)."""
    model, tokenizer = load_model("tiny")
    on, off = _bf16_generation(model, tokenizer, True), _bf16_generation(model, tokenizer, False)
    assert on < 1e-4 and off > 1e-3


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_evaluation_engine_decodes_the_trained_weights(dtype):
    """The loop's evaluation engine decodes the trainer's own model: after a step its log-probs are
    those of a fresh engine on the trained weights (a bf16 model's fp32 head is re-read)."""
    from scalerl.rollout import Engine

    cfg = load_config(
        "scalerl",
        overrides=[
            f"model.dtype={dtype}",
            "optim.lr=1e-2",
            "optim.warmup_steps=0",
            "rollout.length.type=none",
            "rollout.max_new_tokens=12",
        ],
    )
    model, tokenizer = load_model("tiny-random", dtype=dtype)
    evaluation = Engine(model, tokenizer, cfg.rollout, fp32_head=True, greedy=True)
    prompts = [Prompt("a", "12+7=", ""), Prompt("b", "3+45=", "")]
    before = evaluation.generate(prompts, 1)
    train_step(model, Optimizer(model, cfg), random_groups(), cfg, pad_id=0, step=1)
    model.eval()
    after = evaluation.generate(prompts, 1)
    fresh = Engine(model, tokenizer, cfg.rollout, fp32_head=True, greedy=True).generate(prompts, 1)
    assert [c.tokens for c in after] == [c.tokens for c in fresh]
    assert [c.logprobs for c in after] == [c.logprobs for c in fresh]
    assert [c.logprobs for c in after] != [c.logprobs for c in before]  # the step changed the policy


def test_no_deprecated_cache_argument_reaches_transformers():
    """The trainer's shared-prompt forward and the engine pass the KV cache under the name the
    installed transformers takes: no `past_key_values` FutureWarning on any run."""
    import warnings

    from scalerl.rollout import Engine

    model, tok = load_model("tiny-random")
    cfg = load_config("scalerl", overrides=["rollout.max_new_tokens=6", "rollout.length.type=none"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            completion_logprobs(
                model, collate(random_groups(seed=2), pad_id=0), temperature=1.0, fp32_head=True, share_prompt=True
            )
        Engine(model, tok, cfg.rollout, seed=0).generate([Prompt("p", "a1b2+a3b4=", "")], 2)
    assert [str(w.message) for w in caught if "past_key_values" in str(w.message)] == []


def _saved_bytes_and_grads(batch, share: bool, dtype: str, recompute: bool):
    """Bytes autograd keeps after the forward (every tensor saved for the backward, seen by a
    saved-tensors hook: checkpointed layers keep theirs out of its sight), the log-probs and
    the gradients of a fixed random weighting of them."""
    model, _ = load_model("tiny-random")
    model.train()
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logp = completion_logprobs(
            model, batch, 0.7, fp32_head=True, compute_dtype=dtype, share_prompt=share, recompute=recompute
        )
    weights = torch.randn(logp.shape, generator=torch.Generator().manual_seed(1))
    (logp * weights).sum().backward()
    layers = [m for m in model.base_model.modules() if type(m).__name__.endswith("DecoderLayer")]
    assert len(layers) == 4 and all("forward" not in vars(m) for m in layers)  # the wrappers are gone
    return saved[0], logp.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("share,dtype", [(True, "fp32"), (False, "fp32"), (True, "bf16"), (False, "bf16")])
def test_recomputed_layers_give_the_same_logprobs_and_gradients_and_keep_a_tenth(share, dtype):
    """Against the plain forward (which the tests above check against the HF model's logits):
    the replay computes exactly what the forward did (the same kernels and bf16 casts), so the
    log-probs and every gradient agree; the forward keeps under a tenth of the bytes (measured
    3.6-7.4%: each layer's input against all of its intermediates)."""
    batch = collate(random_groups(), pad_id=0)
    plain_bytes, plain_logp, plain = _saved_bytes_and_grads(batch, share, dtype, recompute=False)
    rc_bytes, rc_logp, rc = _saved_bytes_and_grads(batch, share, dtype, recompute=True)
    assert torch.allclose(rc_logp, plain_logp, atol=1e-6, rtol=0)
    assert rc.keys() == plain.keys() and len(plain) == len(list(load_model("tiny-random")[0].parameters()))
    for name, g in plain.items():
        rel = ((rc[name] - g).norm() / g.norm()).item()
        assert rel < 1e-6, f"{name}: relative gradient difference {rel:.2e}"
    assert rc_bytes < plain_bytes / 10


def _most_weight_gradients_alive(monkeypatch, hold: bool) -> int:
    """The most weight-shaped tensors alive at once during a shared-path backward on tiny-random
    (7 weight matrices a layer, 4 layers, and the tied embedding), not counting the parameters
    and their `.grad`; `hold`: the second uses enter as the parameters themselves (the old graph)."""
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode

    from scalerl.trainer import forward

    if hold:
        monkeypatch.setattr(
            forward, "_grad_leaf", lambda p, values: p if values.dtype == p.dtype else p.to(values.dtype)
        )
    model, _ = load_model("tiny-random")
    model.train()
    shapes = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
    batch = collate(random_groups(), pad_id=0)
    assert all(s[0] not in (batch.input_ids.numel(), batch.targets.numel()) for s in shapes)  # no activation alike
    logp = completion_logprobs(model, batch, 0.7, fp32_head=True, share_prompt=True)
    loss = (logp * torch.randn(logp.shape, generator=torch.Generator().manual_seed(1))).sum()
    for p in model.parameters():  # a later micro-batch: `.grad` exists
        p.grad = torch.zeros_like(p)
    own = {p.untyped_storage().data_ptr() for p in model.parameters()} | {
        p.grad.untyped_storage().data_ptr() for p in model.parameters()
    }
    made, most = [], [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if (
                    isinstance(t, torch.Tensor)
                    and tuple(t.shape) in shapes
                    and t.untyped_storage().data_ptr() not in own
                ):
                    made.append(StorageWeakRef(t.untyped_storage()))
            most[0] = max(most[0], len({w.cdata for w in made if not w.expired()}))
            return out

    with Count():
        loss.backward()
    return most[0]


def test_a_weights_second_use_does_not_hold_its_gradients_until_the_backward_ends(monkeypatch):
    """The completion pass's backward runs whole before the prompt pass's; when both uses of a
    weight met in one autograd node, every layer's completion-pass weight gradient stayed alive
    until the prompt pass reached that layer (the model's weights in bytes on SmolLM2).
    Counted with the old graph as the control, in the same test."""
    now = _most_weight_gradients_alive(monkeypatch, hold=False)
    monkeypatch.undo()
    held = _most_weight_gradients_alive(monkeypatch, hold=True)
    assert held >= 20, held  # most of the 28 layer weights at once (26 measured): the old graph holds them
    assert now <= 7, now  # at most one layer's (2 measured)
