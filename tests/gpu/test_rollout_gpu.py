"""The rollout engine on CUDA: the fixed-shape loop's CUDA graphs against the eager path, and log-probs against a
fresh forward (tests/rollout: the same on the CPU)."""

from __future__ import annotations

import pytest
import torch

from rollout_helpers import LONG_AND_SHORT, MODELS, TEXTS, char_tokenizer, prompts, smollm2_shape, tiny_llama
from scalerl.config import NoLengthControl, RolloutConfig
from scalerl.rollout import Engine

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tok():
    return char_tokenizer()


# ---------------------------------------------------------------- the same on CUDA, with CUDA graphs
@pytest.mark.gpu
@pytest.mark.parametrize("name", list(MODELS))
def test_cuda_graphs_greedy_equal_eager(tok, name):
    model = MODELS[name](len(tok)).cuda()
    cfg = RolloutConfig(max_new_tokens=20, batch_slots=3, length=NoLengthControl())
    static = Engine(model, tok, cfg, greedy=True)
    assert static.decode == "static" and static._loop.capture
    a = static.generate(prompts(LONG_AND_SHORT), n=2)
    eager = Engine(model, tok, cfg.model_copy(update={"decode": "eager"}), greedy=True)
    b = eager.generate(prompts(LONG_AND_SHORT), n=2)
    assert [c.tokens for c in a] == [c.tokens for c in b]
    assert static._loop._graphs  # the steps ran as captured graphs
    again = static.generate(prompts(LONG_AND_SHORT), n=2)  # graphs and buffers reused across calls
    assert [c.tokens for c in again] == [c.tokens for c in a]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-4), (torch.bfloat16, 0.05)])
def test_cuda_graphs_sampled_logprobs_and_reused_slots(tok, dtype, atol):
    model = smollm2_shape(len(tok)).cuda().to(dtype)
    cfg = RolloutConfig(temperature=1.0, max_new_tokens=16, batch_slots=2, length=NoLengthControl())
    engine = Engine(model, tok, cfg, fp32_head=True, seed=3)
    for c in engine.generate(prompts(LONG_AND_SHORT), n=2):
        ids = torch.tensor([c.prompt_tokens + c.tokens], device="cuda")
        with torch.no_grad():
            hidden = model.model(ids).last_hidden_state[0, len(c.prompt_tokens) - 1 : -1]
        ref = torch.log_softmax(hidden.float() @ model.lm_head.weight.float().T, -1)
        ref = ref.gather(-1, ids[0, len(c.prompt_tokens) :, None])[:, 0].cpu()
        assert (torch.tensor(c.logprobs) - ref).abs().mean() < atol, c.id
    greedy = Engine(model, tok, cfg, greedy=True)
    together = greedy.generate(prompts(LONG_AND_SHORT), n=1)
    alone = [Engine(model, tok, cfg, greedy=True).generate(prompts([t]), n=1)[0] for t in LONG_AND_SHORT]
    assert [c.tokens for c in together] == [c.tokens for c in alone]


@pytest.mark.gpu
def test_cuda_graphs_follow_in_flight_weight_updates(tok, monkeypatch):
    """Weights copied in place between replays: the tokens after the update carry its version and
    equal what the new weights give over the old K/V (a stale graph would ignore the copy)."""
    old, new = tiny_llama(len(tok), seed=3).cuda(), tiny_llama(len(tok), seed=4).cuda()
    cfg = RolloutConfig(max_new_tokens=14, batch_slots=2, length=NoLengthControl())
    engine = Engine(old, tok, cfg, greedy=True, ignore_eos=True)
    calls = iter(range(1, 10**6))
    real_step = engine._step
    monkeypatch.setattr(
        engine,
        "_step",
        lambda s, c: (engine.update_weights(new.state_dict(), 7) if next(calls) == 5 else None, real_step(s, c))[1],
    )
    out = engine.generate(prompts(["12+7=", "What is 3*4?"]), n=1)
    for c in out:
        assert c.versions == [0] * 5 + [7] * 9


@pytest.mark.gpu
def test_logprobs_equal_fresh_forward_on_cuda(tok):
    model = tiny_llama(len(tok), seed=1).cuda()
    cfg = RolloutConfig(temperature=0.7, max_new_tokens=16, batch_slots=3, length=NoLengthControl())
    out = Engine(model, tok, cfg, seed=3).generate(prompts(TEXTS), n=2)
    for c in out:
        ids = torch.tensor([c.prompt_tokens + c.tokens], device="cuda")
        with torch.no_grad():
            logits = model(ids).logits[0, len(c.prompt_tokens) - 1 : -1].float() / 0.7
        ref = torch.log_softmax(logits, -1).gather(-1, ids[0, len(c.prompt_tokens) :, None])[:, 0].cpu()
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4)
