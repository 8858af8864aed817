"""The process transport's weights, on the CPU and on CUDA: the model whose greedy tokens name the weights'
version (tests/transport/test_weights.py says how), and the generator builds a spawned generator process runs
(imported as `weights_helpers`: tests/ is on sys.path under pytest, the spawned process inherits it)."""

import torch

from doubles import FakeTask, parity_reward
from scalerl.batching import BatchFiller
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.transport.local import ProcessRollouts
from scalerl.transport.protocol import GeneratorBuild, TrainerUpdate
from scalerl.transport.window import Window

GREEDY = [
    "model.name=tiny-random",
    "rollout.temperature=0.00001",
    "rollout.length.type=none",
    "rollout.max_new_tokens=6",
    "rollout.batch_slots=4",
]
FIRST_TOKEN = 20  # token_of(0); ids below are digits and special tokens


def token_of(version: int) -> int:
    """The token greedy decoding writes with version `version`'s weights."""
    return FIRST_TOKEN + version


@torch.no_grad()
def set_version(model, version: int, boost: float = 2.0) -> None:
    """Make greedy decoding of `model` write `token_of(version)` whatever the context (in place)."""
    emb = model.get_input_embeddings().weight
    u = 1.0 - 2.0 * (torch.arange(emb.shape[1], device=emb.device) % 2)  # +-1: exact in bf16, RMS 1
    emb.copy_(u.expand_as(emb))
    emb[token_of(version)] *= boost


@torch.no_grad()
def version_model(device: str = "cpu"):
    from scalerl.models import load_model

    model, _ = load_model("tiny-random", device=device)
    for name, p in model.named_parameters():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            p.zero_()
        elif name.endswith("norm.weight"):
            p.fill_(1.0)
    set_version(model, 0)
    return model


def build_greedy(
    cfg_json: str,
    device: str,
    *,
    seed: int,
    model=None,
    tokenizer=None,
    task=None,
    reward=None,
    temperature=None,
    weights=None,
    local=False,
):
    """A `GeneratorBuild` function (picklable): the real engine on a freshly loaded (random) tiny
    model, which the published `weights` replace."""
    from scalerl.assembly.generator import build_generator, decode_dtype
    from scalerl.config import Config
    from scalerl.models import load_model

    if model is None:
        model, tokenizer = load_model(
            "tiny-random", dtype=decode_dtype(Config.model_validate_json(cfg_json)), device=device
        )
    return build_generator(
        cfg_json,
        device,
        seed=seed,
        model=model,
        tokenizer=tokenizer,
        task=task or FakeTask(),
        reward=reward or parity_reward,
        temperature=temperature,
        weights=weights,
        local=local,
    )


def check_versions(device: str, alias: bool, bf16: bool = False) -> None:
    """`bf16`: the generator decodes in bf16 with its fp32 head: the buffer is bf16, the head's fp32
    values travel beside it. The boosted row is then 1 + 2**-10 times as long: equal to the others
    once rounded to bf16, so only a head that holds the fp32 values finds `token_of(v)`."""
    cfg = load_config(
        "scalerl", overrides=[*GREEDY, f"model.device={device}", f"model.compute_dtype={'bf16' if bf16 else 'fp32'}"]
    )
    boost = 1 + 2**-10 if bf16 else 2.0
    model = version_model(device)
    set_version(model, 0, boost)
    P, G, k = 2, 2, 2
    src = ProcessRollouts(
        GeneratorBuild(build_greedy, (cfg.model_dump_json(), device)),
        0,
        model.state_dict(),
        0,
        {"seed": 0, "epoch": 0, "position": 0},
        None,
        G,
        Window(P, k),
        1,
        alias=alias,
        dtype=torch.bfloat16 if bf16 else torch.float32,
        head="lm_head.weight",
    )
    assert src.aliased == (alias and not bf16)
    tokens = []
    try:
        for version in range(1, 9):
            (mb,) = src.collect(version - 1, lambda: BatchFiller(P, zero_variance=False), lambda g: None)
            tokens += [(t, v) for g in mb.groups for c in g.completions for t, v in zip(c.tokens, c.versions)]
            if src.aliased:  # the buffer is this model's parameters: they change under the transport's lock only
                with src.step_guard(version):
                    set_version(model, version, boost)
            else:
                set_version(model, version, boost)
            src.send(TrainerUpdate(version, model.state_dict()))
    finally:
        src.close()
    wrong = [(t, v) for t, v in tokens if t != token_of(v)]
    assert not wrong, (
        f"{len(wrong)} of {len(tokens)} tokens decoded with other weights than their version's: {wrong[:5]}"
    )
    assert len({v for _, v in tokens}) >= 3  # versions did change under the generator


def build_failing(*, seed: int, **given):
    """A `GeneratorBuild` function whose generator process cannot build its model."""
    raise ScaleRLError("no model here")
