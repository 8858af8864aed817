"""scalerl check: a run against the band of committed reference runs (scalerl/study/band.py)."""

import json

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.errors import ScaleRLError
from scalerl.study.band import band, check, read_curve, read_references

X = [1e12 * 2**i for i in range(8)]


def _run(folder, ys, staleness=1.5, build="abc123", se=0.01, subsets=None):
    folder.mkdir(parents=True)
    rows = [{"step": 0, "kind": "eval", "val/pass_rate": 0.1, "compute/flops": 0.0}]
    for i, (x, y) in enumerate(zip(X, ys)):
        row = {"step": i + 1, "kind": "eval", "val/pass_rate": y, "val/pass_rate_se": se, "compute/flops": x}
        for name, values in (subsets or {}).items():
            row[f"val/pass_rate/{name}"] = values[i]
        rows.append(row)
        rows.append({"step": i + 1, "kind": "train", "staleness/max": staleness})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "done.json").write_text(json.dumps({"model_build": build}))
    return folder


def _refs(tmp_path):
    for seed, shift in enumerate([-0.02, 0.0, 0.02]):
        _run(tmp_path / "refs" / f"seed{seed}", [0.2 + 0.06 * i + shift for i in range(8)], staleness=1.0 + seed / 2)
    return read_references(tmp_path / "refs")


def test_band_is_the_99_percent_prediction_interval_at_the_same_compute(tmp_path):
    refs = _refs(tmp_path)
    lo, hi = band(refs, np.array([X[2], (X[3] + X[4]) / 2, X[-1] * 2]))
    # three references 0.02 apart: sd 0.02, t(0.995, 2) = 9.9248 (tables), sqrt(1 + 1/3)
    half = 9.924843 * 0.02 * (4 / 3) ** 0.5
    assert lo[0] == pytest.approx(0.2 + 0.12 - half, abs=1e-5) and hi[0] == pytest.approx(0.2 + 0.12 + half, abs=1e-5)
    assert lo[1] == pytest.approx(0.2 + 0.21 - half, abs=1e-5)  # halfway between two evaluations, linearly
    assert np.isnan(lo[2]) and np.isnan(hi[2])  # beyond the references' compute: not compared


def test_a_run_like_its_references_passes_and_a_falling_one_fails(tmp_path):
    refs = _refs(tmp_path)
    same = read_curve(_run(tmp_path / "same", [0.2 + 0.06 * i + 0.01 for i in range(8)], staleness=1.8))
    out = check(same, refs, "abc123")
    assert out["ok"] and not out["failures"]
    fell = read_curve(_run(tmp_path / "fell", [0.2, 0.26, 0.32, 0.38, 0.36, 0.1, 0.1, 0.1], staleness=1.8))
    out = check(fell, refs, "abc123")
    assert not out["ok"] and "end pass rate 0.100" in out["failures"][0]
    stale = read_curve(_run(tmp_path / "stale", [0.2 + 0.06 * i for i in range(8)], staleness=7.5))
    out = check(stale, refs, "abc123")
    assert out["failures"] == ["its mean staleness/max 7.50 exceeds the references' highest 2.00 by more than 1"]


def test_a_results_entry_reads_its_staleness_from_activity_json(tmp_path):
    run = _run(tmp_path / "r", [0.3] * 8, staleness=9.0)  # the small form's last training row
    (run / "activity.json").write_text(json.dumps({"train": {"staleness/max": {"mean": 2.5, "max": 4}}}))
    assert read_curve(run).staleness == 2.5


def test_subset_drops_are_reported(tmp_path):
    rung = [0.0, 0.1, 0.2, 0.29, 0.2, 0.1, 0.0, 0.0]
    run = read_curve(_run(tmp_path / "r", [0.2 + 0.06 * i for i in range(8)], subsets={"2x7": rung}))
    assert run.drops() == {"2x7": pytest.approx(0.29)}  # its peak minus its last evaluation


def test_other_builds_and_too_few_references_are_refused(tmp_path):
    refs = _refs(tmp_path)
    run = read_curve(_run(tmp_path / "r", [0.3] * 8, build="ffffff"))
    with pytest.raises(ScaleRLError, match="model build ffffff"):
        check(run, refs, "ffffff")
    _run(tmp_path / "mixed" / "seed0", [0.3] * 8, build="a")
    _run(tmp_path / "mixed" / "seed1", [0.3] * 8, build="b")
    with pytest.raises(ScaleRLError, match="other model builds"):
        read_references(tmp_path / "mixed")
    _run(tmp_path / "one" / "seed0", [0.3] * 8)
    with pytest.raises(ScaleRLError, match="needs at least 2"):
        read_references(tmp_path / "one")


def test_the_command_exits_1_on_a_failure(tmp_path, capsys):
    _refs(tmp_path)
    _run(tmp_path / "fell", [0.2, 0.26, 0.32, 0.38, 0.36, 0.1, 0.1, 0.1])
    assert main(["check", str(tmp_path / "fell"), "--against", str(tmp_path / "refs")]) == 1
    assert "FAIL" in capsys.readouterr().out
    _run(tmp_path / "fine", [0.2 + 0.06 * i for i in range(8)])
    assert main(["check", str(tmp_path / "fine"), "--against", str(tmp_path / "refs")]) == 0


def _plan(folder, **changes):
    """A resolved config.yaml as `scalerl train` writes it, with `changes` (dotted keys) applied."""
    from scalerl.config import Config, dump_config

    data = Config().model_dump(mode="json")
    for key, value in changes.items():
        section, name = key.split(".")
        data[section][name] = value
    (folder / "config.yaml").write_text(dump_config(Config.model_validate(data)))
    return folder


def test_runs_evaluated_on_another_plan_are_refused(tmp_path):
    """The end is the mean of the last three evaluations: on 12 or 36 of them it is another quantity."""
    for seed, shift in enumerate([-0.02, 0.0, 0.02]):
        _plan(_run(tmp_path / "refs" / f"seed{seed}", [0.2 + 0.06 * i + shift for i in range(8)]), **{"eval.count": 36})
    refs = read_references(tmp_path / "refs")
    same = read_curve(_plan(_run(tmp_path / "same", [0.2 + 0.06 * i for i in range(8)]), **{"eval.count": 36}))
    assert check(same, refs, "abc123")["ok"]
    other = read_curve(
        _plan(_run(tmp_path / "other", [0.2 + 0.06 * i for i in range(8)]), **{"eval.count": 12, "eval.samples": 4})
    )
    with pytest.raises(ScaleRLError, match=r"count 12 \(references 36\), samples 4 \(references 2\)"):
        check(other, refs, "abc123")
    _plan(_run(tmp_path / "mixed" / "seed0", [0.3] * 8), **{"eval.count": 12})
    _plan(_run(tmp_path / "mixed" / "seed1", [0.3] * 8), **{"eval.count": 36})
    with pytest.raises(ScaleRLError, match="different plans"):
        read_references(tmp_path / "mixed")


def test_the_committed_default_references_are_the_default_run_as_users_get_it():
    """CI checks `scalerl train` with no arguments against studies/default/base: those runs must be of
    the shipped weights and the default evaluation plan, with at least 15 evaluations inside the frozen
    first-half fit window (a tenth to a half of the final FLOPs, counted here from the rows; issue 47)."""
    from pathlib import Path

    from scalerl.config import Config
    from scalerl.models import weights_id
    from scalerl.run.metrics import read_rows
    from scalerl.study.band import PLAN_KEYS, eval_plan

    cfg = Config()
    default = {**{k: getattr(cfg.eval, k) for k in PLAN_KEYS}, "max_steps": cfg.run.max_steps}
    refs = sorted((Path(__file__).resolve().parents[2] / "studies" / "default" / "base").glob("seed*"))
    assert len(refs) >= 8
    shipped = weights_id(cfg.model.name)
    for ref in refs:
        assert eval_plan(ref) == default, ref
        assert json.loads((ref / "done.json").read_text())["model_build"] == shipped, ref
        x = np.array([r["compute/flops"] for r in read_rows(ref / "metrics.jsonl") if r.get("kind") == "eval"])
        inside = (x >= 0.1 * x[-1]) & (x <= 0.5 * x[-1])
        assert inside.sum() >= 15, (ref, int(inside.sum()))
