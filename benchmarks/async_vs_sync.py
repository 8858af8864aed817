"""PipelineRL-k for k = 1, 2, 4, 8 against PPO-off-policy-1, on the same configuration, one after the other.

Prints, for each mode, the wall-clock (training steps only: evaluation excluded) and the
device-hours spent to first reach a validation pass rate, the steps per hour, the staleness the
trainer saw (mean, max) and the share of generated groups dropped, and the ratios against
PPO-off-policy-1. The paper (Section 3.1, Fig. 4a) found PipelineRL reaches a similar ceiling
with a much better efficiency B (k = 8 chosen, k = 4 as good); here the question is how much
faster each k gets there on this machine.

    .venv/bin/python benchmarks/async_vs_sync.py                      # default run, all five modes
    .venv/bin/python benchmarks/async_vs_sync.py --modes PipelineRL-8,PPO-off-policy-1 --steps 40
    .venv/bin/python benchmarks/async_vs_sync.py --steps 60 --target 0.3 --set batch.prompts=16

Timings depend on the machine's load: run it alone, and compare the modes only within one
invocation.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from scalerl.configure import load_config
from scalerl.loop import train
from scalerl.run.metrics import read_rows

MODES = {
    **{f"PipelineRL-{k}": ["pipeline.mode=pipeline_rl", f"pipeline.k={k}"] for k in (1, 2, 4, 8)},
    "PPO-off-policy-1": ["pipeline.mode=ppo_off_policy", "pipeline.k=1"],
}
BASELINE = "PPO-off-policy-1"


def run_mode(name: str, overrides: list[str], out: Path) -> list[dict]:
    cfg = load_config("scalerl", overrides=overrides + MODES[name])
    run_dir = out / name
    run_dir.mkdir(parents=True)
    print(
        f"== {name}: {cfg.run.max_steps} steps, {cfg.batch.prompts}x{cfg.batch.generations} per step -> {run_dir}",
        flush=True,
    )
    train(cfg, run_dir, progress=True)
    return read_rows(run_dir / "metrics.jsonl")


def reach(rows: list[dict], target: float) -> dict:
    """Wall-clock (sum of step times), device-hours and step where the validation curve first
    crosses `target`, interpolated linearly between the two evaluations around the crossing."""
    train_rows = [r for r in rows if r["kind"] == "train"]
    total_wall = sum(r["time/step"] for r in train_rows)
    out = {
        "steps_per_hour": len(train_rows) / total_wall * 3600 if total_wall else None,
        "final": [r["val/pass_rate"] for r in rows if r["kind"] == "eval"][-1],
        "staleness_mean": sum(r["staleness/mean"] for r in train_rows) / len(train_rows),
        "staleness_max": max(r["staleness/max"] for r in train_rows),
        "dropped_share": train_rows[-1].get("staleness/dropped_share", 0.0),
        "wall_s": None,
        "device_hours": None,
        "step": None,
    }
    wall, prev = 0.0, None  # prev: (wall, device-hours, step, pass rate) at the previous evaluation
    for r in rows:
        if r["kind"] == "train":
            wall += r["time/step"]
            continue
        now = (wall, r["compute/device_hours"], r["step"], r["val/pass_rate"])
        if now[3] >= target:
            f = 1.0 if prev is None or now[3] == prev[3] else (target - prev[3]) / (now[3] - prev[3])
            a = prev or now
            out.update(
                wall_s=a[0] + f * (now[0] - a[0]),
                device_hours=a[1] + f * (now[1] - a[1]),
                step=a[2] + f * (now[2] - a[2]),
            )
            break
        prev = now
    return out


def fmt(x, spec: str) -> str:
    return "not reached" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per mode (default: the recipe's)")
    parser.add_argument(
        "--target",
        type=float,
        default=None,
        help="validation pass rate to reach (default: halfway from the start to the lower final)",
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=None, help="keep the run directories here")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {', '.join(MODES)}")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"--modes: unknown {', '.join(unknown)} (expected some of {', '.join(MODES)})")
    overrides = list(args.overrides) + ([f"run.max_steps={args.steps}"] if args.steps else [])
    out = args.out or Path(tempfile.mkdtemp(prefix="async_vs_sync-"))
    runs = {name: run_mode(name, overrides, out) for name in modes}
    start = [r["val/pass_rate"] for r in next(iter(runs.values())) if r["kind"] == "eval"][0]
    finals = [[r["val/pass_rate"] for r in rows if r["kind"] == "eval"][-1] for rows in runs.values()]
    target = args.target if args.target is not None else start + 0.5 * (min(finals) - start)
    res = {name: reach(rows, target) for name, rows in runs.items()}
    print(f"\ntarget validation pass rate {target:.3f} (start {start:.3f}); runs in {out}")
    print(
        f"{'mode':<18} {'final':>6} {'steps/hour':>11} {'wall s to target':>17} {'device-h to target':>19} "
        f"{'step':>5} {'stale mean':>10} {'max':>4} {'dropped':>8}"
    )
    for name, r in res.items():
        print(
            f"{name:<18} {r['final']:>6.3f} {fmt(r['steps_per_hour'], '11.0f')} {fmt(r['wall_s'], '17.1f')} "
            f"{fmt(r['device_hours'], '19.5f')} {fmt(r['step'], '5.1f')} {r['staleness_mean']:>10.2f} "
            f"{r['staleness_max']:>4d} {r['dropped_share']:>8.1%}"
        )
    if BASELINE in res:
        base = res[BASELINE]
        for name, a in res.items():
            if name == BASELINE:
                continue
            parts = []
            for key, label in (
                ("wall_s", "wall-clock to target"),
                ("device_hours", "device-hours to target"),
                ("steps_per_hour", "steps per hour"),
            ):
                num, den = (a[key], base[key]) if key == "steps_per_hour" else (base[key], a[key])
                parts.append(f"{label} x{fmt(num / den if num and den else None, '.2f')}")
            print(f"{name} against {BASELINE}: " + ", ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
