"""No-Positive-Resampling and the curriculum sampler."""

import json

import pytest

from doubles import scored
from scalerl.config import CurriculumConfig
from scalerl.errors import ScaleRLError
from scalerl.rl.curriculum import CurriculumExhausted, CurriculumSampler, NoPositiveResampling
from scalerl.types import Completion, Group, Prompt


def group(pid, n_pass, n=10):
    comps = [
        Completion(
            id=f"{pid}/{i}",
            prompt_id=pid,
            prompt_tokens=[1],
            tokens=[2],
            logprobs=[-1.0],
            versions=[0],
            text="",
            finish_reason="eos",
        )
        for i in range(n)
    ]
    return scored(Prompt(pid, "q", "a"), comps, [1.0 if i < n_pass else -1.0 for i in range(n)])


def test_retires_exactly_when_history_reaches_threshold():
    c = NoPositiveResampling(0.9, "cumulative")
    assert c.update(group("p", 8)) is False and not c.is_retired("p")  # 8/10 = 0.80
    assert c.update(group("p", 9)) is False and not c.is_retired("p")  # 17/20 = 0.85
    assert c.update(group("p", 10)) is True and c.is_retired("p")  # 27/30 = 0.90: retired now
    assert c.pass_rate("p") == pytest.approx(0.9)
    assert c.update(group("p", 0)) is False and c.is_retired("p")  # permanent (in-flight group)
    assert c.update(group("q", 9)) is True  # 9/10 in one group
    assert c.update(group("r", 8)) is False
    assert c.n_retired == 2 and c.n_seen == 3


def test_last_pass_rate_retires_on_the_latest_group():
    c = NoPositiveResampling(0.9)  # default: the latest group's rate
    assert c.update(group("p", 2)) is False  # 2/10
    assert c.update(group("p", 8)) is False  # 8/10 (cumulative 10/20)
    assert c.update(group("p", 9)) is True and c.is_retired("p")  # 9/10, though cumulative 19/30 = 0.63
    assert c.pass_rate("p") == pytest.approx(19 / 30)  # the history stays cumulative
    with pytest.raises(ScaleRLError, match="'last' or 'cumulative'"):
        NoPositiveResampling(0.9, "mean")


def test_threshold_one_needs_every_completion_to_pass():
    c = NoPositiveResampling(1.0)
    assert not c.update(group("p", 9))
    c2 = NoPositiveResampling(1.0)
    assert c2.update(group("p", 10))


def test_state_round_trips_through_json():
    c = NoPositiveResampling(0.9, "cumulative")
    for pid, k in [("a", 10), ("b", 3), ("c", 9), ("b", 5)]:
        c.update(group(pid, k))
    state = json.loads(json.dumps(c.state_dict()))
    assert state == {"threshold": 0.9, "history": {"a": [10, 10], "b": [8, 20], "c": [9, 10]}, "retired": ["a", "c"]}
    d = NoPositiveResampling(0.5, "cumulative")
    d.load_state_dict(state)
    assert d.threshold == 0.9 and d.n_retired == 2 and d.is_retired("c") and not d.is_retired("b")
    assert d.update(group("b", 10)) is False  # 18/30 = 0.6 < 0.9
    assert d.pass_rate("b") == pytest.approx(18 / 30)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_threshold_out_of_range(bad):
    with pytest.raises(ScaleRLError, match=rf"threshold must be in \(0, 1\], got {bad}"):
        NoPositiveResampling(bad)


def test_empty_group_is_an_error():
    with pytest.raises(ScaleRLError, match="group of prompt 'p' has no scored completions"):
        NoPositiveResampling().update(Group(Prompt("p", "q", "a"), [], []))


def test_from_config():
    assert NoPositiveResampling.from_config(CurriculumConfig(no_positive_resampling=False)) is None
    assert NoPositiveResampling.from_config(CurriculumConfig(threshold=0.75)).threshold == 0.75


# ---------------------------------------------------------------- sampler
class FiniteTask:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def train_prompt(self, index):
        assert 0 <= index < self.n
        return Prompt(f"t/{index}", f"q{index}", "a")


class EndlessTask:
    def train_prompt(self, index):
        return Prompt(f"e/{index}", f"q{index}", "a")


def retire(c, *ids):
    for pid in ids:
        c.update(group(pid, 10))


def test_finite_sampler_epochs_are_permutations_without_retired():
    c = NoPositiveResampling()
    retire(c, "t/1", "t/3")
    s = CurriculumSampler(FiniteTask(5), c, seed=3)
    ids = [next(s).id for _ in range(9)]
    for epoch in (ids[0:3], ids[3:6], ids[6:9]):
        assert sorted(epoch) == ["t/0", "t/2", "t/4"]
    assert s.epoch == 2 or (s.epoch, s.position) == (3, 0)  # trailing retired ids not yet skipped


def test_finite_sampler_stops_after_epochs():
    s = CurriculumSampler(FiniteTask(4), None, seed=0, epochs=2)
    assert len(list(s)) == 8


def test_sampler_state_round_trip():
    c = NoPositiveResampling()
    retire(c, "t/2")
    s = CurriculumSampler(FiniteTask(6), c, seed=11)
    for _ in range(4):
        next(s)
    state = json.loads(json.dumps(s.state_dict()))
    expected = [next(s).id for _ in range(7)]
    s2 = CurriculumSampler(FiniteTask(6), c, seed=0)
    s2.load_state_dict(state)
    assert [next(s2).id for _ in range(7)] == expected


def test_seeds_give_different_orders():
    orders = {tuple(p.id for p, _ in zip(CurriculumSampler(FiniteTask(20), seed=k), range(20))) for k in range(3)}
    assert len(orders) == 3


def test_all_retired_finite_task_is_a_clear_error():
    c = NoPositiveResampling()
    s = CurriculumSampler(FiniteTask(3), c, seed=0)
    assert next(s).id.startswith("t/")
    retire(c, "t/0", "t/1", "t/2")
    with pytest.raises(CurriculumExhausted, match=r"all 3 training prompts are retired"):
        next(s)


def test_endless_sampler_skips_retired_and_gives_up_when_saturated():
    c = NoPositiveResampling()
    retire(c, "e/0", "e/2")
    s = CurriculumSampler(EndlessTask(), c)
    assert [next(s).id for _ in range(3)] == ["e/1", "e/3", "e/4"]
    retire(c, *(f"e/{i}" for i in range(5, 20)))
    s = CurriculumSampler(EndlessTask(), c, max_skips=10)
    s.load_state_dict({"seed": 0, "epoch": 0, "position": 5})
    with pytest.raises(CurriculumExhausted, match="10 consecutive"):
        next(s)


# ---------------------------------------------------------------- in a real run
def test_retired_prompts_never_drawn_again_in_a_run_over_epochs_and_resume(tmp_path, monkeypatch, one_torch_thread):
    """Through the training loop (tiny-random, parity reward): a pool of 20 arith prompts, several
    epochs, a resume; every prompt drawn is checked against the retirements made before it."""
    from doubles import tiny_random_components
    from scalerl.configure import load_config
    from scalerl.loop import train
    from scalerl.run.metrics import read_rows
    from scalerl.transport import window as transport

    events = []  # ("draw" | "retire", prompt id), in order
    next_prompt, update = transport.LockedSampler.next, NoPositiveResampling.update

    def recording_next(self):
        p = next_prompt(self)
        events.append(("draw", p.id))
        return p

    def recording_update(self, group):
        retired = update(self, group)
        if retired:
            events.append(("retire", group.prompt.id))
        return retired

    monkeypatch.setattr(transport.LockedSampler, "next", recording_next)
    monkeypatch.setattr(NoPositiveResampling, "update", recording_update)
    common = [
        "model.name=tiny-random",
        "task.train_size=20",
        "batch.prompts=4",
        "batch.generations=4",
        "rollout.max_new_tokens=8",
        "rollout.length.type=none",
        "rollout.batch_slots=4",
        "eval.every=100",
        "eval.prompts=2",
        "eval.samples=1",
        "run.checkpoint_every=2",
        "pipeline.transport=thread",
        "pipeline.k=1",
        "run.threads=1",
        "curriculum.threshold=1.0",
        "run.seed=1",
    ]
    cfg = load_config("scalerl", overrides=common + ["run.max_steps=5"])
    train(cfg, tmp_path, comps=tiny_random_components(cfg), progress=False)
    first = list(events)
    cfg = load_config("scalerl", overrides=common + ["run.max_steps=10"])
    tr = train(cfg, tmp_path, resume=True, comps=tiny_random_components(cfg), progress=False)
    retired_at_resume = set(tr.curriculum.state_dict()["retired"]) & {i for k, i in first if k == "retire"}
    retired: set[str] = set()
    for kind, pid in events:
        if kind == "retire":
            retired.add(pid)
        else:
            assert pid not in retired, f"{pid} drawn after it was retired"
    assert retired_at_resume and not retired_at_resume & {i for k, i in events[len(first) :] if k == "draw"}
    rows = [r for r in read_rows(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == list(range(1, 11))
    assert {r["curriculum/pool_size"] for r in rows} == {20} and rows[-1]["curriculum/epoch"] >= 2
    assert rows[-1]["curriculum/retired"] == len(tr.curriculum.state_dict()["retired"]) > 0
