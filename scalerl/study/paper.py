"""What the paper found for each configuration a study runs, and whether a study agrees.

Every recipe and leave-one-out variant of `scalerl.study.variants` has a `Finding`: the
figure, the paper's words, and the direction it found for the variant's ceiling `A` and
efficiency `B` against a reference (the base, or for the FP32-head pair the bf16 trunk with
its head kept). `judge` turns a study's measured differences (`scalerl.study.verdicts.compare`)
into one verdict per claim:

- **agrees**: the measured difference has the paper's direction beyond the seed margin (for a
  claim of no difference: within it);
- **disagrees**: the opposite direction beyond the margin, or no difference beyond the margin
  where the paper found one that the margin could have shown;
- **not powered**: for a claim about `A` whose size the paper gives (`Finding.effect_A`; for a claim
  of no difference, the paper's own +-0.02 for "similar"), the seeds cannot detect a difference that
  small (`scalerl.scaling.power.detectable_difference`, two-sided t-test, alpha 0.05, power 0.8, from
  the two sides' seed spreads of `A`) and the measured difference is not larger than what they can
  detect, so it is read neither way; for a claimed difference (in `A` or `B`) of a size the paper does
  not give, no difference seen (absence of a difference of unknown size is no evidence against it);
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
    figure: str  # where in the paper
    claim: str  # the paper's finding, in words (variant against reference)
    A: Direction | None  # the variant's A against the reference's
    B: Direction | None = None  # the variant's B against the reference's
    effect_A: float | None = None  # the size of the paper's difference in A, where it gives one (a claim of
    # no difference: SIMILAR_A, the paper's own tolerance); None: not given
    against: str | None = None  # the reference configuration (None: the study's base)
    needs_bf16: bool = False  # acts only when the trunk computes in bf16
    b_per_hour: bool = False  # the paper's B difference is per GPU-hour: idle time, which FLOPs do not count


SIMILAR_A = 0.02  # the paper's "similar A": within +-0.02 (Figs. 7, 8a)
_RECIPE = (
    "Fig. 2",
    "ScaleRL reaches the highest ceiling of the recipes compared (A = 0.61 at 8B) and is more efficient",
)
_LOO = "Fig. 7: most leave-one-out runs reach a similar A (within 0.02) but a lower B; ScaleRL has the highest B"

FINDINGS: dict[str, Finding] = {
    "grpo": Finding(*_RECIPE, A="lower"),
    "dapo": Finding(*_RECIPE, A="lower"),
    "magistral": Finding(*_RECIPE, A="lower"),
    "minimax": Finding(*_RECIPE, A="lower"),
    "gspo": Finding(
        "Fig. 5a",
        "GSPO and CISPO reach the same ceiling (A about 0.595), both above DAPO",
        A="similar",
        effect_A=SIMILAR_A,
    ),
    "dapo-loss": Finding(
        "Figs. 5a, 7",
        "the DAPO loss lowers the ceiling against CISPO (A 0.52 against 0.595)",
        A="lower",
        effect_A=0.075,
    ),
    "token-agg": Finding(
        "Fig. 14a", "prompt-level aggregation reaches the best or tied-best ceiling", A="not higher", effect_A=SIMILAR_A
    ),
    "prompt-norm": Finding(
        "Fig. 14b",
        "batch-, prompt-level or no advantage normalisation reach similar ceilings",
        A="similar",
        effect_A=SIMILAR_A,
    ),
    "no-fp32-head": Finding(
        "Fig. 5b",
        "the FP32 LM head raises the ceiling (A 0.52 without, 0.61 with)",
        A="lower",
        effect_A=0.09,
        needs_bf16=True,
    ),
    "bf16-trunk-no-fp32-head": Finding(
        "Fig. 5b",
        "the FP32 LM head raises the ceiling of a bf16 model (A 0.52 without, 0.61 with)",
        A="lower",
        effect_A=0.09,
        against="bf16-trunk",
        needs_bf16=True,
    ),
    "no-zero-var-filter": Finding("Fig. 6a", "dropping zero-variance prompts raises the ceiling", A="lower"),
    "no-npr": Finding("Fig. 6b", "No-Positive-Resampling improves scalability and the ceiling", A="lower"),
    "ppo-off-policy": Finding(
        "Fig. 4a",
        "PPO-off-policy-k reaches a similar or slightly lower ceiling than PipelineRL-k with a much lower B",
        A="not higher",
        B="lower",
        b_per_hour=True,
        effect_A=SIMILAR_A,
    ),
    "length-penalty": Finding(_LOO.split(":")[0], _LOO.split(": ", 1)[1], A="similar", B="lower", effect_A=SIMILAR_A),
    # the scaling axes (Section 5, Table 1): each against the base, from its x0.5 and x2 sides
    "batch-16": Finding(
        "Fig. 10",
        "a larger batch is slower early but reaches a higher ceiling (A 0.645 at 2,048 prompts against 0.605-0.610)",
        A="lower",
        effect_A=0.035,
    ),
    "batch-64": Finding(
        "Fig. 10",
        "a larger batch is slower early but reaches a higher ceiling (A 0.645 at 2,048 prompts against 0.605-0.610)",
        A="higher",
        effect_A=0.035,
    ),
    "think-52": Finding(
        "Fig. 9a",
        "a longer generation budget lowers B but raises the ceiling (A 0.645 at 32k against 0.61 at 14k)",
        A="lower",
        B="higher",
        effect_A=0.035,
    ),
    "think-208": Finding(
        "Fig. 9a",
        "a longer generation budget lowers B but raises the ceiling (A 0.645 at 32k against 0.61 at 14k)",
        A="higher",
        B="lower",
        effect_A=0.035,
    ),
    "gens-4": Finding(
        "Fig. 17",
        "at a fixed number of completions a step, 8-32 generations per prompt give the same curve",
        A="similar",
        effect_A=SIMILAR_A,
    ),
    "gens-16": Finding(
        "Fig. 17",
        "at a fixed number of completions a step, 8-32 generations per prompt give the same curve",
        A="similar",
        effect_A=SIMILAR_A,
    ),
    "model-2m": Finding(
        "Fig. 1a",
        "a larger model reaches a higher ceiling (17Bx16 MoE A 0.71 against the 8B dense 0.61)",
        A="higher",
        effect_A=0.10,
    ),
    "model-4m": Finding(
        "Fig. 1a",
        "a larger model reaches a higher ceiling (17Bx16 MoE A 0.71 against the 8B dense 0.61)",
        A="higher",
        effect_A=0.10,
    ),
    **{
        f"pipeline-k{k}": Finding(
            "Fig. 4b",
            "k = 8 is the most efficient PipelineRL (k = 4 close); the ceiling barely moves with k",
            A="similar",
            B="lower",
            b_per_hour=True,
            effect_A=SIMILAR_A,
        )
        for k in (1, 2, 4)
    },
}


def _model_free(d: dict) -> str:
    """The fit-free differences, shown beside a verdict that could not use A."""
    if "dEnd" not in d:
        return ""
    out = f"; end pass rate {d['dEnd']:+.3f} ({'beyond' if d['end_differs'] else 'within'} +-{d['margin_end']:.3f})"
    if "dAtBase" in d:
        out += (
            f", at the reference's compute {d['dAtBase']:+.3f} "
            f"({'beyond' if d['at_base_differs'] else 'within'} +-{d['margin_at_base']:.3f})"
        )
    return out


def _direction(expected: Direction, delta: float, differs: bool) -> str | None:
    """The verdict on one claim from a difference judged against its margin; None where a claimed
    difference did not show (the caller says whether the margin could have shown it)."""
    if expected == "similar":
        return "agrees" if not differs else "disagrees"
    if differs:
        return "agrees" if (delta > 0) == (expected == "higher") else "disagrees"
    return "agrees" if expected == "not higher" else None


def _power(d: dict, f: Finding) -> tuple[str, bool]:
    """The detectable difference in A beside the paper's effect, and whether the comparison can be read:
    the seeds detect the paper's effect (detectable <= effect), or the measured difference is larger
    than the detectable one (resolved, whatever the paper's size), or the paper gives no size (nothing
    to hold the detectable difference against; `_claim_A` then reads only a difference it sees)."""
    mdd, effect = d.get("detectable_A"), f.effect_A
    if mdd is None:
        return "one seed a side: no detectable difference", effect is None
    resolved = abs(d["dA"]) > mdd
    if effect is None:
        return f"detectable {mdd:.3f}; the paper gives no size", True
    if mdd <= effect:
        return f"detectable {mdd:.3f} <= the paper's {effect:.3f}", True
    return (
        f"detectable {mdd:.3f} > the paper's {effect:.3f}" + (", but the difference exceeds it" if resolved else ""),
        resolved,
    )


def _claim_A(d: dict, f: Finding) -> tuple[str, str]:
    if d.get("A_differs") is None:
        return "not measurable here", (
            "A on the edge of its range: the curve did not bend enough to pin a ceiling" + _model_free(d)
        )
    power, powered = _power(d, f)
    measured = f"{d['dA']:+.3f} ({'beyond' if d['A_differs'] else 'within'} +-{d['margin_A']:.3f}; {power})"
    if not powered:
        return NOT_POWERED, measured
    verdict = _direction(f.A, d["dA"], d["A_differs"])
    if verdict is not None:
        return verdict, measured
    if f.effect_A is None:  # a difference not seen, of a size the paper does not give: the seeds' power unknown
        return NOT_POWERED, f"{measured}: no difference beyond the seed margin"
    if d["margin_A"] >= f.effect_A:
        return (
            "not measurable here",
            f"{measured}: the seed margin is not smaller than the paper's effect ({f.effect_A:.3f})",
        )
    return "disagrees", f"{measured}: no difference beyond the seed margin"


def _claim_B(d: dict, f: Finding) -> tuple[str, str]:
    if d.get("A_differs") is None:
        return "not measurable here", "no B without a pinned ceiling (A on the edge of its range)"
    if d.get("B_differs") is None:
        return "not measurable here", f"{d['dB']:+.2f}: one seed a side, no measured spread of B"
    mdd = f"; detectable {d['detectable_B']:.2f}" if d.get("detectable_B") is not None else ""
    measured = f"{d['dB']:+.2f} ({'beyond' if d['B_differs'] else 'within'} +-{d['margin_B']:.2f}{mdd})"
    verdict = _direction(f.B, d["dB"], d["B_differs"])  # the paper gives no size for B: a difference not seen
    return (
        (verdict, measured)
        if verdict
        else (
            NOT_POWERED,
            f"{measured}: no difference beyond the seed spread, "
            "and the paper gives no size of B to hold the seeds' power against",
        )
    )


TIME_AXES = ("compute/device_hours",)  # x axes that count the time a device waits, as GPU-hours do


TASK_SETS_CEILING = "not testable here: the task sets the ceiling"
NOT_POWERED = "not powered"
DOES_NOT_ACT = "not testable here: the component does not act"  # set by the report from `Variant.acts`


def judge(
    d: dict, f: Finding, trunk_dtype: str = "bf16", x_col: str = "compute/flops", task_cap: str | None = None
) -> dict:
    """Verdicts on the paper's claims about A and B (those it makes) from `d`, the measured
    differences of the variant from the reference (`scalerl.study.verdicts.compare`).
    `trunk_dtype`: what the variant's trunk computed in ('fp32' makes a head-precision claim
    not measurable). `x_col`: the fits' x axis; a claim about B per GPU-hour (PipelineRL's k,
    PPO-off-policy: the paper's gain is generator and trainer kept busy) is not measurable on
    an axis that counts no idle time (FLOPs). Returns {"A": [verdict, measured], "B": ...,
    "overall": verdict}. `task_cap`: why the task sets the ceiling (subsets that never pass), or None."""
    out: dict = {}
    if f.needs_bf16 and trunk_dtype != "bf16":
        why = (
            f"the trunk computes in {trunk_dtype}, where the head's precision changes nothing (see the bf16-trunk pair)"
        )
        out = {k: ("not measurable here", why) for k in ("A", "B") if getattr(f, k) is not None}
    elif not d.get("judged"):
        out = {
            k: ("not measurable here", f"no comparison: {d.get('why', 'no fit')}")
            for k in ("A", "B")
            if getattr(f, k) is not None
        }
    else:
        if f.A is not None:
            out["A"] = _claim_A(d, f)
            if task_cap and not (d.get("A_differs") and d["dA"] < 0):  # only a drop below the cap informs
                out["A"] = (TASK_SETS_CEILING, f"{out['A'][1]}; {task_cap}")
        if f.B is not None and f.b_per_hour and x_col not in TIME_AXES:
            out["B"] = (
                "not measurable here",
                f"the paper's B here is per GPU-hour (idle generator or trainer time), "
                f"which x = {x_col} does not count: see the report with --x compute/device_hours, from runs "
                "that had their cores to themselves",
            )
        elif f.B is not None:
            out["B"] = _claim_B(d, f)
    out = {k: list(v) for k, v in out.items()}  # [verdict, measured]: the same in report.json as here
    verdicts = [v for v, _ in out.values()]
    out["overall"] = (
        "disagrees"
        if "disagrees" in verdicts
        else "agrees"
        if "agrees" in verdicts
        else TASK_SETS_CEILING
        if TASK_SETS_CEILING in verdicts
        else NOT_POWERED
        if NOT_POWERED in verdicts
        else "not measurable here"
    )
    return out
