"""Steps per hour of PipelineRL on the Ray backend with 1 and 2 generator actors, and the Ray
backend's overhead against the in-process backend on the same config, in one invocation.

    .venv/bin/python benchmarks/ray_scaling.py [--steps 12] [--model tiny-random] [--cpus 2]

Every run trains `--steps` optimizer steps from the same start (same config, seed, model);
steps/hour is measured over the steps after the first (the first includes actor start-up and
the generators' first fill), from the `time/step` column of metrics.jsonl. Ray start-up
(`ray.init`) and actor start-up are reported separately. Evaluation is pushed past the end of
the run so that only generation + training is timed. The three configurations run interleaved,
`--repeats` times, in one Ray instance, and the median run of each is shown.

On a shared 2-core machine the generators and the trainer compete for the same cores: a second
generator actor cannot add compute there, so this measures the backend's overhead and its
scaling ceiling on this machine, not the speed-up on a cluster (docs/ray.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _config(model: str, steps: int, extra: list[str]):
    from scalerl.configure import load_config

    return load_config(
        "scalerl",
        overrides=[
            f"model.name={model}",
            f"run.max_steps={steps}",
            "batch.prompts=8",
            "batch.generations=4",
            "rollout.batch_slots=16",
            "pipeline.k=2",
            f"eval.every={steps + 1}",
            "eval.prompts=8",
            "eval.samples=1",
            f"run.checkpoint_every={steps + 1}",
            "run.threads=2",
            *extra,
        ],
    )


def _components(cfg):
    """tiny-random: the real engine and trainer with the parity reward (groups always have
    variance, so every step trains); otherwise the configured model, task and reward."""
    if cfg.model.name != "tiny-random":
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test doubles
    from doubles import tiny_random_components

    return tiny_random_components(cfg)


def _run(cfg, label: str) -> dict:
    from scalerl.loop import train
    from scalerl.run.metrics import read_rows

    with tempfile.TemporaryDirectory() as run_dir:
        t0 = time.monotonic()
        train(cfg, Path(run_dir), comps=_components(cfg), progress=False)
        wall = time.monotonic() - t0
        rows = [r for r in read_rows(Path(run_dir) / "metrics.jsonl") if r["kind"] == "train"]
    steady = [r["time/step"] for r in rows[1:]]
    per_step = statistics.mean(steady)
    return {
        "label": label,
        "steps": len(rows),
        "wall_s": wall,
        "first_step_s": rows[0]["time/step"],
        "step_s": per_step,
        "steps_per_hour": 3600.0 / per_step,
        "gen_wait_s": statistics.mean(r["time/gen_wait"] for r in rows[1:]),
        "train_s": statistics.mean(r["time/train"] for r in rows[1:]),
        "idle_s": statistics.mean(r.get("ray/gen_idle_seconds", float("nan")) for r in rows[1:]),
        "staleness_max": max(r["staleness/max"] for r in rows),
    }


def _median(runs: list[dict]) -> dict:
    """The run with the median seconds per step (of repeats of one configuration)."""
    return sorted(runs, key=lambda r: r["step_s"])[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument(
        "--model",
        default="tiny-random",
        help="tiny-random (parity reward, see _components), "
        "tiny (warm-started arithmetic model, real reward), or any model.name",
    )
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    parser.add_argument("--repeats", type=int, default=2, help="rounds over the three configurations (median kept)")
    args = parser.parse_args()

    import ray
    import torch

    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray_init_s = time.monotonic() - t0
    configs = [("in-process (process transport)", ["pipeline.transport=process"])]
    for n in (1, 2):
        configs.append(
            (
                f"ray, {n} generator actor{'s' if n > 1 else ''}",
                ["pipeline.backend=ray", f"ray.generators={n}", f"ray.generator_cpus={args.cpus / (n + 1):.3f}"],
            )
        )
    runs: dict[str, list[dict]] = {label: [] for label, _ in configs}
    try:
        for _ in range(args.repeats):  # interleaved, so that load from other users hits every configuration
            for label, extra in configs:
                runs[label].append(_run(_config(args.model, args.steps, extra), label))
    finally:
        ray.shutdown()

    results = [_median(runs[label]) for label, _ in configs]
    base = results[0]["step_s"]
    print(
        f"model {args.model}, {args.steps} steps of 8 prompts x 4, PipelineRL k=2, {os.cpu_count()} cores, "
        f"load average {load:.1f} at start, {os.getloadavg()[0]:.1f} at end; ray.init took {ray_init_s:.1f} s; "
        f"median of {args.repeats} interleaved runs"
    )
    print(
        f"{'backend':32s} {'steps/hour':>10s} {'s/step':>7s} {'vs in-proc':>10s} {'train s':>7s} {'1st step s':>10s} "
        f"{'wait s':>7s} {'gen idle s':>10s} {'stale max':>9s}  all s/step"
    )
    for r in results:
        spread = ", ".join(f"{x['step_s']:.2f}" for x in runs[r["label"]])
        print(
            f"{r['label']:32s} {r['steps_per_hour']:10.0f} {r['step_s']:7.2f} {r['step_s'] / base:9.2f}x "
            f"{r['train_s']:7.2f} {r['first_step_s']:10.1f} {r['gen_wait_s']:7.2f} {r['idle_s']:10.2f} "
            f"{r['staleness_max']:9d}  {spread}"
        )


if __name__ == "__main__":
    main()
