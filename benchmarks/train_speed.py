"""Wall time per training step of `scalerl train`: a git ref (A, default `main`) against the working
tree (B), same machine, same seed, alternating A/B/A/B in one invocation.

    python benchmarks/train_speed.py                        # the default run (120 steps), A/B twice
    python benchmarks/train_speed.py --steps 40 --repeats 3 # shorter runs (--set run.max_steps=40)
    python benchmarks/train_speed.py --ref 9a66824 --set rollout.decode=eager
    python benchmarks/train_speed.py --metric time/score_wait --metric time/gen_wait --set ...

A is a temporary `git worktree` of `--ref` (removed at the end), run with PYTHONPATH pointing
there and this tree's interpreter; B is this tree. Each run is `scalerl train --no-progress` with
`--set run.max_steps=N --set run.seed=S` and the `--set`s given (to both sides), in a fresh
run directory under a temporary folder. Printed per run: the whole run's wall time (start-up,
step-0 evaluation, every step, the evaluations of the geometric schedule, checkpoints and the
final fit: what a user waits for) divided by its steps, the median of the loop's own `time/step`
(a step without the evaluations), the evaluations' total (`time/eval`), the median of each
`--metric` over the training rows (`-` where a side does not log it), and the machine's load;
then the median of each side and the ratios B / A. The evaluation schedule has `eval.count`
points whatever the length, so a run shorter than the default spends a larger share of its time
evaluating: say which length a figure is for.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(src: Path, out: Path, steps: int, seed: int, sets: list[str], metrics: list[str]) -> dict:
    """One `scalerl train` with the package at `src`; its timings."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [
        sys.executable,
        "-m",
        "scalerl",
        "train",
        "--no-progress",
        "--run-dir",
        str(out),
        "--set",
        f"run.max_steps={steps}",
        "--set",
        f"run.seed={seed}",
    ]
    for s in sets:
        cmd += ["--set", s]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"train_speed: {' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    if len(train) != steps:
        raise SystemExit(f"train_speed: {out} has {len(train)} training rows, expected {steps}")
    evals = [r["time/eval"] for r in rows if r["kind"] == "eval" and "time/eval" in r]
    extra = {m: statistics.median(r[m] for r in train) if all(m in r for r in train) else None for m in metrics}
    return {
        "wall_per_step": wall / steps,
        "step_median": statistics.median(r["time/step"] for r in train),
        "eval_total": sum(evals),
        "evals": len(evals),
        "wall": wall,
        "load": (load + os.getloadavg()[0]) / 2,
        "metrics": extra,
    }


def _medians(metrics: dict[str, float | None]) -> str:
    return "".join(f", {m} median {'-' if v is None else f'{v:.3f}'}" for m, v in metrics.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default="main", help="git ref of side A (default: main)")
    ap.add_argument("--steps", type=int, default=120, help="run.max_steps of every run (the default run: 120)")
    ap.add_argument("--repeats", type=int, default=2, help="A/B pairs, alternating")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="config override for both sides"
    )
    ap.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    ap.add_argument(
        "--metric",
        dest="metrics",
        action="append",
        default=[],
        metavar="NAME",
        help="a training-row metric whose median per run is printed too (repeatable)",
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="train_speed-"))
    ref_dir = tmp / "ref"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(ref_dir), args.ref], check=True, capture_output=True
    )
    commit = subprocess.run(
        ["git", "-C", str(ref_dir), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    sides = {"A": ref_dir, "B": ROOT}
    print(
        f"A = {args.ref} ({commit}), B = working tree ({head}{', modified' if dirty else ''}); "
        f"scalerl train, {args.steps} steps, seed {args.seed}, sets {args.sets or 'none'}; nice {os.nice(0)}, "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    results: dict[str, list[dict]] = {"A": [], "B": []}
    try:
        for i in range(args.repeats):
            for side, src in sides.items():
                r = run_once(src, tmp / f"{side}{i}", args.steps, args.seed, args.sets, args.metrics)
                results[side].append(r)
                print(
                    f"{side}{i}: {r['wall_per_step']:6.2f} s/step wall ({r['wall']:.0f} s), time/step median "
                    f"{r['step_median']:5.2f} s, {r['evals']} evaluations {r['eval_total']:.0f} s, load "
                    f"{r['load']:.1f}{_medians(r['metrics'])}",
                    flush=True,
                )
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(ref_dir)], capture_output=True)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"run directories: {tmp}")
    med = {
        s: {k: statistics.median(r[k] for r in rs) for k in ("wall_per_step", "step_median", "eval_total")}
        for s, rs in results.items()
    }
    for s in ("A", "B"):
        print(
            f"median {s}: {med[s]['wall_per_step']:.2f} s/step wall, time/step {med[s]['step_median']:.2f} s, "
            f"evaluations {med[s]['eval_total']:.0f} s"
        )
    for k, label in (("wall_per_step", "wall per step"), ("step_median", "time/step"), ("eval_total", "evaluations")):
        ratio = med["B"][k] / med["A"][k]
        print(f"B / A {label}: {ratio:.3f} ({(1 - ratio) * 100:+.1f}% less time)")


if __name__ == "__main__":
    main()
