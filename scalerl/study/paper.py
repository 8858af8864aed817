"""What the paper found for each configuration a study runs, and whether a study agrees.

Every recipe and leave-one-out variant of `scalerl.study.variants` has a `Finding`: the
figure, the paper's words, and the direction it found for the variant's ceiling `A` and
efficiency `B` against a reference (the base, or for the FP32-head pair the bf16 trunk with
its head kept). `judge` turns a study's measured differences (`scalerl.study.report.compare`)
into one verdict per claim:

- **agrees**: the measured difference has the paper's direction beyond the seed margin (for a
  claim of no difference: within it);
- **disagrees**: the opposite direction beyond the margin, or no difference beyond the margin
  where the paper found one that the margin could have shown;
- **not testable here: the task sets the ceiling**, for a claim about `A`, where some validation
  subset never passes in any evaluation of any run of the study (`task_cap`): every configuration
  then meets the same ceiling, set by the items nobody solves, and only a variant that ends below
  it beyond the margin (an instability) says anything about `A`;
- **not measurable here**, with the reason: `A` on the edge of its range (the curve did not
  bend enough to pin a ceiling), one seed a side (no measured spread of `B`), a seed margin
  wider than the paper's own effect, a component that cannot act in the run's precision, or a
  claim about `B` per GPU-hour (PipelineRL's k, PPO-off-policy: the paper's gain is generator
  and trainer kept busy) judged on an axis that counts no idle time (FLOPs).

Departures from the paper:
1. The paper judges recipes at 8B / 100k GPU-hour scale; a study here judges them on its own
   testbed. A verdict says whether the testbed reproduces the direction, not the size.
2. The paper gives no margin for `B`; it is judged against the measured seed spread of `B`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["lower", "higher", "similar", "not higher"]


@dataclass(frozen=True)
class Finding:
    figure: str                       # where in the paper
    claim: str                        # the paper's finding, in words (variant against reference)
    A: Direction | None               # the variant's A against the reference's
    B: Direction | None = None        # the variant's B against the reference's
    effect_A: float | None = None     # the size of the paper's difference in A, where it gives one
    against: str | None = None        # the reference configuration (None: the study's base)
    needs_bf16: bool = False          # acts only when the trunk computes in bf16
    b_per_hour: bool = False          # the paper's B difference is per GPU-hour: idle time, which FLOPs do not count


_RECIPE = ("Fig. 2", "ScaleRL reaches the highest ceiling of the recipes compared (A = 0.61 at 8B) and is more "
           "efficient")
_LOO = "Fig. 7: most leave-one-out runs reach a similar A (within 0.02) but a lower B; ScaleRL has the highest B"

FINDINGS: dict[str, Finding] = {
    "grpo": Finding(*_RECIPE, A="lower"),
    "dapo": Finding(*_RECIPE, A="lower"),
    "magistral": Finding(*_RECIPE, A="lower"),
    "minimax": Finding(*_RECIPE, A="lower"),
    "gspo": Finding("Fig. 5a", "GSPO and CISPO reach the same ceiling (A about 0.595), both above DAPO", A="similar"),
    "dapo-loss": Finding("Figs. 5a, 7", "the DAPO loss lowers the ceiling against CISPO (A 0.52 against 0.595)",
                         A="lower", effect_A=0.075),
    "token-agg": Finding("Fig. 14a", "prompt-level aggregation reaches the best or tied-best ceiling",
                         A="not higher"),
    "prompt-norm": Finding("Fig. 14b", "batch-, prompt-level or no advantage normalisation reach similar ceilings",
                           A="similar"),
    "no-fp32-head": Finding("Fig. 5b", "the FP32 LM head raises the ceiling (A 0.52 without, 0.61 with)",
                            A="lower", effect_A=0.09, needs_bf16=True),
    "bf16-trunk-no-fp32-head": Finding(
        "Fig. 5b", "the FP32 LM head raises the ceiling of a bf16 model (A 0.52 without, 0.61 with)",
        A="lower", effect_A=0.09, against="bf16-trunk", needs_bf16=True),
    "no-zero-var-filter": Finding("Fig. 6a", "dropping zero-variance prompts raises the ceiling", A="lower"),
    "no-npr": Finding("Fig. 6b", "No-Positive-Resampling improves scalability and the ceiling", A="lower"),
    "ppo-off-policy": Finding("Fig. 4a", "PPO-off-policy-k reaches a similar or slightly lower ceiling than "
                              "PipelineRL-k with a much lower B", A="not higher", B="lower", b_per_hour=True),
    "length-penalty": Finding(_LOO.split(":")[0], _LOO.split(": ", 1)[1], A="similar", B="lower"),
    # the scaling axes (Section 5, Table 1): each against the base, from its x0.5 and x2 sides
    "batch-16": Finding("Fig. 10", "a larger batch is slower early but reaches a higher ceiling (A 0.645 at 2,048 "
                        "prompts against 0.605-0.610)", A="lower"),
    "batch-64": Finding("Fig. 10", "a larger batch is slower early but reaches a higher ceiling (A 0.645 at 2,048 "
                        "prompts against 0.605-0.610)", A="higher"),
    "think-52": Finding("Fig. 9a", "a longer generation budget lowers B but raises the ceiling (A 0.645 at 32k "
                        "against 0.61 at 14k)", A="lower", B="higher"),
    "think-208": Finding("Fig. 9a", "a longer generation budget lowers B but raises the ceiling (A 0.645 at 32k "
                         "against 0.61 at 14k)", A="higher", B="lower"),
    "gens-4": Finding("Fig. 17", "at a fixed number of completions a step, 8-32 generations per prompt give "
                      "the same curve", A="similar"),
    "gens-16": Finding("Fig. 17", "at a fixed number of completions a step, 8-32 generations per prompt give "
                       "the same curve", A="similar"),
    "model-2m": Finding("Fig. 1a", "a larger model reaches a higher ceiling (17Bx16 MoE A 0.71 against the 8B "
                        "dense 0.61)", A="higher"),
    "model-4m": Finding("Fig. 1a", "a larger model reaches a higher ceiling (17Bx16 MoE A 0.71 against the 8B "
                        "dense 0.61)", A="higher"),
    **{f"pipeline-k{k}": Finding("Fig. 4b", "k = 8 is the most efficient PipelineRL (k = 4 close); the ceiling "
                                 "barely moves with k", A="similar", B="lower", b_per_hour=True) for k in (1, 2, 4)},
}


def _model_free(d: dict) -> str:
    """The fit-free differences, shown beside a verdict that could not use A."""
    if "dEnd" not in d:
        return ""
    out = f"; end pass rate {d['dEnd']:+.3f} ({'beyond' if d['end_differs'] else 'within'} +-{d['margin_end']:.3f})"
    if "dAtBase" in d:
        out += (f", at the reference's compute {d['dAtBase']:+.3f} "
                f"({'beyond' if d['at_base_differs'] else 'within'} +-{d['margin_at_base']:.3f})")
    return out


def _direction(expected: Direction, delta: float, differs: bool) -> str | None:
    """The verdict on one claim from a difference judged against its margin; None where a claimed
    difference did not show (the caller says whether the margin could have shown it)."""
    if expected == "similar":
        return "agrees" if not differs else "disagrees"
    if differs:
        return "agrees" if (delta > 0) == (expected == "higher") else "disagrees"
    return "agrees" if expected == "not higher" else None


def _claim_A(d: dict, f: Finding) -> tuple[str, str]:
    if d.get("A_differs") is None:
        return "not measurable here", ("A on the edge of its range: the curve did not bend enough to pin a "
                                       "ceiling" + _model_free(d))
    measured = f"{d['dA']:+.3f} ({'beyond' if d['A_differs'] else 'within'} +-{d['margin_A']:.3f})"
    verdict = _direction(f.A, d["dA"], d["A_differs"])
    if verdict is not None:
        return verdict, measured
    if f.effect_A is not None and d["margin_A"] >= f.effect_A:
        return "not measurable here", f"{measured}: the seed margin is not smaller than the paper's effect ({f.effect_A:.3f})"
    return "disagrees", f"{measured}: no difference beyond the seed margin"


def _claim_B(d: dict, f: Finding) -> tuple[str, str]:
    if d.get("A_differs") is None:
        return "not measurable here", "no B without a pinned ceiling (A on the edge of its range)"
    if d.get("B_differs") is None:
        return "not measurable here", f"{d['dB']:+.2f}: one seed a side, no measured spread of B"
    measured = f"{d['dB']:+.2f} ({'beyond' if d['B_differs'] else 'within'} +-{d['margin_B']:.2f})"
    verdict = _direction(f.B, d["dB"], d["B_differs"])
    return (verdict, measured) if verdict else ("disagrees", f"{measured}: no difference beyond the seed spread")


TIME_AXES = ("compute/device_hours",)   # x axes that count the time a device waits, as GPU-hours do


TASK_SETS_CEILING = "not testable here: the task sets the ceiling"


def judge(d: dict, f: Finding, trunk_dtype: str = "bf16", x_col: str = "compute/flops",
          task_cap: str | None = None) -> dict:
    """Verdicts on the paper's claims about A and B (those it makes) from `d`, the measured
    differences of the variant from the reference (`scalerl.study.report.compare`).
    `trunk_dtype`: what the variant's trunk computed in ('fp32' makes a head-precision claim
    not measurable). `x_col`: the fits' x axis; a claim about B per GPU-hour (PipelineRL's k,
    PPO-off-policy: the paper's gain is generator and trainer kept busy) is not measurable on
    an axis that counts no idle time (FLOPs). Returns {"A": [verdict, measured], "B": ...,
    "overall": verdict}. `task_cap`: why the task sets the ceiling (subsets that never pass), or None."""
    out: dict = {}
    if f.needs_bf16 and trunk_dtype != "bf16":
        why = (f"the trunk computes in {trunk_dtype}, where the head's precision changes nothing "
               "(see the bf16-trunk pair)")
        out = {k: ("not measurable here", why) for k in ("A", "B") if getattr(f, k) is not None}
    elif not d.get("judged"):
        out = {k: ("not measurable here", f"no comparison: {d.get('why', 'no fit')}")
               for k in ("A", "B") if getattr(f, k) is not None}
    else:
        if f.A is not None:
            out["A"] = _claim_A(d, f)
            if task_cap and not (d.get("A_differs") and d["dA"] < 0):   # only a drop below the cap informs
                out["A"] = (TASK_SETS_CEILING, f"{out['A'][1]}; {task_cap}")
        if f.B is not None and f.b_per_hour and x_col not in TIME_AXES:
            out["B"] = ("not measurable here", f"the paper's B here is per GPU-hour (idle generator or trainer time), "
                        f"which x = {x_col} does not count: see the report with --x compute/device_hours, from runs "
                        "that had their cores to themselves")
        elif f.B is not None:
            out["B"] = _claim_B(d, f)
    out = {k: list(v) for k, v in out.items()}  # [verdict, measured]: the same in report.json as here
    verdicts = [v for v, _ in out.values()]
    out["overall"] = ("disagrees" if "disagrees" in verdicts else "agrees" if "agrees" in verdicts
                      else TASK_SETS_CEILING if TASK_SETS_CEILING in verdicts else "not measurable here")
    return out


# Does the component a leave-one-out variant swaps act on the study's testbed at all? Read from the
# runs' own metrics over every training step (`summarise_activity`, which a study's results keep in
# `activity.json` beside the small metrics), never guessed: a swap of something that never acts
# cannot move A, whatever the paper found.
DOES_NOT_ACT = "not testable here: the component does not act"
ACTIVITY_TRAIN_KEYS = ("curriculum/epoch", "curriculum/retired", "curriculum/pool_size", "batch/zero_variance_dropped",
                       "batch/drawn", "loss/clip_frac", "loss/ratio_max", "staleness/max", "train/interrupted_rate",
                       "train/length_penalised_rate")
ACTIVITY_EVAL_KEYS = ("val/interrupted_rate",)
INTERRUPT_FLOOR = 0.01   # forced interruptions "hardly act" below this share of completions


def summarise_activity(rows: list[dict]) -> dict | None:
    """What `component_activity` reads, from a run's metrics rows: for each `ACTIVITY_TRAIN_KEYS`
    over the training rows given, its last, largest and mean value and on how many steps it was
    above 0; for each `ACTIVITY_EVAL_KEYS` its largest value over the evaluations. `steps`: the
    training rows summarised, `last_step`: the last one's step (fewer rows than that: a run kept
    in small form, only its last row). None without a training row."""
    train = [r for r in rows if r.get("kind") == "train"]
    if not train:
        return None
    out: dict = {"steps": len(train), "last_step": int(train[-1].get("step", len(train))), "train": {},
                 "eval_max": {}, "evals": sum(r.get("kind") == "eval" for r in rows)}
    for k in ACTIVITY_TRAIN_KEYS:
        v = [float(r[k]) for r in train if isinstance(r.get(k), (int, float))]
        if len(v) == len(train):
            out["train"][k] = {"last": v[-1], "max": max(v), "mean": sum(v) / len(v), "nonzero": sum(x > 0 for x in v)}
    for k in ACTIVITY_EVAL_KEYS:
        v = [float(r[k]) for r in rows if r.get("kind") == "eval" and isinstance(r.get(k), (int, float))]
        if v:
            out["eval_max"][k] = max(v)
    return out


def _range(values: list[float], fmt: str) -> str:
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def _stat(runs: list[dict], key: str, stat: str) -> list[float] | None:
    """`stat` of `key` over each run's training steps; None if a run lacks it (or there are no runs)."""
    values = [r["train"].get(key, {}).get(stat) for r in runs]
    return None if not runs or any(v is None for v in values) else [float(v) for v in values]


def _whole(runs: list[dict]) -> bool:
    """Every run summarised over all its training steps (not only the last row a small form keeps)."""
    return all(r["steps"] >= r["last_step"] for r in runs)


def _over(runs: list[dict]) -> str:
    steps = [r["steps"] for r in runs]
    return f"over the {_range(steps, 'd')} training steps of all {len(runs)} runs"


def _partial(runs: list[dict]) -> str:
    return (f" (only the last training step of {sum(r['steps'] < r['last_step'] for r in runs)} of the "
            f"{len(runs)} runs is kept: not settled)")


def component_activity(name: str, base: list[dict], variant: list[dict]) -> dict | None:
    """Whether the component the variant `name` swaps acts, from the runs' metrics: {"acts": True,
    False or None (not settled by what is logged), "evidence": str}; None for a variant without a
    check (one whose swap always changes the update, e.g. token against prompt aggregation).

    `base`, `variant`: one `summarise_activity` a run. A component is said not to act only from
    every training step of every run (a run kept without them settles nothing). The checks:
    - `no-npr`: No-Positive-Resampling only stops a retired prompt from being drawn *again*; with
      `curriculum/epoch` never above 0 in any run of either, no prompt was drawn twice.
    - `dapo-loss`: with no token's ratio clipped (`loss/clip_frac` 0 on every step), CISPO's truncated
      IS weight and PPO-clip's min give the same gradient, A * grad(ratio).
    - `no-zero-var-filter`: the base dropped zero-variance groups (`batch/zero_variance_dropped`).
    - `length-penalty`: the base's forced interruptions (`train/interrupted_rate`, and the largest
      `val/interrupted_rate`) and the variant's penalty (`train/length_penalised_rate`, the share of
      completions whose reward it lowered): neither reaching `INTERRUPT_FLOOR` on any step: they do
      not act; a run that did not log the penalty's share settles nothing.
    - `pipeline-k<N>`: the window of N binds only at staleness N (`staleness/max` of the variant's
      own runs, which ran with that window; the base's larger window says nothing of it).
    """
    both = base + variant
    if not base or not variant:
        return None
    whole = _whole(both)
    partial = _partial(both)
    if name == "no-npr":
        epochs = _stat(both, "curriculum/epoch", "max")
        if epochs is None:
            return None
        if max(epochs) >= 1:
            return {"acts": True, "evidence": f"curriculum/epoch reached {max(epochs):.0f}: prompts were drawn again"}
        retired, pool = _stat(base, "curriculum/retired", "last"), _stat(base, "curriculum/pool_size", "last")
        said = (f"curriculum/epoch 0 {_over(both)}: no prompt was drawn twice, so the "
                + (f"{_range(retired, '.0f')} prompts the base retired (of {_range(pool, '.0f')}) " if retired and pool
                   else "prompts the base retired ") + "were never due again")
        return {"acts": False, "evidence": said} if whole else {"acts": None, "evidence": said + partial}
    if name == "dapo-loss":
        clip, steps = _stat(both, "loss/clip_frac", "max"), _stat(both, "loss/clip_frac", "nonzero")
        if clip is None:
            return None
        ratio = _stat(both, "loss/ratio_max", "max")
        if max(clip) > 0:
            def side(runs: list[dict]) -> str:
                n, top = _stat(runs, "loss/clip_frac", "nonzero"), _stat(runs, "loss/clip_frac", "max")
                return f"on {_range(n, '.0f')} of {_range([r['steps'] for r in runs], 'd')} steps (at most {max(top):.2g} of a step's tokens)"
            return {"acts": True, "evidence": (
                f"loss/clip_frac above 0: the variant's loss clipped tokens {side(variant)}, the base's "
                f"{side(base)}" + (f"; loss/ratio_max up to {max(ratio):.2f}" if ratio else ""))}
        said = (f"loss/clip_frac 0 {_over(both)}" + (f" (loss/ratio_max up to {max(ratio):.3f})" if ratio else "")
                + ": no ratio clipped, where CISPO's and PPO-clip's gradients are the same")
        return {"acts": False, "evidence": said} if whole else {"acts": None, "evidence": said + partial}
    if name == "no-zero-var-filter":
        dropped, drawn = _stat(base, "batch/zero_variance_dropped", "mean"), _stat(base, "batch/drawn", "mean")
        if dropped is None:
            return None
        if max(dropped) > 0:
            return {"acts": True, "evidence": (
                f"the base dropped {_range(dropped, '.1f')} zero-variance groups a step on average"
                + (f" of {_range(drawn, '.0f')} drawn" if drawn else "") + f" ({_over(base)})")}
        said = f"the base dropped no zero-variance group {_over(base)}"
        return ({"acts": False, "evidence": said} if _whole(base) else {"acts": None, "evidence": said + partial})
    if name == "length-penalty":
        train = _stat(base, "train/interrupted_rate", "max")
        val = [r["eval_max"].get("val/interrupted_rate") for r in base]
        if train is None or any(v is None for v in val):
            return None
        top = max(train + val)
        if top >= INTERRUPT_FLOOR:
            return {"acts": True, "evidence": f"the base interrupted up to {top:.3f} of a step's or an evaluation's completions"}
        said = (f"the base's forced interruptions hardly act: at most {max(train):.4f} of a training step's completions "
                f"({_over(base)}) and {max(val):.4f} of an evaluation's were interrupted (below {INTERRUPT_FLOOR})")
        penalised = _stat(variant, "train/length_penalised_rate", "max")
        if penalised is None:
            return {"acts": None, "evidence": said + "; whether the penalty acts is not logged (train/length_penalised_rate)"}
        mean = _stat(variant, "train/length_penalised_rate", "mean")
        said += (f"; the penalty lowered the reward of at most {max(penalised):.4f} of a step's completions "
                 f"(mean {_range(mean, '.4f')}, {_over(variant)})")
        if max(penalised) >= INTERRUPT_FLOOR:
            return {"acts": True, "evidence": said}
        return {"acts": False, "evidence": said} if _whole(both) else {"acts": None, "evidence": said + partial}
    if name.startswith("pipeline-k") and name[len("pipeline-k"):].isdigit():
        # the variant's own runs: the window is theirs (the base's k, larger, says nothing of it)
        k, stale = int(name[len("pipeline-k"):]), _stat(variant, "staleness/max", "max")
        if stale is None:
            return None
        if max(stale) >= k:
            return {"acts": True, "evidence": f"staleness/max of its runs reached {max(stale):.0f}, at the window "
                                              f"(k = {k}): the window may have held the generator back"}
        said = (f"staleness/max at most {max(stale):.0f} {_over(variant)}, below k = {k}: no sample was generated "
                "that many versions behind the trainer, so the window never held the generator back")
        return ({"acts": False, "evidence": said} if _whole(variant)
                else {"acts": None, "evidence": said + _partial(variant)})
    return None


# A leave-one-out row is a clean test of its component only if the swap changes nothing else. One thing
# a swap can change through the machine's timing is the data's age: PipelineRL-k's generator runs up to k
# versions ahead of a slower trainer, so a variant that makes the trainer's step longer (training every
# group instead of the filtered ones, say) also trains on staler data. Chosen 2026-11-26, after seeing the
# recipes study (filtered runs 0.3-0.9 steps stale on average, unfiltered ones 6-7): 2 optimizer steps.
STALENESS_SHIFT = 2.0


def staleness_side_effect(name: str, base: list[dict], variant: list[dict]) -> str | None:
    """What the swap `name` also changed, the data's age: the mean over training steps of
    `staleness/max` of the variant's runs against the base's, when they differ by at least
    `STALENESS_SHIFT` optimizer steps over every training step of every run; else None. Not asked
    of the swaps whose point is the data's age (`ppo-off-policy`, `pipeline-k<N>`)."""
    if name == "ppo-off-policy" or name.startswith("pipeline-k") or not base or not variant or not _whole(base + variant):
        return None
    b, v = _stat(base, "staleness/max", "mean"), _stat(variant, "staleness/max", "mean")
    if b is None or v is None or abs(sum(v) / len(v) - sum(b) / len(b)) < STALENESS_SHIFT:
        return None
    return (f"the swap also changed the data's age: staleness/max {_range(v, '.1f')} optimizer steps on average "
            f"({_over(variant)}) against the reference's {_range(b, '.1f')}: on this machine the row measures the "
            "swap and the staler (or fresher) data together")
