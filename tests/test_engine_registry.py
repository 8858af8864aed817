"""`rollout.engine`: the typed choice, the registry, and what the build asks of an engine."""

import dataclasses

import pytest

from scalerl.build.resources import use_process
from scalerl.config import LocalEngineConfig, VllmEngineConfig
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.models import load_model
from scalerl.rollout import Engine, engine_spec, make_engine
from scalerl.rollout.registry import ENGINES, register
from scalerl.rollout.vllm import VllmClient, _find, _versions


def test_the_default_is_the_local_engine_and_vllm_is_a_typed_choice():
    assert load_config("scalerl").rollout.engine == LocalEngineConfig()
    cfg = load_config("scalerl", overrides=["rollout.engine=vllm", "rollout.engine.port=8123"])
    assert isinstance(cfg.rollout.engine, VllmEngineConfig) and cfg.rollout.engine.port == 8123
    with pytest.raises(ScaleRLError, match="rollout.engine.type = 'sglang' is not one of local, vllm"):
        load_config("scalerl", overrides=["rollout.engine=sglang"])
    with pytest.raises(ScaleRLError, match="port"):
        load_config("scalerl", overrides=["rollout.engine.port=1"])   # a field of type vllm only


def test_each_engine_states_what_it_needs():
    local, vllm = engine_spec(LocalEngineConfig()), engine_spec(VllmEngineConfig())
    assert (local.name, local.build, local.process, local.copy) == ("local", Engine, True, True)
    assert (vllm.name, vllm.build, vllm.process, vllm.copy) == ("vllm", VllmClient, True, False)


def test_the_build_asks_the_engine_for_its_transport(monkeypatch):
    local = load_config("scalerl", overrides=["run.threads=2"])
    vllm = load_config("scalerl", overrides=["run.threads=2", "rollout.engine=vllm"])
    assert use_process(local, "cpu") and not use_process(vllm, "cpu")   # auto: a process, except for a server's client
    forced = load_config("scalerl", overrides=["rollout.engine=vllm", "pipeline.transport=process"])
    assert use_process(forced, "cpu")                                    # a generator process hosts the client
    monkeypatch.setitem(ENGINES, VllmEngineConfig, dataclasses.replace(ENGINES[VllmEngineConfig], process=False))
    with pytest.raises(ScaleRLError, match="rollout.engine vllm runs in a server of its own"):
        use_process(forced, "cpu")                                       # an engine no process of ours may host


def test_a_registered_engine_is_built_by_make_engine(monkeypatch):
    model, tok = load_model("tiny-random")
    cfg = load_config("scalerl", overrides=["rollout.max_new_tokens=160"]).rollout
    assert isinstance(make_engine(model, tok, cfg, seed=3), Engine)
    built = []
    monkeypatch.setitem(ENGINES, LocalEngineConfig, ENGINES[LocalEngineConfig])
    register(LocalEngineConfig, process=False)(lambda *a, **kw: built.append(kw) or "mine")
    assert make_engine(model, tok, cfg, seed=3, greedy=True) == "mine"
    assert built == [{"fp32_head": True, "seed": 3, "greedy": True, "ignore_eos": False}]


def test_the_clients_bookkeeping():
    assert _find([5, 1, 2, 9, 1, 2], [1, 2]) == 3 and _find([5, 1], [1, 2]) is None
    spans = [{"version": "default", "start": 0, "end": 2}, {"version": "3", "start": 2, "end": 5}]
    assert _versions(spans, 6, 2) == [2, 2, 3, 3, 3, 2]
