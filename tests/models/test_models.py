"""Model loading, the tiny tokenizer, the build cache; the warm start and SmolLM2: tests/slow."""

import threading

import pytest
import torch

from scalerl.errors import ScaleRLError
from scalerl.models import load_model
from scalerl.models.cache import build_key, cached_build

PHRASE = "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"


@pytest.fixture(scope="module")
def tiny_random():
    return load_model("tiny-random")


def test_tiny_tokenizer_is_character_level_with_single_think_tokens(tiny_random):
    _, tok = tiny_random
    ids = tok(PHRASE)["input_ids"]
    assert len(ids) == len(PHRASE) - len("</think>") + 1  # one token a character, one for </think>
    assert ids[-1] == tok.convert_tokens_to_ids("</think>")
    assert tok.decode(ids) == PHRASE  # no unknowns, no spaces inserted
    assert tok.decode(ids, skip_special_tokens=True) == PHRASE  # think tags survive decoding
    assert tok("12+34=")["input_ids"] == tok("12+34=", add_special_tokens=False)["input_ids"]
    assert len({tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id}) == 4


def test_tiny_model_shape(tiny_random):
    model, tok = tiny_random
    h, layers, mlp, vocab = 128, 4, 512, len(tok)
    # per layer: q,k,v,o (4 h^2) + gate,up,down (3 h mlp) + two RMSNorms; tied embedding; final norm
    expected = vocab * h + layers * (4 * h * h + 3 * h * mlp + 2 * h) + h
    assert sum(p.numel() for p in model.parameters()) == expected
    assert model.config.eos_token_id == tok.eos_token_id
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def test_checkpoint_directory_round_trip_and_bf16(tmp_path, tiny_random):
    model, tok = tiny_random
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert list(tmp_path.glob("*.safetensors"))
    loaded, tok2 = load_model(str(tmp_path))
    ids = torch.tensor([tok("4321+8765=<think>")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert tok2(PHRASE)["input_ids"] == tok(PHRASE)["input_ids"]
    half, _ = load_model(str(tmp_path), dtype="bf16")
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}


def test_unknown_names_list_the_valid_ones(tmp_path):
    with pytest.raises(
        ScaleRLError,
        match="ladder-1m, ladder-2m, ladder-4m, ladder-code-1m, tiny, tiny-random, tiny-order, small, small-order, "
        "smollm2-135m, smollm2-shape-random",
    ):
        load_model("gpt-17")
    with pytest.raises(ScaleRLError, match="no config.json"):
        load_model(str(tmp_path))
    with pytest.raises(ScaleRLError, match="expected one of fp32, bf16"):
        load_model("tiny-random", dtype="fp16")


def test_build_key_depends_on_every_field():
    base = {"model": {"hidden": 128}, "version": "v1"}
    assert build_key("tiny", base) == build_key("tiny", dict(reversed(list(base.items()))))
    assert build_key("tiny", base) != build_key("tiny", {**base, "version": "v2"})
    assert build_key("tiny", base) != build_key("tiny", {**base, "model": {"hidden": 64}})


def test_cache_build_is_atomic_and_happens_once(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path))
    calls = []

    def broken(d):
        (d / "half.bin").write_text("x")
        raise KeyboardInterrupt  # a build killed half-way

    with pytest.raises(KeyboardInterrupt):
        cached_build("k", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.lock"]  # nothing half-built left
    (tmp_path / ".k.killed").mkdir()  # as a SIGKILLed build leaves it

    def slow_build(d):
        calls.append(1)
        threading.Event().wait(0.3)
        (d / "weights").write_text("w")

    results = []
    threads = [threading.Thread(target=lambda: results.append(cached_build("k", slow_build))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(set(results)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k", "k.lock"]
    assert (results[0] / "weights").read_text() == "w"


def test_small_order_is_the_default_testbed_at_the_small_shape(monkeypatch, tmp_path):
    """`small-order` builds the `small` shape (width 512, 8 layers) with `tiny-order`'s warm start and
    wrong-order habit, under its own cache key; `tiny-order`'s key is untouched. Nothing is built here:
    the build is captured and only its spec is checked."""
    import scalerl.models.cache as cache
    from scalerl.models import checkpoint_dir, tiny

    seen = {}
    monkeypatch.setattr(
        cache, "cached_build", lambda key, build, build_missing=True: seen.setdefault(key, build) and tmp_path
    )
    checkpoint_dir("small-order")
    checkpoint_dir("tiny-order")
    (small_key, build), tiny_key = list(seen.items())[0], list(seen)[1]
    assert small_key.startswith("small-order-") and tiny_key == "tiny-order-1f3ddbdbbb74"  # the default's cache
    spec = tiny.build_spec(tiny.order_settings(), "small", tiny.WRONG_ORDER_SHARE)
    assert cache.build_key("small-order", spec) == small_key
    assert spec["model"]["hidden_size"] == 512 and spec["model"]["num_hidden_layers"] == 8
    assert spec["wrong_order_share"] == 0.85 and spec["warm_start"]["max_steps"] == 2700
    calls = []
    monkeypatch.setattr(tiny, "build_tiny", lambda d, settings, **kw: calls.append((settings, kw)))
    build(tmp_path)
    assert calls == [(tiny.order_settings(), {"shape": "small", "wrong_order_share": 0.85})]


def test_bf16_model_keeps_fp32_rope_frequencies(tiny_random):
    from scalerl.assembly.generator import generator_copy
    from scalerl.configure import load_config

    model, _ = tiny_random
    half, _ = load_model("tiny-random", dtype="bf16")
    copy = generator_copy(model, load_config("scalerl", overrides=["model.compute_dtype=bf16"]))
    for m in (half, copy):
        assert m.get_input_embeddings().weight.dtype == torch.bfloat16
        assert m.model.rotary_emb.inv_freq.dtype == torch.float32
        assert torch.equal(m.model.rotary_emb.inv_freq, model.model.rotary_emb.inv_freq)


def test_compute_dtype_auto_is_fp32_without_cuda():
    from scalerl.configure import load_config
    from scalerl.models import compute_dtype

    cfg = load_config("scalerl")
    assert cfg.model.compute_dtype == "auto"
    gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    assert compute_dtype(cfg.model) == ("bf16" if gpu_bf16 else "fp32")
    assert compute_dtype(load_config("scalerl", overrides=["model.device=cpu"]).model) == "fp32"
    assert compute_dtype(load_config("scalerl", overrides=["model.compute_dtype=bf16"]).model) == "bf16"


def test_smollm2_shape_random_has_smollm2s_parameter_count():
    model, tok = load_model("smollm2-shape-random")
    # SmolLM2-135M by hand: tied 49152 x 576 embedding; 30 layers of q/o 576x576, k/v 576x192
    # (3 KV heads of 64), a 576 -> 1536 SwiGLU (3 matrices), two RMSNorms; a final RMSNorm
    per_layer = 2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536 + 2 * 576
    assert sum(p.numel() for p in model.parameters()) == 49152 * 576 + 30 * per_layer + 576 == 134_515_008
    assert len(tok) == 49152 and tok.decode(tok("12 + 7 = 19").input_ids) == "12 + 7 = 19"


def test_a_run_or_its_checkpoint_loads_as_the_trained_model(tmp_path):
    """`model.name` = a scalerl run directory (its newest checkpoint) or one checkpoint: the run's
    base model (config.yaml) with the checkpoint's weights; the tokenizer is the base's."""
    from scalerl.config import dump_config
    from scalerl.configure import load_config
    from scalerl.models import base_model
    from scalerl.rollout.length import phrase_tokens
    from scalerl.run.checkpoint import TrainState, save_checkpoint

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(dump_config(load_config("scalerl", None, ["model.name=tiny-random"])))
    with pytest.raises(ScaleRLError, match="without a finished checkpoint"):
        load_model(str(run))
    (run / "checkpoints").mkdir()
    model, _ = load_model("tiny-random")
    saved = {}
    for step in (2, 4):  # two checkpoints with different weights: the run loads the newer
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * step)
        saved[step] = {k: v.clone() for k, v in model.state_dict().items()}
        save_checkpoint(run, model, {}, TrainState(step=step))
    fresh, _ = load_model("tiny-random")
    for name, expected in ((str(run), saved[4]), (str(run / "checkpoints" / "step_000002"), saved[2])):
        loaded, tok = load_model(name)
        assert len(tok) == len(load_model("tiny-random")[1])
        for k, v in loaded.state_dict().items():
            assert torch.equal(v, expected[k]), k
        assert any(not torch.equal(v, fresh.state_dict()[k]) for k, v in loaded.state_dict().items())
    assert base_model(str(run)) == "tiny-random"
    assert phrase_tokens(str(run), "</think>") == phrase_tokens("tiny-random", "</think>")
    # a checkpoint moved out of its run cannot say which model it belongs to
    lone = tmp_path / "lone"
    (run / "checkpoints" / "step_000002").rename(lone)
    with pytest.raises(ScaleRLError, match="outside its run directory"):
        load_model(str(lone))
    # a run whose config names the run itself
    (run / "config.yaml").write_text(dump_config(load_config("scalerl", None, [f"model.name={run}"])))
    with pytest.raises(ScaleRLError, match="leads back"):
        load_model(str(run))


def test_the_default_testbed_ships_its_weights_checked_by_sha256(tmp_path, monkeypatch):
    """ladder-1m loads from the package, not a build: the same bytes on every machine (issue 47); the
    committed SHA256SUMS is checked, so a changed file is a one-line error naming it."""
    import hashlib
    import shutil

    import scalerl.models as models

    folder = models.checkpoint_dir("ladder-1m", build=False)
    assert folder == models.SHIPPED_ROOT / "ladder-1m"
    expected, name = (folder / "SHA256SUMS").read_text().split()
    assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == expected
    assert models.weights_id("ladder-1m", build=False) == expected[:12]
    copy = tmp_path / "ladder-1m"
    shutil.copytree(folder, copy)
    data = bytearray((copy / name).read_bytes())
    data[-1] ^= 1
    (copy / name).write_bytes(bytes(data))
    monkeypatch.setattr(models, "SHIPPED_ROOT", tmp_path)
    with pytest.raises(ScaleRLError, match=r"model.safetensors: sha256 .*, expected " + expected[:12]):
        models.checkpoint_dir("ladder-1m")
    (copy / "SHA256SUMS").unlink()
    with pytest.raises(ScaleRLError, match="SHA256SUMS: missing"):
        models.checkpoint_dir("ladder-1m")
