"""Write examples/synthetic-8b/metrics.jsonl: a SYNTHETIC run shaped like the paper's 8B ScaleRL
curve (Table 1: C_mid 2542 GPU-hours, B 1.92, A 0.610; R0 0.40), in scalerl's metrics format.

Eval rows (every 100 GPU-hours, from 0 to 16,000): mean@16 over a fixed set of 1,000 prompts of
mixed difficulty, sampled binomially around the curve, which itself wobbles a little from step
to step (AR(1), std 0.006) as a real policy does. Train rows (every 50 GPU-hours) sit between
them and carry no `val/pass_rate`. Deterministic: `python examples/make_synthetic.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, logit

from scalerl.scaling import sigmoid

A, B, C_MID, R0 = 0.610, 1.92, 2542.0, 0.40
PROMPTS, SAMPLES, EVAL_EVERY, TRAIN_EVERY, FINAL = 1000, 16, 100.0, 50.0, 16000.0
HOURS_PER_STEP = 12.5


def eval_pass_rate(target: float, difficulty: np.ndarray, rng: np.random.Generator) -> float:
    """mean@16 over the prompts when the policy's mean pass probability is `target`."""
    shift = brentq(lambda s: expit(s + difficulty).mean() - target, -20, 20)
    passed = rng.binomial(SAMPLES, expit(shift + difficulty))  # (PROMPTS,)
    return float(passed.mean() / SAMPLES)


def main(out: Path = Path(__file__).parent / "synthetic-8b" / "metrics.jsonl") -> None:
    rng = np.random.default_rng(2510_13786)
    difficulty = rng.normal(0.0, 1.5, PROMPTS)
    wobble, rows = 0.0, []
    for i in range(int(FINAL / TRAIN_EVERY) + 1):
        hours = i * TRAIN_EVERY
        step = int(round(hours / HOURS_PER_STEP))
        wobble = 0.5 * wobble + rng.normal(0, 0.006 * np.sqrt(1 - 0.25))
        truth = float(sigmoid(hours, A, B, C_MID, R0)) + (wobble if hours > 0 else 0.0)
        if i > 0:
            rows.append(
                {
                    "step": step,
                    "kind": "train",
                    "compute/device_hours": hours,
                    "train/reward_mean": round(2 * truth - 1 + rng.normal(0, 0.03), 4),
                    "train/truncation_rate": round(float(expit(logit(0.02) + rng.normal(0, 0.3))), 4),
                }
            )
        if hours % EVAL_EVERY == 0:
            rows.append(
                {
                    "step": step,
                    "kind": "eval",
                    "compute/device_hours": hours,
                    "val/pass_rate": round(eval_pass_rate(truth, difficulty, rng), 5),
                    "val/prompts": PROMPTS,
                    "val/samples": SAMPLES,
                }
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {out}")


if __name__ == "__main__":
    main()
