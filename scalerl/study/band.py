"""`scalerl check`: is a run of a configuration within the band of that configuration's committed
runs? The regression check CI runs on the default run (issue 47): a change that makes the default
run fall, or makes it train on staler data, fails it.

The method, fixed before the reference runs were made:
- the reference runs are a study's results folder of one configuration (`<results>/<config>/seed<N>/`:
  `metrics.jsonl` evaluation rows, `activity.json`, `done.json`), all of one build of the model; the
  checked run must start from the same build (`done.json` `model_build` against the weights the
  checked run's model name loads here), else the check refuses, in one line;
- **the curve**: at each of the checked run's evaluations after step 0, each reference run's pass
  rate at the same compute (`compute/flops`, linear interpolation; evaluations beyond a reference's
  compute are not compared); the band is the 99% prediction interval of one more run drawn like the
  references, `mean +- t(0.995, n-1) * sd * sqrt(1 + 1/n)` over the n references (so a run of the
  same configuration fails about one time in a hundred, whatever n). A run fails when its end (the
  mean of its last three evaluations) is below the prediction interval of the references' ends, or
  when more than a third of its evaluations are outside the band;
- **the data's age**: the run's mean `staleness/max` over its training steps must not exceed the
  references' highest by more than one version;
- each validation subset's drop from its own peak to its last evaluation is reported beside the
  references' largest drop (not a failure on its own).

A curve is compared only with references evaluated the same way: the checked run and every reference
must record one evaluation plan (`config.yaml`: `eval.schedule`, `count`, `every`, `prompts`,
`samples`, `temperature` and `run.max_steps`), else the check refuses in one line. The end is the mean
of the last three evaluations, so on another schedule it is another quantity (the default's went from
12 to 36 evaluations, docs/default-run.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scalerl.errors import ScaleRLError
from scalerl.run.compute import FIT_X
from scalerl.run.metrics import read_rows

Y = "val/pass_rate"
STALENESS = "staleness/max"
END_EVALS = 3  # the end of a curve: the mean of its last three evaluations
OUTSIDE_SHARE = 1 / 3  # more evaluations than this outside the band fail the check
LEVEL = 0.99  # the band: a two-sided prediction interval for one more run
STALENESS_SLACK = 1.0  # versions above the references' highest mean staleness/max
PLAN_KEYS = ("schedule", "count", "every", "prompts", "samples", "temperature")  # eval.* that shape a curve


@dataclass
class Curve:
    """One run: its evaluations after step 0 (compute, pass rate, standard error, subsets) and the mean
    `staleness/max` of its training steps (None where not recorded)."""

    name: str
    x: np.ndarray
    y: np.ndarray
    se: np.ndarray
    subsets: dict[str, np.ndarray] = field(default_factory=dict)
    staleness: float | None = None
    build: str | None = None
    plan: dict | None = None  # the evaluation plan (PLAN_KEYS of eval, run.max_steps); None without a config.yaml

    @property
    def end(self) -> float:
        return float(self.y[-END_EVALS:].mean())

    def drops(self) -> dict[str, float]:
        """Each subset's peak minus its last evaluation (not the mean of the last three: a subset still
        rising at the end would read as one that fell)."""
        return {k: float(np.nanmax(v) - v[-1]) for k, v in self.subsets.items()}


def read_curve(run: Path) -> Curve:
    """A run directory or a results folder entry (`metrics.jsonl`, and `activity.json` / `done.json` if there)."""
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        raise ScaleRLError(f"{path}: no metrics.jsonl (expected a scalerl run directory or a study results entry)")
    rows = read_rows(path)
    evals = [r for r in rows if r.get("kind") == "eval" and r.get("step", 0) > 0 and Y in r]
    if len(evals) < END_EVALS:
        raise ScaleRLError(f"{path}: {len(evals)} evaluations after step 0; the check needs at least {END_EVALS}")
    subsets = {k[len(Y) + 1 :] for k in evals[-1] if k.startswith(Y + "/")}
    curve = Curve(
        name=str(run),
        x=np.array([r[FIT_X] for r in evals], float),
        y=np.array([r[Y] for r in evals], float),
        se=np.array([r.get(Y + "_se", 0.0) for r in evals], float),
        subsets={s: np.array([r.get(f"{Y}/{s}", np.nan) for r in evals], float) for s in sorted(subsets)},
    )
    if (Path(run) / "activity.json").is_file():  # a results entry keeps only the last training row
        stats = json.loads((Path(run) / "activity.json").read_text()).get("train", {}).get(STALENESS)
        curve.staleness = None if stats is None else float(stats["mean"])
    else:
        train = [r[STALENESS] for r in rows if r.get("kind") == "train" and STALENESS in r]
        curve.staleness = float(np.mean(train)) if train else None
    if (Path(run) / "done.json").is_file():
        curve.build = json.loads((Path(run) / "done.json").read_text()).get("model_build")
    curve.plan = eval_plan(Path(run))
    return curve


def eval_plan(run: Path) -> dict | None:
    """How run `run` was evaluated (`config.yaml`'s eval.{PLAN_KEYS} and run.max_steps), None where it
    has no config.yaml."""
    import yaml

    from scalerl.run.rundir import CONFIG_FILE

    file = Path(run) / CONFIG_FILE
    if not file.is_file():
        return None
    try:
        cfg = yaml.safe_load(file.read_text(encoding="utf-8"))
        return {**{k: cfg["eval"][k] for k in PLAN_KEYS}, "max_steps": cfg["run"]["max_steps"]}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ScaleRLError(f"{file}: not readable YAML ({' '.join(str(exc).split())[:200]})") from None
    except (KeyError, TypeError) as exc:
        raise ScaleRLError(f"{file}: no eval/run setting {exc} (expected a scalerl run's resolved config)") from None


def _plan_text(plan: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in plan.items())


def read_references(folder: Path) -> list[Curve]:
    runs = sorted(p for p in Path(folder).glob("seed*") if (p / "metrics.jsonl").is_file())
    if len(runs) < 2:
        raise ScaleRLError(f"{folder}: {len(runs)} reference runs (seed*/metrics.jsonl); the band needs at least 2")
    refs = [read_curve(p) for p in runs]
    builds = {r.build for r in refs}
    if len(builds) != 1 or None in builds:
        raise ScaleRLError(
            f"{folder}: the reference runs name other model builds ({sorted(map(str, builds))}); a band is of one build"
        )
    plans = {_plan_text(r.plan) for r in refs if r.plan is not None}
    if len(plans) > 1:
        raise ScaleRLError(
            f"{folder}: the reference runs were evaluated on different plans ({'; '.join(sorted(plans))}); "
            "a band is of one evaluation plan"
        )
    return refs


def prediction_interval(values: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The `LEVEL` prediction interval of one more draw from the distribution of `values` (normal, unknown
    variance): `mean +- t * sd * sqrt(1 + 1/n)` along `axis`, NaN entries left out (NaN where n < 2)."""
    import warnings

    from scipy import stats

    n = np.sum(~np.isnan(values), axis=axis)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a compute fewer than two references reach: NaN
        mean, sd = np.nanmean(values, axis=axis), np.nanstd(values, axis=axis, ddof=1)
        half = stats.t.ppf(0.5 + LEVEL / 2, n - 1) * sd * np.sqrt(1 + 1 / n)
    half = np.where(n >= 2, half, np.nan)
    return mean - half, mean + half


def band(refs: list[Curve], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The prediction band of the references' pass rate at each compute `x` (NaN where fewer than two
    references reach that compute)."""
    at = np.array([np.where((x >= r.x[0]) & (x <= r.x[-1]), np.interp(x, r.x, r.y), np.nan) for r in refs])
    return prediction_interval(at)


def _comparable(run: Curve, refs: list[Curve], build: str | None) -> None:
    """Refuse, in one line, a run that started from another model build or was evaluated on another plan."""
    if build is not None and refs[0].build != build:
        raise ScaleRLError(
            f"the checked run started from model build {build}, the references from {refs[0].build}: "
            "compare runs of one build (rebuild or use the shipped weights)"
        )
    ref_plan = next((r.plan for r in refs if r.plan is not None), None)
    if run.plan is not None and ref_plan is not None and run.plan != ref_plan:
        differ = ", ".join(
            f"{k} {run.plan.get(k)} (references {ref_plan.get(k)})"
            for k in ref_plan
            if run.plan.get(k) != ref_plan.get(k)
        )
        raise ScaleRLError(
            f"{run.name} was evaluated on another plan than the references: {differ}; compare runs "
            "evaluated alike (the end is the mean of the last three evaluations)"
        )


def check(run: Curve, refs: list[Curve], build: str | None) -> dict:
    """The verdict (`ok`, `failures`) and every figure it rests on."""
    _comparable(run, refs, build)
    lo_w, hi_w = band(refs, run.x)
    compared = ~np.isnan(lo_w)
    outside = compared & ((run.y < lo_w) | (run.y > hi_w))
    ref_ends = [r.end for r in refs]
    end_lo = float(prediction_interval(np.array(ref_ends))[0])
    failures = []
    if run.end < end_lo:
        failures.append(
            f"its end pass rate {run.end:.3f} is below the band's end {end_lo:.3f} "
            f"(references {min(ref_ends):.3f}-{max(ref_ends):.3f})"
        )
    if outside.sum() > OUTSIDE_SHARE * compared.sum():
        failures.append(f"{int(outside.sum())} of {int(compared.sum())} evaluations are outside the band")
    ref_stale = [r.staleness for r in refs if r.staleness is not None]
    if run.staleness is not None and ref_stale and run.staleness > max(ref_stale) + STALENESS_SLACK:
        failures.append(
            f"its mean staleness/max {run.staleness:.2f} exceeds the references' highest "
            f"{max(ref_stale):.2f} by more than {STALENESS_SLACK:g}"
        )
    ref_drops = {}
    for r in refs:
        for k, v in r.drops().items():
            ref_drops[k] = max(ref_drops.get(k, 0.0), v)
    return {
        "ok": not failures,
        "failures": failures,
        "run": run.name,
        "references": len(refs),
        "end": run.end,
        "reference_ends": [min(ref_ends), max(ref_ends)],
        "evaluations": [
            {
                "x": float(x),
                "y": float(y),
                "lo": None if np.isnan(a) else float(a),
                "hi": None if np.isnan(b) else float(b),
                "outside": bool(o),
            }
            for x, y, a, b, o in zip(run.x, run.y, lo_w, hi_w, outside)
        ],
        "staleness": run.staleness,
        "reference_staleness": [min(ref_stale), max(ref_stale)] if ref_stale else None,
        "subset_drops": run.drops(),
        "reference_subset_drops": ref_drops,
    }


def lines(out: dict) -> list[str]:
    rows = [
        f"{out['run']} against {out['references']} reference runs:",
        f"  end pass rate {out['end']:.3f} (references {out['reference_ends'][0]:.3f}-{out['reference_ends'][1]:.3f})",
    ]
    if out["staleness"] is not None and out["reference_staleness"]:
        a, b = out["reference_staleness"]
        rows.append(f"  mean staleness/max {out['staleness']:.2f} (references {a:.2f}-{b:.2f})")
    for name, drop in out["subset_drops"].items():
        rows.append(
            f"  subset {name}: peak - last {drop:+.3f} (references at most "
            f"{out['reference_subset_drops'].get(name, float('nan')):+.3f})"
        )
    n_out = sum(e["outside"] for e in out["evaluations"])
    rows.append(f"  evaluations outside the band: {n_out} of {len(out['evaluations'])}")
    rows.append("  PASS: within the band" if out["ok"] else "  FAIL: " + "; ".join(out["failures"]))
    return rows
