"""Each study variant carries its own activity check (`Variant.acts`, scalerl/study/variants.py): the checks,
looked up by variant name from a study's plan, give again the verdicts and evidence the committed studies'
reports hold (studies/*-report/report.json, written by the code of their time), on the same runs."""

import json
from pathlib import Path

import pytest

from scalerl.study.activity import judge_activity
from scalerl.study.report import read_activity
from scalerl.study.variants import plan_variants

STUDIES = Path(__file__).resolve().parents[2] / "studies"
REPORTS = sorted(STUDIES.glob("*-report/report.json"))


def _runs(report: dict) -> list[str]:
    """The runs the report was made from (`config/seedN`), as its provenance lists them."""
    return [run for build in report["provenance"]["models"].values() for runs in build.values() for run in runs]


@pytest.mark.parametrize("path", REPORTS, ids=[p.parent.name for p in REPORTS])
def test_the_variants_checks_give_the_committed_studies_verdicts_again(path):
    report = json.loads(path.read_text())
    study = STUDIES / path.parent.name.removesuffix("-report")
    checks = {
        v.name: v.acts for v in plan_variants("scalerl", leave_one_out=True, k_sweep=True, precision=True, axes=True)
    }
    runs = _runs(report)

    def side(config: str) -> list[dict]:
        return [a for run in runs if run.split("/")[0] == config and (a := read_activity(study / run))]

    judged = 0
    for config in report["configs"]:
        paper = config.get("paper") or {}
        if not paper or config["name"] not in checks:
            continue
        got = judge_activity(checks[config["name"]], side(paper["against"]), side(config["name"]))
        assert got == paper.get("activity"), config["name"]  # the same verdict and evidence, word for word
        judged += got is not None
    if any("activity" in (c.get("paper") or {}) for c in report["configs"]):
        assert judged > 0


def test_the_committed_studies_hold_verdicts_of_every_kind():
    """What the test above compares against: 15 verdicts, acting, not acting and not settled among them."""
    verdicts = [
        c["paper"]["activity"]["acts"]
        for p in REPORTS
        for c in json.loads(p.read_text())["configs"]
        if "activity" in (c.get("paper") or {})
    ]
    assert len(verdicts) >= 15 and {True, False, None} <= set(verdicts)
