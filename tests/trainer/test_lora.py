"""LoRA (`model.lora`): only the adapters train, the generator and the export get merged weights.

The expected values are computed here from the model's shapes and its adapters' own tensors
(W + alpha/r * B @ A), not through scalerl.lora."""

import pytest
import torch
from safetensors.torch import load_file

import scalerl.assembly.run as build_mod
import scalerl.loop as train_mod
from cli_helpers import SETS, one_line
from doubles import tiny_random_components
from scalerl.cli import main
from scalerl.config import LoraConfig
from scalerl.configure import load_config
from scalerl.lora import apply_lora
from scalerl.models import load_model
from scalerl.rollout import Engine
from scalerl.trainer import state as state_mod
from scalerl.trainer.step import Optimizer, train_step
from train_helpers import random_groups

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LORA = "model.lora={r: 4, alpha: 8, targets: [q_proj, v_proj, down_proj]}"
# the real run on `tiny` (arith): every batch trains (no zero-variance filter), 32-token completions
TINY = [
    "model.name=tiny",
    LORA,
    "batch.prompts=2",
    "batch.generations=4",
    "rollout.length.type=none",
    "rollout.max_new_tokens=32",
    "rollout.batch_slots=8",
    "pipeline.transport=thread",
    "run.threads=1",
    "eval.every=100",
    "eval.prompts=2",
    "eval.samples=1",
    "filter.zero_variance=false",
    "curriculum.no_positive_resampling=false",
    "run.checkpoint_every=1",
    "optim.warmup_steps=1",
]


def _expected_merged(model, r: float, alpha: float) -> dict[str, torch.Tensor]:
    """The base model's state dict with W + alpha/r * B @ A for each adapted layer, from the tensors."""
    params = dict(model.named_parameters())
    out = {}
    for key, value in model.state_dict().items():
        if ".lora_" in key:
            continue
        if ".base_layer." in key:
            owner, leaf = key.split(".base_layer.")
            if leaf == "weight":
                A, B = params[f"{owner}.lora_A.default.weight"], params[f"{owner}.lora_B.default.weight"]
                value = value + alpha / r * B.detach() @ A.detach()
            key = f"{owner}.{leaf}"
        out[key] = value
    return out


def test_trainable_parameters_are_r_times_in_plus_out_per_adapted_linear():
    model, _ = load_model("tiny-random")
    targets = ("q_proj", "v_proj", "down_proj")
    expected = sum(
        4 * (m.in_features + m.out_features)
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and n.endswith(targets)
    )
    model = apply_lora(model, LoraConfig(r=4, alpha=8, targets=list(targets)))
    cfg = load_config("scalerl")
    assert sum(p.numel() for p in Optimizer(model, cfg).params) == expected > 0


def test_a_step_changes_the_adapters_and_leaves_the_base_weights():
    cfg = load_config("scalerl", overrides=[LORA, "rollout.temperature=0.7"])
    model, _ = load_model("tiny-random")
    model = apply_lora(model, cfg.model.lora)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for _ in range(2):  # B starts at 0, so A's gradient is 0 on the first step
        row = train_step(model, Optimizer(model, cfg), random_groups(), cfg, pad_id=0, step=1)
    assert row is not None and row["train/grad_norm"] > 0
    after = dict(model.named_parameters())
    base = [n for n in before if ".lora_" not in n]
    adapters = [n for n in before if ".lora_" in n]
    assert base and all(torch.equal(before[n], after[n]) for n in base)
    assert all(not torch.equal(before[n], after[n]) for n in adapters if "lora_B" in n)


def test_the_generator_receives_the_merged_weights(tmp_path, monkeypatch):
    received = []
    update = Engine.update_weights

    def record(self, state_dict, version):
        received.append(({k: v.detach().clone() for k, v in state_dict.items()}, version))
        update(self, state_dict, version)

    monkeypatch.setattr(Engine, "update_weights", record)
    cfg = load_config("scalerl", overrides=[*SETS[1::2], LORA, "run.max_steps=2"])
    tr = train_mod.train(cfg, tmp_path, comps=tiny_random_components(cfg), progress=False)
    state, version = received[-1]
    assert version == tr.state.step == 2
    expected = _expected_merged(tr.model, r=4, alpha=8)
    base, _ = load_model("tiny-random")
    assert set(state) == set(base.state_dict())
    for name, value in expected.items():
        torch.testing.assert_close(state[name], value, rtol=0, atol=1e-6, msg=name)
    assert any(not torch.equal(state[n], base.state_dict()[n]) for n in state)  # the adapters moved the weights


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A real `scalerl train` on `tiny` (arith) with LoRA: 2 steps, a checkpoint each."""
    run = tmp_path_factory.mktemp("lora") / "run"
    torch.set_num_threads(1)
    code = main(
        ["train", "--no-progress", *[a for s in TINY for a in ("--set", s)], "--max-steps", "2", "--run-dir", str(run)]
    )
    assert code == 0
    return run


def test_a_lora_run_checkpoints_adapters_and_merged_weights(lora_run):
    from scalerl.run.metrics import read_rows

    ckpt = lora_run / "checkpoints" / "step_000002"
    adapters = load_file(ckpt / "adapter.safetensors")
    assert adapters and all(".lora_" in k for k in adapters)
    merged = load_file(ckpt / "model.safetensors")
    assert not any(".lora_" in k or ".base_layer." in k for k in merged)
    rows = [r for r in read_rows(lora_run / "metrics.jsonl") if r["kind"] == "train"]
    assert rows[0]["train/trainable_params"] == sum(v.numel() for v in adapters.values())


def test_a_resumed_lora_run_holds_the_checkpoints_adapters_and_optimizer(lora_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    cfg = load_config("scalerl", overrides=TINY)
    comps = build_mod.build_components(cfg, "cpu")
    comps.model = apply_lora(comps.model, cfg.model.lora)
    tr = state_mod.Trainer(cfg, comps.model, comps.tokenizer.pad_token_id, run, state_mod.LocalStep())
    tr.restore()
    ckpt = run / "checkpoints" / "step_000002"
    assert tr.state.step == 2
    saved = load_file(ckpt / "adapter.safetensors")
    params = dict(tr.model.named_parameters())
    assert all(torch.equal(params[k], v) for k, v in saved.items())
    opt = torch.load(ckpt / "optimizer.pt", weights_only=False)
    assert len(opt["opt"]["state"]) == len(tr.optim.params) > 0
    for got, want in zip(tr.optim.opt.state_dict()["state"].values(), opt["opt"]["state"].values()):
        assert torch.equal(got["exp_avg"], want["exp_avg"]) and torch.equal(got["exp_avg_sq"], want["exp_avg_sq"])
    merged = load_file(ckpt / "model.safetensors")
    for name, value in _expected_merged(tr.model, r=4, alpha=8).items():
        if name in merged:
            torch.testing.assert_close(merged[name], value, rtol=0, atol=1e-6)
    assert main(["train", "--no-progress", "--resume", "--max-steps", "3", "--run-dir", str(run)]) == 0
    assert (run / "checkpoints" / "step_000003" / "adapter.safetensors").is_file()


def test_export_of_a_lora_run_loads_without_peft_and_gives_the_merged_logits(lora_run, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "hf"
    assert main(["export", str(lora_run), str(out)]) == 0
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not any("lora" in n for n, _ in model.named_parameters())
    cfg = load_config("scalerl", overrides=["model.name=tiny", LORA])
    merged, _ = load_model("tiny")
    adapted = apply_lora(merged, cfg.model.lora)
    adapted.load_state_dict(load_file(lora_run / "checkpoints" / "step_000002" / "adapter.safetensors"), strict=False)
    adapted.eval()
    ids = torch.tensor([[5, 9, 12, 7, 3]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, adapted(ids).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "override,named",
    [
        ("model.lora.r=0", "model.lora.r"),
        ("model.lora.alpha=-1", "model.lora.alpha"),
        ("model.lora.targets=[]", "model.lora.targets"),
        ("model.lora.rank=4", "model.lora.r"),
        ("model.lora.targets=[qkv_proj]", "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"),
        ("model.lora.targets=[lm_head]", "LM head"),
    ],
)
def test_bad_lora_configs_are_one_line_errors(tmp_path, capsys, monkeypatch, override, named):
    monkeypatch.setattr(build_mod, "build_components", lambda cfg, device: tiny_random_components(cfg, device))
    code = main(["train", "--no-progress", *SETS, "--set", override, "--run-dir", str(tmp_path / "run")])
    assert code != 0
    assert named in one_line(capsys.readouterr().err)
