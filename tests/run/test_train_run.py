"""Run directory, metrics rollback, checkpoints, compute accounting, transport (no model needed)."""

import json
import threading
import time

import pytest
import torch

from doubles import FakeGenerator, parity_reward
from scalerl.batching import BatchFiller
from scalerl.errors import ScaleRLError
from scalerl.rl.curriculum import CurriculumSampler
from scalerl.run.checkpoint import TrainState, latest_checkpoint, load_checkpoint, save_checkpoint
from scalerl.run.compute import ComputeMeter, StepCompute
from scalerl.run.metrics import ROLLED_BACK_FILE, MetricsWriter, read_rows, roll_back
from scalerl.run.rundir import create_run_dir, open_run_dir
from scalerl.transport.local import ProcessRollouts, ThreadedRollouts
from scalerl.transport.policy import staleness
from scalerl.transport.protocol import GeneratorBuild, TrainerUpdate
from scalerl.transport.window import InOrder, LockedSampler, Window
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


def test_compute_meter_books_wall_clock_times_devices_and_every_generated_token():
    m = ComputeMeter(n_params=1000)
    row = m.add(StepCompute(wall_seconds=2.0, devices=2, tokens_generated=50, tokens_trained=40))
    assert row["compute/device_hours"] == pytest.approx(4.0 / 3600)
    assert row["compute/flops"] == 2 * 1000 * 50 + 6 * 1000 * 40
    m.add_generated(30)  # a skipped batch: its generation is compute too
    m2 = ComputeMeter(n_params=1000)
    m2.load_state_dict(m.state_dict())  # a resumed run carries the counters on
    row = m2.add(StepCompute(1.5, 1, 10, 10))
    assert row["compute/device_hours"] == pytest.approx((4.0 + 1.5) / 3600)
    assert row["compute/tokens_generated"] == 90
    assert row["compute/flops"] == 2 * 1000 * 90 + 6 * 1000 * 50


class _Task:
    def train_prompt(self, i):
        return Prompt(id=f"p{i}", text="x" * (i % 5), answer="")


def _score(prompt, c):
    return parity_reward(prompt, c)


def _run_pipeline(k: int, P: int, G: int, token_s: float, slow_trainer: bool, steps: int = 15):
    """`steps` trainer steps over a fake generator; a slow trainer steps once the generator waits at the window."""
    gen = FakeGenerator(vocab=range(3, 20), length=(3, 9), slots=8, step_seconds=token_s)
    src = ThreadedRollouts(gen, LockedSampler(CurriculumSampler(_Task())), G, _score, Window(P, k), 0)
    version, ages, mixed, draws = 0, [], 0, []
    try:
        for _ in range(steps):
            (mb,) = src.collect(version, lambda: BatchFiller(P, zero_variance=False), lambda g: None)
            assert mb.stale_dropped == 0
            ages += [staleness(g, version) for g in mb.groups]
            draws += [g.draw for g in mb.groups]
            mixed += sum(len(set(c.versions)) > 1 for g in mb.groups for c in g.completions)
            assert all(len(g.completions) == G for g in mb.groups)
            if slow_trainer:
                gen.wait_idle()
            version += 1
            src.send(TrainerUpdate(version, {}))
    finally:
        src.close()
    assert draws == list(range(len(draws)))  # the trainer takes groups in draw order
    assert gen.updates == list(range(1, steps + 1))
    return ages, mixed


@pytest.mark.parametrize("k", [1, 2, 4])
def test_pipeline_rl_staleness_reaches_k_and_never_exceeds_it_with_a_slow_trainer(k):
    # the trainer steps once the generator has filled the window (P x (k + 1) groups) and waits at it:
    # a sleep of 0.03 s for that failed at load 8, 0.2 s is a guess about the machine
    ages, _ = _run_pipeline(k, P=2, G=4, token_s=0.0005, slow_trainer=True, steps=k + 6)
    assert max(ages) == k


def test_pipeline_rl_applies_weights_in_flight_with_a_slow_generator():
    ages, mixed = _run_pipeline(2, P=2, G=4, token_s=0.004, slow_trainer=False)
    assert max(ages) <= 2
    assert mixed > 0  # some completions span several policy versions (in-flight update)


def test_window_rule_on_known_numbers():
    w = Window(prompts_per_step=4, k=2)
    w.publish(0, taken=0)  # horizon 0 + 4 * 3 = 12
    assert w.may_start(11, applied=0, published=0, taken=0)
    assert not w.may_start(12, applied=0, published=0, taken=0)
    w.publish(1, taken=6)  # a dynamic-sampling step took 6 draws: horizon 18
    assert not w.may_start(12, applied=0, published=1, taken=6)  # the generator still decodes version 0
    assert w.may_start(17, applied=1, published=1, taken=6)
    assert not w.may_start(18, applied=1, published=1, taken=6)
    w.publish(2, taken=6)  # horizon 18; then empty batches are skipped: taken 20, no new version
    assert w.may_start(22, applied=2, published=2, taken=20)  # the escape: the draws the trainer needs next
    assert not w.may_start(24, applied=2, published=2, taken=20)  # ... and no further
    assert not w.may_start(22, applied=1, published=2, taken=20)  # only on the newest weights
    order = InOrder()
    from scalerl.types import Group

    for d in (2, 0, 1):
        order.push(Group(prompt=Prompt("p", "", ""), completions=[], scores=[], draw=d))
    assert order.pop().draw == 0 and order.pop().draw == 1 and order.pop().draw == 2 and order.pop() is None


def test_generator_error_reaches_the_trainer():
    class Broken(FakeGenerator):
        def stream(self, prompts, n, stop=None, hold=None):
            raise RuntimeError("engine exploded")
            yield

    src = ThreadedRollouts(Broken(vocab=[1]), LockedSampler(CurriculumSampler(_Task())), 2, _score, Window(2, 2), 0)
    with pytest.raises(RuntimeError, match="exploded"):
        src.get(timeout=5)
    src.close()


def test_process_transport_streams_groups_and_applies_published_weights():
    from doubles import build_fake

    k, P, G = 2, 2, 3
    weights = {"w": torch.zeros(3)}
    src = ProcessRollouts(
        GeneratorBuild(build_fake, ([3, 4, 5, 6], (3, 6), 6, 0.002)),
        0,
        weights,
        0,
        {"seed": 0, "epoch": 0, "position": 0},
        None,
        G,
        Window(P, k),
        1,
    )
    seen = []
    try:
        for version in range(6):
            (mb,) = src.collect(version, lambda: BatchFiller(P, zero_variance=False), lambda g: None)
            seen += [max(c.versions) for g in mb.groups for c in g.completions]
            assert all(staleness(g, version) <= k for g in mb.groups)
            time.sleep(0.05)
            src.send(TrainerUpdate(version + 1, {"w": torch.full((3,), version + 1.0)}))
        assert src.sampler_state()["position"] >= 12
    finally:
        src.close()
    assert max(seen) >= 3  # versions published by the trainer reached the other process


def test_a_paused_transport_holds_its_sequences_in_flight_and_resumes_them():
    """`pause()` (the trainer evaluates): the generator thread starts no prompt and takes no
    decode step, so the evaluation has the cores; `resume()`: it goes on and groups arrive."""
    gen = FakeGenerator(vocab=range(3, 20), length=(40, 60), slots=8, step_seconds=0.002)
    src = ThreadedRollouts(gen, LockedSampler(CurriculumSampler(_Task())), 4, parity_reward, Window(2, 8), 0)
    try:
        gen.wait_for(lambda: gen.decode_steps >= 5, "5 decode steps")  # sequences in flight
        src.pause()
        gen.wait_for(lambda: gen.held_steps > 0, "held")  # a decode step under way finished first
        held_at, turns = gen.decode_steps, gen.held_steps
        gen.wait_for(lambda: gen.held_steps >= turns + 50, "50 turns held")
        assert gen.decode_steps == held_at
        src.resume()
        assert src.get(timeout=60).completions  # the held sequences finish: a group arrives
        assert gen.decode_steps > held_at
    finally:
        src.close()


def test_a_slow_score_does_not_hold_the_generator_and_groups_still_arrive_in_draw_order():
    """Scoring in a pool (a code task's `score_workers`): the group of draw 0, each of whose scores lasts
    until the generator has taken 5 more decode steps (were the generator waiting for it, it would never
    end), is handed on when its last score is in; the trainer still takes the groups in draw order, draw
    0 first, with the time it waited for its scores."""
    gen = FakeGenerator(vocab=range(3, 20), length=(3, 9), slots=8, step_seconds=0.002)
    calls, lock = [], threading.Lock()

    def slow_first(prompt, c):
        if prompt.id == "p0":
            t0, at = time.monotonic(), gen.decode_steps
            gen.wait_for(lambda: gen.decode_steps >= at + 5, "5 decode steps while a score of draw 0 ran")
            with lock:
                calls.append((t0, time.monotonic() - t0))
        return parity_reward(prompt, c)

    src = ThreadedRollouts(
        gen, LockedSampler(CurriculumSampler(_Task())), 4, slow_first, Window(2, 30), 0, score_workers=4
    )
    try:
        groups = [src.get(timeout=120) for _ in range(6)]
    finally:
        src.close()
    assert [g.draw for g in groups] == list(range(6)) and len(calls) == 4
    assert groups[0].score_wait == 0.0
    assert groups[0].score_latency > 0  # handed on once its scores were in, not at its last add
    assert groups[0].score_seconds >= sum(span for _, span in calls)


def test_a_scoring_threads_error_in_the_generator_process_reaches_the_trainer():
    """A pooled scorer that raises in the generator process (a scoring thread, not the main one): the
    trainer raises its traceback, not a bare "exited with code 0" (the message must reach the queue
    before the process exits)."""
    from doubles import build_fake_failing_scorer

    src = ProcessRollouts(
        GeneratorBuild(build_fake_failing_scorer),
        0,
        {"w": torch.zeros(3)},
        0,
        {"seed": 0, "epoch": 0, "position": 0},
        None,
        2,
        Window(2, 2),
        1,
    )
    try:
        with pytest.raises(RuntimeError, match="scorer exploded"):
            src.get(timeout=120)
    finally:
        src.close()
