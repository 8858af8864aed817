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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence

from scalerl.run.compute import FIT_X
from scalerl.run.memory import settle
from scalerl.run.metrics import METRICS_FILE, read_rows
from scalerl.types import Completion, Prompt, Score, rollout_stats

MIN_POINTS = 5  # scalerl.scaling.fit_curve needs 5 points in its window


class EvalEngine(Protocol):
    """What an evaluation decodes with (`scalerl.rollout.Generator`'s `reseed` and `generate`): an engine
    over the trainer's model, the generator process's (`scalerl.transport.local.RemoteGenerator`), or
    both at once (`SplitEvaluator`)."""

    def reseed(self) -> None: ...

    def generate(self, prompts: Sequence[Prompt], n: int) -> list[Completion]: ...


@dataclass(frozen=True)
class Downstream:
    """A downstream set (`eval.downstream`): its prompts, its pass/fail reward, its scoring threads."""

    name: str
    prompts: list[Prompt]
    reward_fn: Callable[[Prompt, Completion], Score]
    workers: int = 0


@dataclass(frozen=True)
class Evaluator:
    """The run's evaluation as the loop calls it (built by scalerl.assembly.run): mean@k of `engine` on the
    validation `prompts`, k = `samples`, and on each downstream set, with `threads` torch threads; reseeded
    before each call, so every evaluation draws the same random numbers (`evaluate_all`'s row)."""

    engine: EvalEngine
    prompts: list[Prompt]
    samples: int
    reward_fn: Callable[[Prompt, Completion], Score]
    workers: int  # scoring threads (`GroupAssembler.workers_for` the task)
    threads: int  # torch threads while it decodes
    downstream: tuple[Downstream, ...] = ()

    def __call__(self) -> dict[str, float]:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            self.engine.reseed()  # common random numbers across evaluations (Engine.reseed)
            return evaluate_all(self.engine, self.prompts, self.samples, self.reward_fn, self.workers, self.downstream)
        finally:
            torch.set_num_threads(threads)


def evaluate(
    generator,
    prompts: Sequence[Prompt],
    samples: int,
    reward_fn: Callable[[Prompt, Completion], Score],
    workers: int = 0,
) -> dict[str, float]:
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
    row = rollout_stats(completions, scores, "val")
    row.update({"val/completions": len(completions), "tokens/val_generated": sum(len(c.tokens) for c in completions)})
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


class SplitEvaluator:
    """An evaluation decoded by two generators at once (`eval.split`): `remote` (the generator
    process's evaluation engine) takes most prompts while `local` (an engine over the trainer's own
    model, in the trainer's process) decodes a `local_share` of them on the cores the trainer
    would otherwise leave idle. The prompts are dealt out in turn, so that both get the same mix
    of lengths and subsets; the completions come back grouped by prompt in input order, as one
    generator's would. Each side has its own seed and both are reseeded before every evaluation,
    so the evaluation keeps common random numbers across evaluations; its completions are not
    the ones a single engine would sample."""

    def __init__(self, remote, local, local_share: float):
        if not 0 < local_share < 1:
            raise ValueError(f"SplitEvaluator: local_share = {local_share}: expected a share between 0 and 1")
        self.remote, self.local, self.local_share = remote, local, local_share

    @property
    def version(self) -> int:
        return self.remote.version

    def reseed(self) -> None:
        self.remote.reseed()
        self.local.reseed()

    def deal(self, n_prompts: int) -> list[bool]:
        """Per prompt, whether the local side decodes it: in turn, `local_share` of them."""
        return [int((i + 1) * self.local_share) > int(i * self.local_share) for i in range(n_prompts)]

    def generate(self, prompts: Sequence[Prompt], n: int) -> list[Completion]:
        prompts = list(prompts)
        mine = self.deal(len(prompts))
        local = [p for p, m in zip(prompts, mine) if m]
        remote = [p for p, m in zip(prompts, mine) if not m]
        with ThreadPoolExecutor(1, thread_name_prefix="scalerl-eval-remote") as pool:
            pending = pool.submit(self.remote.generate, remote, n) if remote else None
            ours = self.local.generate(local, n) if local else []
            theirs = pending.result() if pending is not None else []
        order = {p.id: i for i, p in enumerate(prompts)}
        return sorted(theirs + ours, key=lambda c: order[c.prompt_id])  # stable: each prompt's samples in order


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
    return var**0.5 / n


def live_forecast(evals: list[tuple[float, float]], fit_min_frac: float, se: list[float] | None = None) -> dict:
    """Refit the sigmoid to (compute, pass rate) so far by the one forecast specification
    (`scalerl.scaling.spec`: the window, R0, the grid check, 200 bootstrap replicas, as `scalerl
    fit`, fit.json and the study report); {} while too few points. From six evaluations on, also
    whether the curve fell after its peak (`scalerl.scaling.find_fall`, with each evaluation's
    standard error `se` where given): `forecast/fell` (1 or 0) and `forecast/peak`; once the first
    half of the compute holds five evaluations, the first-half check (the frozen method):
    `forecast/first_half_predicted`, `forecast/first_half_error`, its calibrated interval
    (`forecast/first_half_lo`, `_hi`), `forecast/first_half_identified` and its baselines' errors.
    With the fit: whether the ceiling is identified (`forecast/identified`, 1 or 0; where not,
    `forecast/A_lower_bound`) and the forecast at twice the compute so far with its calibrated
    interval (`forecast/at_2x`, `_lo`, `_hi`).

    A fit that cannot be made (e.g. a flat curve) is reported in the row as `forecast/error`
    rather than stopping the training run; the final fit (launch.final_fit) does raise.
    """
    from scalerl.errors import ScaleRLError
    from scalerl.scaling.spec import spec_fit

    if not evals:
        return {}
    x = [c for c, _ in evals]
    y = [r for _, r in evals]
    out = _fall_and_first_half(x, y, se)
    if sum(c > 0 for c in x) < MIN_POINTS:
        return out
    try:
        fit = spec_fit(x, y, fit_min_frac)
    except ScaleRLError as exc:
        return {**out, "forecast/error": str(exc)}
    return {**out, **_fit_columns(x, y, fit)}


def _fall_and_first_half(x: list[float], y: list[float], se: list[float] | None) -> dict:
    """`live_forecast`'s columns that need no fit of their own: the fall after a peak, the first-half check."""
    from scalerl.scaling import find_fall
    from scalerl.scaling.outlook import first_half_check

    fall = find_fall(y, se)
    out = {} if fall is None else {"forecast/fell": int(fall["fell"]), "forecast/peak": fall["peak"]}
    half = first_half_check(x, y)
    if half is not None and "error" in half:
        out.update(
            {
                f"forecast/first_half_{k}": half[k]
                for k in (
                    "predicted",
                    "error",
                    "baseline_last_error",
                    "baseline_best_error",
                    "baseline_ruler_error",
                    "baseline_last3_error",
                )
            }
        )
        out.update(
            {
                "forecast/first_half_lo": half["interval"][0],
                "forecast/first_half_hi": half["interval"][1],
                "forecast/first_half_identified": int(half["identified"]),
            }
        )
    return out


def _fit_columns(x: list[float], y: list[float], fit) -> dict:
    """`live_forecast`'s columns of the fit: its parameters, whether the ceiling is identified (or its lower
    bound), the forecast at twice the compute so far with its calibrated interval."""
    from scalerl.scaling.outlook import outlook

    lo, hi = fit.ci.get("A", (float("nan"), float("nan")))
    look = outlook(x, y, fit)
    now = max(x)
    g2 = look.gain(now, 2 * now)
    out = {
        "forecast/A": fit.A,
        "forecast/A_lo": lo,
        "forecast/A_hi": hi,
        "forecast/B": fit.B,
        "forecast/C_mid": fit.C_mid,
        "forecast/rmse": fit.rmse,
        "forecast/identified": int(look.identified),
        "forecast/at_2x": g2["value"],
        "forecast/at_2x_lo": g2["value_lo"],
        "forecast/at_2x_hi": g2["value_hi"],
    }
    if not look.identified and look.ident["lower_bound"] is not None:
        out["forecast/A_lower_bound"] = look.ident["lower_bound"]
    return out


def eval_rows(run_dir) -> list[dict]:
    """The evaluation rows so far that hold FIT_X and val/pass_rate, from the run's metrics.jsonl
    (rolled back to the checkpoint on a resume): the live forecast reads the same record as the final fit."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    return [
        r
        for r in read_rows(path)
        if r.get("kind") == "eval" and r.get(FIT_X) is not None and r.get("val/pass_rate") is not None
    ]


def eval_curve(run_dir) -> list[tuple[float, float]]:
    """(FIT_X, val/pass_rate) of every evaluation so far (`eval_rows`)."""
    return [(r[FIT_X], r["val/pass_rate"]) for r in eval_rows(run_dir)]


def forecast_row(run_dir, row: dict, fit_min_frac: float) -> dict:
    """`live_forecast` over the run's evaluations so far (`eval_rows`) and this one (`row`)."""
    rows = [*eval_rows(run_dir), row]  # metrics.jsonl: the one record, and this evaluation
    curve = [(r[FIT_X], r["val/pass_rate"]) for r in rows]
    se = [r.get("val/pass_rate_se") for r in rows]
    return live_forecast(curve, fit_min_frac, se=None if None in se else se)


def evaluate_all(
    generator: EvalEngine,
    prompts: Sequence[Prompt],
    samples: int,
    reward_fn: Callable,
    workers: int,
    downstream: Sequence[Downstream] = (),
) -> dict[str, float]:
    """`evaluate` on the validation prompts, and `downstream/<name>/pass_rate[_se]` per downstream set;
    then the evaluation engine's dropped caches freed (`scalerl.run.memory.settle`) before training goes on."""
    row = evaluate(generator, prompts, samples, reward_fn, workers=workers)
    for d in downstream:
        other = evaluate(generator, d.prompts, samples, d.reward_fn, workers=d.workers)
        row[f"downstream/{d.name}/pass_rate"] = other["val/pass_rate"]
        row[f"downstream/{d.name}/pass_rate_se"] = other["val/pass_rate_se"]
    settle()
    return row
