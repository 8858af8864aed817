"""Memory soak: run `scalerl train` for N steps and report each process's resident memory.

By default the SmolLM2 command of docs/training.md (seed 3, rg:chain_sum); `--set` adds or
overrides keys, `--config` starts from a file. The figures come from the run's own record,
`system/rss_mb` (trainer) and `system/rss_mb/<name>` (each generator process) in every training
row of metrics.jsonl (scalerl.run.memory), and `system/rss_mb/total`: the run's memory, the sum
of the processes' PSS (shared pages once; runs older than that logged the sum of their RSS,
which counts the published weights in both processes: `total_kind` says which). Printed per
process: the peak, and the growth over the second half of the run, `second_half_growth`:
(median of the last `WINDOW` training rows - median of the `WINDOW` rows from the middle step
on) / the latter; and the peak within steps (`system/rss_peak_mb`, VmHWM between two rows).

    .venv/bin/python benchmarks/memory_soak.py --steps 300 --run-dir runs/soak
    .venv/bin/python benchmarks/memory_soak.py --steps 60 --set model.name=tiny --set task.name=arith
    .venv/bin/python benchmarks/memory_soak.py --report runs/soak      # the figures of a finished run

`--plot FILE` draws resident memory against steps (matplotlib); `--before DIR` adds a second
run's curves (dashed) to the plot, e.g. the same command on an older commit; `--samples` /
`--before-samples` (files of `benchmarks/memory_sample.py`) add a panel of the runs' memory
against wall-clock time, evaluations included.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2 = [
    "run.seed=3",
    "model.name=smollm2-135m",
    "task.name=rg:chain_sum",
    "task.options={min_terms: 2, max_terms: 3, max_digits: 1}",
    "task.train_size=512",
    "eval.every=15",
]
WINDOW = 10  # training rows in each median of `second_half_growth`
PREFIX = "system/rss_mb"


def train_rows(run_dir: Path) -> list[dict]:
    """The training rows of a run's metrics.jsonl that record memory."""
    rows = []
    with open(Path(run_dir) / "metrics.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n"):
                row = json.loads(line)
                if row.get("kind") == "train" and PREFIX in row:
                    rows.append(row)
    return rows


def series(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """Process name (`trainer`, `generator0`, ..., `total`) -> [(step, MiB)]."""
    out: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key == PREFIX or key.startswith(PREFIX + "/"):
                name = "trainer" if key == PREFIX else key[len(PREFIX) + 1 :]
                out.setdefault(name, []).append((row["step"], value))
    return out


def second_half_growth(values: list[float], window: int = WINDOW) -> float:
    """(median of the last `window` values - median of the `window` from the middle on) / the latter."""
    if len(values) < 2:
        raise ValueError(f"need at least 2 rows to measure growth, got {len(values)}")
    w = max(1, min(window, len(values) // 4))
    mid = len(values) // 2
    start = statistics.median(values[mid : mid + w])
    end = statistics.median(values[-w:])
    return (end - start) / start


def total_kind(rows: list[dict]) -> str:
    """What `system/rss_mb/total` sums in these rows: PSS (shared pages once) or, in older runs, RSS."""
    return "PSS" if any("system/pss_mb" in r for r in rows) else "RSS"


def summary(run_dir: Path) -> dict[str, dict[str, float]]:
    """Per process: peak MiB, MiB at the first and last rows, second-half growth (a fraction), the
    peak within steps (VmHWM between rows, where logged)."""
    rows = train_rows(run_dir)
    if not rows:
        raise SystemExit(
            f"{run_dir}/metrics.jsonl has no training row with {PREFIX} (a run older than the memory metrics?)"
        )
    out = {}
    for name, points in series(rows).items():
        values = [v for _, v in points]
        key = "system/rss_peak_mb" + ("" if name == "trainer" else f"/{name}")
        peaks = [r[key] for r in rows if key in r]
        out[name] = {
            "rows": len(values),
            "first_mb": values[0],
            "last_mb": values[-1],
            "peak_mb": max(values),
            "second_half_growth": second_half_growth(values) if len(values) >= 2 else float("nan"),
            "peak_within_steps_mb": max(peaks) if peaks else float("nan"),
        }
    return out


def run(run_dir: Path, steps: int, sets: list[str], config: str | None, minutes: float | None) -> int:
    """`scalerl train` for `steps` optimizer steps (or `minutes` of training); its exit code."""
    args = [
        sys.executable,
        "-m",
        "scalerl",
        "train",
        "--no-progress",
        "--run-dir",
        str(run_dir),
        "--max-steps",
        str(steps),
    ]
    if config is not None:
        args += ["--config", config]
    for s in [*sets, *([f"run.max_minutes={minutes}"] if minutes is not None else [])]:
        args += ["--set", s]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.call(args, env=env, cwd=ROOT)


def sampled_total(path: Path) -> list[tuple[float, float]]:
    """(minutes since the first sample, the sum of the processes' PSS in MiB) from a
    `benchmarks/memory_sample.py` file: the run's memory between rows too (evaluations included)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    t0 = rows[0]["t"]
    return [((r["t"] - t0) / 60, sum(e["pss_mb"] for e in r["procs"].values())) for r in rows]


def plot(path: Path, runs: list[tuple[str, Path, str]], samples: list[tuple[str, Path, str]] = ()) -> None:
    """Resident memory (GB) of each process against steps; `runs`: (label, run dir, line style).
    With `samples` ((label, memory_sample.py file, style)), a second panel: the run's memory
    (PSS summed over its processes) against wall-clock minutes, evaluations included."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if samples:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 2]})
        for label, file, style in samples:
            minutes, values = zip(*sampled_total(file))
            ax2.plot(
                minutes, [v / 1024 for v in values], style, color="C2", label=f"total PSS, sampled every 5 s ({label})"
            )
        ax2.set_xlabel("wall-clock minutes (evaluations included)")
        ax2.set_ylabel("memory (GB)")
        ax2.grid(alpha=0.3)
        ax2.legend(fontsize=8)
    else:
        fig, ax = plt.subplots(figsize=(8, 4.5))
    colours = {"trainer": "C0", "generator0": "C1", "total": "C2"}
    for label, run_dir, style in runs:
        rows = train_rows(run_dir)
        for name, points in series(rows).items():
            steps, values = zip(*points)
            what = f"total, sum of {total_kind(rows)}" if name == "total" else f"{name} RSS"
            ax.plot(steps, [v / 1024 for v in values], style, color=colours.get(name, "C3"), label=f"{what} ({label})")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("resident memory (GB)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--minutes", type=float, default=None, help="run.max_minutes (default: none, --steps ends it)")
    ap.add_argument("--run-dir", type=Path, default=ROOT / "runs" / "memory-soak")
    ap.add_argument("--config", default=None, help="a config file instead of the SmolLM2 command")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="key=value, after the SmolLM2 command's")
    ap.add_argument("--report", type=Path, default=None, help="only report on this finished run directory")
    ap.add_argument("--plot", type=Path, default=None, help="write a plot of memory against steps here")
    ap.add_argument("--before", type=Path, default=None, help="a second run directory to plot beside (dashed)")
    ap.add_argument("--samples", type=Path, default=None, help="memory_sample.py's file of the run (a second panel)")
    ap.add_argument("--before-samples", type=Path, default=None, help="memory_sample.py's file of --before")
    a = ap.parse_args()

    run_dir = a.report
    if run_dir is None:
        run_dir = a.run_dir
        code = run(run_dir, a.steps, ([] if a.config else SMOLLM2) + a.sets, a.config, a.minutes)
        if code != 0:
            raise SystemExit(f"scalerl train exited with code {code}")
    print(f"total = the sum of the processes' {total_kind(train_rows(run_dir))}")
    for name, s in summary(run_dir).items():
        print(
            f"{name:>11}: peak {s['peak_mb']:7.0f} MB, first {s['first_mb']:7.0f} MB, last {s['last_mb']:7.0f} MB, "
            f"second-half growth {s['second_half_growth']:+.1%} ({s['rows']} rows), "
            f"peak within steps {s['peak_within_steps_mb']:7.0f} MB"
        )
    if a.plot is not None:
        runs = [("after", run_dir, "-")] + ([("before", a.before, "--")] if a.before else [])
        samples = ([("after", a.samples, "-")] if a.samples else []) + (
            [("before", a.before_samples, "--")] if a.before_samples else []
        )
        plot(a.plot, runs, samples)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
