"""The first-half forecast per subset, against the frozen method (exploratory; docs/study.md).

On the 3/5/7 ladder the pass rate is the mean of three rungs learnt at different compute (the
3-digit rung by a fifth of the run, the 7-digit one in its second half), and a single sigmoid
fitted to the first half bends with the first rung, so the frozen method under-predicts the end.
Here each rung's own curve (`val/pass_rate/<subset>`) gets the frozen method's first-half fit
(`first_half_prediction`), a rung whose fit fails is predicted by its last first-half evaluation,
and the run's forecast is the mean over rungs (the validation set holds them in equal shares).

The rule was written on 2026-11-26 at 08:51 UTC, after looking at 19 finished runs of the axes
study and before the seed-2 runs of batch-16, batch-64, think-52, think-208, gens-4, gens-16,
model-2m and model-4m had finished: those 8 are its test.

    python benchmarks/subset_forecast.py studies/axes [--runs CONFIG/seedN ...]

The rule as committed then (877e868) is `scalerl.scaling.subset_first_half_prediction`, which this
script now calls; the output is unchanged.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from scalerl.scaling import first_half_prediction, read_metrics, subset_first_half_prediction
from scalerl.study.report import read_subsets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a study's results folder (<config>/seed<N>/metrics.jsonl)")
    ap.add_argument("--runs", nargs="*", help="only these CONFIG/seedN")
    args = ap.parse_args()
    rows = []
    for run in sorted(args.results.glob("*/seed*")):
        name = f"{run.parent.name}/{run.name}"
        if args.runs and name not in args.runs or not (run / "done.json").exists():
            continue
        x, y, _ = read_metrics(run / "metrics.jsonl", "compute/flops", "val/pass_rate")
        rungs = {k: v for k, v in read_subsets(run / "metrics.jsonl", "compute/flops", x).items() if k.startswith("2x")}
        frozen = first_half_prediction(x, y)
        per_subset = subset_first_half_prediction(x, rungs)["predicted"]
        rows.append(
            (
                name,
                frozen["error"],
                per_subset - frozen["measured"],
                frozen["baseline_last_error"],
                frozen["baseline_best_error"],
            )
        )
    print(f"{'run':22s} {'frozen':>8s} {'per-subset':>11s} {'last eval':>10s} {'best eval':>10s}   (forecast - end)")
    for name, *errs in rows:
        print(f"{name:22s} " + " ".join(f"{e:+{w}.3f}" for e, w in zip(errs, (8, 11, 10, 10))))
    if rows:
        a = np.abs(np.array([r[1:] for r in rows]))
        print(
            f"{len(rows)} runs: mean |error| "
            + ", ".join(f"{n} {m:.3f}" for n, m in zip(("frozen", "per-subset", "last eval", "best eval"), a.mean(0)))
        )
        print(
            "within 0.02: "
            + ", ".join(
                f"{n} {k}" for n, k in zip(("frozen", "per-subset", "last eval", "best eval"), (a <= 0.02).sum(0))
            )
        )


if __name__ == "__main__":
    main()
