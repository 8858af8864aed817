"""Other frameworks' logs through their presets, and compute derived from wall time, tokens, steps.

The TRL logs are a real `GRPOTrainer` run (tests/fixtures/make_trl_logs.py); verl's, OpenRLHF's and
SkyRL's are written here with the metric names their source code logs (see PRESETS[...].source).
Expected compute is worked out in the tests from the raw logs, not by the code under test.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.errors import ScaleRLError
from scalerl.scaling.sources import Compute, read_run
from scaling_helpers import write_tb

TRL = Path(__file__).parents[1] / "fixtures" / "trl_grpo"


def fit_cli(capsys, *argv):
    code = main(["fit", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def trl_events():
    from tensorboard.backend.event_processing import event_accumulator as ea

    (f,) = TRL.glob("events.out.tfevents*")
    acc = ea.EventAccumulator(str(f), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}


def curve(step):  # Eq. 1 in steps: A 0.62, B 2, C_mid 60 steps, R0 0.3
    return 0.3 + 0.32 / (1 + (60 / step) ** 2) if step else 0.3


# ---------------------------------------------------------------- TRL: a real run
def test_trl_run_wall_compute_is_the_event_files_own_wall_time():
    ev = trl_events()
    start = min(e.wall_time for events in ev.values() for e in events)
    evals = ev["eval/reward"]
    s = read_run(TRL, preset="trl", compute=Compute("wall", devices=1))
    expected = [0.0 if e.step == 0 else (e.wall_time - start) / 3600 for e in evals]
    np.testing.assert_allclose(s.x, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s.y, [e.value for e in evals], rtol=1e-6)
    assert len(evals) == 21 and s.how["source"] == "TensorBoard event wall times" and s.how["pauses"] == []
    two = read_run(TRL, preset="trl", compute=Compute("wall", devices=2))
    np.testing.assert_allclose(two.x, 2 * s.x)


def test_trl_run_token_compute_is_8n_per_token_seen():
    ev = trl_events()
    tokens = {e.step: e.value for e in ev["train/num_tokens"]}  # running total, prompt + completion
    s = read_run(TRL, preset="trl", compute=Compute("tokens", params=1e6))
    expected = [8e6 * max((v for st, v in tokens.items() if st <= e.step), default=0.0) for e in ev["eval/reward"]]
    np.testing.assert_allclose(s.x, expected, rtol=1e-6)
    assert s.x[0] == 0 and s.how["unit"] == "FLOPs"


def test_trl_run_fitted_through_the_cli(capsys, tmp_path):
    code, out, err = fit_cli(
        capsys,
        TRL,
        "--from",
        "trl",
        "--compute",
        "wall",
        "--devices",
        "1",
        "--json",
        "--plot",
        tmp_path / "trl.png",
        "--bootstrap",
        "50",
    )
    assert code == 0, err
    d = json.loads(out)
    assert d["y"] == "eval/reward" and d["compute"]["kind"] == "wall" and d["compute"]["devices"] == 1
    # the reward is 0.7 x a share (make_trl_logs.py): the run rose from ~0 towards 0.7
    assert 0.6 < d["A"] <= 0.72 and d["R0"] < 0.02 and d["ci"]["A"][0] <= d["A"] <= d["ci"]["A"][1]
    assert d["window"][1] == pytest.approx(max(read_run(TRL, preset="trl", compute=Compute("wall", 1)).x))
    v = d["verdict"]
    assert v["ceiling"] == d["A"] and set(v["gains"]) == {"2x", "10x"} and v["recommendation"]
    assert (tmp_path / "trl.png").stat().st_size > 10_000
    code, out, _ = fit_cli(
        capsys, TRL, "--from", "trl", "--compute", "wall", "--devices", "1", "--bootstrap", "10", "--no-grid-check"
    )
    assert code == 0 and "verdict at" in out and "TensorBoard event wall times" in out


def test_trl_preset_without_compute_says_what_to_pass(capsys):
    code, _, err = fit_cli(capsys, TRL, "--from", "trl")
    assert code == 2 and err.count("\n") == 1 and "--compute wall --devices N" in err


# ---------------------------------------------------------------- verl: FileLogger JSONL
def write_verl(path, sources=("gsm8k",)):
    rows = []
    for step in range(1, 121):
        data = {
            "timing_s/step": 30.0 + step % 3,
            "perf/total_num_tokens": 1000.0 + step,
            "response_length/mean": 200.0,
            "critic/score/mean": 0.1,
        }
        if step % 5 == 0 or step == 1:
            for ds in sources:
                data[f"val-core/{ds}/reward/mean@4"] = curve(step)
                data[f"val-aux/{ds}/reward/std@4"] = 0.1
        rows.append({"step": step, "data": data})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_verl_preset_wall_from_step_times_and_tokens(tmp_path):
    log = write_verl(tmp_path / "exp.jsonl")
    steps = np.arange(1, 121)
    seconds = np.cumsum(30.0 + steps % 3)
    tokens = np.cumsum(1000.0 + steps)
    evals = np.array([1] + list(range(5, 121, 5)))
    s = read_run(log, preset="verl", compute=Compute("wall", devices=8))
    assert s.y_name == "val-core/gsm8k/reward/mean@4"
    np.testing.assert_allclose(s.x, seconds[evals - 1] * 8 / 3600)
    np.testing.assert_allclose(s.y, [curve(e) for e in evals])
    t = read_run(log, preset="verl", compute=Compute("tokens", params=1e9))
    np.testing.assert_allclose(t.x, 8e9 * tokens[evals - 1])


def test_verl_preset_fits_and_names_ambiguity(tmp_path, capsys):
    log = write_verl(tmp_path / "exp.jsonl")
    code, out, err = fit_cli(
        capsys, log, "--from", "verl", "--compute", "steps", "--per-step", "1", "--json", "--bootstrap", "20"
    )
    assert code == 0, err
    d = json.loads(out)
    assert d["A"] == pytest.approx(0.62, abs=0.01) and d["C_mid"] == pytest.approx(60, rel=0.05)
    two = write_verl(tmp_path / "two.jsonl", sources=("gsm8k", "math"))
    code, _, err = fit_cli(capsys, two, "--from", "verl", "--compute", "steps", "--per-step", "1")
    assert code == 2 and "val-core/gsm8k/reward/mean@4, val-core/math/reward/mean@4" in err and "--y" in err


# ---------------------------------------------------------------- OpenRLHF: TensorBoard
def test_openrlhf_preset_through_tensorboard(tmp_path):
    scalars = []
    for step in range(1, 101):
        wall = 1000.0 + 40.0 * step
        for tag, v in (
            ("train/timing/make_experience", 25.0),
            ("train/timing/ppo_train", 12.0),
            ("train/timing/broadcast", 3.0),
            ("train/rollout/response_length_mean", 300.0),
            ("train/rollout/num_samples", 64.0),
            ("train/reward", 0.1),
        ):
            scalars.append((step, wall, tag, v))
        if step % 4 == 0:
            scalars.append((step, wall + 5, "eval/eval_math_pass1", curve(step)))
            scalars.append((step, wall + 5, "eval/eval_math_pass8", 0.9))
    folder = write_tb(tmp_path / "tb", scalars)
    s = read_run(folder, preset="openrlhf", compute=Compute("wall", devices=4))
    evals = np.arange(4, 101, 4)
    assert s.y_name == "eval/eval_math_pass1"
    np.testing.assert_allclose(s.x, (40.0 * evals + 5 - 40.0) * 4 / 3600)  # since the first event (step 1)
    t = read_run(folder, preset="openrlhf", compute=Compute("tokens", params=5e8))
    np.testing.assert_allclose(t.x, 8 * 5e8 * 300 * 64 * evals)  # generated (and trained) completion tokens


# ---------------------------------------------------------------- SkyRL: W&B CSV export
def test_skyrl_preset_through_a_wandb_export(tmp_path):
    lines = ["trainer/global_step,timing/step,eval/all/avg_score,eval/all/pass_at_4"]
    for step in range(1, 81):
        score = f"{curve(step):.6f}" if step % 4 == 0 else ""
        lines.append(f"{step},{20 + step % 2},{score},{'0.8' if score else ''}")
    log = tmp_path / "skyrl.csv"
    log.write_text("\n".join(lines) + "\n")
    s = read_run(log, preset="skyrl", compute=Compute("wall", devices=2))
    steps = np.arange(1, 81)
    seconds = np.cumsum(20.0 + steps % 2)
    evals = np.arange(4, 81, 4)
    assert s.y_name == "eval/all/avg_score"
    np.testing.assert_allclose(s.x, seconds[evals - 1] * 2 / 3600)
    with pytest.raises(ScaleRLError, match="none of those of the skyrl preset"):
        read_run(log, preset="skyrl", compute=Compute("tokens", params=1e9))


# ---------------------------------------------------------------- wall time: pauses; errors
def test_pauses_are_left_out_and_reported(tmp_path, capsys):
    rows, t = [], 1.7e9
    for step in range(1, 61):
        t += 3600.0 * 3 if step == 31 else 60.0  # the run stopped for 3 hours before step 31
        row = {"_timestamp": t, "train/global_step": step, "train/loss": 0.1}
        if step % 2 == 0:
            row["eval/reward"] = curve(step)
        rows.append(row)
    log = tmp_path / "w.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = read_run(log, preset="trl", compute=Compute("wall", devices=1))
    evals = np.arange(2, 61, 2)
    # 60 s per step since step 1; the 3 h gap (which took the place of step 31's 60 s) is left out
    np.testing.assert_allclose(s.x, 60.0 * (evals - 1 - (evals >= 31)) / 3600)
    assert len(s.how["pauses"]) == 1 and s.how["pauses"][0]["seconds"] == pytest.approx(3 * 3600)
    assert any("left out 1 pause(s)" in w for w in s.warnings)
    kept = read_run(log, preset="trl", compute=Compute("wall", devices=1, pause_threshold=4 * 3600))
    assert kept.x[-1] == pytest.approx(s.x[-1] + 3) and kept.how["pauses"] == []


def test_wall_without_wall_time_and_absent_metrics_are_one_line(tmp_path, capsys):
    log = tmp_path / "m.jsonl"
    log.write_text("".join(json.dumps({"step": i, "val/pass_rate": curve(i)}) + "\n" for i in range(1, 30)))
    code, _, err = fit_cli(capsys, log, "--compute", "wall", "--devices", "1")
    assert code == 2 and err.count("\n") == 1
    assert "--compute wall needs wall time" in err and "no timestamps" in err and str(log) in err
    code, _, err = fit_cli(capsys, log, "--from", "verl", "--compute", "steps", "--per-step", "1")
    assert code == 2 and err.count("\n") == 1
    assert "no verl validation metric" in err and "metrics present: val/pass_rate" in err
    code, _, err = fit_cli(capsys, TRL, "--from", "skyrl", "--compute", "wall", "--devices", "1")
    assert code == 2 and err.count("\n") == 1 and "eval/reward" in err and "eval/entropy" in err


def test_reward_to_pass(tmp_path):
    log = tmp_path / "r.jsonl"
    log.write_text("".join(json.dumps({"step": i, "eval_reward": 2 * curve(i) - 1}) + "\n" for i in range(0, 40)))
    s = read_run(log, preset="trl", compute=Compute("steps", per_step=1), reward_to_pass=True)
    np.testing.assert_allclose(s.y, [curve(i) for i in range(40)])
    assert s.how["y"].startswith("(eval_reward + 1) / 2")
    bad = tmp_path / "b.jsonl"
    bad.write_text("".join(json.dumps({"step": i, "eval_reward": 3.0 * i}) + "\n" for i in range(5)))
    with pytest.raises(ScaleRLError, match=r"rewards in \[-1, 1\].* has 3"):
        read_run(bad, preset="trl", compute=Compute("steps", per_step=1), reward_to_pass=True)


def test_scalerl_preset_reads_its_own_compute_column(tmp_path):
    rows = [
        {
            "step": i,
            "kind": "eval",
            "compute/device_hours": 0.5 * i,
            "compute/flops": 7e9 * i**1.1,
            "val/pass_rate": curve(i),
            "compute/tokens_trained": 100.0 * i,
            "compute/tokens_generated": 300.0 * i,
        }
        for i in range(30)
    ]
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = read_run(tmp_path, preset="scalerl")  # the axis scalerl train fits: FLOPs
    np.testing.assert_allclose(s.x, 7e9 * np.arange(30) ** 1.1)
    h = read_run(tmp_path, preset="scalerl", x="compute/device_hours")
    np.testing.assert_allclose(h.x, 0.5 * np.arange(30))
    t = read_run(tmp_path, preset="scalerl", compute=Compute("tokens", params=10.0))
    np.testing.assert_allclose(t.x, [6 * 10 * 100 * i + 2 * 10 * 300 * i for i in range(30)])


def test_tensorboard_file_being_written_reads_its_complete_records(tmp_path):
    """What `scalerl watch` sees of an event file mid-write: the records written whole, no error."""
    (f,) = TRL.glob("events.out.tfevents*")
    data = f.read_bytes()
    whole = read_run(TRL, preset="trl", compute=Compute("wall", devices=1))
    part = tmp_path / f.name
    part.write_bytes(data[: len(data) * 2 // 3 - 5])  # cut inside a record
    s = read_run(tmp_path, preset="trl", compute=Compute("wall", devices=1))
    assert 5 < s.x.size < whole.x.size and s.warnings == []
    np.testing.assert_allclose(s.x, whole.x[: s.x.size])


def test_wandb_chart_export_through_a_preset(tmp_path):
    log = tmp_path / "wandb.csv"
    rows = ['"Step","grpo-7b - eval/reward","grpo-7b - eval/reward__MIN","grpo-7b - eval/reward__MAX"']
    rows += [f"{s},{curve(s):.6f},0,1" for s in range(0, 200, 10)]
    log.write_text("\n".join(rows) + "\n")
    s = read_run(log, preset="trl", compute=Compute("steps", per_step=2.0))
    assert s.y_name == "eval/reward"
    np.testing.assert_allclose(s.x, 2.0 * np.arange(0, 200, 10))
    np.testing.assert_allclose(s.y, [curve(x) for x in range(0, 200, 10)], atol=1e-6)
