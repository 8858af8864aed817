"""How noisy is one evaluation? Re-evaluate a run's checkpoint with different sampling seeds.

Loads the newest checkpoint of a run directory (its `config.yaml` says the model, task and
evaluation size), evaluates it `--repeats` times with the run's own evaluator but a different
sampling seed each time, and prints the spread of the pass rate beside the per-evaluation
estimate the run logs (`val/pass_rate_se`, `scalerl.evaluate.sampling_se`). The prompts are the
run's fixed validation prompts, so the spread is the sampling noise of one evaluation.

    .venv/bin/python benchmarks/eval_noise.py runs/scalerl-20261122-1830 --repeats 10
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()

    from safetensors.torch import load_model as load_weights

    from scalerl.assembly.generator import decode_dtype
    from scalerl.config import Config
    from scalerl.evaluate import evaluate
    from scalerl.models import load_model
    from scalerl.rewards import RewardFn
    from scalerl.rollout import Engine
    from scalerl.run.checkpoint import latest_checkpoint
    from scalerl.run.rundir import read_run_config
    from scalerl.tasks import task_for_run

    cfg = Config.model_validate(read_run_config(a.run_dir))
    if a.threads:
        torch.set_num_threads(a.threads)
    ckpt = latest_checkpoint(a.run_dir)
    model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype, device="cpu")
    load_weights(model, str(ckpt / "model.safetensors"))
    model = model.to(torch.bfloat16 if decode_dtype(cfg) == "bf16" else torch.float32).eval()
    task = task_for_run(cfg, tokenizer, model)
    prompts = task.val_prompts(cfg.eval.prompts_for(task.val_size))
    reward = RewardFn(task, cfg.reward)
    rollout = cfg.rollout.model_copy(update={"temperature": cfg.eval.temperature})
    rates, ses, t0 = [], [], time.monotonic()
    for seed in range(a.repeats):
        engine = Engine(model, tokenizer, rollout, fp32_head=cfg.model.fp32_head, seed=1000 + seed)
        with torch.no_grad():
            row = evaluate(engine, prompts, cfg.eval.samples, reward)
        rates.append(row["val/pass_rate"])
        ses.append(row["val/pass_rate_se"])
    reward.close()
    rates, ses = np.array(rates), np.array(ses)
    print(
        f"{a.run_dir} at {ckpt.name}: {len(prompts)} prompts x {cfg.eval.samples} samples, {a.repeats} "
        f"evaluations with different seeds ({time.monotonic() - t0:.0f} s, load average {os.getloadavg()[0]:.1f})"
    )
    from scipy.stats import chi2

    sd, dof = rates.std(ddof=1), a.repeats - 1
    lo, hi = sd * np.sqrt(dof / chi2.ppf(0.95, dof)), sd * np.sqrt(dof / chi2.ppf(0.05, dof))
    print(
        f"pass rate {rates.mean():.4f}; sd over the repeats {sd:.4f} (90% interval {lo:.4f} .. {hi:.4f}); "
        f"mean logged estimate val/pass_rate_se {ses.mean():.4f}"
    )


if __name__ == "__main__":
    main()
