"""The process transport's weights (scalerl.transport.weights): the generator process decodes straight
from the one published buffer (no copy of its own, none staged per version), every token with the
weights of the version it records; the evaluation runs there too and gives what it gave in the
trainer's process.

The model that shows it: tiny-random with every decoder layer silenced (attention and MLP output
projections zero) and every embedding row along one direction u, the row of token `token_of(v)`
twice as long as the others. Whatever the context, the last hidden state is then RMSNorm(u) and the
tied head's logits are proportional to the rows' lengths, so greedy decoding writes `token_of(v)`
at every step decoded with version v's weights: a token and its recorded version must agree."""

import pytest
import torch

from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.transport.weights import adopt
from weights_helpers import check_versions, set_version, version_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("alias", [False, True])
def test_every_token_is_decoded_with_the_weights_of_the_version_it_records(alias):
    check_versions("cpu", alias)


def test_a_bf16_generator_decodes_a_bf16_buffer_with_the_fp32_head_of_the_published_weights():
    check_versions("cpu", alias=True, bf16=True)


def test_the_published_weights_are_one_buffer_each_storage_once():
    from scalerl.transport.weights import SharedWeights

    ctx = torch.multiprocessing.get_context("spawn")
    model = version_model()
    state = model.state_dict()
    shared = SharedWeights(ctx, state, 0, 0, torch.float32, alias=False)
    link = shared.link.tensors
    assert link["lm_head.weight"] is link["model.embed_tokens.weight"]  # tied: one tensor
    params = {p.data_ptr() for p in model.parameters()}
    assert shared.nbytes() == 4 * sum(p.numel() for p in model.parameters())  # each storage once
    assert all(t.is_shared() and t.data_ptr() not in params for t in link.values())
    aliased = SharedWeights(ctx, state, 0, 0, torch.float32, alias=True)
    assert all(p.is_shared() for p in model.parameters())  # the trainer's parameters moved into shared memory
    assert aliased.aliased and {t.data_ptr() for t in aliased.link.tensors.values()} == {
        p.data_ptr() for p in model.parameters()
    }  # ... and are the buffer
    low = SharedWeights(ctx, model.state_dict(), 0, 0, torch.bfloat16, alias=True, head="lm_head.weight")
    assert not low.aliased and low.head32[1].dtype == torch.float32  # another dtype: a buffer of its own


def test_adopt_decodes_from_the_given_tensors_and_refuses_what_does_not_fit():
    model = version_model()
    other = version_model()
    set_version(other, 3)
    adopt(model, other.state_dict())
    assert all(a.data_ptr() == b.data_ptr() for a, b in zip(model.parameters(), other.parameters()))
    with pytest.raises(ScaleRLError, match="lack 1 of the model's entries"):
        adopt(model, {k: v for k, v in other.state_dict().items() if k != "model.norm.weight"})
    bad = dict(other.state_dict())
    bad["model.norm.weight"] = bad["model.norm.weight"].to(torch.bfloat16)
    with pytest.raises(ScaleRLError, match="model.norm.weight"):
        adopt(model, bad)


def test_the_evaluation_in_the_generator_process_gives_what_the_trainers_process_gave(tmp_path, two_cores):
    """Under the process transport the generator process evaluates (the trainer's process holds no
    evaluation engine); same seed, weights and prompts: the same completions as in the trainer's process."""
    from doubles import tiny_random_components
    from scalerl.assembly.run import build_run
    from scalerl.transport.local import RemoteGenerator

    out = {}
    for transport in ("thread", "process"):
        cfg = load_config(
            "scalerl",
            overrides=[
                "model.name=tiny-random",
                "batch.prompts=2",
                "batch.generations=2",
                "rollout.max_new_tokens=8",
                "rollout.batch_slots=4",
                "eval.prompts=4",
                "rollout.length.type=none",
                f"pipeline.transport={transport}",
                "run.threads=2",
                "eval.split=off",
            ],
        )
        torch.manual_seed(0)
        comps = tiny_random_components(cfg)
        run = build_run(cfg, tmp_path / transport, comps=comps)
        try:
            assert isinstance(run.evaluator.engine, RemoteGenerator) == (transport == "process")
            run.evaluator.engine.reseed()
            prompts = comps.task.val_prompts(4)
            out[transport] = [(c.prompt_id, c.tokens) for c in run.evaluator.engine.generate(prompts, 2)]
        finally:
            run.close()
    assert out["process"] == out["thread"] and len(out["thread"]) == 8


def test_a_split_evaluation_is_the_generator_processs_share_and_the_trainers_own_engine_on_the_rest(
    tmp_path, two_cores
):
    """eval.split=auto (the default) under the process transport on 2 cores with the tiny model: the
    generator process decodes every other prompt as it would alone, and the trainer's process the
    others with an engine of its own seed over the trainer's model."""
    from doubles import tiny_random_components
    from scalerl.assembly.run import EVAL_SEED_OFFSET, SPLIT_SEED_OFFSET, build_run
    from scalerl.evaluate import SplitEvaluator

    overrides = [
        "model.name=tiny-random",
        "batch.prompts=2",
        "batch.generations=2",
        "rollout.max_new_tokens=8",
        "rollout.batch_slots=4",
        "eval.prompts=6",
        "rollout.length.type=none",
        "pipeline.transport=process",
        "run.threads=2",
    ]
    cfg = load_config("scalerl", overrides=overrides)
    torch.manual_seed(0)
    comps = tiny_random_components(cfg)
    run = build_run(cfg, tmp_path / "split", comps=comps)
    prompts = comps.task.val_prompts(6)
    try:
        assert isinstance(run.evaluator.engine, SplitEvaluator) and run.evaluator.engine.local_share == 0.5
        run.evaluator.engine.reseed()
        split = [(c.prompt_id, c.tokens) for c in run.evaluator.engine.generate(prompts, 2)]
        run.evaluator.engine.reseed()
        again = [(c.prompt_id, c.tokens) for c in run.evaluator.engine.generate(prompts, 2)]
        run.evaluator.engine.remote.reseed()
        remote = [(c.prompt_id, c.tokens) for c in run.evaluator.engine.remote.generate(prompts[0::2], 2)]
        local = comps.stage(
            run.trainer.model, cfg.run.seed + EVAL_SEED_OFFSET + SPLIT_SEED_OFFSET, cfg.eval.temperature
        ).generator
        local.reseed()
        mine = [(c.prompt_id, c.tokens) for c in local.generate(prompts[1::2], 2)]
    finally:
        run.close()
    assert [pid for pid, _ in split] == [p.id for p in prompts for _ in range(2)]
    assert split == again  # common random numbers
    assert sorted(split) == sorted(remote + mine) and len(remote) == len(mine) == 6


def test_a_generator_that_fails_at_start_up_ends_the_trainer_with_its_line_and_lets_it_exit(tmp_path):
    """The trainer asked for an evaluation (a request larger than a pipe's buffer) that the dead
    generator never read: the error is raised in one line, and the process still exits."""
    import subprocess
    import sys
    from pathlib import Path

    code = f"""
import sys, torch
sys.path.insert(0, {str(Path(__file__).parents[1])!r})
from weights_helpers import build_failing
from scalerl.errors import ScaleRLError
from scalerl.transport.local import EvalSpec, ProcessRollouts
from scalerl.transport.protocol import GeneratorBuild
from scalerl.transport.window import Window
from scalerl.types import Prompt
start = {{"seed": 0, "epoch": 0, "position": 0}}
src = ProcessRollouts(GeneratorBuild(build_failing), 0, {{"w": torch.zeros(3)}}, 0, start,
                      None, 2, Window(2, 2), 1, evals=EvalSpec(0, None, 1))
try:
    src.evaluate([Prompt(f"p{{i}}", f"{{i}}: " + "x" * 400, "") for i in range(500)], 4, False)   # 200 kB
except ScaleRLError as exc:
    print("raised:", exc)
finally:
    src.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() in (
        "raised: no model here",  # its line, or its exit if that came first
        "raised: generator process exited with code 0: the run stopped at its last checkpoint, carry on with --resume",
    )
