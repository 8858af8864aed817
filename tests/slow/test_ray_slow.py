"""The Ray backend, slow tier: ray.publish=broadcast with FSDP trainer ranks, a generator that dies, a group formed
again after a restart (one local CPU Ray for the module; tests/transport/test_ray.py holds the rest)."""

import time

import pytest
import torch

pytest.importorskip("ray", reason="the Ray backend is the optional extra scalerl[ray]")

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError

from doubles import tiny_random_components
from ray_helpers import check_broadcast_publish, local_ray, record_trained, small_cfg, train_with_a_killer, wait_for  # noqa: F401  (local_ray: the module's Ray, an autouse fixture)
from scalerl.loop import train
from scalerl.transport import ray as backend


@pytest.mark.slow
def test_broadcast_publish_with_fsdp_trainer_ranks_gives_every_generator_the_trainers_weights(tmp_path, monkeypatch):
    """The same as tests/transport/test_ray.py's broadcast test, the trainer as two FSDP ranks."""
    check_broadcast_publish(tmp_path, monkeypatch, ["trainer.strategy=fsdp", "ray.trainers=2"])


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
    assert time.monotonic() - killed["at"] < 120  # ray.publish_timeout_s is 300: nothing waited it out
    message = str(err.value).splitlines()[0]
    assert "generator actor 0 died and used up its 0 restarts" in message, message


@pytest.mark.slow
def test_broadcast_group_is_formed_again_after_a_generator_restarts(tmp_path, monkeypatch):
    """ray.publish=broadcast with a restart: actor 0 killed mid-run, Ray restarts it, the trainer
    forms a new group with its new start, and at the end both actors hold the trainer's last
    weights bit for bit."""
    cfg = small_cfg(
        [
            "run.max_steps=8",
            "ray.publish=broadcast",
            "ray.max_restarts=1",
            "pipeline.max_kl=null",
            "ray.publish_timeout_s=600",
        ]
    )
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
                final[rank] = wait_for(
                    lambda w=worker: ray.get(w.weights.remote(last), timeout=60), f"version {last} in generator {rank}"
                )
            super().close()

    killed: dict = {}

    def kill_and_wait_for_the_restart() -> None:
        source = sources[0]
        ray.kill(source.workers[0], no_restart=False)
        deadline = time.monotonic() + 600  # a restart imports torch and builds the model: minutes on a loaded machine
        while time.monotonic() < deadline and killed.get("back") != (0, 2):
            try:
                killed["back"] = ray.get(source.workers[0].ping.remote(), timeout=60)
            except (ActorUnavailableError, GetTimeoutError):
                time.sleep(0.2)

    trained, rows = train_with_a_killer(cfg, tmp_path, monkeypatch, Recorded, kill_and_wait_for_the_restart)
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert killed["back"] == (0, 2) and rows[-1]["ray/restarts"] == 1
    assert rows[-1]["ray/broadcast_groups"] >= 2  # formed again with the new start
    # no member waited out ray.publish_timeout_s (600 s) on the broken group: the publish that met
    # the dead actor took the restart's time (seconds to a few minutes), not the timeout's
    assert max(r["time/publish"] for r in rows) < 300
    assert len(trained) == len(set(trained))
    want = published[8]
    for rank in (0, 1):
        assert sorted(final[rank]) == sorted(want) and all(torch.equal(final[rank][k], want[k]) for k in want), rank
