"""The optimizer step: tensors built from groups, micro-batching that leaves the loss unchanged."""

import dataclasses

import pytest
import torch

from doubles import scored
from scalerl.configure import load_config
from scalerl.models import load_model
from scalerl.trainer import step as step_mod
from scalerl.trainer.step import Optimizer, collate, micro_batches, train_step
from scalerl.types import Prompt
from train_helpers import completion, step_groups

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_collate_places_completion_tokens_after_their_prompt():
    g = scored(
        Prompt("a", "", ""),
        [completion("a", 0, [7, 8, 9], [4, 5], forced=[False, True]), completion("a", 1, [7, 8, 9], [6])],
        [1.0, -1.0],
    )
    b = collate([g], pad_id=0)
    assert b.input_ids.tolist() == [[7, 8, 9, 4, 5], [7, 8, 9, 6, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    # hidden state at position 2 (last prompt token) predicts the first completion token
    assert b.positions.tolist() == [[2, 3], [2, 0]]
    assert b.targets.tolist() == [[4, 5], [6, 0]]
    assert b.mask.tolist() == [[1.0, 0.0], [1.0, 0.0]]  # forced token and padding masked
    assert b.gen_logprobs.tolist() == [[-1.0, 0.0], [-1.0, 0.0]]
    assert b.prompt_ids.tolist() == [0, 0]


def test_micro_batches_pack_similar_lengths_and_cover_every_group():
    groups = [
        scored(Prompt(str(i), "", ""), [completion(str(i), j, [1], [2] * n) for j in range(2)], [1.0, 1.0])
        for i, n in enumerate([50, 3, 48, 4])
    ]
    parts = micro_batches(groups, max_tokens=2 * 2 * 51)
    assert sorted(i for p in parts for i in p) == [0, 1, 2, 3]
    assert parts == [[1, 3], [2, 0]]


# tiny-random (4 layers, hidden 128, MLP 512, 4 heads, vocab 102, fp32), by hand from
# `ActivationCost`'s formula: a token 4 x (8 x 128 + 4 x 512) x 4 B, a (query, key) pair
# 4 x 4 heads x 2 x 4 B, a trained token 102 x 4 B.
TINY_TOKEN, TINY_PAIR, TINY_TRAINED = 49_152, 128, 408
# A group of 2 completions of 6 tokens after a 10-token prompt, its prompt run once (shared):
# 10 + 2 x 6 = 22 tokens, 10 x 10 + 12 x (10 + 6) = 292 pairs, 12 trained tokens.
GROUP_BYTES = 22 * TINY_TOKEN + 292 * TINY_PAIR + 12 * TINY_TRAINED  # 1,123,616 B, 1.07 MiB


def _same_groups(P=6):
    """P groups of GROUP_BYTES each, every one with a trainable signal."""
    return [
        scored(
            Prompt(str(p), "", ""), [completion(str(p), j, [5 + p] * 10, [7 + j] * 6) for j in range(2)], [1.0, -1.0]
        )
        for p in range(P)
    ]


def test_activation_cost_of_the_tiny_model_is_the_hand_computed_one():
    model, _ = load_model("tiny-random")
    assert step_mod.ActivationCost.of(model) == step_mod.ActivationCost(TINY_TOKEN, TINY_PAIR, TINY_TRAINED)


@pytest.mark.parametrize("budget_mb,per_part", [(2.2, 2), (3.3, 3), (1.0, 1), (100.0, 6)])
def test_the_config_activation_budget_bounds_each_micro_batch(budget_mb, per_part):
    """2 groups take 2,247,232 B (2.14 MiB) and 3 take 3,370,848 B (3.21 MiB); a group alone
    (1.07 MiB) is over a 1 MiB budget and so runs by itself."""
    assert 2 * GROUP_BYTES <= 2.2 * 2**20 < 3 * GROUP_BYTES <= 3.3 * 2**20 < 4 * GROUP_BYTES
    assert 2**20 < GROUP_BYTES
    cost = step_mod.ActivationCost(TINY_TOKEN, TINY_PAIR, TINY_TRAINED)
    groups = _same_groups()
    parts = micro_batches(groups, shared=True, activations=cost, max_bytes=budget_mb * 2**20)
    assert [len(p) for p in parts] == [per_part] * (6 // per_part)
    cfg = load_config("scalerl", overrides=[f"batch.activation_budget_mb={budget_mb}", "optim.lr=1e-30"])
    model, _ = load_model("tiny-random")
    row = train_step(model, Optimizer(model, cfg), groups, cfg, pad_id=0, step=1)
    assert row["train/micro_batches"] == 6 // per_part


@pytest.mark.parametrize("aggregation", ["prompt", "sample", "token"])
def test_micro_batching_gives_the_one_batch_loss_and_gradient(aggregation, monkeypatch):
    cfg = load_config("scalerl", overrides=[f"loss.aggregation={aggregation}", "optim.lr=1e-30"])
    groups = step_groups()
    results = []
    for budget in (10**9, 1):  # one batch; one group per micro-batch
        monkeypatch.setattr(step_mod, "MICRO_BATCH_TOKENS", budget)
        model, _ = load_model("tiny-random")
        row = train_step(model, Optimizer(model, cfg), groups, cfg, pad_id=0, step=1)
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results.append((row, grads))
    (one, g1), (many, g2) = results
    assert one["train/micro_batches"] == 1 and many["train/micro_batches"] == len(groups)
    assert many["train/loss"] == pytest.approx(one["train/loss"], rel=1e-5, abs=1e-7)
    assert many["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-4)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def _groups_with_untrainable_completions():
    """_random_groups plus a completion that is all injected tokens (no trainable token) and a
    group whose every completion is so (it counts as no unit in any aggregation)."""
    groups = step_groups(P=5)
    c = groups[0].completions[2]
    groups[0].completions[2] = dataclasses.replace(c, forced_mask=[True] * len(c.tokens))
    dead = [completion("dead", g, [9, 9, 9], [11, 12], forced=[True, True]) for g in range(4)]
    return groups + [scored(Prompt("dead", "", ""), dead, [(1.0, -1.0)[g % 2] for g in range(4)])]


def _two_workers(groups, cfg):
    """shard_step on two model copies in two threads, with an in-process all-reduce."""
    import threading

    from scalerl.trainer.step import plan_shards, shard_step

    shards = plan_shards(groups, cfg, 2)
    barrier, flats, rows, models = threading.Barrier(2), [None, None], [None, None], [None, None]

    def reduce_for(rank):
        def reduce(flat):
            flats[rank] = flat.clone()
            barrier.wait()
            total = flats[0] + flats[1]
            barrier.wait()  # both have read before either writes its next tensor (gradients, then counters)
            flat.copy_(total)

        return reduce

    for rank in range(2):  # loaded one after the other: the random init draws from the global RNG
        models[rank], _ = load_model("tiny-random")

    def run(rank):
        rows[rank] = shard_step(
            models[rank], Optimizer(models[rank], cfg), shards[rank], cfg, 0, 1, reduce=reduce_for(rank)
        )

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rows, models


@pytest.mark.parametrize("aggregation", ["prompt", "sample", "token"])
def test_one_step_for_one_or_two_workers_and_any_micro_batch_size(aggregation, monkeypatch):
    """Loss and gradients equal whether the batch is one micro-batch, one group per micro-batch,
    or two data-parallel workers (one function, one weighting rule), untrainable completions included."""
    cfg = load_config("scalerl", overrides=[f"loss.aggregation={aggregation}", "optim.lr=1e-30"])
    groups = _groups_with_untrainable_completions()
    model, _ = load_model("tiny-random")
    one = train_step(model, Optimizer(model, cfg), groups, cfg, pad_id=0, step=1)
    g_one = [p.grad.clone() for p in model.parameters()]
    monkeypatch.setattr(step_mod, "MICRO_BATCH_TOKENS", 1)
    rows, models = _two_workers(groups, cfg)
    assert rows[0]["train/loss"] == rows[1]["train/loss"] == pytest.approx(one["train/loss"], rel=1e-5, abs=1e-7)
    assert rows[0]["tokens/trained_step"] == one["tokens/trained_step"]
    for m in models:
        for a, p in zip(g_one, m.parameters()):
            torch.testing.assert_close(p.grad, a, rtol=1e-4, atol=1e-7)
    # units by hand: 5 live prompts; 5 x 4 completions less the one without a trainable token
    from scalerl.trainer.step import aggregation_units

    assert aggregation_units(groups, "prompt") == 5 and aggregation_units(groups, "sample") == 19


# The recomputed cost (batch.recompute), by hand for tiny-random (4 K/V heads of width 32): a
# token keeps every layer's input and the prompt K/V it reads, 4 x (128 + 2 x 4 x 32) x 4 B,
# plus one layer's activations rebuilt at a time, (8 x 128 + 4 x 512) x 4 B; a pair one layer's
# 4 heads x 2 x 4 B; a trained token the head's 102 x 4 B as before.
TINY_RC_TOKEN, TINY_RC_PAIR = 4 * (128 + 2 * 4 * 32) * 4 + (8 * 128 + 4 * 512) * 4, 4 * 2 * 4
GROUP_RC_BYTES = 22 * TINY_RC_TOKEN + 292 * TINY_RC_PAIR + 12 * TINY_TRAINED  # 419,744 B, 0.40 MiB


def test_recomputed_activation_cost_of_the_tiny_model_is_the_hand_computed_one():
    model, _ = load_model("tiny-random")
    assert step_mod.ActivationCost.of(model, recompute=True) == step_mod.ActivationCost(
        TINY_RC_TOKEN, TINY_RC_PAIR, TINY_TRAINED
    )


# (mode, budget MiB) -> micro-batch sizes and how many recompute. `auto` recomputes exactly the
# micro-batches a group alone puts over the budget (1.07 MiB > 1.0); `always` packs by the
# recomputed cost: 2 groups 0.80 MiB fit 1.0 MiB, 3 (1.20 MiB) do not.
@pytest.mark.parametrize(
    "mode,budget_mb,sizes,recomputed",
    [("auto", 1.0, [1] * 6, 6), ("auto", 2.2, [2] * 3, 0), ("never", 1.0, [1] * 6, 0), ("always", 1.0, [2] * 3, 3)],
)
def test_recompute_plan_follows_the_mode_and_the_budget(mode, budget_mb, sizes, recomputed):
    assert 2 * GROUP_RC_BYTES <= 2**20 < 3 * GROUP_RC_BYTES and GROUP_BYTES > 2**20
    cfg = load_config(
        "scalerl", overrides=[f"batch.recompute={mode}", f"batch.activation_budget_mb={budget_mb}", "optim.lr=1e-30"]
    )
    model, _ = load_model("tiny-random")
    groups = _same_groups()
    plan = step_mod.plan_micro_batches(groups, cfg, model)
    assert [len(p) for p, _ in plan] == sizes and sum(rc for _, rc in plan) == recomputed
    assert sorted(i for p, _ in plan for i in p) == list(range(6))
    row = train_step(model, Optimizer(model, cfg), groups, cfg, pad_id=0, step=1)
    assert row["train/micro_batches"] == len(sizes) and row["train/recomputed"] == recomputed


def test_recompute_always_is_refused_for_a_model_without_checkpointable_layers(monkeypatch):
    cfg = load_config("scalerl", overrides=["batch.recompute=always"])
    model, _ = load_model("tiny-random")
    monkeypatch.setattr(step_mod, "can_recompute", lambda m: False)
    with pytest.raises(step_mod.ScaleRLError, match="batch.recompute=always: .*GradientCheckpointingLayer"):
        step_mod.plan_micro_batches(_same_groups(), cfg, model)
    auto = load_config("scalerl", overrides=["batch.activation_budget_mb=1.0"])
    assert [rc for _, rc in step_mod.plan_micro_batches(_same_groups(), auto, model)] == [False] * 6


def test_the_default_activation_budget_is_512_mib_on_a_cpu_and_a_twentieth_of_what_is_available(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(step_mod.psutil, "virtual_memory", lambda: type("VM", (), {"available": 24 * 2**30})())
    assert step_mod.activation_budget(None, cpu) == 512 * 2**20
    monkeypatch.setattr(step_mod.psutil, "virtual_memory", lambda: type("VM", (), {"available": 4 * 2**30})())
    assert step_mod.activation_budget(None, cpu) == 4 * 2**30 // 20  # 204.8 MiB
    assert step_mod.activation_budget(100.0, cpu) == 100 * 2**20


# SmolLM2-135M's shape (fp32; 30 layers, hidden 576, MLP 1,536, 9 heads, 3 K/V heads, 49,152
# tokens): a group of a 301-token prompt and 8 completions of 13 tokens keeps, by hand,
# 405 tokens x 30 x (8 x 576 + 4 x 1,536) x 4 B + (301^2 + 104 x 314) pairs x 30 x 9 x 2 x 4 B
# + 104 trained x 49,152 x 4 B = 809,229,552 B (771.7 MiB): over the default 512 MiB, under 1,024.
SMOL_GROUP_BYTES = 405 * 30 * (8 * 576 + 4 * 1536) * 4 + (301**2 + 104 * 314) * 30 * 9 * 2 * 4 + 104 * 49152 * 4


def test_a_real_models_group_is_recomputed_at_the_default_budget_and_not_at_1024(monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    monkeypatch.setattr(step_mod.psutil, "virtual_memory", lambda: type("VM", (), {"available": 24 * 2**30})())
    config = LlamaConfig(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        tie_word_embeddings=True,
    )
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    group = scored(Prompt("p", "", ""), [completion("p", j, [5] * 301, [6] * 13) for j in range(8)], [1.0, -1.0] * 4)
    cost = step_mod.ActivationCost.of(model)
    assert cost.bytes(*step_mod.micro_batch_sizes([group], shared=True)) == SMOL_GROUP_BYTES
    default = load_config("scalerl")
    assert default.batch.activation_budget_mb is None
    assert step_mod.plan_micro_batches([group, group], default, model) == [([0], True), ([1], True)]
    wide = load_config("scalerl", overrides=["batch.activation_budget_mb=1024"])
    assert step_mod.plan_micro_batches([group, group], wide, model) == [([0], False), ([1], False)]
