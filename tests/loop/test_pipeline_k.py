"""PipelineRL-k, draws and compute through the real loop (`train`), with fake generators."""

import pytest

from doubles import parity_reward
from scalerl.assembly.resources import ray_devices, split_threads
from scalerl.errors import ScaleRLError
from scalerl.loop import train
from scalerl.trainer import state as state_mod
from scalerl.types import Prompt, Score
from train_helpers import fake_components, small_cfg, train_rows

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_k_sweep_staleness_reaches_k_never_exceeds_it_and_nothing_is_dropped(k, tmp_path, monkeypatch):
    cfg = small_cfg(
        extra=[
            f"run.max_steps={k + 5}",
            f"pipeline.k={k}",
            "filter.zero_variance=false",
            "eval.every=100",
            "run.checkpoint_every=100",
            "pipeline.max_kl=null",
        ]
    )  # the paper's fixed k
    comps, gens = fake_components(cfg, step_seconds=0.0005)
    real_step = state_mod.train_step

    def slow_step(*args, **kwargs):
        gens[1].wait_idle()  # a trainer slower than the generator: it steps once the generator waits at the window
        return real_step(*args, **kwargs)

    monkeypatch.setattr(state_mod, "train_step", slow_step)
    train(cfg, tmp_path, comps=comps, progress=False)
    rows = train_rows(tmp_path)
    assert len(rows) == k + 5
    assert max(r["staleness/max"] for r in rows) == k
    assert rows[-1]["staleness/dropped"] == 0 and rows[-1]["staleness/dropped_share"] == 0.0


@pytest.mark.parametrize("max_kl, lo, hi", [(1e-12, 0, 1), (1e6, 4, 4)])
def test_the_staleness_bound_follows_the_measured_kl(max_kl, lo, hi, tmp_path, monkeypatch):
    """pipeline.max_kl: with a trainer slower than the generator, a bound no measured KL fits keeps every
    batch at most 1 version stale; one every KL fits lets the bound grow a version a step up to k (4)."""
    k = 4
    cfg = small_cfg(
        extra=[
            f"run.max_steps={3 * k}",
            f"pipeline.k={k}",
            f"pipeline.max_kl={max_kl}",
            "filter.zero_variance=false",
            "eval.every=100",
            "run.checkpoint_every=100",
        ]
    )
    comps, gens = fake_components(cfg, step_seconds=0.0005)
    real_step = state_mod.train_step

    def slow_step(*args, **kwargs):
        gens[1].wait_idle()  # slower than the generator: once it waits at the window
        return real_step(*args, **kwargs)

    monkeypatch.setattr(state_mod, "train_step", slow_step)
    train(cfg, tmp_path, comps=comps, progress=False)
    rows = train_rows(tmp_path)
    bounds = [r["pipeline/bound"] for r in rows]
    # slow start: nothing stale at step 1, so the bound grows to 2; then one version a step at most
    assert bounds[:k] == ([2, 1, 1, 1] if hi == 1 else [2, 3, 4, 4])
    assert min(bounds[1:]) >= 1 and max(bounds[1:]) == hi
    late = [r["staleness/max"] for r in rows[2 * k :]]
    assert lo <= min(late) and max(late) <= hi
    assert all(r["pipeline/kl"] >= 0 for r in rows)
    assert rows[-1]["staleness/dropped"] == 0


class _TwoPrompts:
    """A task with two training prompts, drawn over and over (ids repeat)."""

    name = "two"
    val_size = 384
    answer_marker = "</think>"

    def __len__(self) -> int:
        return 2

    def train_prompt(self, index: int) -> Prompt:
        return Prompt(id=f"two/{index % 2}", text=f"{index % 2}=", answer="")

    def val_prompts(self, n: int) -> list[Prompt]:
        return [Prompt(id=f"two/val/{i}", text=f"{i}=", answer="") for i in range(n)]


@pytest.mark.parametrize("mode", ["pipeline_rl", "ppo_off_policy"])
def test_the_same_prompt_in_flight_twice_trains_as_two_groups(mode, tmp_path, monkeypatch):
    cfg = small_cfg(
        extra=[
            "run.max_steps=3",
            "batch.prompts=4",
            f"pipeline.mode={mode}",
            "pipeline.k=2",
            "filter.zero_variance=false",
            "eval.every=100",
            "curriculum.no_positive_resampling=false",
        ]
    )
    comps, _ = fake_components(cfg)
    comps.task = _TwoPrompts()
    seen = []
    real_step = state_mod.train_step

    def record(model, optim, groups, *args, **kwargs):
        seen.append([(g.prompt.id, len(g.completions)) for g in groups])
        return real_step(model, optim, groups, *args, **kwargs)

    monkeypatch.setattr(state_mod, "train_step", record)
    train(cfg, tmp_path, comps=comps, progress=False)
    assert len(train_rows(tmp_path)) == 3
    for step in seen:  # 4 groups of G = 4 each, two of each prompt: never merged into one group of 8
        assert sorted(step) == [("two/0", 4), ("two/0", 4), ("two/1", 4), ("two/1", 4)]


def test_a_batch_whose_every_check_failed_stops_the_run_naming_the_error(tmp_path):
    cfg = small_cfg(extra=["run.max_steps=3", "eval.every=100"])
    comps, _ = fake_components(cfg)

    def broken_checker(prompt, completion):
        return Score(-1.0, False, error="AssertionError: daemonic processes are not allowed to have children")

    comps.reward_fn = broken_checker
    with pytest.raises(ScaleRLError, match=r"step 1: the reward failed on all 8 answers.*daemonic"):
        train(cfg, tmp_path, comps=comps, progress=False)


def test_one_device_shared_by_generator_and_trainer_books_wall_clock_once(tmp_path, two_cores):
    cfg = small_cfg(extra=["run.max_steps=4", "eval.every=100"])  # run.threads=1: one core for both stages
    comps, _ = fake_components(cfg)
    train(cfg, tmp_path, comps=comps, progress=False)
    rows = train_rows(tmp_path)
    total = 0.0
    for r in rows:
        assert r["compute/devices"] == 1.0
        assert r["compute/step_device_seconds"] == pytest.approx(r["time/step"])
        total += r["time/step"]
        assert r["compute/device_hours"] == pytest.approx(total / 3600)
    assert split_threads(cfg, "cuda").devices == 1.0  # one GPU, both stages: counted once
    assert split_threads(small_cfg(extra=["run.threads=2", "pipeline.transport=process"]), "cpu").devices == 2.0


def test_ray_counts_every_actors_devices():
    cfg = small_cfg(extra=["ray.generators=3", "ray.generator_cpus=2", "ray.trainers=2", "ray.trainer_cpus=1"])
    assert ray_devices(cfg, "cpu", driver_threads=1) == 1 + 3 * 2 + 1 * 1
    gpu = small_cfg(extra=["ray.generators=2", "ray.generator_gpus=1", "ray.trainers=3", "ray.trainer_gpus=1"])
    assert ray_devices(gpu, "cuda", driver_threads=8) == 1 + 2 * 1 + 2 * 1


def test_skipped_batches_still_count_their_generated_tokens(tmp_path):
    cfg = small_cfg(extra=["run.max_steps=3", "eval.every=100"])
    comps, _ = fake_components(cfg)
    calls = {"n": 0}

    def every_other_batch_all_fail(prompt, completion):  # zero-variance batches are skipped, but cost compute
        score = parity_reward(prompt, completion) if (calls["n"] // 8) % 2 else Score(-1.0, False)
        calls["n"] += 1
        return score

    comps.reward_fn = every_other_batch_all_fail
    train(cfg, tmp_path, comps=comps, progress=False)
    rows = train_rows(tmp_path)
    assert rows[-1]["train/skipped_batches"] >= 1
    per_step = sum(r["tokens/generated"] for r in rows)
    assert rows[-1]["compute/tokens_generated"] > per_step  # the skipped batches' tokens are in the total
    n = sum(p.numel() for p in comps.model.parameters())
    assert rows[-1]["compute/flops"] == pytest.approx(
        2 * n * rows[-1]["compute/tokens_generated"] + 6 * n * rows[-1]["compute/tokens_trained"]
    )


def test_the_evaluation_of_a_large_model_uses_every_core_the_run_holds(two_cores):
    from scalerl.assembly.resources import eval_threads

    cfg = small_cfg(extra=["run.threads=2", "pipeline.transport=process"])
    threads = split_threads(cfg, "cpu")
    assert (threads.train, threads.decode) == (1, 1)  # generator and trainer, a core each
    assert eval_threads(cfg, threads, 134_515_008, "cpu") == 2  # SmolLM2-135M: both cores
    assert eval_threads(cfg, threads, 1_050_000, "cpu") == 1  # the tiny model: the generator's share
    assert eval_threads(cfg, split_threads(cfg, "cuda"), 134_515_008, "cuda") == 2  # a GPU: as decoding
