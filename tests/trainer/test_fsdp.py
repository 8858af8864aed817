"""FSDP2 trainer ranks (trainer.strategy fsdp) over gloo on CPU, against one process.

One spawn of 2 ranks (module fixture) runs every case, since starting a rank (torch,
transformers, the process group) costs most of the time here:
- equality: one optimizer step of 2 FSDP ranks equals `train_step` in this process on the same
  batch (loss and weights, max abs difference < 1e-5), CISPO and PPO-clip, prompt / sample /
  token aggregation; micro-batch counts unequal between ranks; fewer groups than ranks;
- checkpoints: the ranks write step 1 with torch.distributed.checkpoint and take step 2, then
  one rank is killed with SIGKILL; a new pair of ranks loads step 1 and takes step 2 again: the
  same weights, bit for bit; one process (no process group) loads the same checkpoint and takes
  step 2: the same weights within 1e-5.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal

import pytest
import torch

from fsdp_helpers import CASES, TOL, fsdp_cfg, fsdp_groups, max_diff
from scalerl.models import load_model
from scalerl.trainer.sharded import FSDPRank, load_shards, spawn_ranks
from scalerl.trainer.step import Optimizer, plan_shards, train_step
from scalerl.types import Group


def _step_groups(step: int) -> list[Group]:
    return fsdp_groups(3 * step)


def _train_ranks(rank: int, world: int, rendezvous: str, run_dir: str, steps: int) -> None:
    """Steps 1..`steps` on 2 ranks, a checkpoint after each, as a run writes them (rank 0 the rest)."""
    from scalerl.run.checkpoint import TrainState, save_checkpoint

    cfg = fsdp_cfg([])
    r = FSDPRank(cfg, rank, world, rendezvous)
    model = load_model("tiny-random")[0] if rank == 0 else None
    for step in range(1, steps + 1):
        r.step(plan_shards(_step_groups(step), cfg, world)[rank], step)
        full = r.full_weights()
        if rank == 0:
            model.load_state_dict(full)
            save_checkpoint(run_dir, model, {}, TrainState(step=step), shards=lambda p: r.save(str(p)))
        else:
            r.save(os.path.join(run_dir, "checkpoints", f".tmp-step_{step:06d}", "dcp"))


def _ranks_main(rank: int, world: int, rendezvous: str, run_dir: str, steps: int) -> dict | None:
    """Every equality case, then the resume of `run_dir`'s newest checkpoint to step `steps`; rank 0's results."""
    from scalerl.run.checkpoint import latest_checkpoint, read_state, verify_checksums

    cases = []
    for overrides, n in CASES:
        cfg = fsdp_cfg(overrides)
        r = FSDPRank(cfg, rank, world, rendezvous)
        row = r.step(plan_shards(fsdp_groups()[:n], cfg, world)[rank], 1)
        cases.append((row, r.full_weights()))
    ckpt = latest_checkpoint(run_dir)
    verify_checksums(ckpt)
    r = FSDPRank(fsdp_cfg([]), rank, world, rendezvous)
    r.load(str(ckpt / "dcp"))
    for step in range(read_state(ckpt).step + 1, steps + 1):
        r.step(plan_shards(_step_groups(step), r.cfg, world)[rank], step)
    weights = r.full_weights()
    return {"cases": cases, "resumed_from": ckpt.name, "weights": weights, "memory": r.memory()} if rank == 0 else None


def _kill_9_mid_run(run_dir: str) -> None:
    """2 ranks training with a checkpoint every step, both killed with SIGKILL once step 2 is saved."""
    import time

    import torch.multiprocessing as mp

    from scalerl.run.ports import host_store
    from scalerl.trainer.sharded import _rank_main

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    store = host_store("127.0.0.1", "2 FSDP ranks")  # hosted here until they are killed
    rendezvous = f"127.0.0.1:{store.port}"
    procs = [
        ctx.Process(target=_rank_main, args=(_train_ranks, r, 2, rendezvous, (run_dir, 1000), out)) for r in range(2)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 180
    try:
        while not os.path.exists(os.path.join(run_dir, "checkpoints", "step_000002")):
            assert time.monotonic() < deadline, "no step 2 checkpoint within 180 s"
            assert all(p.is_alive() for p in procs), "a rank died before step 2"
            time.sleep(0.05)
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.join(timeout=30)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    from scalerl.run.checkpoint import remove_partial

    run_dir = str(tmp_path_factory.mktemp("fsdp-run"))
    _kill_9_mid_run(run_dir)
    remove_partial(run_dir)  # what a resume does first: a half-written .tmp-step_N goes
    newest = max(
        int(p.name.split("_")[1])
        for p in (tmp_path_factory.getbasetemp() / run_dir).joinpath("checkpoints").glob("step_*")
    )
    steps = newest + 2
    return spawn_ranks(_ranks_main, 2, run_dir, steps, timeout_s=300)[0] | {"run_dir": run_dir, "steps": steps}


def _single(overrides: list[str]):
    cfg = fsdp_cfg(overrides)
    torch.manual_seed(cfg.run.seed)
    model, tokenizer = load_model("tiny-random")
    model.train()
    return model, Optimizer(model, cfg), cfg, tokenizer.pad_token_id


@pytest.mark.parametrize("case", range(len(CASES)))
def test_two_fsdp_ranks_take_the_single_process_step(ranks, case):
    overrides, n = CASES[case]
    model, optim, cfg, pad = _single(overrides)
    start = copy.deepcopy(model.state_dict())
    one = train_step(model, optim, fsdp_groups()[:n], cfg, pad, 1)
    row, weights = ranks["cases"][case]
    assert max_diff(start, model.state_dict()) > 1e-3  # the step moved the weights well past the tolerance
    assert max_diff(weights, model.state_dict()) < TOL
    assert abs(row["train/loss"] - one["train/loss"]) < TOL
    assert row["tokens/trained_step"] == one["tokens/trained_step"]
    assert abs(row["train/grad_norm"] - one["train/grad_norm"]) < TOL


def test_unequal_micro_batches_and_a_rank_without_a_group_are_padded():
    cfg = fsdp_cfg(CASES[2][0])
    shards = plan_shards(fsdp_groups(), cfg, 2)
    assert [len(s.groups) for s in shards] == [2, 1]  # with a tiny activation budget: 2 micro-batches vs 1
    lone = plan_shards(fsdp_groups()[:1], cfg, 2)
    assert [s.weight for s in lone] == [1.0, 0.0] and lone[1].groups == lone[0].groups


def test_two_ranks_resume_after_kill_9_exactly(ranks):
    model, optim, cfg, pad = _single([])
    for step in range(1, ranks["steps"] + 1):
        train_step(model, optim, _step_groups(step), cfg, pad, step)
    assert ranks["resumed_from"] >= "step_000002"
    assert max_diff(ranks["weights"], model.state_dict()) < TOL


def test_one_process_resumes_a_two_rank_checkpoint(ranks):
    from scalerl.run.checkpoint import latest_checkpoint, read_state

    ckpt = latest_checkpoint(ranks["run_dir"])
    steps = range(read_state(ckpt).step + 1, ranks["steps"] + 1)
    model, optim, cfg, pad = _single([])
    load_shards(ckpt / "dcp", model, optim, cfg)
    weights = copy.deepcopy(model.state_dict())
    for step in steps:
        train_step(model, optim, _step_groups(step), cfg, pad, step)
    assert max_diff(ranks["weights"], model.state_dict()) < TOL
    # the AdamW moments came from the shards: the same weights with a fresh AdamW end elsewhere
    fresh, fresh_optim, _, _ = _single([])
    fresh.load_state_dict(weights)
    for step in steps:
        train_step(fresh, fresh_optim, _step_groups(step), cfg, pad, step)
    assert max_diff(ranks["weights"], fresh.state_dict()) > 100 * TOL


def test_each_rank_holds_half_of_the_parameters_gradients_and_moments(ranks):
    model, _, _, _ = _single([])
    full = sum(p.numel() * p.element_size() for p in model.parameters())
    mem = ranks["memory"]
    assert full / 2 <= mem["params"] <= full / 2 * 1.1
    assert mem["optimizer"] >= 2 * full / 2 and mem["optimizer"] <= 2 * full / 2 * 1.1 + 1024


def test_export_of_a_sharded_checkpoint_writes_one_hugging_face_folder_of_its_weights(ranks, tmp_path):
    import yaml
    from transformers import AutoModelForCausalLM

    from scalerl.export import export_run

    run_dir = tmp_path / "run"  # the killed run's checkpoints, with the config.yaml a run writes
    shutil.copytree(os.path.join(ranks["run_dir"], "checkpoints"), run_dir / "checkpoints")
    (run_dir / "config.yaml").write_text(yaml.safe_dump(fsdp_cfg([]).model_dump(mode="json")))
    ckpt = export_run(run_dir, tmp_path / "hf")
    assert (ckpt / "dcp").is_dir()
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    model, optim, cfg, _ = _single([])
    load_shards(ckpt / "dcp", model, optim, cfg)  # the weights as the ranks' shards hold them
    assert max_diff(exported.state_dict(), model.state_dict()) == 0


def test_strategy_resolution_and_what_fsdp_refuses():
    from scalerl.errors import ScaleRLError
    from scalerl.trainer.sharded import check_config

    assert fsdp_cfg([]).trainer.resolved(1) == "single" and fsdp_cfg(["ray.trainers=2"]).trainer.resolved(2) == "ddp"
    fsdp = fsdp_cfg(["trainer.strategy=fsdp", "ray.trainers=2"])
    assert (
        fsdp.trainer.actors(2) == 2 and fsdp_cfg(["ray.trainers=3"]).trainer.actors(3) == 2
    )  # ddp: rank 0 is the driver
    with pytest.raises(ScaleRLError, match="trainer.strategy = 'single' runs one trainer, but ray.trainers = 2"):
        fsdp_cfg(["trainer.strategy=single", "ray.trainers=2"])
    with pytest.raises(ScaleRLError, match="loss.kl_beta > 0 is not supported with trainer.strategy=fsdp"):
        check_config(fsdp_cfg(["trainer.strategy=fsdp", "loss.type=ppo_clip", "loss.kl_beta=0.01"]))
