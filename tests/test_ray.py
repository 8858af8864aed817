"""The Ray backend on a local CPU Ray: generator actors, an actor killed mid-run, data parallelism.

One Ray instance for the module (num_cpus=2, no dashboard), shut down at the end.
"""

import copy
import json
import os
import threading
import time

import pytest
import torch

ray = pytest.importorskip("ray", reason="the Ray backend is the optional extra scalerl[ray]")
from ray.exceptions import ActorUnavailableError, GetTimeoutError  # noqa: E402

from scalerl.configure import load_config
from scalerl.transport import ray as backend
from scalerl.trainer.data_parallel import start_workers
from scalerl.transport.ray import ShardSampler, merge_sampler_states, split_sampler_state
from scalerl.trainer import state as state_mod
from doubles import FakeTask, scored, tiny_random_components
from scalerl.trainer.step import Optimizer, aggregation_units, plan_shards, train_step
from scalerl.loop import train
from scalerl.rl.curriculum import CurriculumSampler
from scalerl.run.checkpoint import latest_checkpoint
from scalerl.run.metrics import read_rows
from scalerl.types import Completion, Group, Prompt

SMALL = ["model.name=tiny-random", "batch.prompts=2", "batch.generations=4", "rollout.max_new_tokens=12",
         "rollout.batch_slots=8", "eval.every=100", "eval.prompts=4", "eval.samples=2", "run.checkpoint_every=100",
         "optim.warmup_steps=1", "pipeline.backend=ray", "ray.generators=2", "ray.generator_cpus=0.5",
         "ray.trainer_cpus=0.5", "pipeline.k=2"]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    tests = os.path.dirname(os.path.abspath(__file__))  # the actors import the test doubles (tests/doubles.py)
    path = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()


def small_cfg(extra=()):
    cfg = load_config("scalerl", overrides=SMALL + list(extra))
    cfg.rollout.length.think_min, cfg.rollout.length.think_max, cfg.rollout.length.answer_budget = 4, 6, 4
    cfg.rollout.length.phrase = "</think>"  # 1 token: 6 + 1 + 4 <= 12
    return cfg


def record_trained(monkeypatch, on_step=None) -> tuple[list[str], list[str]]:
    """(completion ids, prompt ids) of every group the trainer stepped on, in order."""
    completions: list[str] = []
    prompts: list[str] = []

    def step(model, optim, groups, cfg, pad_id, step, ref_model=None, advantages=None):
        completions.extend(c.id for g in groups for c in g.completions)
        prompts.extend(g.prompt.id for g in groups)
        if on_step is not None:
            on_step(step)
        return train_step(model, optim, groups, cfg, pad_id, step, ref_model, advantages=advantages)

    monkeypatch.setattr(state_mod, "train_step", step)
    return completions, prompts


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


def _train_with_a_killer(cfg, tmp_path, monkeypatch, source_cls, killer) -> tuple[list[str], list[dict]]:
    """Train `cfg` with `source_cls` as the Ray source; `killer` runs in a thread started at step 2
    (the trainer keeps going meanwhile) and joined at step 5. (Trained completion ids, train rows.)"""
    thread = threading.Thread(target=killer)

    def on_step(step):
        if step == 2:
            thread.start()
        if step == 5:
            thread.join()

    monkeypatch.setattr(backend, "RayRollouts", source_cls)
    trained, _ = record_trained(monkeypatch, on_step)
    train(cfg, tmp_path, comps=tiny_random_components(cfg), progress=False)
    return trained, [r for r in read_rows(tmp_path / "metrics.jsonl") if r["kind"] == "train"]


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
        deadline = time.monotonic() + 600   # a restart imports torch and builds the model: minutes on a loaded machine
        while time.monotonic() < deadline:  # wait for Ray to bring it back: a fresh process, incarnation 2
            try:
                killed["back"] = ray.get(source.workers[0].ping.remote(), timeout=60)
            except (ActorUnavailableError, GetTimeoutError):
                pass
            if killed.get("back") == (0, 2):
                return
            time.sleep(0.2)

    trained, rows = _train_with_a_killer(cfg, tmp_path, monkeypatch, Recorded, kill_with_groups_in_flight)
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
    shards = [ShardSampler(CurriculumSampler(task, None, seed=0), r, 3, {"seed": 0, "epoch": 0, "position": 0})
              for r in range(3)]
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
    return Completion(id=f"{pid}/{i}", prompt_id=pid, prompt_tokens=[5, 6, 7][: 1 + i % 3], tokens=tokens,
                      logprobs=[-3.0 + 0.1 * j for j in range(t)], versions=[0] * t, text="", finish_reason="eos",
                      forced_mask=[j >= t - forced for j in range(t)])


def _groups() -> list[Group]:
    """3 prompts x 2 completions of unequal lengths, rewards with variance."""
    lengths = [(3, 9), (2, 4), (7, 1)]
    groups = []
    for p, (a, b) in enumerate(lengths):
        pid = f"p{p}"
        cs = [_completion(pid, 0, [10 + p + j for j in range(a)]), _completion(pid, 1, [20 + j for j in range(b)], forced=p % 2)]
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
    from scalerl.trainer.data_parallel import rank_store
    from scalerl.models import load_model

    cfg = load_config("scalerl", overrides=["model.name=tiny-random", "loss.aggregation=prompt",
                                           "optim.lr=1e-2", "optim.eps=1e-3", "optim.warmup_steps=0",
                                           "ray.trainers=2", "ray.trainer_cpus=0.5"])
    model, tokenizer = load_model("tiny-random")
    torch.manual_seed(0)
    with torch.no_grad():  # weights unlike the workers' freshly built ones, so the load is exercised
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    start = copy.deepcopy(model.state_dict())
    groups = _groups()

    optim = Optimizer(model, cfg)
    store, rendezvous = rank_store("2 trainer workers")   # hosted here, the workers its clients
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
    args = parser.parse_args(["--backend", "ray", "--ray-address", "10.0.0.1:6379", "--generators", "3",
                              "--trainers", "2", "--set", "ray.generators=5"])
    cfg = load_config("scalerl", overrides=args.overrides + train_cmd.scale_out_overrides(args))
    assert (cfg.pipeline.backend, cfg.ray.address, cfg.ray.generators, cfg.ray.trainers) == ("ray", "10.0.0.1:6379", 3, 2)
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
    assert hub.deliver(0, 1, a) is False   # the dead start's late delivery is refused
    assert hub.admit(0, 1, b.prompt, state, 0) == ("stop", -1)
    assert hub.admit(0, 2, b.prompt, state, 0) == ("go", 1)   # the window: draws 0 and 1 (P * (k + 1) = 2)
    assert hub.admit(0, 2, Prompt("c", "x", ""), state, 0) == ("wait", -1)
    assert hub.deliver(0, 2, b) is True    # draw 1 finished first ...
    assert hub.take(0.0) is None           # ... but the trainer takes draw 0 first and waits for it
    assert hub.deliver(0, 2, a) is True    # the regenerated group is accepted once
    assert hub.deliver(0, 2, a) is False
    assert hub.take(0.0) is a and hub.take(0.0) is b
    assert hub.admit(0, 2, Prompt("c", "x", ""), state, 0) == ("go", 2)  # taken + P: the escape on the newest weights
    hub.set_weights(["w1"], 1)             # horizon 2 + 2 = 4
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
        if sources:   # the actor's engine runs in its process: the hub says when it waits at the window
            _wait_for(lambda: ray.get(sources[-1].hub.at_window.remote()) or None, "actor at the window")
        else:         # the second idle turn from now asked the window after the last publish
            with turned:
                start = turns[0]
                assert turned.wait_for(lambda: turns[0] >= start + 2, 120), "the generator at the window in 120 s"
        return real_step(*args, **kwargs)

    monkeypatch.setattr(state_mod, "train_step", slow_step)
    ages = {}
    for backend_name in ("local", "ray"):
        cfg = small_cfg([f"pipeline.backend={backend_name}", "ray.generators=1", "run.max_steps=8",
                         "pipeline.transport=thread", "filter.zero_variance=false"])
        run = tmp_path / backend_name
        run.mkdir()
        train(cfg, run, comps=tiny_random_components(cfg), progress=False)
        rows = [r for r in read_rows(run / "metrics.jsonl") if r["kind"] == "train"]
        assert rows[-1]["staleness/dropped"] == 0
        ages[backend_name] = [r["staleness/max"] for r in rows]
    for name, seq in ages.items():
        assert max(seq) == 2, (name, seq)                     # k = 2 reached, never exceeded
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
    assert hub.admit(0, 1, p[1], state, 0) == ("go", 1)     # the window (2 draws) is full
    assert hub.admit(1, 1, p[2], state, 0) == ("wait", -1)  # rank 1 waits, with nothing in flight
    hub.deliver(0, 1, scored(p[0], [_completion("p0", 0, [10])], [1.0], draw=0))
    assert hub.take(0.0).draw == 0
    hub.set_weights(["w1"], 1)                              # version 1: the window reaches draw 1 + 2 = 3
    assert hub.admit(0, 1, p[3], state, 1) == ("wait", -1)  # rank 0 (1 in flight) yields to rank 1 (0 in flight)
    assert hub.admit(1, 1, p[2], state, 1) == ("go", 2)


# ------------------------------------------------------------------ ray.publish broadcast
def _wait_for(fetch, what: str, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = fetch()
        if got is not None:
            return got
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout_s} s")


@pytest.mark.parametrize("extra", [[], pytest.param(["trainer.strategy=fsdp", "ray.trainers=2"], marks=pytest.mark.slow)],
                         ids=["single", "fsdp2"])
def test_broadcast_publish_gives_every_generator_the_trainers_weights(tmp_path, monkeypatch, extra):
    """ray.publish=broadcast over gloo, real actors: after each publish every generator actor holds
    the trainer's published weights bit for bit, and the tokens it decodes carry the new versions."""
    cfg = small_cfg(["run.max_steps=4", "ray.publish=broadcast", "ray.publish_bucket_mb=0.05", *extra])   # tiny-random is ~0.4 MB: several buckets
    published: dict[int, dict] = {}
    received: dict[tuple[int, int], dict] = {}
    nbytes: list[int] = []     # bytes of a publish: each storage once (tied weights are one)

    class Checked(backend.RayRollouts):
        def send(self, update):
            super().send(update)
            nbytes.append(sum(t.numel() * t.element_size() for t in {t.data_ptr(): t for t in update.weights.values()}.values()))
            published[update.version] = {k: v.detach().clone() for k, v in update.weights.items()}
            for rank, worker in enumerate(self.workers):
                received[update.version, rank] = _wait_for(lambda: ray.get(worker.weights.remote(update.version)),
                                                           f"version {update.version} in generator {rank}")

    versions: list[int] = []   # the newest token version in each step's batch

    def step(model, optim, groups, cfg_, pad_id, step_, ref_model=None, advantages=None):
        versions.append(max(v for g in groups for c in g.completions for v in c.versions))
        return train_step(model, optim, groups, cfg_, pad_id, step_, ref_model, advantages=advantages)

    monkeypatch.setattr(backend, "RayRollouts", Checked)
    if not extra:
        monkeypatch.setattr(state_mod, "train_step", step)
    train(cfg, tmp_path, comps=tiny_random_components(cfg), progress=False)

    assert sorted(published) == [1, 2, 3, 4]
    for (version, rank), got in received.items():
        want = published[version]
        assert sorted(got) == sorted(want), (version, rank)
        assert all(torch.equal(got[k], want[k]) for k in want), (version, rank)   # bit for bit
    changed = [max((published[v + 1][k] - published[v][k]).abs().max().item() for k in published[v])
               for v in range(1, 4)]
    assert min(changed) > 0   # every step moved the weights: each publish carried new values
    rows = [r for r in read_rows(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # a step's row is written before its own publish: step s counts the s - 1 publishes before it
    assert [r["ray/broadcast_bytes"] for r in rows] == [nbytes[0] * (s - 1) for s in range(1, 5)]
    assert [r["ray/broadcast_groups"] for r in rows] == [1] * 4     # formed once: no actor restarted
    if not extra:
        # the window lets a draw of step 4 start only once its generator applied version >= 1
        assert versions[0] == 0 and versions[3] >= 1, versions


@pytest.mark.slow
def test_broadcast_run_stops_with_one_line_when_a_generator_dies(tmp_path, monkeypatch):
    """ray.publish=broadcast without restarts (ray.max_restarts=0): an actor killed mid-run ends the
    run at once with an error naming what failed, not a broadcast waiting for a member that is gone."""
    from scalerl.errors import ScaleRLError

    cfg = small_cfg(["run.max_steps=30", "ray.publish=broadcast", "ray.max_restarts=0"])
    sources, killed = [], {}

    class Recorded(backend.RayRollouts):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sources.append(self)

    def on_step(step):
        if step == 2:
            ray.kill(sources[0].workers[0], no_restart=True)
            killed["at"] = time.monotonic()

    monkeypatch.setattr(backend, "RayRollouts", Recorded)
    record_trained(monkeypatch, on_step)
    with pytest.raises((ScaleRLError, RuntimeError)) as err:
        train(cfg, tmp_path, comps=tiny_random_components(cfg), progress=False)
    assert time.monotonic() - killed["at"] < 120        # ray.publish_timeout_s is 300: nothing waited it out
    message = str(err.value).splitlines()[0]
    assert "generator actor 0 died and used up its 0 restarts" in message, message


@pytest.mark.slow
def test_broadcast_group_is_formed_again_after_a_generator_restarts(tmp_path, monkeypatch):
    """ray.publish=broadcast with a restart: actor 0 killed mid-run, Ray restarts it, the trainer
    forms a new group with its new start, and at the end both actors hold the trainer's last
    weights bit for bit."""
    cfg = small_cfg(["run.max_steps=8", "ray.publish=broadcast", "ray.max_restarts=1", "pipeline.max_kl=null",
                     "ray.publish_timeout_s=600"])
    sources, published, final = [], {}, {}

    class Recorded(backend.RayRollouts):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            sources.append(self)

        def send(self, update):
            super().send(update)
            published[update.version] = {k: v.detach().clone() for k, v in update.weights.items()}

        def close(self):
            last = max(published)
            for rank, worker in enumerate(self.workers):
                final[rank] = _wait_for(lambda: ray.get(worker.weights.remote(last), timeout=60),
                                        f"version {last} in generator {rank}")
            super().close()

    killed: dict = {}

    def kill_and_wait_for_the_restart() -> None:
        source = sources[0]
        ray.kill(source.workers[0], no_restart=False)
        deadline = time.monotonic() + 600   # a restart imports torch and builds the model: minutes on a loaded machine
        while time.monotonic() < deadline and killed.get("back") != (0, 2):
            try:
                killed["back"] = ray.get(source.workers[0].ping.remote(), timeout=60)
            except (ActorUnavailableError, GetTimeoutError):
                time.sleep(0.2)

    trained, rows = _train_with_a_killer(cfg, tmp_path, monkeypatch, Recorded, kill_and_wait_for_the_restart)
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert killed["back"] == (0, 2) and rows[-1]["ray/restarts"] == 1
    assert rows[-1]["ray/broadcast_groups"] >= 2            # formed again with the new start
    # no member waited out ray.publish_timeout_s (600 s) on the broken group: the publish that met
    # the dead actor took the restart's time (seconds to a few minutes), not the timeout's
    assert max(r["time/publish"] for r in rows) < 300
    assert len(trained) == len(set(trained))
    want = published[8]
    for rank in (0, 1):
        assert sorted(final[rank]) == sorted(want) and all(torch.equal(final[rank][k], want[k]) for k in want), rank
