"""`rollout.engine`: the typed choice, the registry, each engine's declaration of what it needs, and what the
build asks of it. An engine added here, in this file only (`ToyEngineConfig`, `OracleEngine`), runs in
`scalerl generate`'s own code."""

import argparse
from typing import ClassVar, Literal

import pytest
from pydantic import BaseModel

from scalerl.assembly.generator import build_generator
from scalerl.assembly.resources import generator_host, split_threads, use_process
from scalerl.commands import generate
from scalerl.config import LocalEngineConfig, VllmEngineConfig
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.models import load_model
from scalerl.rollout import Engine, EngineNeeds, build_engine, engine_spec, make_engine, registry
from scalerl.rollout.vllm import VllmClient, _find, _versions
from scalerl.types import Completion


def test_the_default_is_the_local_engine_and_vllm_is_a_typed_choice():
    assert load_config("scalerl").rollout.engine == LocalEngineConfig()
    cfg = load_config("scalerl", overrides=["rollout.engine=vllm", "rollout.engine.port=8123"])
    assert isinstance(cfg.rollout.engine, VllmEngineConfig) and cfg.rollout.engine.port == 8123
    with pytest.raises(ScaleRLError, match="rollout.engine.type = 'sglang' is not one of local, vllm"):
        load_config("scalerl", overrides=["rollout.engine=sglang"])
    with pytest.raises(ScaleRLError, match="port"):
        load_config("scalerl", overrides=["rollout.engine.port=1"])  # a field of type vllm only


def test_each_engine_declares_what_it_needs():
    local, vllm = engine_spec(LocalEngineConfig()), engine_spec(VllmEngineConfig())
    assert (local.name, local.build, local.needs) == ("local", Engine, EngineNeeds())
    assert local.needs.hosts == {"thread", "process", "ray"} and local.needs.copy and local.needs.lora
    assert (vllm.name, vllm.build) == ("vllm", VllmClient)
    assert vllm.needs == EngineNeeds(copy=False, devices=frozenset({"cpu", "cuda"}), lora=False)
    assert vllm.needs.hosts == {"thread", "process", "ray"}  # a server per generator actor under Ray


def _one_line(match: str, call, *args) -> str:
    with pytest.raises(ScaleRLError, match=match) as err:
        call(*args)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_the_build_asks_the_declaration_where_the_generator_runs_and_what_it_refuses(two_cores):
    def cfg(*extra):
        return load_config("scalerl", overrides=["run.threads=2", *extra])

    # pipeline.transport=auto: a process on a CPU of 2 cores, where the engine may run in one; else a thread
    assert generator_host(cfg(), "cpu") == "process" and use_process(cfg(), "cpu")
    assert generator_host(cfg(), "cuda") == "thread" and generator_host(cfg("run.threads=1"), "cpu") == "thread"
    assert generator_host(cfg("rollout.engine=vllm"), "cpu") == "thread"
    assert generator_host(cfg("pipeline.mode=ppo_off_policy"), "cpu") == "thread"
    assert generator_host(cfg("pipeline.backend=ray"), "cpu") == "ray"
    # each refusal from vLLM's declaration, in one line naming the setting that asked
    # a generator process of ours hosts vLLM's client when asked (auto keeps the thread: the server decodes)
    assert use_process(cfg("rollout.engine=vllm", "pipeline.transport=process"), "cpu")
    assert generator_host(cfg("rollout.engine=vllm", "pipeline.backend=ray"), "cpu") == "ray"
    _one_line(
        "model.lora: rollout.engine vllm does not decode a LoRA model",
        split_threads,
        cfg("rollout.engine=vllm", "model.lora.r=4"),
        "cpu",
    )
    assert generator_host(cfg("model.lora.r=4"), "cpu") == "process"  # the local engine decodes one


# ---------------------------------------------------------------- an engine added in this file only
class ToyEngineConfig(BaseModel):
    """The choice (a config class with `type` and the module that registers it)."""

    module: ClassVar[str] = __name__
    type: Literal["oracle"] = "oracle"


class OracleEngine:
    """A `Generator` that answers every prompt it is asked, right on even samples, with nothing on odd ones."""

    version = 0

    def __init__(self, model, tokenizer, cfg, *, fp32_head, seed, greedy, ignore_eos=False):
        self.tokenizer, self.seed, self.greedy = tokenizer, seed, greedy
        self.built_with = (cfg.engine, fp32_head, seed, greedy)
        BUILT.append(self)

    def generate(self, prompts, n):
        out = []
        for p in prompts:
            for k in range(n):
                text = f"</think> {p.answer}" if k % 2 == 0 else "no idea"
                tokens = self.tokenizer(text, add_special_tokens=False)["input_ids"]
                out.append(
                    Completion(f"{p.id}/{k}", p.id, [1], tokens, [0.0] * len(tokens), [0] * len(tokens), text, "eos")
                )
        return out

    def close(self):
        self.closed = True


BUILT: list[OracleEngine] = []


@pytest.fixture
def oracle(monkeypatch, two_cores):
    """The oracle registered (in a copy of the registry) with its declaration."""
    monkeypatch.setattr(registry, "ENGINES", dict(registry.ENGINES))
    BUILT.clear()
    registry.register(
        ToyEngineConfig, EngineNeeds(hosts=frozenset({"thread"}), copy=False, devices=frozenset({"cpu"}))
    )(OracleEngine)
    base = load_config("scalerl", overrides=["run.threads=2"])
    return base.model_copy(update={"rollout": base.rollout.model_copy(update={"engine": ToyEngineConfig()})})


def _args(**kw):
    return argparse.Namespace(**{"n": 4, "prompts": 3, "split": "val", "seed": 11, "greedy": False, **kw})


def test_an_engine_registered_in_a_test_runs_in_scalerl_generate(oracle):
    out = generate.show(oracle, _args())
    (engine,) = BUILT
    assert engine.built_with == (ToyEngineConfig(), oracle.model.fp32_head, 11, False) and engine.closed
    # its completions, scored by the run's own reward: the even samples right, the odd ones without an answer
    assert out.count("--- PASS reward +1") == 6 and out.count("fail (no answer found)") == 6
    assert "pass rate 0.500 over 12 completions" in out and "no answer found in 50.0%" in out
    # the build asks its declaration: a thread under auto (not a process), refusals in one line
    assert generator_host(oracle, "cpu") == "thread"
    forced = oracle.model_copy(update={"pipeline": oracle.pipeline.model_copy(update={"transport": "process"})})
    _one_line(
        "rollout.engine oracle runs its generator in a thread of the trainer's process only", use_process, forced, "cpu"
    )
    _one_line("model.device = 'cuda:0': rollout.engine oracle decodes on cpu only", generator_host, oracle, "cuda:0")
    on_ray = oracle.model_copy(update={"pipeline": oracle.pipeline.model_copy(update={"backend": "ray"})})
    _one_line(
        "pipeline.backend = ray: rollout.engine oracle runs its generator in a thread of the trainer's "
        "process only, not in Ray actors .*use pipeline.backend=local",
        generator_host,
        on_ray,
        "cpu",
    )


# ---------------------------------------------------------------- generate and train: the same engine
def test_generate_and_train_build_the_same_engine_with_the_same_tokens():
    """A seeded `scalerl generate` samples what the engine built directly (the path before `build_engine`)
    samples, and so does a generator stage of `scalerl train` on the same model and seed."""
    cfg = load_config(
        "scalerl",
        overrides=["model.name=tiny-random", "rollout.max_new_tokens=12", "rollout.length.type=none", "run.threads=1"],
    )
    model, tok = load_model("tiny-random")
    args = _args(n=2, prompts=2, seed=3)
    from scalerl.tasks import get_task

    task = get_task(cfg.task, tok)
    prompts = task.val_prompts(2)
    direct = Engine(model, tok, cfg.rollout, fp32_head=cfg.model.fp32_head, seed=3).generate(prompts, 2)
    built = build_engine(cfg, model, tok, seed=3).generate(prompts, 2)
    staged = build_generator(
        cfg.model_dump_json(),
        "cpu",
        seed=3,
        model=model,
        tokenizer=tok,
        task=task,
        reward=lambda prompt, completion: None,
    ).generator
    assert [c.tokens for c in built] == [c.tokens for c in direct] == [c.tokens for c in staged.generate(prompts, 2)]
    assert len({tuple(c.tokens) for c in direct}) > 1  # sampled, not one fixed answer
    shown = generate.show(cfg, args)
    for c in direct:
        assert f"{c.finish_reason}, {len(c.tokens)} tokens" in shown and c.text in shown


def test_a_registered_engine_is_built_by_make_engine(monkeypatch):
    model, tok = load_model("tiny-random")
    cfg = load_config("scalerl", overrides=["rollout.max_new_tokens=160"]).rollout
    assert isinstance(make_engine(model, tok, cfg, seed=3), Engine)
    built = []
    monkeypatch.setattr(registry, "ENGINES", dict(registry.ENGINES))
    registry.register(LocalEngineConfig)(lambda *a, **kw: built.append(kw) or "mine")
    assert make_engine(model, tok, cfg, seed=3, greedy=True) == "mine"
    assert built == [{"fp32_head": True, "seed": 3, "greedy": True, "ignore_eos": False}]


def test_the_clients_bookkeeping():
    assert _find([5, 1, 2, 9, 1, 2], [1, 2]) == 3 and _find([5, 1], [1, 2]) is None
    spans = [{"version": "default", "start": 0, "end": 2}, {"version": "3", "start": 2, "end": 5}]
    assert _versions(spans, 6, 2) == [2, 2, 3, 3, 3, 2]
