"""A vLLM run of the default testbed against the local engine's seeds at the same steps.

    python studies/vllm-default/compare.py RUN [--against studies/default/base]

For each evaluation of RUN (metrics.jsonl), every reference seed's `val/pass_rate` at that step (linear
between its two nearest evaluations; the learning rate is constant after its warm-up, whatever the run's
length, so a step is the same point of the schedule in a 40-step and a 120-step run), then their range and
mean, and whether RUN is inside the range. Then RUN's training rows: `staleness/max` (highest), the median
`time/step`, `time/train`, `time/publish` and `time/eval`. `scalerl check` compares whole runs evaluated
on one plan; this compares a shorter run on another plan.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np


def rows(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.strip()]


def curve(run: Path) -> tuple[np.ndarray, np.ndarray]:
    ev = [(r["step"], r["val/pass_rate"]) for r in rows(run) if r["kind"] == "eval"]
    return np.array([s for s, _ in ev], dtype=float), np.array([p for _, p in ev])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--against", type=Path, default=Path("studies/default/base"))
    args = ap.parse_args()
    refs = [curve(d) for d in sorted(args.against.glob("seed*"))]
    steps, rates = curve(args.run)
    inside = 0
    print(f"| step | vLLM | local engine, {len(refs)} seeds: range | mean |\n|---|---|---|---|")
    for step, rate in zip(steps, rates):
        at = np.array([np.interp(step, x, y) for x, y in refs])
        ok = at.min() <= rate <= at.max()
        inside += ok
        print(
            f"| {step:g} | {rate:.3f} | {at.min():.3f}-{at.max():.3f}{'' if ok else ' (outside)'} | {at.mean():.3f} |"
        )
    print(f"\n{inside} of {len(steps)} evaluations inside the seeds' range")
    train = [r for r in rows(args.run) if r["kind"] == "train"]
    evals = [r["time/eval"] for r in rows(args.run) if r["kind"] == "eval"]
    med = {k: statistics.median(r.get(f"time/{k}", 0.0) for r in train) for k in ("step", "train", "publish")}
    print(
        f"{len(train)} steps: staleness/max at most {max(r['staleness/max'] for r in train)}, medians: "
        + ", ".join(f"time/{k} {v:.2f} s" for k, v in med.items())
        + f", time/eval {statistics.median(evals):.1f} s"
    )


if __name__ == "__main__":
    main()
