"""The default run over its seeds (issue 47): start, half, end, each rung's peak against its last evaluation, the
fitted `A` with its 90% interval and the mean of the rungs' own ceilings, the whole-run fit's residuals against the
sampling error, and the first-half forecast's error beside three naive predictors that see the same first-half
evaluations (the last, the best, and the ruler: a line through the last two against log compute).

    .venv/bin/python studies/default/default_summary.py studies/default/base [more result folders] [--md] [--thin N]

`--thin N` first keeps, of each run's evaluations, step 0 and the one nearest to each step of the geometric
plan of N evaluations (`scalerl.config.eval_schedule`, as `eval.count=N` would evaluate): the same runs seen
through a sparser plan (`--thin 12`: the plan before 2026-11-28), a control for what the number of
evaluations alone changes. Beside the frozen first-half forecast, the forecast by the rungs' own first-half
fits (`subset_first_half_prediction`, a departure written 2026-11-26) is shown as `rungs err`.

Reads `<folder>/seed<N>/metrics.jsonl` (evaluation rows: `compute/flops`, `val/pass_rate`,
`val/pass_rate_se`, `val/pass_rate/<rung>`) and, from `activity.json`, the means over every training step
of `staleness/max` and the median of `time/gen_wait` (the seconds a step waited for data: well above 0
where the generator is the slower stage). The baselines are computed here, not by scalerl."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from scalerl.config import eval_schedule
from scalerl.scaling.fit import first_half_prediction, fit_curve, subset_first_half_prediction

TAIL = 3  # the end of a curve: the mean of its last three evaluations


def evals(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == "eval" and "val/pass_rate" in r]


def train_stat(folder: Path, key: str, stat: str = "mean") -> float | None:
    """`stat` of a training metric over every step, from the run's `activity.json` (None without it)."""
    act = folder / "activity.json"
    if act.is_file():
        stats = json.loads(act.read_text()).get("train", {}).get(key, {})
        return None if stat not in stats else float(stats[stat])
    return None


def rounded(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ruler(x: np.ndarray, y: np.ndarray, at: float) -> float:
    """A straight line through the last two points against log compute, extrapolated to `at`."""
    (x1, x2), (y1, y2) = np.log(x[-2:]), y[-2:]
    return float(y2 + (y2 - y1) / (x2 - x1) * (np.log(at) - x2))


def thinned(rows: list[dict], count: int, fit_min_frac: float = 0.1) -> list[dict]:
    """Step 0 and, for each step of the `count`-evaluation geometric plan, the evaluation nearest to it."""
    last = rows[-1]["step"]
    plan = eval_schedule(last, count, first=max(1, round(last * fit_min_frac / 2)))
    later = [r for r in rows if r["step"] > 0]
    keep = {min(later, key=lambda r: (abs(r["step"] - s), r["step"]))["step"] for s in plan}
    return [r for r in rows if r["step"] == 0 or r["step"] in keep]


def one(folder: Path, thin: int | None = None) -> dict:
    rows = evals(folder / "metrics.jsonl")
    if thin:
        rows = thinned(rows, thin)
    x = np.array([r["compute/flops"] for r in rows], float)
    y = np.array([r["val/pass_rate"] for r in rows], float)
    se = np.array([r.get("val/pass_rate_se", np.nan) for r in rows], float)
    rungs = sorted(k.split("/")[-1] for k in rows[-1] if k.startswith("val/pass_rate/"))
    end = float(y[-TAIL:].mean())
    # a rung's end is its last evaluation here: the mean of its last three (the curve's end) flags a rung
    # that is still rising as one that fell (chosen after seeing seed 0: its 5-digit rung rose 0.85 -> 0.97)
    peak_drop = {g: float(max(r[f"val/pass_rate/{g}"] for r in rows) - rows[-1][f"val/pass_rate/{g}"]) for g in rungs}
    pos = x > 0
    fit = fit_curve(x[pos], y[pos], "sigmoid", n_bootstrap=200)
    resid = y[pos] - fit.predict(x[pos])
    half = first_half_prediction(x[pos], y[pos])
    in_window = int(((x[pos] >= half["window_from"]) & (x[pos] <= x[pos][-1] / 2)).sum())
    by_rung = subset_first_half_prediction(
        x[pos], {g: np.array([r[f"val/pass_rate/{g}"] for r in rows], float)[pos] for g in rungs}
    )
    hx, hy = x[pos][x[pos] <= x[pos][-1] / 2], y[pos][x[pos] <= x[pos][-1] / 2]
    target = float(np.mean(x[pos][-TAIL:]))
    # the ceiling as the mean of the rungs' own ceilings (scalerl.study.report.subset_ceiling; a rung that
    # never passed counts 0): the rungs are equal shares of the validation set, learnt at different compute
    rung_a = []
    for g in rungs:
        yg = np.array([r[f"val/pass_rate/{g}"] for r in rows], float)
        rung_a.append(0.0 if not (yg > 0).any() else fit_curve(x[pos], yg[pos], "sigmoid", n_bootstrap=0).A)
    return {
        "run": str(folder),
        "start": float(y[0]),
        "half": float(np.interp(x[-1] / 2, x, y)),
        "end": end,
        "peak_minus_end": peak_drop,
        "A": fit.A,
        "A_ci": list(fit.ci.get("A", (np.nan, np.nan))),
        "A_rungs": float(np.mean(rung_a)),
        "A_each_rung": dict(zip(rungs, rung_a)),
        "residual_ratio": float(np.sqrt(np.mean(resid**2)) / np.nanmedian(se[pos])),
        "residual_rms": float(np.sqrt(np.mean(resid**2))),
        "se_median": float(np.nanmedian(se[pos])),
        "window_points": in_window,
        "evaluations": int(pos.sum()),
        "rungs_error": by_rung["predicted"] - half["measured"],
        "first_half_error": half["error"],
        "last_error": half["baseline_last_error"],
        "best_error": half["baseline_best_error"],
        "ruler_error": ruler(hx, hy, target) - half["measured"],
        "first_half_points": half["points"],
        "staleness_max_mean": train_stat(folder, "staleness/max"),
        "gen_wait_median": train_stat(folder, "time/gen_wait", "median"),
    }


def summary(results: list[dict]) -> list[str]:
    def med(key):
        v = [r[key] for r in results]
        return f"{np.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]"

    out = [
        f"{len(results)} runs; median [range]:",
        *(
            f"  {k}: {med(k)}"
            for k in (
                "start",
                "half",
                "end",
                "A",
                "A_rungs",
                "residual_ratio",
                "residual_rms",
                "se_median",
                "window_points",
                "evaluations",
            )
        ),
        *(
            f"  |{k}|: mean {np.mean([abs(r[k]) for r in results]):.3f}, within 0.02 on "
            f"{sum(abs(r[k]) <= 0.02 for r in results)} of {len(results)}"
            for k in ("first_half_error", "rungs_error", "last_error", "best_error", "ruler_error")
        ),
    ]
    worst = max(max(r["peak_minus_end"].values()) for r in results)
    out.append(f"  largest drop of a rung from its peak to its last evaluation: {worst:.3f} (criterion: at most 0.05)")
    return out


def table(results: list[dict]) -> list[str]:
    rungs = sorted(results[0]["peak_minus_end"])
    head = (
        "| run | start | half | end | "
        + " | ".join(f"{g} peak-last" for g in rungs)
        + " | A [90%] | A (rungs: mean (each)) | resid/se | in window | first-half err | rungs err | last | best"
        " | ruler | staleness/max | trainer wait (median s) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        each = ", ".join(f"{a:.2f}" for a in r["A_each_rung"].values())
        lines.append(
            f"| {Path(r['run']).parent.name}/{Path(r['run']).name} | {r['start']:.3f} | {r['half']:.3f} | "
            f"{r['end']:.3f} | "
            + " | ".join(f"{r['peak_minus_end'][g]:+.3f}" for g in rungs)
            + f" | {r['A']:.3f} [{r['A_ci'][0]:.3f}, {r['A_ci'][1]:.3f}] | {r['A_rungs']:.3f} ({each})"
            f" | {r['residual_ratio']:.2f} | {r['window_points']} | {r['first_half_error']:+.3f}"
            f" | {r['rungs_error']:+.3f} | {r['last_error']:+.3f} | {r['best_error']:+.3f} | "
            f"{r['ruler_error']:+.3f} | {rounded(r['staleness_max_mean'], 2)} | {rounded(r['gen_wait_median'], 3)} |"
        )
    return lines


def main(argv: list[str]) -> None:
    skip = {argv.index("--thin") + 1} if "--thin" in argv else set()
    folders = [Path(a) for i, a in enumerate(argv) if not a.startswith("--") and i not in skip]
    runs = sorted(p for f in folders for p in f.glob("seed*") if (p / "metrics.jsonl").is_file())
    thin = int(argv[argv.index("--thin") + 1]) if "--thin" in argv else None
    results = [one(p, thin) for p in runs]
    print("\n".join(table(results) if "--md" in argv else []))
    print("\n".join(summary(results)))


if __name__ == "__main__":
    main(sys.argv[1:])
