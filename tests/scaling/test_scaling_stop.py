"""Answers a user asks (scalerl.scaling.stop): the compute at which a run reaches a pass rate, the
gain left to a budget, the stop rule, the patience rule; `scalerl fit --target/--budget` and
`scalerl watch --budget --on-stop` acting on a real writer's log."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.scaling import fit_curve
from scalerl.scaling.stop import compute_for, patience_stop, stop_decision

A, B, C_MID, R0 = 0.62, 2.0, 60.0, 0.3


def eq1(c):
    c = np.asarray(c, dtype=float)
    return np.where(c > 0, R0 + (A - R0) / (1 + (C_MID / np.maximum(c, 1e-9)) ** B), R0)


def noisy(steps, seed=0, sd=0.004):
    return eq1(steps) + np.where(steps > 0, np.random.default_rng(seed).normal(0, sd, len(steps)), 0)


X = np.arange(0, 241, 5.0)


def test_compute_for_a_target_inverts_the_fitted_curve():
    fit = fit_curve(X, noisy(X), fit_min=10, n_bootstrap=60)
    r = compute_for(fit, 0.5)
    assert fit.predict([r["compute"]])[0] == pytest.approx(0.5, abs=1e-9)  # the curve is at 0.5 there
    assert r["lo"] < r["compute"] < r["hi"] and r["reached_share"] == 1.0
    # the true curve reaches 0.5 at C_mid * ((0.5 - R0) / (A - 0.5)) ** (1 / B) = 60 * (0.2 / 0.12) ** 0.5
    assert r["lo"] * 0.97 < 60 * (0.2 / 0.12) ** 0.5 < r["hi"] * 1.03
    above = compute_for(fit, 0.9)
    assert above["compute"] is None and above["hi"] is None and "not reached before the ceiling" in above["text"]
    assert compute_for(fit, 0.2)["compute"] == 0.0  # below the start: already there


def test_stop_rule_stops_on_a_plateau_and_not_on_a_rising_curve():
    fit = fit_curve(X, noisy(X), fit_min=10, n_bootstrap=60)
    plateau = stop_decision(fit, 240.0, 480.0)
    # the gain is the fitted curve's, from 240 to 480 (eq1: 0.6089 -> 0.6171, +0.008)
    assert plateau["gain"] == pytest.approx(fit.predict([480.0])[0] - fit.predict([240.0])[0])
    assert plateau["gain"] == pytest.approx(float(eq1(480) - eq1(240)), abs=0.005)
    assert plateau["stop"] is True and plateau["hi"] < 0.02 and "stop" in plateau["text"]
    early = X[X <= 60]
    rising = stop_decision(fit_curve(early, noisy(early), fit_min=5, n_bootstrap=60), 60.0, 600.0)
    assert rising["stop"] is False and rising["upper"] >= 0.02  # eq1 gains 0.15 from 60 to 600
    assert stop_decision(fit, 240.0, 100.0)["gain"] == 0.0  # a budget already spent: nothing left


def test_patience_counts_evaluations_without_a_new_best():
    assert patience_stop([0.1, 0.2, 0.3, 0.3, 0.29, 0.3, 0.2, 0.25], patience=5) == 7
    assert patience_stop([0.1, 0.2, 0.3, 0.4], patience=2) is None
    assert patience_stop([0.5, 0.51, 0.52, 0.5], patience=2, min_delta=0.02) == 2  # +0.01 is no improvement


def _csv(path, steps, y):
    path.write_text("step,acc\n" + "".join(f"{s:g},{v:.5f}\n" for s, v in zip(steps, y)))
    return path


def test_fit_cli_answers_target_and_budget(tmp_path, capsys):
    log = _csv(tmp_path / "run.csv", X, noisy(X))
    args = [
        "fit",
        str(log),
        "--x",
        "step",
        "--y",
        "acc",
        "--bootstrap",
        "40",
        "--no-grid-check",
        "--target",
        "0.5",
        "0.9",
        "--budget",
        "260",
    ]
    assert main([*args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [t["target"] for t in d["targets"]] == [0.5, 0.9] and d["targets"][1]["compute"] is None
    # a plateau whose ceiling is identified, 1.08x the compute left: the calibrated gain's upper end is small
    assert d["identified"] is True
    assert d["budget"]["budget"] == 260 and d["budget"]["stop"] is True and d["budget"]["threshold"] == 0.02
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "target: 0.500 at compute" in out and "target: 0.900 is not reached by the forecast" in out
    assert "budget: from 240 to the budget 260" in out
    assert main([*args[:-2], "--budget", "-1"]) == 2
    assert "--budget -1: expected a positive" in capsys.readouterr().err


WRITER = r"""
import sys, time
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    f.write("step,acc\n")
    for i in range(n):
        c = 5.0 * i
        y = 0.3 + 0.32 / (1 + (60 / c) ** 2) if c else 0.3
        f.write(f"{c:g},{y + 0.003 * (-1) ** i:.5f}\n"); f.flush(); time.sleep(0.05)
"""


def test_watch_runs_the_on_stop_command_when_the_rule_fires(tmp_path):
    """A log (written by another process) of a curve at its plateau; with a budget of 1.08x its last
    compute the rule fires, the watch runs --on-stop (touching a file) and ends by itself, exit 0."""
    log, flag = tmp_path / "run.csv", tmp_path / "STOP"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    writer = subprocess.run([sys.executable, "-c", WRITER, str(log), "49"], timeout=60)
    assert writer.returncode == 0
    watch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scalerl",
            "watch",
            str(log),
            "--x",
            "step",
            "--y",
            "acc",
            "--every",
            "0.1",
            "--bootstrap",
            "40",
            "--no-grid-check",
            "--budget",
            "260",
            "--on-stop",
            f"touch {flag}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        out, err = watch.communicate(timeout=180)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait(timeout=30)
    assert watch.returncode == 0, err
    assert "the stop rule fired" in out and "ran --on-stop" in out and flag.exists()
    assert "watch: stopped" in err
