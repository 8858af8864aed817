"""The Ray backend's tests, fast and slow tier: one local CPU Ray for a module (num_cpus=2, no dashboard), the
small configuration, the trainer's record of what it stepped on, and the broadcast publish's check (imported as
`ray_helpers`: tests/ is on sys.path under pytest)."""

import os
import threading
import time

import pytest
import ray
import torch

from doubles import tiny_random_components
from scalerl.configure import load_config
from scalerl.loop import train
from scalerl.run.metrics import read_rows
from scalerl.trainer import state as state_mod
from scalerl.trainer.step import train_step
from scalerl.transport import ray as backend

SMALL = [
    "model.name=tiny-random",
    "batch.prompts=2",
    "batch.generations=4",
    "rollout.max_new_tokens=12",
    "rollout.batch_slots=8",
    "eval.every=100",
    "eval.prompts=4",
    "eval.samples=2",
    "run.checkpoint_every=100",
    "optim.warmup_steps=1",
    "pipeline.backend=ray",
    "ray.generators=2",
    "ray.generator_cpus=0.5",
    "ray.trainer_cpus=0.5",
    "pipeline.k=2",
]


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


def train_with_a_killer(cfg, tmp_path, monkeypatch, source_cls, killer) -> tuple[list[str], list[dict]]:
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


def wait_for(fetch, what: str, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = fetch()
        if got is not None:
            return got
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout_s} s")


def check_broadcast_publish(tmp_path, monkeypatch, extra: list[str]) -> None:
    """ray.publish=broadcast over gloo, real actors, with the overrides `extra`: after each publish every
    generator actor holds the trainer's published weights bit for bit, and the tokens it decodes carry the new
    versions."""
    cfg = small_cfg(
        ["run.max_steps=4", "ray.publish=broadcast", "ray.publish_bucket_mb=0.05", *extra]
    )  # tiny-random is ~0.4 MB: several buckets
    published: dict[int, dict] = {}
    received: dict[tuple[int, int], dict] = {}
    nbytes: list[int] = []  # bytes of a publish: each storage once (tied weights are one)

    class Checked(backend.RayRollouts):
        def send(self, update):
            super().send(update)
            nbytes.append(
                sum(t.numel() * t.element_size() for t in {t.data_ptr(): t for t in update.weights.values()}.values())
            )
            published[update.version] = {k: v.detach().clone() for k, v in update.weights.items()}
            for rank, worker in enumerate(self.workers):
                received[update.version, rank] = wait_for(
                    lambda w=worker: ray.get(w.weights.remote(update.version)),
                    f"version {update.version} in generator {rank}",
                )

    versions: list[int] = []  # the newest token version in each step's batch

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
        assert all(torch.equal(got[k], want[k]) for k in want), (version, rank)  # bit for bit
    changed = [
        max((published[v + 1][k] - published[v][k]).abs().max().item() for k in published[v]) for v in range(1, 4)
    ]
    assert min(changed) > 0  # every step moved the weights: each publish carried new values
    rows = [r for r in read_rows(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # a step's row is written before its own publish: step s counts the s - 1 publishes before it
    assert [r["ray/broadcast_bytes"] for r in rows] == [nbytes[0] * (s - 1) for s in range(1, 5)]
    assert [r["ray/broadcast_groups"] for r in rows] == [1] * 4  # formed once: no actor restarted
    if not extra:
        # the window lets a draw of step 4 start only once its generator applied version >= 1
        assert versions[0] == 0 and versions[3] >= 1, versions
