"""`scalerl export`: a real 2-step run on tiny-random, exported, loaded by transformers as it is.

The checks do not go through the export code: the exported tensors are compared with the
checkpoint's own safetensors file, and the exported model's logits with those of
`scalerl.models.load_model(<checkpoint>)`."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

import scalerl.assembly.run as build_mod
from cli_helpers import SETS, one_line
from doubles import tiny_random_components
from scalerl.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 2-step `scalerl train` on tiny-random (the parity reward of the run-directory tests: a
    random model never passes arith), checkpoints at steps 1 and 2."""
    run = tmp_path_factory.mktemp("export") / "run"
    mp = pytest.MonkeyPatch()
    mp.setattr(build_mod, "build_components", lambda cfg, device: tiny_random_components(cfg, device))
    torch.set_num_threads(1)
    try:
        code = main(
            [
                "train",
                "--no-progress",
                *SETS,
                "--set",
                "run.checkpoint_every=1",
                "--max-steps",
                "2",
                "--run-dir",
                str(run),
            ]
        )
    finally:
        mp.undo()
    assert code == 0
    return run


def test_export_loads_with_transformers_and_equals_the_checkpoint(trained, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scalerl.models import load_model

    out = tmp_path / "hf"
    assert main(["export", str(trained), str(out)]) == 0
    ckpt = trained / "checkpoints" / "step_000002"  # the newest
    assert {"config.json", "generation_config.json", "model.safetensors", "README.md"} <= {
        p.name for p in out.iterdir()
    }

    exported, saved = load_file(out / "model.safetensors"), load_file(ckpt / "model.safetensors")
    shared = set(exported) & set(saved)
    assert len(shared) >= len(saved) - 1  # a tied head may be stored under either name
    for name in shared:
        assert torch.equal(exported[name], saved[name]), name
    base, _ = load_model("tiny-random")
    assert any(not torch.equal(exported[n], p.detach()) for n, p in base.named_parameters() if n in exported)

    model = AutoModelForCausalLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    ref, ref_tok = load_model(str(ckpt))
    ids = tok("12+34=", return_tensors="pt").input_ids
    assert ids.tolist() == ref_tok("12+34=", return_tensors="pt").input_ids.tolist()
    with torch.no_grad():
        got, want = model(ids).logits[0, -1], ref(ids).logits[0, -1]
        assert torch.equal(got, want)
        new = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)
    assert new.shape[1] == ids.shape[1] + 3 or tok.eos_token_id in new[0, ids.shape[1] :].tolist()
    assert new[0, ids.shape[1]].item() == int(want.argmax())  # greedy: the reference's argmax

    card = (out / "README.md").read_text()
    assert "recipe: scalerl" in card and "base model: tiny-random" in card and "step 2" in card
    assert "No fit" in card  # 2 steps: too few evaluations to fit


def test_export_an_older_step_and_the_fit_in_the_card(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    fit = {
        "model": "sigmoid",
        "A": 0.8125,
        "B": 1.5,
        "C_mid": 3.0e9,
        "ci": {"A": [0.75, 0.875]},
        "x": "flops",
        "final": {"start_pass_rate": 0.0625, "end_pass_rate": 0.5},
    }
    (run / "fit.json").write_text(json.dumps(fit))
    out = tmp_path / "hf"
    out.mkdir()  # an empty folder is fine
    assert main(["export", str(run), str(out), "--step", "1"]) == 0
    exported, saved = load_file(out / "model.safetensors"), load_file(run / "checkpoints/step_000001/model.safetensors")
    assert all(torch.equal(exported[n], saved[n]) for n in set(exported) & set(saved))
    card = (out / "README.md").read_text()
    for text in ("0.8125", "[0.75, 0.875]", "B (scaling exponent): 1.5", "3e+09", "0.0625", "0.5", "step 1"):
        assert text in card, text


def test_export_errors_are_one_line(trained, tmp_path, capsys):
    def err(*args):
        assert main(["export", *args]) == 2
        return one_line(capsys.readouterr().err)

    assert "not a scalerl run directory" in err(str(tmp_path), str(tmp_path / "o1"))
    assert "steps 1, 2" in err(str(trained), str(tmp_path / "o2"), "--step", "7")
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    assert "not empty" in err(str(trained), str(full))
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(trained / "config.yaml", bare / "config.yaml")
    assert "no checkpoint" in err(str(bare), str(tmp_path / "o3"))
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
