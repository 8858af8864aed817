"""The Ray backend on a local CPU Ray: generator actors, an actor killed mid-run, data parallelism.

One Ray instance for the module (num_cpus=2, no dashboard), shut down at the end.
"""

import copy
import json
import threading
import time

import pytest
import torch

pytest.importorskip("ray", reason="the Ray backend is the optional extra scalerl[ray]")

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError

from doubles import FakeTask, scored, tiny_random_components
from ray_helpers import check_broadcast_publish, local_ray, record_trained, small_cfg, train_with_a_killer, wait_for  # noqa: F401  (local_ray: the module's Ray, an autouse fixture)
from scalerl.configure import load_config
from scalerl.loop import train
from scalerl.rl.curriculum import CurriculumSampler
from scalerl.run.checkpoint import latest_checkpoint
from scalerl.run.metrics import read_rows
from scalerl.trainer import state as state_mod
from scalerl.trainer.data_parallel import start_workers
from scalerl.trainer.step import Optimizer, aggregation_units, plan_shards, train_step
from scalerl.transport import ray as backend
from scalerl.transport.ray import ShardSampler, merge_sampler_states, split_sampler_state
from scalerl.types import Completion, Group, Prompt


def test_two_generator_actors_train_with_bounded_staleness_and_resume(tmp_path, monkeypatch):
    cfg = small_cfg(["run.max_steps=3", "run.checkpoint_every=1"])
    trained, prompts = record_trained(monkeypatch)
    train(cfg, tmp_path, comps=tiny_random_components(cfg), progress=False)
    first = len(trained)
    state = json.loads((latest_checkpoint(tmp_path) / "state.json").read_text())
    assert [s["drawn"] for s in state["sampler"]["ranks"]] and len(state["sampler"]["ranks"]) == 2
    cfg.run.max_steps = 9  # long enough for both actors to deliver: the first to start may fill the
    train(cfg, tmp_path, resume=True, comps=tiny_random_components(cfg), progress=False)  # window alone

    rows = [r for r in read_rows(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == list(range(1, 10))
    assert max(r["staleness/max"] for r in rows) <= 2
    assert max(r["ray/completions/gen0"] for r in rows) > 0 and max(r["ray/completions/gen1"] for r in rows) > 0
    assert all(r["ray/queue_depth"] >= 0 and r["ray/gen_idle_seconds"] >= 0 for r in rows)
    assert len(trained) == len(set(trained)) > 0
    # engine ids end in "@<seed>.<serial>", seed = (base * 64 + rank) * 1024 + start: the trained
    # completions come from the two ranks (which of them generated the first draws depends on
    # the machine's load), and the resumed actors (base 3) have seeds of their own
    seeds = {int(cid.rsplit("@", 1)[1].split(".")[0]) for cid in trained}
    assert {(s // 1024) % 64 for s in seeds} <= {0, 1}
    assert {s // (64 * 1024) for s in seeds} == {0, 3}
    assert first < len(trained)
    # the resumed run carries on its actors' shards: no prompt is trained in both halves
    assert len(prompts) == len(set(prompts))
    assert rows[-1]["ray/restarts"] == 0


def test_killed_generator_restarts_and_no_completion_is_trained_twice(tmp_path, monkeypatch):
    # the paper's fixed window (no slow start of pipeline.max_kl): actor 0 holds leases from the first steps
    cfg = small_cfg(["run.max_steps=8", "ray.placement=pack", "pipeline.max_kl=null"])
    sources = []

    delivered: list[str] = []
    delivered_ids: list[str] = []

    class Recorded(backend.RayRollouts):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sources.append(self)

        def get(self, timeout=None):
            group = super().get(timeout)
            delivered.append(group.prompt.id)
            delivered_ids.extend(c.id for c in group.completions)
            return group

    killed: dict = {}

    def kill_with_groups_in_flight() -> None:
        source = sources[0]
        deadline = time.monotonic() + 60
        while not killed.get("in_flight") and time.monotonic() < deadline:  # while actor 0 is decoding
            killed["in_flight"] = ray.get(source.hub.open_leases.remote(0))
        ray.kill(source.workers[0], no_restart=False)
        deadline = time.monotonic() + 600  # a restart imports torch and builds the model: minutes on a loaded machine
        while time.monotonic() < deadline:  # wait for Ray to bring it back: a fresh process, incarnation 2
            try:
                killed["back"] = ray.get(source.workers[0].ping.remote(), timeout=60)
            except (ActorUnavailableError, GetTimeoutError):
                pass
            if killed.get("back") == (0, 2):
                return
            time.sleep(0.2)

    trained, rows = train_with_a_killer(cfg, tmp_path, monkeypatch, Recorded, kill_with_groups_in_flight)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert killed["back"] == (0, 2)  # rank 0, second incarnation
    assert rows[-1]["ray/restarts"] == 1
    assert len(trained) == len(set(trained))
    assert len(delivered) == len(set(delivered))  # no group delivered twice
    # the groups the dead actor had in flight were regenerated (by the new incarnation) and delivered
    assert killed["in_flight"] and set(killed["in_flight"]) <= set(delivered)
    assert rows[-1]["ray/regenerated_groups"] >= 1
    assert any(cid.rsplit("@", 1)[1].startswith("2.") for cid in delivered_ids)  # engine seed of (rank 0, start 2)
    assert max(r["staleness/max"] for r in rows) <= 2
    groups = ray.util.placement_group_table().values()
    assert [g["strategy"] for g in groups] == ["PACK"] and all(g["state"] == "REMOVED" for g in groups)


class _Endless:
    """An endless task (no `__len__`): the sampler draws indices 0, 1, 2, ... in order."""

    def train_prompt(self, index: int) -> Prompt:
        return FakeTask().train_prompt(index)


def test_shards_are_disjoint_and_cover_the_stream():
    task = _Endless()
    shards = [
        ShardSampler(CurriculumSampler(task, None, seed=0), r, 3, {"seed": 0, "epoch": 0, "position": 0})
        for r in range(3)
    ]
    drawn = [[s.next().id for _ in range(4)] for s in shards]
    assert drawn[1] == ["fake/train/1", "fake/train/4", "fake/train/7", "fake/train/10"]
    assert sorted(int(i.rsplit("/", 1)[1]) for ids in drawn for i in ids) == list(range(12))
    merged = merge_sampler_states([s.state_dict() for s in shards])
    assert merged["position"] == 12  # rank 2 drew index 11 last: the furthest position is 12
    assert split_sampler_state(merged, 3)[1]["drawn"] == 11  # same world: each actor resumes its own shard
    assert split_sampler_state(merged, 2) == [{"seed": 0, "epoch": 0, "position": 12, "drawn": 0}] * 2


# ------------------------------------------------------------------ data parallelism
def _completion(pid: str, i: int, tokens: list[int], forced: int = 0) -> Completion:
    t = len(tokens)
    return Completion(
        id=f"{pid}/{i}",
        prompt_id=pid,
        prompt_tokens=[5, 6, 7][: 1 + i % 3],
        tokens=tokens,
        logprobs=[-3.0 + 0.1 * j for j in range(t)],
        versions=[0] * t,
        text="",
        finish_reason="eos",
        forced_mask=[j >= t - forced for j in range(t)],
    )


def _groups() -> list[Group]:
    """3 prompts x 2 completions of unequal lengths, rewards with variance."""
    lengths = [(3, 9), (2, 4), (7, 1)]
    groups = []
    for p, (a, b) in enumerate(lengths):
        pid = f"p{p}"
        cs = [
            _completion(pid, 0, [10 + p + j for j in range(a)]),
            _completion(pid, 1, [20 + j for j in range(b)], forced=p % 2),
        ]
        groups.append(scored(Prompt(pid, "x", ""), cs, (1.0, -1.0) if p != 1 else (-1.0, 1.0)))
    return groups


def test_aggregation_units_and_shard_weights_by_hand():
    groups = _groups()
    # trainable tokens: p0: 3 + 9, p1: 2 + (4 - 1 forced), p2: 7 + 1
    assert aggregation_units(groups, "token") == 12 + 5 + 8
    assert aggregation_units(groups, "sample") == 6
    assert aggregation_units(groups, "prompt") == 3
    cfg = load_config("scalerl", overrides=["loss.aggregation=token"])
    shards = plan_shards(groups, cfg, 2)  # round robin: {p0, p2}, {p1}
    assert [[g.prompt.id for g in s.groups] for s in shards] == [["p0", "p2"], ["p1"]]
    assert [aggregation_units(s.groups, "token") / s.total_units for s in shards] == pytest.approx([20 / 25, 5 / 25])


def test_two_gloo_workers_match_one_worker_on_the_combined_batch():
    from scalerl.models import load_model
    from scalerl.trainer.data_parallel import rank_store

    cfg = load_config(
        "scalerl",
        overrides=[
            "model.name=tiny-random",
            "loss.aggregation=prompt",
            "optim.lr=1e-2",
            "optim.eps=1e-3",
            "optim.warmup_steps=0",
            "ray.trainers=2",
            "ray.trainer_cpus=0.5",
        ],
    )
    model, tokenizer = load_model("tiny-random")
    torch.manual_seed(0)
    with torch.no_grad():  # weights unlike the workers' freshly built ones, so the load is exercised
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    start = copy.deepcopy(model.state_dict())
    groups = _groups()

    optim = Optimizer(model, cfg)
    store, rendezvous = rank_store("2 trainer workers")  # hosted here, the workers its clients
    workers, joined = start_workers(cfg, 2, rendezvous, first_rank=0)
    ray.get(joined)
    ray.get([w.load.remote(start, optim.state_dict()) for w in workers])
    one = train_step(model, optim, groups, cfg, tokenizer.pad_token_id, 1)
    shards = plan_shards(groups, cfg, 2)
    rows = ray.get([w.step.remote(shards[r], 1) for r, w in enumerate(workers)])
    w0, w1 = ray.get([w.weights.remote() for w in workers])
    for w in workers:
        ray.kill(w)

    assert rows[0]["train/loss"] == pytest.approx(one["train/loss"], rel=1e-5, abs=1e-7)
    assert rows[0]["tokens/trained_step"] == one["tokens/trained_step"]
    # every rank reports the batch's mismatch (all versions 0, the weights the step holds)
    assert rows[0]["train/logprob_mismatch"] == rows[1]["train/logprob_mismatch"]
    assert rows[0]["train/logprob_mismatch"] == pytest.approx(one["train/logprob_mismatch"], rel=1e-5)
    moved = max((model.state_dict()[k] - start[k]).abs().max().item() for k in start)
    assert moved > 1e-3  # the step did change the weights, well above the tolerance below
    for name, ref in model.state_dict().items():
        torch.testing.assert_close(w0[name], w1[name], rtol=0, atol=0)
        torch.testing.assert_close(w0[name], ref, rtol=1e-5, atol=1e-6)


def test_cli_flags_map_to_config_fields():
    import argparse

    from scalerl.commands import train as train_cmd

    parser = argparse.ArgumentParser()
    train_cmd.add_arguments(parser)
    args = parser.parse_args(
        [
            "--backend",
            "ray",
            "--ray-address",
            "10.0.0.1:6379",
            "--generators",
            "3",
            "--trainers",
            "2",
            "--set",
            "ray.generators=5",
        ]
    )
    cfg = load_config("scalerl", overrides=args.overrides + train_cmd.scale_out_overrides(args))
    assert (cfg.pipeline.backend, cfg.ray.address, cfg.ray.generators, cfg.ray.trainers) == (
        "ray",
        "10.0.0.1:6379",
        3,
        2,
    )
    # a host:port that YAML would read as a base-60 number stays a string
    args = parser.parse_args(["--ray-address", "12:30"])
    assert load_config("scalerl", overrides=train_cmd.scale_out_overrides(args)).ray.address == "12:30"
    assert train_cmd.scale_out_overrides(parser.parse_args([])) == []


def test_hub_leases_deliver_each_group_once_in_draw_order_and_refuse_a_dead_start():
    from scalerl.transport.ray import RolloutHub
    from scalerl.transport.window import Window

    def group(pid: str, draw: int) -> Group:
        cs = [_completion(pid, i, [10, 11]) for i in range(2)]
        return scored(Prompt(pid, "x", ""), cs, [1.0, -1.0], draw=draw)

    state = {"seed": 0, "epoch": 0, "position": 0, "drawn": 0}
    hub = RolloutHub([dict(state)], Window(prompts_per_step=1, k=1), weights=["w0"], version=0)  # no Ray needed
    assert hub.register(0)["incarnation"] == 1
    a, b = group("a", 0), group("b", 1)
    assert hub.admit(0, 1, a.prompt, {**state, "position": 1}, 0) == ("go", 0)
    restarted = hub.register(0)  # actor 0 died with "a" in flight and came back
    assert restarted["incarnation"] == 2 and restarted["pending"] == [(0, a.prompt)]
    assert restarted["state"]["position"] == 1
    assert hub.deliver(0, 1, a) is False  # the dead start's late delivery is refused
    assert hub.admit(0, 1, b.prompt, state, 0) == ("stop", -1)
    assert hub.admit(0, 2, b.prompt, state, 0) == ("go", 1)  # the window: draws 0 and 1 (P * (k + 1) = 2)
    assert hub.admit(0, 2, Prompt("c", "x", ""), state, 0) == ("wait", -1)
    assert hub.deliver(0, 2, b) is True  # draw 1 finished first ...
    assert hub.take(0.0) is None  # ... but the trainer takes draw 0 first and waits for it
    assert hub.deliver(0, 2, a) is True  # the regenerated group is accepted once
    assert hub.deliver(0, 2, a) is False
    assert hub.take(0.0) is a and hub.take(0.0) is b
    assert hub.admit(0, 2, Prompt("c", "x", ""), state, 0) == ("go", 2)  # taken + P: the escape on the newest weights
    hub.set_weights(["w1"], 1)  # horizon 2 + 2 = 4
    assert hub.admit(0, 2, Prompt("d", "x", ""), state, 1) == ("go", 3)
    assert hub.admit(0, 2, Prompt("e", "x", ""), state, 1) == ("wait", -1)
    assert hub.open_leases(0) == ["c", "d"]
    c = hub.counters()
    assert (c["completions"], c["restarts"], c["regenerated"], c["rejected"]) == ([4], [1], 1, 2)
    hub.fail(0, 2, "Traceback: boom")
    assert "boom" in hub.take(0.0)


def test_local_and_ray_transports_keep_the_same_staleness_distribution(tmp_path, monkeypatch):
    """One PipelineRL-k rule: with a slow trainer both transports sit at the window (staleness k). The
    trainer steps once the generator waits at the window since the last publish (the engine's idle turns
    in this process; the hub's `at_window` for the actor): slower by construction, on any machine (a
    sleep of 0.3 s was not, under two other jobs on 2 cores; 1 s was a guess)."""
    from scalerl.rollout.engine import Engine

    sources, turns, real_idle = [], [0], Engine._idle
    turned = threading.Condition()

    def idle_turn(self):
        with turned:
            turns[0] += 1
            turned.notify_all()
        real_idle(self)

    class Recorded(backend.RayRollouts):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sources.append(self)

    monkeypatch.setattr(Engine, "_idle", idle_turn)
    monkeypatch.setattr(backend, "RayRollouts", Recorded)
    real_step = train_step

    def slow_step(*args, **kwargs):
        if sources:  # the actor's engine runs in its process: the hub says when it waits at the window
            wait_for(lambda: ray.get(sources[-1].hub.at_window.remote()) or None, "actor at the window")
        else:  # the second idle turn from now asked the window after the last publish
            with turned:
                start = turns[0]
                assert turned.wait_for(lambda: turns[0] >= start + 2, 120), "the generator at the window in 120 s"
        return real_step(*args, **kwargs)

    monkeypatch.setattr(state_mod, "train_step", slow_step)
    ages = {}
    for backend_name in ("local", "ray"):
        cfg = small_cfg(
            [
                f"pipeline.backend={backend_name}",
                "ray.generators=1",
                "run.max_steps=8",
                "pipeline.transport=thread",
                "filter.zero_variance=false",
            ]
        )
        run = tmp_path / backend_name
        run.mkdir()
        train(cfg, run, comps=tiny_random_components(cfg), progress=False)
        rows = [r for r in read_rows(run / "metrics.jsonl") if r["kind"] == "train"]
        assert rows[-1]["staleness/dropped"] == 0
        ages[backend_name] = [r["staleness/max"] for r in rows]
    for name, seq in ages.items():
        assert max(seq) == 2, (name, seq)  # k = 2 reached, never exceeded
    # after the first k steps (the window filling up) every step trains at the bound on both
    assert ages["local"][3:] == ages["ray"][3:] == [2] * 5, ages


def test_hub_gives_the_window_to_the_actor_waiting_with_fewer_prompts_in_flight():
    from scalerl.transport.ray import RolloutHub
    from scalerl.transport.window import Window

    state = {"seed": 0, "epoch": 0, "position": 0, "drawn": 0}
    hub = RolloutHub([dict(state), dict(state)], Window(prompts_per_step=1, k=1), weights=["w0"], version=0)
    assert hub.register(0)["incarnation"] == 1 and hub.register(1)["incarnation"] == 1
    p = [Prompt(f"p{i}", "x", "") for i in range(4)]
    assert hub.admit(0, 1, p[0], state, 0) == ("go", 0)
    assert hub.admit(0, 1, p[1], state, 0) == ("go", 1)  # the window (2 draws) is full
    assert hub.admit(1, 1, p[2], state, 0) == ("wait", -1)  # rank 1 waits, with nothing in flight
    hub.deliver(0, 1, scored(p[0], [_completion("p0", 0, [10])], [1.0], draw=0))
    assert hub.take(0.0).draw == 0
    hub.set_weights(["w1"], 1)  # version 1: the window reaches draw 1 + 2 = 3
    assert hub.admit(0, 1, p[3], state, 1) == ("wait", -1)  # rank 0 (1 in flight) yields to rank 1 (0 in flight)
    assert hub.admit(1, 1, p[2], state, 1) == ("go", 2)


# ------------------------------------------------------------------ ray.publish broadcast (with FSDP ranks: tests/slow)
def test_broadcast_publish_gives_every_generator_the_trainers_weights(tmp_path, monkeypatch):
    """ray.publish=broadcast over gloo, one trainer: every generator actor holds the trainer's published
    weights bit for bit after each publish, and the tokens it decodes carry the new versions."""
    check_broadcast_publish(tmp_path, monkeypatch, [])
