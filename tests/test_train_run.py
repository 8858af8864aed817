"""Run directory, metrics rollback, checkpoints, compute accounting, transport (no model needed)."""

import json
import time

import pytest
import torch

from scalerl.errors import ScaleRLError
from scalerl.pipeline.fake import FakeGenerator
from scalerl.pipeline.modes import PipelineRL, staleness
from scalerl.pipeline.transport import LockedSampler, ProcessRollouts, ThreadedRollouts
from scalerl.rl.curriculum import CurriculumSampler
from scalerl.rl.filters import BatchFiller
from scalerl.run.checkpoint import TrainState, latest_checkpoint, load_checkpoint, save_checkpoint
from scalerl.run.compute import ComputeMeter, StepCompute
from scalerl.run.metrics import ROLLED_BACK_FILE, MetricsWriter, read_rows, roll_back
from scalerl.run.rundir import create_run_dir, open_run_dir
from scalerl.types import Prompt


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_existing_run_dir_is_refused(tmp_path):
    run = create_run_dir(tmp_path / "r", "recipe: x\n")
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    with pytest.raises(ScaleRLError, match="--resume"):
        create_run_dir(run, "recipe: y\n")
    assert (run / "config.yaml").read_text() == "recipe: x\n"  # not overwritten
    with pytest.raises(ScaleRLError, match="config.yaml"):
        open_run_dir(tmp_path / "nothing")


def test_rollback_moves_rows_after_checkpoint_and_torn_line(tmp_path):
    w = MetricsWriter(tmp_path, tensorboard=False)
    for s in range(3):
        w.write({"step": s, "kind": "train", "x": s})
    offset = w.offset()
    w.write({"step": 3, "kind": "train", "x": 3})
    w.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "ki')  # kill -9 in the middle of a write
    moved = roll_back(tmp_path, offset)
    assert moved > 0
    assert [r["step"] for r in read_rows(tmp_path / "metrics.jsonl")] == [0, 1, 2]
    archived = [json.loads(line) for line in (tmp_path / ROLLED_BACK_FILE).read_text().splitlines()]
    assert archived[0] == {"step": 3, "kind": "train", "x": 3}
    assert archived[1]["torn_line"] == '{"step": 4, "ki'
    w = MetricsWriter(tmp_path, tensorboard=False)  # the redone step appends cleanly
    w.write({"step": 3, "kind": "train", "x": 33})
    w.close()
    assert [r["step"] for r in read_rows(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3]


def test_metrics_nan_written_as_null(tmp_path):
    w = MetricsWriter(tmp_path, tensorboard=False)
    w.write({"step": 1, "kind": "train", "loss": float("nan")})
    w.close()
    assert read_rows(tmp_path / "metrics.jsonl") == [{"step": 1, "kind": "train", "loss": None}]


def test_checkpoint_roundtrip_keeps_last_good(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, model, opt.state_dict(), TrainState(step=step, sampler={"position": 10 * step}))
    (tmp_path / "checkpoints" / ".tmp-step_000004").mkdir()  # a save torn by kill -9
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*"))
    assert names == ["step_000002", "step_000003"]
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt.name == "step_000003"
    want = model.weight.detach().clone()
    torch.manual_seed(5)
    expected_draw = torch.rand(1)
    torch.manual_seed(5)
    save_checkpoint(tmp_path, model, opt.state_dict(), TrainState(step=5))
    with torch.no_grad():
        model.weight.zero_()
    torch.rand(3)
    _, state = load_checkpoint(latest_checkpoint(tmp_path), model)
    assert state.step == 5
    assert torch.equal(model.weight, want)
    assert torch.equal(torch.rand(1), expected_draw)  # RNG restored


def test_compute_meter_sums_device_seconds_and_flops():
    m = ComputeMeter(n_params=1000)
    row = m.add(StepCompute(gen_seconds=2.0, train_seconds=2.0, gen_devices=1, train_devices=1,
                            tokens_generated=50, tokens_trained=40))
    assert row["compute/device_hours"] == pytest.approx(4.0 / 3600)
    assert row["compute/flops"] == 2 * 1000 * 50 + 6 * 1000 * 40
    m2 = ComputeMeter(n_params=1000)
    m2.load_state_dict(m.state_dict())  # a resumed run carries the counters on
    row = m2.add(StepCompute(1.0, 0.5, 2, 2, 10, 10))
    assert row["compute/device_hours"] == pytest.approx((4.0 + 3.0) / 3600)
    assert row["compute/tokens_generated"] == 60


class _Task:
    def train_prompt(self, i):
        return Prompt(id=f"p{i}", text="x" * (i % 5), answer="")


def _score(prompt, c):
    c.passed = sum(c.tokens) % 2 == 0
    c.reward = 1.0 if c.passed else -1.0


def test_pipeline_rl_never_trains_staler_than_k_and_applies_weights_in_flight():
    k, P, G = 2, 2, 4
    gen = FakeGenerator(vocab=range(3, 20), length=(3, 9), slots=8, step_seconds=0.001)
    src = ThreadedRollouts(gen, LockedSampler(CurriculumSampler(_Task())), G, _score, max_queued=P * k)
    mode = PipelineRL(src, k)
    version, ages, mixed = 0, [], 0
    try:
        for _ in range(15):
            (mb,) = mode.collect(version, lambda: BatchFiller(P, zero_variance=False), lambda g: None)
            ages += [staleness(g, version) for g in mb.kept]
            mixed += sum(len(set(c.versions)) > 1 for g in mb.groups for c in g.completions)
            assert all(len(g.completions) == G for g in mb.groups)
            time.sleep(0.03)  # a slow trainer
            version += 1
            mode.after_step({}, version)
    finally:
        mode.close()
    assert max(ages) <= k
    assert max(ages) >= 1      # the generator really ran ahead of the trainer
    assert mixed > 0           # some completions span several policy versions (in-flight update)
    assert gen.updates == list(range(1, 16))


def test_generator_error_reaches_the_trainer():
    class Broken(FakeGenerator):
        def stream(self, prompts, n, stop=None):
            raise RuntimeError("engine exploded")
            yield

    src = ThreadedRollouts(Broken(vocab=[1]), LockedSampler(CurriculumSampler(_Task())), 2, _score, max_queued=4)
    with pytest.raises(RuntimeError, match="exploded"):
        src.get(timeout=5)
    src.close()


def test_process_transport_streams_groups_and_applies_published_weights():
    from scalerl.pipeline.fake import build_fake

    k, P, G = 2, 2, 3
    weights = {"w": torch.zeros(3)}
    src = ProcessRollouts(build_fake, ([3, 4, 5, 6], (3, 6), 6, 0.002, 0), weights, 0,
                          {"seed": 0, "epoch": 0, "position": 0}, None, G, P * k, 1)
    mode = PipelineRL(src, k)
    seen = []
    try:
        for version in range(6):
            (mb,) = mode.collect(version, lambda: BatchFiller(P, zero_variance=False), lambda g: None)
            seen += [max(c.versions) for g in mb.kept for c in g.completions]
            assert all(staleness(g, version) <= k for g in mb.kept)
            time.sleep(0.05)
            mode.after_step({"w": torch.full((3,), version + 1.0)}, version + 1)
        assert src.sampler_state()["position"] >= 12
    finally:
        mode.close()
    assert max(seen) >= 3  # versions published by the trainer reached the other process
