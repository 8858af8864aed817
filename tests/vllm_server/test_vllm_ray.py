"""`rollout.engine: vllm` on the Ray transport (`pipeline.backend: ray`), against real vLLM servers and a
real local Ray (one instance for the module, 2 CPUs, no dashboard): each generator actor starts a server of
its own, publishes the object store's weights to it, and leaves no process of it behind however it ends."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
import ray

from process_helpers import gone_within
from scalerl.config import NoLengthControl, RolloutConfig, VllmEngineConfig
from scalerl.models import load_model
from scalerl.rollout import make_engine
from scalerl.rollout.vllm_server import GUARD
from scalerl.trainer import state as state_mod
from scalerl.trainer.step import train_step
from scalerl.types import Prompt

pytestmark = pytest.mark.vllm  # against real servers: `make test-vllm` (with Ray)

ENGINE_CORE = "VLLM::EngineCor"  # the process name, as the kernel keeps it (15 characters)
MARK = f"scalerl-test-{uuid.uuid4().hex[:12]}"  # in the environment of every process of this module's actors


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    here = os.path.dirname(os.path.abspath(__file__))  # the actors import `ServerHolder` from this module,
    tests = os.path.dirname(here)  # which imports the helpers in tests/
    path = os.pathsep.join(p for p in (here, tests, os.environ.get("PYTHONPATH")) if p)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path, "SCALERL_TEST_MARK": MARK}},
    )
    yield
    ray.shutdown()


def marked(proc: psutil.Process) -> bool:
    try:
        return proc.environ().get("SCALERL_TEST_MARK") == MARK
    except psutil.Error:
        return False


def server_processes(guard: psutil.Process) -> list[psutil.Process]:
    """A started server's processes: its guard and everything below it (API server, EngineCore, workers)."""
    try:
        return [guard, *guard.children(recursive=True)]
    except psutil.Error:
        return [guard]


class ServerHolder:
    """A Ray actor that starts a vLLM server (a client on the tiny random model), as a generator actor does."""

    def __init__(self):
        model, tok = load_model("tiny-random")
        cfg = RolloutConfig(
            length=NoLengthControl(),
            max_new_tokens=8,
            engine=VllmEngineConfig(start_timeout_s=600, kv_cache_mb=64, max_inflight=4),
        )
        self.client = make_engine(model, tok, cfg, seed=0)

    def guard(self) -> tuple[int, str]:
        return self.client.server.proc.pid, str(self.client._dir)

    def tokens(self) -> int:
        return len(self.client.generate([Prompt("p", "<s>1+2=", "3")], 1)[0].tokens)


def test_a_killed_actor_leaves_no_process_of_its_server():
    """`ray.kill` ends the actor without any exit handler: its server's guard sees it die and takes the API
    server, its EngineCore and that one's workers with it, within seconds, and removes the client's folder
    (the model it saved for its server)."""
    holder = ray.remote(ServerHolder).options(num_cpus=1).remote()
    pid, folder = ray.get(holder.guard.remote(), timeout=900)
    guard = psutil.Process(pid)
    assert (Path(folder) / "model" / "model.safetensors").exists()
    assert ray.get(holder.tokens.remote(), timeout=120) > 0  # a working server
    procs = server_processes(guard)
    names = [p.name() for p in procs]
    assert any(n.startswith(ENGINE_CORE) for n in names) and len(procs) >= 3, names
    ray.kill(holder)
    print(f"killed actor: its {len(procs)} server processes gone in {gone_within(procs, 60):.1f} s")
    assert not Path(folder).exists()


# the run of test_train_on_a_vllm_generator_actor: the tiny model, 3 steps of 2 x 4 on one vLLM generator actor
ACTOR_RUN = [
    "model.name=tiny-random",
    "batch.prompts=2",
    "batch.generations=4",
    "rollout.max_new_tokens=24",
    "rollout.length.think_min=8",
    "rollout.length.think_max=12",
    "rollout.length.answer_budget=4",
    "rollout.length.phrase=</think>",
    "filter.zero_variance=false",
    "pipeline.k=1",
    "eval.every=100",
    "run.checkpoint_every=100",
    "rollout.engine=vllm",
    "rollout.engine.request_timeout_s=120",
    "rollout.engine.start_timeout_s=900",
    "rollout.engine.kv_cache_mb=64",
    "ray.generator_cpus=1",
]


def _watch_servers(seen: dict, done: threading.Event) -> None:
    """Every process of the actor's server (and its name) into `seen`, until `done`."""
    while not done.is_set():
        for p in psutil.process_iter(["cmdline"]):
            if p.info["cmdline"] and str(GUARD) in p.info["cmdline"] and marked(p):
                for q in server_processes(p):
                    try:
                        seen[q] = q.name()  # the last one: EngineCore renames itself
                    except psutil.Error:
                        continue
        time.sleep(0.5)


def test_train_on_a_vllm_generator_actor(tmp_path, monkeypatch):
    """`scalerl train --backend ray --generators 1 --set rollout.engine=vllm`: the actor's server decodes with
    the weights of each published version (per-token versions, staleness within k), the run completes, and
    at its end no process of the server is left."""
    from scalerl.cli import main
    from scalerl.run.metrics import read_rows

    trained: list = []

    def step(model, optim, groups, cfg, pad_id, step, ref_model=None, advantages=None):
        trained.append((step, groups))
        return train_step(model, optim, groups, cfg, pad_id, step, ref_model, advantages=advantages)

    monkeypatch.setattr(state_mod, "train_step", step)
    seen: dict[psutil.Process, str] = {}
    done = threading.Event()

    watcher = threading.Thread(target=_watch_servers, args=(seen, done), daemon=True)
    watcher.start()
    try:
        argv = ["train", "--no-progress", "--run-dir", str(tmp_path / "run"), "--max-steps", "3"]
        code = main([*argv, "--backend", "ray", "--generators", "1", *[a for s in ACTOR_RUN for a in ("--set", s)]])
    finally:
        done.set()
        watcher.join(timeout=30)
    assert code == 0
    rows = [r for r in read_rows(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["version"] for r in rows] == [1, 2, 3] and max(r["staleness/max"] for r in rows) <= 1
    assert rows[-1]["ray/completions/gen0"] >= 3 * 2 * 4 and rows[-1]["staleness/dropped"] == 0
    completions = [(s, c) for s, groups in trained for g in groups for c in g.completions]
    assert len(completions) == 3 * 2 * 4
    for s, c in completions:  # one version per token, from the server's spans: never newer than the trainer's
        assert len(c.versions) == len(c.tokens) > 0 and all(0 <= v < s for v in c.versions)
        assert c.versions == sorted(c.versions)
    assert max(v for _, c in completions for v in c.versions) >= 1  # published weights reached the server
    assert any(n.startswith(ENGINE_CORE) for n in seen.values()), seen
    print(f"run end: the actor's {len(seen)} server processes gone {gone_within(list(seen), 60):.1f} s after")
