"""scalerl's forecast inside a real TRL GRPOTrainer run, on the CPU (about a minute).

    pip install -e ".[trl]"                  # TRL (the `trl` extra; `make venv` installs it)
    python examples/trl_forecast.py [--steps 40] [--out runs/trl_forecast] [--no-stop]

A randomly initialised tiny Llama (scalerl's character-level tokenizer, `scalerl.models.tiny`) is
trained by TRL's `GRPOTrainer` with `report_to="tensorboard"` and an evaluation every 2 steps; the
reward is 0.7 x the share of the completion's characters that are the letter "a" (a random model
starts near 0.01, GRPO raises it towards 0.7). `scalerl.integrations.trl.ForecastCallback` refits
Eq. 1 at each evaluation and logs `forecast/A` (with its interval), the expected gain at 2x and 10x
and the gain left to the budget (`max_steps`) through the trainer, so they land in TensorBoard
beside TRL's own metrics; with the stop rule on (the default here) it ends training once the
upper end of the 90% interval of the gain left is below 0.02.

At the end the script reads the TensorBoard event file back and prints every forecast tag it holds
(transformers' TensorBoard and W&B callbacks file a key that is not an evaluation's under `train/`:
`train/forecast/A`), and checks that the last `forecast/A` is what `scalerl fit --from trl
--compute steps --per-step 1` gives on the same logs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

CEILING = 0.7


def share_of_a(completions, **kwargs) -> list[float]:
    return [CEILING * c.count("a") / max(len(c), 1) for c in completions]


def train(steps: int, out: Path, stop: bool):
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from scalerl.integrations.trl import ForecastCallback
    from scalerl.models.tiny import build_random, build_tokenizer

    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    model = build_random(tokenizer, seed=0)
    train_set = Dataset.from_dict({"prompt": [f"say a{i}:" for i in range(64)]})
    eval_set = Dataset.from_dict({"prompt": [f"write a{i}." for i in range(8)]})
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(out / "tb")  # transformers' TensorBoardCallback reads it
    cfg = GRPOConfig(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        num_generations=4,
        num_generations_eval=4,
        max_completion_length=12,
        learning_rate=3e-3,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="no",
        report_to="tensorboard",
        seed=0,
        use_cpu=True,
        dataloader_num_workers=0,
        temperature=1.0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=share_of_a,
        args=cfg,
        train_dataset=train_set,
        eval_dataset=eval_set,
        processing_class=tokenizer,
    )
    cb = ForecastCallback.attach(trainer, metric="eval_reward", stop=stop)
    trainer.evaluate()  # the evaluation before training (step 0): R0
    trainer.train()
    return trainer, cb


def tensorboard_forecasts(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing import event_accumulator as ea

    out: dict[str, list[tuple[int, float]]] = {}
    for f in sorted(folder.rglob("events.out.tfevents*")):
        acc = ea.EventAccumulator(str(f), size_guidance={ea.SCALARS: 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            if "forecast/" in tag:  # transformers' rewrite_logs files a non-eval key under train/
                out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out", type=Path, default=Path("runs/trl_forecast"))
    ap.add_argument("--no-stop", action="store_true", help="log the stop rule but do not act on it")
    args = ap.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"trl_forecast: {args.out} exists and is not empty: pass another --out or remove it")
    trainer, cb = train(args.steps, args.out, stop=not args.no_stop)
    tb = tensorboard_forecasts(args.out / "tb")
    if "train/forecast/A" not in tb:
        sys.exit(f"trl_forecast: no forecast/A in the TensorBoard logs under {args.out / 'tb'}")
    print(
        f"\ntrained {trainer.state.global_step} of {args.steps} steps"
        + (f"; stopped by the forecast at step {cb.stopped_at:g}" if cb.stopped_at is not None else "")
    )
    print(f"TensorBoard ({args.out / 'tb'}) holds {len(tb)} forecast tags:")
    for tag, points in sorted(tb.items()):
        print(f"  {tag:32s} " + ", ".join(f"{s}: {v:.3f}" for s, v in points[-4:]))
    print("last forecast: " + json.dumps({k: round(v, 4) for k, v in cb.last.items()}))
    same = scalerl_fit(args.out / "tb")
    print(
        f"scalerl fit --from trl --compute steps --per-step 1 on the same logs: A = {same:.4f} "
        f"(the callback's last: {cb.last['forecast/A']:.4f})"
    )
    if abs(same - cb.last["forecast/A"]) > 1e-6:
        sys.exit("trl_forecast: the callback's forecast differs from scalerl fit's on the same logs")
    return 0


def scalerl_fit(folder: Path) -> float:
    """`scalerl fit --from trl --compute steps --per-step 1` on the TensorBoard logs: its A."""
    from scalerl.scaling.forecast import Options, fit_series, read
    from scalerl.scaling.sources import Compute

    o = Options(preset="trl", compute=Compute("steps", per_step=1.0))
    return fit_series(read(folder, o), o).A


if __name__ == "__main__":
    sys.exit(main())
