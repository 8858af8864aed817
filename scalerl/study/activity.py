"""Does the component a study variant swaps act on the study's testbed at all?

Read from the runs' own metrics over every training step (`summarise_activity`, which a study's
results keep in `activity.json` beside the small metrics), never guessed: a swap of something that
never acts cannot move A, whatever the paper found. Each variant of `scalerl.study.variants` that
can sit idle carries its own check (`Variant.acts`, one of the functions below); a check takes the
reference's and the variant's summaries, one a run, and returns {"acts": True, False or None (not
settled by what is logged), "evidence": str}, or None where what it reads was not logged. A
component is said not to act only from every training step of every run it reads (a run kept
without them settles nothing).
"""

from __future__ import annotations

import statistics
from typing import Callable

Summaries = list[dict]
ActivityCheck = Callable[[Summaries, Summaries], "dict | None"]

ACTIVITY_TRAIN_KEYS = (
    "curriculum/epoch",
    "curriculum/retired",
    "curriculum/pool_size",
    "batch/zero_variance_dropped",
    "batch/drawn",
    "loss/clip_frac",
    "loss/ratio_max",
    "staleness/max",
    "train/interrupted_rate",
    "train/length_penalised_rate",
    "time/gen_wait",
)
ACTIVITY_EVAL_KEYS = ("val/interrupted_rate",)
INTERRUPT_FLOOR = 0.01  # forced interruptions "hardly act" below this share of completions


def summarise_activity(rows: list[dict]) -> dict | None:
    """What the checks read, from a run's metrics rows: for each `ACTIVITY_TRAIN_KEYS`
    over the training rows given, its last, largest, mean and median value and on how many steps it was
    above 0; for each `ACTIVITY_EVAL_KEYS` its largest value over the evaluations. `steps`: the
    training rows summarised, `last_step`: the last one's step (fewer rows than that: a run kept
    in small form, only its last row). None without a training row."""
    train = [r for r in rows if r.get("kind") == "train"]
    if not train:
        return None
    out: dict = {
        "steps": len(train),
        "last_step": int(train[-1].get("step", len(train))),
        "train": {},
        "eval_max": {},
        "evals": sum(r.get("kind") == "eval" for r in rows),
    }
    for k in ACTIVITY_TRAIN_KEYS:
        v = [float(r[k]) for r in train if isinstance(r.get(k), (int, float))]
        if len(v) == len(train):
            out["train"][k] = {
                "last": v[-1],
                "max": max(v),
                "mean": sum(v) / len(v),
                "median": statistics.median(v),
                "nonzero": sum(x > 0 for x in v),
            }
    for k in ACTIVITY_EVAL_KEYS:
        v = [float(r[k]) for r in rows if r.get("kind") == "eval" and isinstance(r.get(k), (int, float))]
        if v:
            out["eval_max"][k] = max(v)
    return out


def _range(values: list[float], fmt: str) -> str:
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def _stat(runs: Summaries, key: str, stat: str) -> list[float] | None:
    """`stat` of `key` over each run's training steps; None if a run lacks it (or there are no runs)."""
    values = [r["train"].get(key, {}).get(stat) for r in runs]
    return None if not runs or any(v is None for v in values) else [float(v) for v in values]


def _whole(runs: Summaries) -> bool:
    """Every run summarised over all its training steps (not only the last row a small form keeps)."""
    return all(r["steps"] >= r["last_step"] for r in runs)


def _over(runs: Summaries) -> str:
    steps = [r["steps"] for r in runs]
    return f"over the {_range(steps, 'd')} training steps of all {len(runs)} runs"


def _partial(runs: Summaries) -> str:
    return (
        f" (only the last training step of {sum(r['steps'] < r['last_step'] for r in runs)} of the "
        f"{len(runs)} runs is kept: not settled)"
    )


def _idle(said: str, runs: Summaries) -> dict:
    """'Does not act', settled only when every run of `runs` was summarised over all its steps."""
    return {"acts": False, "evidence": said} if _whole(runs) else {"acts": None, "evidence": said + _partial(runs)}


def judge_activity(check: ActivityCheck | None, base: Summaries, variant: Summaries) -> dict | None:
    """`check` on the reference's and the variant's runs; None without a check or without runs on a side."""
    if check is None or not base or not variant:
        return None
    return check(base, variant)


def resampling_acts(base: Summaries, variant: Summaries) -> dict | None:
    """No-Positive-Resampling only stops a retired prompt from being drawn *again*: with
    `curriculum/epoch` never above 0 in any run of either side, no prompt was drawn twice."""
    both = base + variant
    epochs = _stat(both, "curriculum/epoch", "max")
    if epochs is None:
        return None
    if max(epochs) >= 1:
        return {"acts": True, "evidence": f"curriculum/epoch reached {max(epochs):.0f}: prompts were drawn again"}
    retired, pool = _stat(base, "curriculum/retired", "last"), _stat(base, "curriculum/pool_size", "last")
    said = (
        f"curriculum/epoch 0 {_over(both)}: no prompt was drawn twice, so the "
        + (
            f"{_range(retired, '.0f')} prompts the base retired (of {_range(pool, '.0f')}) "
            if retired and pool
            else "prompts the base retired "
        )
        + "were never due again"
    )
    return _idle(said, both)


def clipping_acts(base: Summaries, variant: Summaries) -> dict | None:
    """CISPO against PPO-clip: with no token's ratio clipped (`loss/clip_frac` 0 on every step), CISPO's
    truncated IS weight and PPO-clip's min give the same gradient, A * grad(ratio)."""
    both = base + variant
    clip = _stat(both, "loss/clip_frac", "max")
    if clip is None:
        return None
    ratio = _stat(both, "loss/ratio_max", "max")
    if max(clip) > 0:

        def side(runs: Summaries) -> str:
            n, top = _stat(runs, "loss/clip_frac", "nonzero"), _stat(runs, "loss/clip_frac", "max")
            steps = _range([r["steps"] for r in runs], "d")
            return f"on {_range(n, '.0f')} of {steps} steps (at most {max(top):.2g} of a step's tokens)"

        return {
            "acts": True,
            "evidence": (
                f"loss/clip_frac above 0: the variant's loss clipped tokens {side(variant)}, the base's "
                f"{side(base)}" + (f"; loss/ratio_max up to {max(ratio):.2f}" if ratio else "")
            ),
        }
    said = (
        f"loss/clip_frac 0 {_over(both)}"
        + (f" (loss/ratio_max up to {max(ratio):.3f})" if ratio else "")
        + ": no ratio clipped, where CISPO's and PPO-clip's gradients are the same"
    )
    return _idle(said, both)


def zero_variance_filter_acts(base: Summaries, variant: Summaries) -> dict | None:
    """The zero-variance filter acts where the base dropped groups (`batch/zero_variance_dropped`)."""
    dropped, drawn = _stat(base, "batch/zero_variance_dropped", "mean"), _stat(base, "batch/drawn", "mean")
    if dropped is None:
        return None
    if max(dropped) > 0:
        return {
            "acts": True,
            "evidence": (
                f"the base dropped {_range(dropped, '.1f')} zero-variance groups a step on average"
                + (f" of {_range(drawn, '.0f')} drawn" if drawn else "")
                + f" ({_over(base)})"
            ),
        }
    return _idle(f"the base dropped no zero-variance group {_over(base)}", base)


def length_control_acts(base: Summaries, variant: Summaries) -> dict | None:
    """Forced interruptions against the length penalty: the base's interruptions (`train/interrupted_rate`,
    and the largest `val/interrupted_rate`) and the variant's penalty (`train/length_penalised_rate`, the
    share of completions whose reward it lowered), neither reaching `INTERRUPT_FLOOR` on any step: they do
    not act; a run that did not log the penalty's share settles nothing."""
    train = _stat(base, "train/interrupted_rate", "max")
    val = [r["eval_max"].get("val/interrupted_rate") for r in base]
    if train is None or any(v is None for v in val):
        return None
    top = max(train + val)
    if top >= INTERRUPT_FLOOR:
        return {
            "acts": True,
            "evidence": f"the base interrupted up to {top:.3f} of a step's or an evaluation's completions",
        }
    said = (
        f"the base's forced interruptions hardly act: at most {max(train):.4f} of a training step's completions "
        f"({_over(base)}) and {max(val):.4f} of an evaluation's were interrupted (below {INTERRUPT_FLOOR})"
    )
    penalised = _stat(variant, "train/length_penalised_rate", "max")
    if penalised is None:
        return {
            "acts": None,
            "evidence": said + "; whether the penalty acts is not logged (train/length_penalised_rate)",
        }
    mean = _stat(variant, "train/length_penalised_rate", "mean")
    said += (
        f"; the penalty lowered the reward of at most {max(penalised):.4f} of a step's completions "
        f"(mean {_range(mean, '.4f')}, {_over(variant)})"
    )
    if max(penalised) >= INTERRUPT_FLOOR:
        return {"acts": True, "evidence": said}
    return _idle(said, base + variant)


def window_acts(k: int) -> ActivityCheck:
    """PipelineRL's window of k binds only at staleness k: `staleness/max` of the variant's own runs,
    which ran with that window (the reference's larger window says nothing of it)."""

    def check(base: Summaries, variant: Summaries) -> dict | None:
        stale = _stat(variant, "staleness/max", "max")
        if stale is None:
            return None
        if max(stale) >= k:
            return {
                "acts": True,
                "evidence": f"staleness/max of its runs reached {max(stale):.0f}, at the window "
                f"(k = {k}): the window may have held the generator back",
            }
        return _idle(
            f"staleness/max at most {max(stale):.0f} {_over(variant)}, below k = {k}: no sample was "
            "generated that many versions behind the trainer, so the window never held the generator back",
            variant,
        )

    check.__name__ = f"window_acts_k{k}"
    return check


# A leave-one-out row is a clean test of its component only if the swap changes nothing else. One thing
# a swap can change through the machine's timing is the data's age: PipelineRL-k's generator runs up to k
# versions ahead of a slower trainer, so a variant that makes the trainer's step longer (training every
# group instead of the filtered ones, say) also trains on staler data. Chosen 2026-11-26, after seeing the
# recipes study (filtered runs 0.3-0.9 steps stale on average, unfiltered ones 6-7): 2 optimizer steps.
STALENESS_SHIFT = 2.0


def staleness_side_effect(base: Summaries, variant: Summaries) -> str | None:
    """What a swap also changed, the data's age: the mean over training steps of `staleness/max` of the
    variant's runs against the reference's, when they differ by at least `STALENESS_SHIFT` optimizer steps
    over every training step of every run; else None. Not asked of the swaps whose point is the data's
    age (those that set `pipeline.*`: `Variant.sets_pipeline`)."""
    if not base or not variant or not _whole(base + variant):
        return None
    b, v = _stat(base, "staleness/max", "mean"), _stat(variant, "staleness/max", "mean")
    if b is None or v is None or abs(sum(v) / len(v) - sum(b) / len(b)) < STALENESS_SHIFT:
        return None
    return (
        f"the swap also changed the data's age: staleness/max {_range(v, '.1f')} optimizer steps on average "
        f"({_over(variant)}) against the reference's {_range(b, '.1f')}: on this machine the row measures the "
        "swap and the staler (or fresher) data together"
    )
