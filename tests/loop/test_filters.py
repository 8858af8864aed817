"""The zero-variance filter and dynamic sampling decide on correctness, not on the shaped reward.

DAPO keeps a group iff 0 < #correct < G. With a length penalty the reward of a correct answer
depends on its length, so an all-correct group of unequal lengths has reward variance; it must
still be dropped. Expected values are worked out by hand from the penalty formula (DAPO Eq. 13).
"""

from __future__ import annotations

import pytest

from scalerl.batching import BatchFiller, zero_variance_filter
from scalerl.configure import load_config
from scalerl.types import Completion, Group, Prompt, Score

# penalty window: max_len 6, tolerance 4 -> no penalty up to 2 tokens, -(L - 2) / 4 up to 6, -1 beyond
PENALTY = {2: 0.0, 3: -0.25, 4: -0.5, 6: -1.0, 8: -1.0}


def group(pid: str, answers: list[tuple[bool, int]]) -> Group:
    """A scored group from (passed, length) pairs; reward = +-1 plus the length penalty above."""
    comps = [
        Completion(
            id=f"{pid}/{i}",
            prompt_id=pid,
            prompt_tokens=[1],
            tokens=[2] * n,
            logprobs=[-1.0] * n,
            versions=[0] * n,
            text="",
            finish_reason="eos",
            forced_mask=[False] * n,
        )
        for i, (ok, n) in enumerate(answers)
    ]
    return Group(Prompt(pid, "q", "a"), comps, [Score((1.0 if ok else -1.0) + PENALTY[n], ok) for ok, n in answers])


ALL_CORRECT_UNEQUAL = group("long", [(True, 2), (True, 3), (True, 4), (True, 6)])  # rewards 1, .75, .5, 0
ALL_WRONG_UNEQUAL = group("wrong", [(False, 2), (False, 8), (False, 3), (False, 2)])  # -1, -2, -1.25, -1
MIXED = group("mixed", [(True, 6), (False, 2), (False, 2), (False, 2)])  # 0, -1, -1, -1
MIXED_EQUAL_LENGTHS = group("mixed2", [(True, 2), (False, 2), (True, 2), (True, 2)])


def test_rewards_of_the_groups_vary_as_intended():
    assert ALL_CORRECT_UNEQUAL.rewards == [1.0, 0.75, 0.5, 0.0]  # reward variance from length alone
    assert ALL_WRONG_UNEQUAL.rewards == [-1.0, -2.0, -1.25, -1.0]


def test_filter_drops_groups_of_equal_correctness_whatever_their_rewards():
    kept, dropped = zero_variance_filter([ALL_CORRECT_UNEQUAL, MIXED, ALL_WRONG_UNEQUAL, MIXED_EQUAL_LENGTHS])
    assert [g.prompt.id for g in kept] == ["mixed", "mixed2"] and dropped == 2


def test_dapo_dynamic_sampling_keeps_drawing_past_all_correct_unequal_length_groups():
    cfg = load_config("dapo", overrides=["batch.prompts=2", "batch.generations=4"])
    f = BatchFiller.from_config(cfg)
    assert (f.zero_variance, f.dynamic_sampling) == (True, True)
    offered = [ALL_CORRECT_UNEQUAL, MIXED, ALL_WRONG_UNEQUAL, MIXED_EQUAL_LENGTHS]
    joined = [f.add(g) for g in offered]
    assert joined == [False, True, False, True] and f.full
    assert f.metrics() == {
        "batch/groups": 2.0,
        "batch/drawn": 4.0,
        "batch/zero_variance_dropped": 2.0,
        "batch/exhausted": 0.0,
        "batch/extra_prompts": 2.0,
        "batch/empty": 0.0,
    }


@pytest.mark.parametrize(
    "recipe,kept", [("magistral", ["mixed"]), ("scalerl", ["mixed"]), ("grpo", ["long", "mixed", "wrong"])]
)
def test_each_recipe_filters_on_correctness_or_not_at_all(recipe, kept):
    cfg = load_config(recipe, overrides=["batch.prompts=3"])
    f = BatchFiller.from_config(cfg)
    for g in (ALL_CORRECT_UNEQUAL, MIXED, ALL_WRONG_UNEQUAL):
        f.add(g)
    assert f.full and [g.prompt.id for g in f.groups] == kept


def test_a_completion_without_its_score_is_an_error():
    g = group("x", [(True, 2), (False, 2)])
    with pytest.raises(ValueError, match=r"group 'x': 2 completions but 1 scores"):
        Group(g.prompt, g.completions, g.scores[:1])


# ---------------------------------------------------------------- through the training loop
def _run_dapo(tmp_path, monkeypatch, extra: list[str]) -> tuple[list[Group], list[dict]]:
    """DAPO on the real loop with a forced reward: every completion of an even-numbered prompt is
    correct, the others pass on token parity; lengths 3..8 under the penalty window above, so the
    even prompts' groups are all correct with length-shaped, unequal rewards. Returns the groups
    each optimizer step trained on, and the metrics rows."""
    from doubles import FakeTask, fake_build, parity_reward
    from scalerl import loop as train_mod
    from scalerl.assembly.generator import Components
    from scalerl.models import load_model
    from scalerl.run.metrics import read_rows
    from scalerl.trainer import state as state_mod

    def forced_reward(prompt, completion):
        if int(prompt.id.rsplit("/", 1)[1]) % 2 == 0:
            return Score(1.0, True)
        return parity_reward(prompt, completion)

    sets = [
        "model.name=tiny-random",
        "batch.prompts=2",
        "batch.generations=4",
        "rollout.max_new_tokens=12",
        "rollout.length.tolerance=4",
        "rollout.length.max_len=6",
        "run.max_steps=4",
        "eval.every=100",
        "eval.prompts=2",
        "eval.samples=2",
        "optim.warmup_steps=1",
        "pipeline.transport=thread",
        "run.threads=1",
        *extra,
    ]
    cfg = load_config("dapo", overrides=sets)
    model, tokenizer = load_model("tiny-random")

    comps = Components(model, tokenizer, FakeTask(), forced_reward, fake_build(cfg, []))
    trained: list[Group] = []
    real = state_mod.train_step

    def recording_step(model, optim, groups, *args, **kwargs):
        trained.extend(groups)
        return real(model, optim, groups, *args, **kwargs)

    monkeypatch.setattr(state_mod, "train_step", recording_step)
    tmp_path.mkdir()
    train_mod.train(cfg, tmp_path, comps=comps, progress=False)
    return trained, [r for r in read_rows(tmp_path / "metrics.jsonl") if r["kind"] == "train"]


def _all_correct_unequal(g: Group) -> bool:
    return all(s.passed for s in g.scores) and len(set(g.rewards)) > 1


@pytest.mark.usefixtures("one_torch_thread")
def test_dapo_trains_no_all_correct_group_even_when_lengths_make_rewards_differ(tmp_path, monkeypatch):
    trained, rows = _run_dapo(tmp_path / "on", monkeypatch, [])
    assert len(rows) == 4 and trained
    assert all(0 < g.passes < 4 for g in trained)
    assert sum(r["batch/zero_variance_dropped"] for r in rows) >= 1
    # the same run with the filter off trains such groups: the forced reward does produce them
    trained_off, rows_off = _run_dapo(
        tmp_path / "off", monkeypatch, ["filter.zero_variance=false", "filter.dynamic_sampling=false"]
    )
    assert any(_all_correct_unequal(g) for g in trained_off)
    assert all(r["batch/zero_variance_dropped"] == 0 for r in rows_off)
