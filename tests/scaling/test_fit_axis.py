"""The evaluation schedule and the fit's x axis are what `scalerl train`'s fits use: evaluations
land on the geometric schedule by default, and the final fit and the study report fit against
the analytic FLOPs, not the device-hours a loaded machine stretches."""

import json

import numpy as np
import pytest

from cli_helpers import SMALL, fake_model, train_cli  # noqa: F401  (fake_model: an autouse fixture)
from scalerl.config import eval_schedule
from scalerl.configure import load_config
from scalerl.launch import final_fit
from scalerl.study.report import fit_run

NOT_EVERY = [s for s in SMALL if not s.startswith("eval.every")]


def test_geometric_schedule_is_even_in_log_steps():
    # 12 ** (i / 4) for i = 0..4 is 1, 1.86, 3.46, 6.45, 12: rounded 1, 2, 3, 6, 12
    assert eval_schedule(12, 5) == [1, 2, 3, 6, 12]
    # 80 steps, 16 evaluations: 80 ** (i / 15) rounds to 1, 1, 2, 2, 3, 4, ...; repeats move up one step
    steps = eval_schedule(80, 16)
    assert len(steps) == 16 and steps[0] == 1 and steps[-1] == 80 and steps == sorted(set(steps))
    late = np.log(steps[9:])  # past the repeats, the spacing is even in log(step)
    assert np.allclose(np.diff(late), np.log(80) / 15, atol=0.06)
    assert eval_schedule(4, 16) == [1, 2, 3, 4]


def test_default_is_geometric_and_eval_every_picks_linear():
    cfg = load_config("scalerl")
    assert cfg.eval.schedule == "geometric"
    # from half of fit_min_frac of the run (the rise before the fits' windows) to the end
    total = cfg.run.max_steps
    steps = cfg.eval.steps(total)
    first = total * cfg.eval.fit_min_frac / 2
    assert steps[0] == round(first) and steps[-1] == total and len(steps) == cfg.eval.count
    assert steps == sorted(set(steps))
    late = np.log([s for s in steps if s >= total / 3])  # past the consecutive early steps, even in log(step)
    assert np.allclose(np.diff(late), np.log(total / first) / (len(steps) - 1), atol=0.03)
    cfg = load_config("scalerl", overrides=["eval.every=3", "run.max_steps=10"])
    assert cfg.eval.schedule == "linear" and cfg.eval.steps(10) == [3, 6, 9, 10]


def test_train_evaluates_on_the_schedule(tmp_path, capsys):
    run = tmp_path / "run"
    sets = [a for s in [*NOT_EVERY, "eval.count=5"] for a in ("--set", s)]
    code, out, err = train_cli(capsys, "--run-dir", str(run), "--max-steps", "12", *sets)
    assert code == 0, err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 1, 2, 3, 6, 12]


def _write(path, flops, hours, y):
    rows = [
        {
            "step": i,
            "kind": "eval",
            "compute/flops": float(f),
            "compute/device_hours": float(h),
            "val/pass_rate": float(v),
        }
        for i, (f, h, v) in enumerate(zip(flops, hours, y))
    ]
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_fits_use_flops_not_device_hours(tmp_path):
    # a sigmoid in FLOPs (A 0.6, B 1.5, C_mid 1e12, R0 0.1); the machine got three times busier
    # half-way, so device-hours per FLOP triple there: in device-hours the curve is another shape
    flops = np.concatenate([[0.0], np.geomspace(5e10, 1.6e13, 16)])
    y = np.where(flops > 0, 0.1 + 0.5 / (1 + (1e12 / np.maximum(flops, 1)) ** 1.5), 0.1)
    rate = np.where(flops <= 8e12, 1.0, 3.0)  # device-hours per 1e13 FLOPs
    hours = np.concatenate([[0.0], np.cumsum(np.diff(flops) * rate[1:] / 1e13)])
    _write(tmp_path / "run", flops, hours, y)
    out = final_fit(tmp_path / "run", 0.1)
    assert out["x"] == "compute/flops" and out["final"]["compute"] == pytest.approx(1.6e13)
    assert out["A"] == pytest.approx(0.6, abs=0.005) and out["C_mid"] == pytest.approx(1e12, rel=0.05)
    assert json.loads((tmp_path / "run" / "fit.json").read_text())["x"] == "compute/flops"
    # the study report, default x, on the same run: the same axis
    r = fit_run("scalerl", 0, tmp_path / "run", "compute/flops", 0.1, n_bootstrap=0)
    assert r.fit.C_mid == pytest.approx(1e12, rel=0.05) and abs(r.half["error"]) < 0.01


def test_a_metrics_file_inside_a_run_directory_fits_the_directorys_axis(tmp_path):
    from scalerl.scaling.sources import read_run

    flops, hours, y = [1e10, 2e10, 4e10], [0.5, 0.7, 0.9], [0.1, 0.2, 0.3]
    _write(tmp_path / "run", flops, hours, y)
    (tmp_path / "run" / "config.yaml").write_text("recipe: scalerl\n")
    for path in (tmp_path / "run", tmp_path / "run" / "metrics.jsonl"):
        s = read_run(path, y="val/pass_rate")
        assert (s.x_name, s.x.tolist()) == ("compute/flops", flops)
    _write(tmp_path / "loose", flops, hours, y)  # no config.yaml: not a scalerl run directory
    s = read_run(tmp_path / "loose" / "metrics.jsonl", y="val/pass_rate")
    assert (s.x_name, s.x.tolist()) == ("compute/device_hours", hours)
