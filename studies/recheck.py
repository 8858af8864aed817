"""Recompute, from the committed studies, every figure docs/study.md states about what they show.

    python studies/recheck.py            (from the repository root; reads studies/, writes nothing)

Independent of `scalerl.study`: end pass rates, margins, rung curves, the ruler and the provenance
are read from each run's kept metrics (`studies/<study>/<config>/seed<k>/metrics.jsonl`, its
evaluation rows) and done.json; only fitted ceilings `A` (and each seed's) are taken from the
committed report.json, whose fits the reviewer of issue 47 reproduced exactly. The detectable
difference is worked here from scipy's t quantiles, not from `scalerl.scaling.power`.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
from scipy import optimize, stats

ROOT = Path(__file__).resolve().parent
MARGIN = 0.02  # the paper's +-0.02
TAIL = 3  # the end of a run: the mean of its last three evaluations


def evals(run: Path) -> dict[str, np.ndarray]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("kind") == "eval"]
    keys = set.intersection(*(set(r) for r in rows))
    return {k: np.array([float(r[k]) for r in rows]) for k in keys if isinstance(rows[0][k], (int, float))}


def runs(study: str, config: str) -> list[Path]:
    return sorted(p for p in (ROOT / study / config).glob("seed*") if (p / "done.json").is_file())


def ends(study: str, config: str) -> np.ndarray:
    return np.array([evals(r)["val/pass_rate"][-TAIL:].mean() for r in runs(study, config)])


def report(name: str) -> dict:
    data = json.loads((ROOT / name / "report.json").read_text())
    return {c["name"]: c for c in data["configs"]}


def mdd(s1: float, n1: int, s2: float, n2: int) -> float:
    """Two-sided two-sample t-test, alpha 0.05, power 0.8: (t_.975 + t_.8) s_pooled sqrt(1/n1 + 1/n2)."""
    dof = n1 + n2 - 2
    sp = np.sqrt(((n1 - 1) * s1**2 + (n2 - 1) * s2**2) / dof)
    return float((stats.t.ppf(0.975, dof) + stats.t.ppf(0.8, dof)) * sp * np.sqrt(1 / n1 + 1 / n2))


def seed_a(cfg: dict) -> np.ndarray:
    return np.array([r["A"] for r in cfg["runs"] if r["finished"] and r["A"] is not None])


def compare_end(study: str, base: str, config: str) -> str:
    b, v = ends(study, base), ends(study, config)
    margin = max(MARGIN, b.std(ddof=1), v.std(ddof=1))
    d = v.mean() - b.mean()
    return (
        f"end {d:+.3f} ({'beyond' if abs(d) > margin else 'within'} +-{margin:.3f}; "
        f"detectable {mdd(b.std(ddof=1), len(b), v.std(ddof=1), len(v)):.3f})"
    )


def compare_a(rep: dict, base: str, config: str) -> str:
    b, v = seed_a(rep[base]), seed_a(rep[config])
    margin = max(MARGIN, b.std(ddof=1), v.std(ddof=1))
    d = rep[config]["fit"]["A"] - rep[base]["fit"]["A"]
    return (
        f"A {d:+.3f} ({'beyond' if abs(d) > margin else 'within'} +-{margin:.3f}; "
        f"detectable {mdd(b.std(ddof=1), len(b), v.std(ddof=1), len(v)):.3f})"
    )


def provenance() -> None:
    print("## Code and weights of every committed run (done.json)")
    folders = [p for p in ROOT.iterdir() if p.name != "history"] + list(
        (ROOT / "history").iterdir()
    )  # history: superseded
    for study in sorted(p for p in folders if p.is_dir() and not p.name.endswith(("-report", "-hours"))):
        done = [json.loads(p.read_text()) for p in study.glob("*/seed*/done.json")]
        if done:
            code = Counter(str(d.get("code", "not recorded"))[:7] for d in done)
            print(f"  {study.relative_to(ROOT)}: {len(done)} runs; code {dict(code)}")


def leave_one_out() -> None:
    print("## Leave-one-out end pass rates against the base (studies/recipes, 3 seeds)")
    for config in (
        "dapo-loss",
        "token-agg",
        "prompt-norm",
        "no-fp32-head",
        "no-zero-var-filter",
        "no-npr",
        "ppo-off-policy",
        "length-penalty",
    ):
        print(f"  {config}: {compare_end('recipes', 'scalerl', config)}")


def axes() -> None:
    rep = report("axes-report")
    print("## Scaling axes against the base (studies/axes, 3 seeds)")
    for config in ("batch-16", "batch-64", "think-208", "gens-4", "gens-16", "model-2m", "model-4m"):
        print(f"  {config}: {compare_a(rep, 'base', config)}; {compare_end('axes', 'base', config)}")


def rungs(study: str, config: str) -> str:
    cells = []
    for rung in ("2x3", "2x5", "2x7"):
        curves = [evals(r)[f"val/pass_rate/{rung}"] for r in runs(study, config)]
        cells.append(
            f"{rung} {np.mean([c[0] for c in curves]):.3f} -> {np.mean([c[-TAIL:].mean() for c in curves]):.3f}"
        )
    return ", ".join(cells)


def builds(study: str, config: str) -> str:
    return ", ".join(
        sorted({json.loads((r / "done.json").read_text()).get("model_build", "?") for r in runs(study, config)})
    )


def model_size() -> None:
    print("## Model size: the larger model on two builds of the testbed (start -> end of each rung, seed means)")
    for study, rep, base, larger in (
        ("controls-first-build", "controls-first-build-report", "base", "model-larger"),
        ("controls-b2", "controls-b2-report", "base", "model-larger"),
        ("axes", "axes-report", "base", "model-2m"),
    ):
        r = report(rep)
        print(
            f"  {study}: {larger} (build {builds(study, larger)}) against {base} (build {builds(study, base)}): "
            f"{compare_a(r, base, larger)}; {compare_end(study, base, larger)}"
        )
        for config in (base, larger):
            print(f"    {config}: {rungs(study, config)}")
    for config in ("batch-16", "batch-64", "think-208"):
        print(f"    axes {config}: {rungs('axes', config)}")


def ceiling_gap(study: str, cfg: dict) -> float | None:
    """A minus the ceiling the rungs' own fits set: sum over rungs of share x rung A (a rung that never
    passed: 0), the shares fitted to the pooled evaluations (non-negative, summing to 1)."""
    names = sorted(cfg["subsets"])
    if not names or cfg["fit"] is None:
        return None
    rows = [evals(r) for r in runs(study, cfg["name"])]
    S = np.concatenate([np.stack([e[f"val/pass_rate/{n}"] for n in names], 1) for e in rows])
    y = np.concatenate([e["val/pass_rate"] for e in rows])
    w, _ = optimize.nnls(np.vstack([S, 100 * np.ones(len(names))]), np.append(y, 100.0))
    caps = np.array([cfg["subsets"][n].get("A", 0.0) if "A" in cfg["subsets"][n] else 0.0 for n in names])
    return float(cfg["fit"]["A"] - w @ caps)


def ceilings() -> None:
    print(
        "## A against the rungs' own ceilings (A - sum of share x rung A); configurations that did not fall,\n"
        "## whose A is pinned (not on the edge) and whose every rung passed at some evaluation"
    )
    gaps = []
    for study, rep in (("axes", "axes-report"), ("recipes", "recipes-report")):
        for name, cfg in report(rep).items():
            gap = ceiling_gap(study, cfg)
            if (
                gap is not None
                and not cfg["fell"]
                and not cfg["A_on_edge"]
                and all("A" in s for s in cfg["subsets"].values())
            ):
                gaps.append((gap, f"{study}/{name}"))
                if name in ("base", "scalerl"):
                    print(f"  {study}/{name}: A {cfg['fit']['A']:.3f}, the rungs' ceiling {cfg['fit']['A'] - gap:.3f}")
    gaps.sort()
    print(
        f"  over {len(gaps)} configurations: from {gaps[0][0]:+.3f} ({gaps[0][1]}) "
        f"to {gaps[-1][0]:+.3f} ({gaps[-1][1]})"
    )


def ruler(run: Path) -> float:
    """A straight line through the last two first-half evaluations against log compute, at the last three
    evaluations' compute, minus their measured mean."""
    e = evals(run)
    x, y = e["compute/flops"], e["val/pass_rate"]
    half = np.flatnonzero(x <= x[-1] / 2)
    (x1, x2), (y1, y2) = x[half[-2:]], y[half[-2:]]
    slope = (y2 - y1) / (np.log(x2) - np.log(x1))
    return float(np.mean(y2 + slope * (np.log(x[-TAIL:]) - np.log(x2))) - y[-TAIL:].mean())


def forecast_against_ruler() -> None:
    print("## The frozen first-half forecast against the ruler, distinct standing runs of the four studies")
    seen, fit_err, ruler_err = set(), [], []
    for study in ("axes", "controls-b2", "recipes", "ksweep"):
        for name, cfg in report(f"{study}-report").items():
            for r in cfg["runs"]:
                path = ROOT / study / name / f"seed{r['seed']}"
                digest = hashlib.sha256((path / "metrics.jsonl").read_bytes()).hexdigest()
                fh = r["first_half"]
                if digest in seen or not r["finished"] or not fh or "error" not in fh or (r["fall"] or {}).get("fell"):
                    continue
                seen.add(digest)
                fit_err.append(abs(fh["error"]))
                ruler_err.append(abs(ruler(path)))
    f, r = np.array(fit_err), np.array(ruler_err)
    print(
        f"  {len(f)} runs: forecast mean |error| {f.mean():.3f} (within 0.02: {(f <= MARGIN).sum()}); ruler "
        f"{r.mean():.3f} (within 0.02: {(r <= MARGIN).sum()}); forecast closer on {(f < r).sum()} of {len(f)}"
    )


def power() -> None:
    print("## What 3 seeds can detect in A (every configuration against its base, the reports' seed fits)")
    values = []
    for rep, base in (
        ("axes-report", "base"),
        ("recipes-report", "scalerl"),
        ("controls-b2-report", "base"),
        ("ksweep-report", "scalerl"),
    ):
        r = report(rep)
        b = seed_a(r[base])
        values += [
            mdd(b.std(ddof=1), len(b), v.std(ddof=1), len(v))
            for name, c in r.items()
            if name != base and len(v := seed_a(c)) >= 2
        ]
    values.sort()
    print(
        f"  detectable difference in A over {len(values)} comparisons: median {np.median(values):.3f}, "
        f"quartiles {np.percentile(values, 25):.3f}-{np.percentile(values, 75):.3f} "
        f"(the paper's effects: 0.035 batch and thinking budget, 0.075 DAPO loss, 0.09 FP32 head, 0.10 model size)"
    )
    base = seed_a(report("axes-report")["base"])
    print(
        f"  the base's seed std of A {base.std(ddof=1):.3f}: detectable with 3 seeds a side "
        f"{mdd(base.std(ddof=1), 3, base.std(ddof=1), 3):.3f}, "
        f"with 5 {mdd(base.std(ddof=1), 5, base.std(ddof=1), 5):.3f}"
    )
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, base.std(ddof=1), (2, 100_000, 3))
    margin = np.maximum(MARGIN, np.maximum(a.std(1, ddof=1), b.std(1, ddof=1)))
    print(
        f"  the margin rule on identical configurations (normal seeds at that std, 3 a side, 100,000 draws): "
        f"'differs' {np.mean(np.abs(a.mean(1) - b.mean(1)) > margin):.0%} of the time"
    )


if __name__ == "__main__":
    for section in (provenance, leave_one_out, axes, model_size, ceilings, forecast_against_ruler, power):
        section()
        print()
