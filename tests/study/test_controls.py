"""The controls of a study (`scalerl ablate --controls`): what they change, how they are judged,
the false-positive rate over splits of the base's seeds, and the verdict on claims about `A`
where the task, not the recipe, sets the ceiling."""

import json

import numpy as np
import pytest

from scalerl.study import fit_study, plan_runs, plan_variants, write_report
from scalerl.study.paper import FINDINGS, TASK_SETS_CEILING, judge
from scalerl.study.report import controls_summary
from scalerl.study.runner import DONE_FILE

X = np.concatenate([[0.0], np.geomspace(0.05, 8.0, 16)])


def eq1(c, A, B=2.0, C_mid=1.0, R0=0.1):
    return np.where(c > 0, R0 + (A - R0) / (1 + (C_mid / np.maximum(c, 1e-12)) ** B), R0)


def write_run(run_dir, A, subsets=None):
    y = eq1(X, A)
    run_dir.mkdir(parents=True)
    rows = []
    for i, (c, v) in enumerate(zip(X, y)):
        row = {"step": i, "kind": "eval", "compute/flops": float(c), "val/pass_rate": float(v)}
        row.update({f"val/pass_rate/{k}": float(f(v)) for k, f in (subsets or {}).items()})
        rows.append(row)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / DONE_FILE).write_text("{}")


def test_the_controls_plan_and_what_each_changes(tmp_path):
    from scalerl.config import InterruptConfig
    from scalerl.models.tiny import build_tokenizer
    from scalerl.tasks.arith import completion_text

    specs = plan_runs(plan_variants("scalerl", controls=True, seeds=3), 3, tmp_path)
    seeds = {}
    for s in specs:
        seeds.setdefault(s.variant.name, []).append(s.seed)
    assert seeds == {"base": [0, 1, 2], "think-56": [0, 1, 2], "think-40": [0, 1, 2], "base-again": [3, 4, 5]}
    by = {(s.variant.name, s.seed): s.cfg for s in specs}
    base = by[("base", 0)]
    assert base.model.name == "ladder-1m" and by[("think-56", 0)].model.name == "ladder-1m"
    assert by[("base-again", 3)].model_dump(exclude={"run"}) == base.model_dump(exclude={"run"})
    # the graded budgets: think-56 cuts only the 7-digit scratchpad, think-40 the 5- and 7-digit ones
    tok = build_tokenizer()
    t56, t40 = by[("think-56", 0)].rollout.length, by[("think-40", 0)].rollout.length

    def thinking(digits):  # tokens up to and including </think> of a correct completion
        return len(
            tok(completion_text((10**digits - 1, 10**digits - 1), digits).split("</think>")[0] + "</think>")[
                "input_ids"
            ]
        )

    assert thinking(5) < t56.think_min and thinking(7) > t56.think_max
    assert thinking(3) < t40.think_min and thinking(5) > t40.think_max
    assert thinking(7) < InterruptConfig().think_min  # ... while the default budget fits every rung
    with pytest.raises(Exception, match="--controls is a study of its own"):
        plan_variants("scalerl", leave_one_out=True, controls=True)


def _study(tmp_path, a_of):
    specs = plan_runs(plan_variants("scalerl", controls=True, seeds=3), 3, tmp_path)
    for s in specs:
        write_run(s.run_dir, a_of(s.variant.name, s.seed))
    return fit_study(specs, n_bootstrap=5)


def test_controls_are_detected_and_the_negative_control_is_not(tmp_path):
    true_a = {"base": 0.70, "base-again": 0.70, "think-56": 0.55, "think-40": 0.35}
    jitter = {0: -0.003, 1: 0.0, 2: 0.003, 3: -0.003, 4: 0.0, 5: 0.003}
    configs = _study(tmp_path, lambda name, seed: true_a[name] + jitter[seed])
    s = controls_summary(configs)
    assert s["positive"]["think-56"]["detected"] is True and s["positive"]["think-40"]["detected"] is True
    assert s["positive"]["think-56"]["dA"] == pytest.approx(-0.15, abs=0.01)
    assert s["positive"]["think-40"]["dA"] == pytest.approx(-0.35, abs=0.01)
    g = s["graded"]
    assert g["order"] == ["think-40", "think-56", "base"] and g["ordered"] is True
    assert [st["dA"] for st in g["steps"]] == [pytest.approx(0.20, abs=0.01), pytest.approx(0.15, abs=0.01)]
    assert s["negative"]["differs"] is False
    fp = s["false_positive"]
    assert fp["runs"] == 6 and fp["splits"] == 10 and fp["differs_A"] == 0 and fp["rate_A"] == 0.0
    data = write_report(tmp_path, configs, "base", "compute/flops", "table")
    assert data["controls"]["false_positive"]["splits"] == 10
    assert "False-positive rate" in (tmp_path / "report.md").read_text()


def test_a_control_in_the_wrong_direction_is_not_detected(tmp_path):
    true_a = {"base": 0.70, "base-again": 0.70, "think-56": 0.80, "think-40": 0.70}
    jitter = {0: -0.003, 1: 0.0, 2: 0.003, 3: -0.003, 4: 0.0, 5: 0.003}
    configs = _study(tmp_path, lambda name, seed: true_a[name] + jitter[seed])
    s = controls_summary(configs)
    assert s["positive"]["think-56"]["detected"] is False  # higher, where lower was expected
    assert s["positive"]["think-40"]["detected"] is False  # no difference
    assert s["graded"]["ordered"] is False  # think-56 above the base breaks the order


def test_false_positives_count_the_splits_that_separate_two_real_groups(tmp_path):
    # base seeds at A 0.70, base-again seeds at 0.76: of the 10 splits of 6 runs into 3 + 3, only the
    # one with the three 0.70 runs on one side and the three 0.76 on the other has a difference (0.06)
    # beyond its margin; a mixed split differs by 0.02 against a seed std of about 0.035
    configs = _study(tmp_path, lambda name, seed: 0.76 if name == "base-again" else 0.70)
    s = controls_summary(configs)
    assert s["negative"]["differs"] is True
    fp = s["false_positive"]
    assert fp["splits"] == 10 and fp["differs_A"] == 1 and fp["rate_A"] == pytest.approx(0.1)


def test_claims_about_A_are_not_testable_where_a_subset_never_passes(tmp_path):
    specs = plan_runs(plan_variants("scalerl", leave_one_out=True), 1, tmp_path)
    a_of = {"scalerl": 0.60, "dapo-loss": 0.60, "no-npr": 0.45}
    specs = [s for s in specs if s.variant.name in a_of]
    for s in specs:  # the 2x16 subset never passes: the task caps every run
        write_run(s.run_dir, a_of[s.variant.name], {"2x3": lambda v: min(1.0, v / 0.62), "2x16": lambda v: 0.0})
    configs = fit_study(specs, n_bootstrap=5)
    data = write_report(tmp_path, configs, "scalerl", "compute/flops", "table")
    paper = {c["name"]: c["paper"] for c in data["configs"] if c["paper"]}
    assert paper["dapo-loss"]["A"][0] == TASK_SETS_CEILING  # no difference: nothing learnt about A
    assert "2x16" in paper["dapo-loss"]["A"][1]
    assert paper["no-npr"]["A"][0] == "agrees"  # a drop below the cap still shows
    # without the cap the same no-difference says nothing of the paper's "lower", whose size it does not give
    d = {
        "judged": True,
        "dA": 0.0,
        "A_differs": False,
        "margin_A": 0.02,
        "dB": 0.0,
        "B_differs": None,
        "detectable_A": 0.03,
    }
    assert judge(d, FINDINGS["no-npr"])["A"][0] == "not powered"
    # ... and disagrees with a claim of a size the seeds can detect (the DAPO loss: 0.075 lower)
    assert judge(d, FINDINGS["dapo-loss"])["A"][0] == "disagrees"
    assert judge(d, FINDINGS["no-npr"], task_cap="2x16 never passes")["A"][0] == TASK_SETS_CEILING


def test_each_subset_is_fitted_on_its_own_and_one_that_never_passed_says_so(tmp_path):
    """The report's per-subset section: each rung's own Eq. 1 fit (seeds pooled) recovers the
    ceiling its curve was drawn with, whatever the whole curve's; a rung at 0 throughout gets no
    fit but the reason."""
    specs = [
        s for s in plan_runs(plan_variants("scalerl", controls=True, seeds=2), 2, tmp_path) if s.variant.name == "base"
    ]
    for s in specs:  # the whole curve, a rung at 0 throughout, and two rungs rising on their own timescales
        write_run(s.run_dir, 0.6, {"hard": lambda v: 0.0})
        rows = [json.loads(line) for line in (s.run_dir / "metrics.jsonl").read_text().splitlines()]
        for row in rows:
            c = row["compute/flops"]
            row["val/pass_rate/easy"] = float(eq1(np.array([c]), 0.9, B=3.0, C_mid=0.5)[0])
            row["val/pass_rate/mid"] = float(eq1(np.array([c]), 0.35, B=1.5, C_mid=2.0)[0])
        (s.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    configs = fit_study(specs, n_bootstrap=20)
    data = write_report(tmp_path, configs, "base", "compute/flops", "table")
    subsets = next(c for c in data["configs"] if c["name"] == "base")["subsets"]
    assert subsets["hard"] == {"error": "never passed"}
    assert abs(subsets["easy"]["A"] - 0.9) < 0.01 and abs(subsets["easy"]["B"] - 3.0) < 0.1
    assert abs(subsets["mid"]["A"] - 0.35) < 0.01 and abs(subsets["mid"]["C_mid"] - 2.0) < 0.1
    md = (tmp_path / "report.md").read_text()
    assert "## Per subset" in md and "never passed" in md and "0.900 [" in md


def test_the_scaling_axes_plan_halves_and_doubles_each_axis_of_the_base(tmp_path):
    """`scalerl ablate --axes`: x0.5 and x2 of prompts per step, thinking budget, generations per
    prompt at a fixed number of completions a step, and two larger models; every configuration is
    one the engine accepts (the thinking budget, the phrase and the answer fit the completion budget)."""
    from scalerl.rollout.length import phrase_tokens

    specs = plan_runs(plan_variants("scalerl", axes=True), 1, tmp_path)
    by = {s.variant.name: s.cfg for s in specs}
    base = by["base"]
    assert set(by) == {
        "base",
        "batch-16",
        "batch-64",
        "think-52",
        "think-208",
        "gens-4",
        "gens-16",
        "model-2m",
        "model-4m",
    }
    assert (by["batch-16"].batch.prompts, by["batch-64"].batch.prompts) == (
        base.batch.prompts // 2,
        base.batch.prompts * 2,
    )
    for name in ("gens-4", "gens-16"):  # the same completions a step, split otherwise
        b = by[name].batch
        assert b.prompts * b.generations == base.batch.prompts * base.batch.generations
        assert b.generations in (base.batch.generations // 2, base.batch.generations * 2)
    phrase = phrase_tokens(base.model.name, base.rollout.length.phrase)
    for name, factor in (("think-52", 0.5), ("think-208", 2)):
        r = by[name].rollout
        assert (r.length.think_min, r.length.think_max) == (
            base.rollout.length.think_min * factor,
            base.rollout.length.think_max * factor,
        )
        assert r.length.think_max + phrase + r.length.answer_budget <= r.max_new_tokens
    assert [by[n].model.name for n in ("model-2m", "model-4m")] == ["ladder-2m", "ladder-4m"]
    for name, cfg in by.items():  # each changes only its own axis
        changed = {k for k, v in cfg.model_dump(exclude={"run"}).items() if v != base.model_dump(exclude={"run"})[k]}
        assert len(changed) <= 1, (name, changed)


@pytest.mark.parametrize(
    "dA, differs, expected, verdict",
    [
        (+0.05, True, "higher", "agrees"),
        (-0.05, True, "higher", "disagrees"),
        (+0.05, True, "lower", "disagrees"),
        (-0.05, True, "lower", "agrees"),
        (+0.01, False, "higher", "not powered"),  # no difference, and the paper gives no size: read neither way
    ],
)
def test_a_claimed_rise_agrees_only_with_a_rise_beyond_the_margin(dA, differs, expected, verdict):
    from scalerl.study.paper import Finding

    d = {
        "judged": True,
        "dA": dA,
        "A_differs": differs,
        "margin_A": 0.02,
        "dB": 0.0,
        "B_differs": None,
        "detectable_A": 0.03,
    }
    assert judge(d, Finding("Fig. x", "claim", A=expected))["A"][0] == verdict
    # a claim of 0.05 that seeds detecting 0.03 did not see: disagrees
    sized = judge(d, Finding("Fig. x", "claim", A=expected, effect_A=0.05))["A"][0]
    assert sized == (verdict if differs else "disagrees")


def test_the_ceiling_as_the_sum_of_the_rungs_ceilings(tmp_path):
    """Three rungs in equal shares learnt at different compute (C_mid 0.3, 2 and never): the pass rate
    is their mean, so its ceiling is the mean of theirs, (0.95 + 0.80 + 0) / 3, whatever one sigmoid
    through the mean says."""
    from scalerl.study.report import subset_ceiling

    specs = [
        s for s in plan_runs(plan_variants("scalerl", controls=True, seeds=2), 2, tmp_path) if s.variant.name == "base"
    ]
    for s in specs:
        r1 = eq1(X, 0.95, C_mid=0.3, R0=0.0) + 0.002 * s.seed
        r2 = eq1(X, 0.80, C_mid=2.0, R0=0.0) + 0.001 * s.seed
        r3 = np.zeros_like(X)
        s.run_dir.mkdir(parents=True)
        rows = [
            {
                "step": i,
                "kind": "eval",
                "compute/flops": float(c),
                "val/pass_rate": float((a + b + d) / 3),
                "val/pass_rate/2x3": float(a),
                "val/pass_rate/2x5": float(b),
                "val/pass_rate/2x7": float(d),
            }
            for i, (c, a, b, d) in enumerate(zip(X, r1, r2, r3))
        ]
        (s.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (s.run_dir / DONE_FILE).write_text("{}")
    (base,) = fit_study(specs, n_bootstrap=20)
    sc = subset_ceiling(base)
    assert sc["subsets"] == 3 and sc["A"] == pytest.approx((0.95 + 0.80 + 0.0) / 3, abs=0.01)
    assert sc["lo"] <= sc["A"] <= sc["hi"]
    data = write_report(tmp_path, [base], "base", "compute/flops", "table")
    assert data["configs"][0]["A_subsets"]["A"] == pytest.approx(sc["A"])
    assert "sum of ceilings" in (tmp_path / "report.md").read_text()
