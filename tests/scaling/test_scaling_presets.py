"""The prime-rl, NeMo-RL, AReaL and slime presets: logs written here with the names each framework's
source logs (PRESETS[...].source cites the files), beside the neighbouring metrics that must not be
taken for the pass rate; the expected compute is worked out here from the raw values."""

import json

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.scaling.sources import PRESETS, Compute, read_run
from scaling_helpers import write_tb

STEPS = np.arange(0, 101, 5)


def curve(step):  # Eq. 1 in steps: A 0.62, B 2, C_mid 30 steps, R0 0.3
    return 0.3 + 0.32 / (1 + (30 / step) ** 2) if step else 0.3


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prime_rl_avg_at_k_not_pass_at_k(tmp_path):
    rows = []
    for s in range(0, 101):
        rows.append({"step": s, "progress/ckpt_step": s, "reward/mean": 0.2})
        if s % 5 == 0:  # src/prime_rl/eval/utils.py: eval/<env>/avg@k, pass@k, completion_len/avg, ...
            rows.append(
                {
                    "eval/gsm8k/avg@4": curve(s),
                    "eval/gsm8k/pass@2": 0.9,
                    "eval/gsm8k/completion_len/avg": 310.0,
                    "eval/gsm8k/no_response/pct": 0.0,
                    "progress/ckpt_step": s,
                    "step": s,
                }
            )
    s = read_run(write_jsonl(tmp_path / "prime.jsonl", rows), preset="prime-rl", compute=Compute("steps", per_step=2.0))
    assert s.y_name == "eval/gsm8k/avg@4"
    np.testing.assert_allclose(s.x, 2.0 * STEPS)
    np.testing.assert_allclose(s.y, [curve(v) for v in STEPS])


def test_nemo_rl_validation_accuracy_with_step_times(tmp_path):
    lines = [
        "step,timing/train/total_step_time,validation/accuracy,validation/avg_length,"
        "timing/validation/total_validation_time"
    ]
    for step in range(0, 101):
        acc = f"{curve(step):.6f}" if step % 5 == 0 else ""
        secs = f"{40 + step % 3}" if step else ""  # step 0 is the validation before training
        lines.append(f"{step},{secs},{acc},{'250' if acc else ''},{'12' if acc else ''}")
    log = tmp_path / "nemo.csv"
    log.write_text("\n".join(lines) + "\n")
    s = read_run(log, preset="nemo-rl", compute=Compute("wall", devices=8))
    seconds = np.concatenate([[0.0], np.cumsum([40.0 + k % 3 for k in range(1, 101)])])
    assert s.y_name == "validation/accuracy"
    np.testing.assert_allclose(s.x, seconds[STEPS] * 8 / 3600)
    np.testing.assert_allclose(s.y, [round(curve(v), 6) for v in STEPS])


def test_areal_eval_rollout_reward_through_tensorboard(tmp_path, capsys):
    scalars = []
    for step in range(0, 101):
        scalars.append((step, 1000.0 + 30 * step, "rollout/reward", 0.2))
        if step % 5 == 0:  # stats_tracker "eval-rollout" scope: reward and its __count
            scalars += [
                (step, 1001.0 + 30 * step, "eval-rollout/reward", curve(step)),
                (step, 1001.0 + 30 * step, "eval-rollout/reward__count", 128.0),
            ]
    folder = write_tb(tmp_path / "tb", scalars)
    s = read_run(folder, preset="areal", compute=Compute("steps", per_step=1.0))
    assert s.y_name == "eval-rollout/reward"
    np.testing.assert_allclose(s.x, STEPS)
    np.testing.assert_allclose(s.y, [curve(v) for v in STEPS], rtol=1e-6)
    code = main(
        [
            "fit",
            str(folder),
            "--from",
            "areal",
            "--compute",
            "steps",
            "--per-step",
            "1",
            "--json",
            "--bootstrap",
            "20",
            "--no-grid-check",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["A"] == pytest.approx(0.62, abs=0.01) and d["C_mid"] == pytest.approx(30, rel=0.05)


def test_slime_eval_dataset_not_its_ratios_or_step(tmp_path):
    rows = []
    for s in range(0, 101):
        rows.append({"rollout/step": s, "rollout/raw_reward": 0.2, "perf/step_time": 50.0})
        if s % 5 == 0:  # rollout_metrics.log_eval_rollout_data: eval/<ds>, eval/<ds>-truncated_ratio, -pass@k
            rows.append(
                {
                    "eval/aime": curve(s),
                    "eval/aime-truncated_ratio": 0.05,
                    "eval/aime-pass@1": 0.3,
                    "eval/aime-pass@4": 0.5,
                    "eval/step": s,
                }
            )
    log = write_jsonl(tmp_path / "slime.jsonl", rows)
    s = read_run(log, preset="slime", compute=Compute("steps", per_step=1.0))
    assert s.y_name == "eval/aime"
    np.testing.assert_allclose(s.x, STEPS)
    np.testing.assert_allclose(s.y, [curve(v) for v in STEPS])


def test_every_new_preset_cites_its_source_and_is_a_cli_choice():
    from scalerl.commands.fit import PRESETS as CHOICES

    for name in ("prime-rl", "nemo-rl", "areal", "slime"):
        assert name in CHOICES and "commit" in PRESETS[name].source and ".py" in PRESETS[name].source
