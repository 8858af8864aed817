"""Where the time of each k-sweep run went: step wall-clock, the trainer's wait for data, staleness.

The k-sweep's claim is about idle time (the paper's Fig. 4 is per GPU-hour), which the small
form of a run (evaluation rows only) does not keep. This reads the full run directories and
prints one row per configuration (median over its seeds of each run's per-step mean: a mean,
since PPO-off-policy generates once every k steps and a median step would hide that), so the
table in docs/study.md can be regenerated where the runs are:

    .venv/bin/python studies/ksweep-report/ksweep_timing.py runs/ksweep/runs > studies/ksweep-report/timing.md

Columns: wall s/step (`time/step`), device-s/step (`compute/step_device_seconds`: wall x the
devices the run holds), the training phase (`time/train`), the share of the step the trainer was
not training (1 - train / step: waiting for rollouts under PipelineRL, generating under
PPO-off-policy), `staleness/mean` and the run's `staleness/max`, and device-hours over the whole
run (`compute/device_hours` at its last step).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from scalerl.run.metrics import read_rows

COLUMNS = (
    "wall s/step",
    "device-s/step",
    "train s/step",
    "not training",
    "staleness mean",
    "staleness max",
    "device-hours",
)


def run_summary(run_dir: Path) -> dict[str, float] | None:
    rows = [r for r in read_rows(run_dir / "metrics.jsonl") if r.get("kind") != "eval"]
    steps = [r for r in rows if "time/step" in r]
    if not steps or not (run_dir / "done.json").is_file():
        return None
    mean = lambda key: statistics.mean(float(r[key]) for r in steps)  # noqa: E731
    return {
        "wall s/step": mean("time/step"),
        "device-s/step": mean("compute/step_device_seconds"),
        "train s/step": mean("time/train"),
        "not training": 1.0 - mean("time/train") / mean("time/step"),
        "staleness mean": statistics.mean(float(r.get("staleness/mean", 0.0)) for r in steps),
        "staleness max": max(float(r.get("staleness/max", 0.0)) for r in steps),
        "device-hours": float(steps[-1]["compute/device_hours"]),
    }


def main(root: str) -> None:
    base = Path(root)
    if not base.is_dir():
        sys.exit(f"{root}: not a directory (expected a study's runs/ folder: <config>/seed<N>/)")
    table: dict[str, list[dict[str, float]]] = {}
    for run_dir in sorted(base.glob("*/seed*")):
        s = run_summary(run_dir)
        if s is not None:
            table.setdefault(run_dir.parent.name, []).append(s)
    if not table:
        sys.exit(f"{root}: no finished run (expected <config>/seed<N>/metrics.jsonl and done.json)")
    ref = statistics.median(r["device-s/step"] for r in table["scalerl"]) if "scalerl" in table else None
    print("| config | runs | " + " | ".join(COLUMNS) + " | device-s/step vs scalerl |")
    print("|---|---|" + "---|" * (len(COLUMNS) + 1))
    for name, runs in sorted(table.items(), key=lambda kv: (kv[0] != "scalerl", kv[0])):
        cells = [statistics.median(r[c] for r in runs) for c in COLUMNS]
        ratio = f"x{cells[1] / ref:.2f}" if ref else ""
        fmt = [
            f"{cells[0]:.2f}",
            f"{cells[1]:.2f}",
            f"{cells[2]:.2f}",
            f"{cells[3]:.2f}",
            f"{cells[4]:.2f}",
            f"{cells[5]:.0f}",
            f"{cells[6]:.3f}",
        ]
        print(f"| {name} | {len(runs)} | " + " | ".join(fmt) + f" | {ratio} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: ksweep_timing.py RUNS_DIR   (a study's runs/ folder, e.g. runs/ksweep/runs)")
    main(sys.argv[1])
