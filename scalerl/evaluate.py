"""Evaluation on the fixed held-out set, and the live sigmoid forecast.

Departures from the paper (Section 2.1, Appendix A.5-A.7):
1. mean@k with k = `eval.samples` (paper: mean@16) on `eval.prompts` held-out prompts
   (paper: 1,000), sized for the tiny model's CPU budget.
2. The live forecast excludes the first `eval.fit_min_frac` of the compute spent so far (the
   paper excludes a fixed early window, ~1.5k GPU-hours) and needs at least `MIN_POINTS`
   evaluations after that window.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from scalerl.types import Completion, Prompt, Score

MIN_POINTS = 5  # scalerl.scaling.fit_curve needs 5 points in its window


def evaluate(generator, prompts: Sequence[Prompt], samples: int,
             reward_fn: Callable[[Prompt, Completion], Score], workers: int = 0) -> dict[str, float]:
    """mean@k pass rate of `generator` (current weights) on `prompts`, k = `samples`.

    Prompts whose `meta` names a `"subset"` (arith: `2x3` = two 3-digit operands) or a
    `"domain"` (a mix such as `arith,code`: `arith`, `code`) also get `val/pass_rate/<name>`,
    the same mean over those completions. `workers` > 0 scores in that many threads (code).
    """
    by_id = {p.id: p for p in prompts}
    completions = generator.generate(list(prompts), samples)
    if workers > 0:
        with ThreadPoolExecutor(workers, thread_name_prefix="scalerl-eval-score") as pool:
            scores = list(pool.map(lambda c: reward_fn(by_id[c.prompt_id], c), completions))
    else:
        scores = [reward_fn(by_id[c.prompt_id], c) for c in completions]
    n = max(1, len(completions))
    row = {
        "val/pass_rate": sum(s.passed for s in scores) / n,
        "val/reward_mean": sum(s.reward for s in scores) / n,
        "val/length_mean": sum(len(c.tokens) for c in completions) / n,
        "val/truncation_rate": sum(c.truncated for c in completions) / n,      # cut without an interruption
        "val/interrupted_rate": sum(c.interrupted for c in completions) / n,
        "val/completions": len(completions),
        "tokens/val_generated": sum(len(c.tokens) for c in completions),
    }
    row["val/pass_rate_se"] = sampling_se([c.prompt_id for c in completions], [s.passed for s in scores])
    # per-subset pass rates (e.g. arith difficulty levels), for prompts that name one
    subsets: dict[str, list[bool]] = {}
    for c, s in zip(completions, scores):
        meta = by_id[c.prompt_id].meta
        for key in ("subset", "domain"):
            if meta.get(key) is not None:
                subsets.setdefault(str(meta[key]), []).append(s.passed)
    for name, passed in sorted(subsets.items()):
        row[f"val/pass_rate/{name}"] = sum(passed) / len(passed)
    return row


def sampling_se(prompt_ids: Sequence[str], passed: Sequence[bool]) -> float:
    """The standard error of the mean@k pass rate from sampling alone, the prompts held fixed
    (they are: the validation set is the same at every evaluation): sqrt(sum_i s_i^2 / k_i) / n
    over the n prompts, s_i^2 the unbiased variance of prompt i's k_i pass/fail samples. With one
    sample per prompt, the binomial sqrt(p (1 - p) / n) (an upper bound: it counts the spread
    between prompts too). `prompt_ids[j]` and `passed[j]` describe completion j."""
    by_prompt: dict[str, list[float]] = {}
    for pid, ok in zip(prompt_ids, passed, strict=True):
        by_prompt.setdefault(pid, []).append(float(ok))
    if not by_prompt:
        return 0.0
    n = len(by_prompt)
    if all(len(v) == 1 for v in by_prompt.values()):
        p = sum(v[0] for v in by_prompt.values()) / n
        return (p * (1 - p) / n) ** 0.5
    var = 0.0
    for v in by_prompt.values():
        k = len(v)
        if k > 1:
            m = sum(v) / k
            var += sum((t - m) ** 2 for t in v) / (k - 1) / k
    return var ** 0.5 / n


def live_forecast(evals: list[tuple[float, float]], fit_min_frac: float, n_bootstrap: int = 50,
                  se: list[float] | None = None) -> dict:
    """Refit the sigmoid to (compute, pass rate) so far; {} while too few points. From six
    evaluations on, also whether the curve fell after its peak (`scalerl.scaling.find_fall`, with
    each evaluation's standard error `se` where given): `forecast/fell` (1 or 0) and `forecast/peak`.

    A fit that cannot be made (e.g. a flat curve) is reported in the row as `forecast/error`
    rather than stopping the training run; the final fit (launch.final_fit) does raise.
    """
    from scalerl.errors import ScaleRLError
    from scalerl.scaling import find_fall, fit_curve

    if not evals:
        return {}
    x = [c for c, _ in evals]
    y = [r for _, r in evals]
    fall = find_fall(y, se)
    out = {} if fall is None else {"forecast/fell": int(fall["fell"]), "forecast/peak": fall["peak"]}
    fit_min = fit_min_frac * evals[-1][0]
    if sum(c >= fit_min and c > 0 for c, _ in evals) < MIN_POINTS:
        return out
    try:
        fit = fit_curve(x, y, model="sigmoid", fit_min=fit_min, n_bootstrap=n_bootstrap, seed=0)
    except ScaleRLError as exc:
        return {**out, "forecast/error": str(exc)}
    lo, hi = fit.ci.get("A", (float("nan"), float("nan")))
    return {**out, "forecast/A": fit.A, "forecast/A_lo": lo, "forecast/A_hi": hi, "forecast/B": fit.B,
            "forecast/C_mid": fit.C_mid, "forecast/rmse": fit.rmse}
