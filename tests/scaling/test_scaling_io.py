"""Readers (JSONL run dirs, CSV, W&B CSV, TensorBoard) and the `scalerl fit` command."""

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.errors import ScaleRLError
from scalerl.scaling import read_metrics
from scalerl.scaling.sources import Compute, read_run

X, Y = "compute/device_hours", "val/pass_rate"


def curve(c):
    return 0.4 + 0.2 / (1 + (2500 / c) ** 2) if c > 0 else 0.4  # Eq. 1, A 0.6, B 2, C_mid 2500


def write_run(path, n=40, extra=()):
    rows = []
    for i in range(n):
        c = 250.0 * i
        rows.append({"step": i, "kind": "train", X: c, "train/loss": 0.1})  # no Y: ignored silently
        rows.append({"step": i, "kind": "eval", X: c, Y: round(curve(c) + 0.003 * (-1) ** i, 5)})
    rows.extend(extra)
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_run_dir_mixed_rows(tmp_path):
    run = write_run(tmp_path / "run", extra=[{"kind": "eval", X: 1e4, Y: None}, {"kind": "eval", X: 1e4, Y: "n/a"}])
    x, y, warns = read_metrics(run, X, Y)
    assert len(x) == 40 and x[1] == 250.0 and y[1] == pytest.approx(curve(250.0) - 0.003)
    assert len(warns) == 1 and "skipped 2 row(s)" in warns[0]


def test_jsonl_nan_and_nested(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"c": 1, "val": {"acc": 0.5}}\n{"c": 2, "val": {"acc": NaN}}\n{"c": 3, "val": {"acc": 0.7}}\n')
    x, y, warns = read_metrics(f, "c", "val/acc")
    assert list(x) == [1, 3] and list(y) == [0.5, 0.7] and "skipped 1" in warns[0]


def test_csv_and_wandb_export(tmp_path):
    f = tmp_path / "plain.csv"
    f.write_text("hours,acc\n10,0.3\n20,\n5,0.2\n")
    x, y, warns = read_metrics(f, "hours", "acc")
    assert list(x) == [5, 10] and list(y) == [0.2, 0.3] and warns == []  # row 20 lacks acc: not a skip
    w = tmp_path / "wandb.csv"
    w.write_text(
        'Step,"run-a - eval/acc","run-a - eval/acc__MIN","run-a - eval/acc__MAX"\n1,0.1,0.05,0.15\n2,0.2,0.1,0.3\n'
    )
    x, y, _ = read_metrics(w, "Step", "eval/acc")
    assert list(y) == [0.1, 0.2]
    two = tmp_path / "two.csv"
    two.write_text('Step,"a - acc","b - acc"\n1,0.1,0.2\n')
    with pytest.raises(ScaleRLError, match="ambiguous"):
        read_metrics(two, "Step", "acc")


def test_tensorboard_events(tmp_path):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(tmp_path / "tb"))
    for step in range(6):
        for tag, value in ((X, 10.0 * step), (Y, 0.1 * step)):
            summ = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(event_pb2.Event(step=step, wall_time=float(step), summary=summ))
    writer.close()
    x, y, _ = read_metrics(tmp_path, X, Y)  # a directory without metrics.jsonl
    np.testing.assert_allclose(x, [0, 10, 20, 30, 40, 50])
    np.testing.assert_allclose(y, [0, 0.1, 0.2, 0.3, 0.4, 0.5], atol=1e-6)
    x, _, _ = read_metrics(tmp_path, "step", Y)
    assert list(x) == [0, 1, 2, 3, 4, 5]


def run_cli(capsys, *argv):
    code = main(["fit", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_one_path(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    code, out, err = run_cli(capsys, run, "--fit-min", 1000, "--predict", 20000, "--json", "--bootstrap", 30)
    assert code == 0, err
    d = json.loads(out)
    assert set(d) == {
        "model",
        "A",
        "B",
        "C_mid",
        "R0",
        "rmse",
        "n_points",
        "ci",
        "predictions",
        "warnings",
        "x",
        "y",
        "compute",
        "window",
        "grid_check",
        "fall",
        "verdict",
        "first_half_fit",
        "identified",
        "ceiling",
        "identification",
        "forecast_method",
    }
    assert d["compute"] == {"kind": "column", "column": X} and d["grid_check"]["agrees"] is True
    assert d["fall"]["fell"] is False  # a sigmoid that only rises (plus noise) did not fall
    assert d["model"] == "sigmoid" and d["n_points"] == 36 and d["R0"] == pytest.approx(0.403)
    assert set(d["ci"]) == {"A", "B", "C_mid"} and len(d["ci"]["A"]) == 2
    p = d["predictions"][0]
    assert p["x"] == 20000 and p["lo"] <= p["y"] <= p["hi"] and abs(p["y"] - curve(20000)) < 0.01


def test_several_paths_json_and_table(tmp_path, capsys):
    a = write_run(tmp_path / "a")
    b = tmp_path / "b"
    b.mkdir()
    rows = [{X: 250.0 * i, Y: 0.4 + 0.3 / (1 + (2500 / (250.0 * i)) ** 2) if i else 0.4} for i in range(40)]
    (b / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, _ = run_cli(capsys, a, b, "--json", "--bootstrap", 1)
    objs = json.loads(out)
    assert [o["path"] for o in objs] == [str(a), str(b)]
    code, out, _ = run_cli(capsys, a, b, "--bootstrap", 10, "--plot", tmp_path / "f.png")
    table = out[out.index("run ") :].splitlines()
    assert table[2].startswith("b ") and table[3].startswith("a ")  # b has the higher ceiling (0.7)
    assert (tmp_path / "f.png").stat().st_size > 10_000 and (tmp_path / "f_linearised.png").exists()


def test_seeds_of_one(tmp_path, capsys):
    runs = [write_run(tmp_path / f"s{i}") for i in range(3)]
    code, out, _ = run_cli(capsys, *runs, "--seeds-of-one", "--json", "--bootstrap", 10, "--predict", 20000)
    d = json.loads(out)
    assert d["paths"] == [str(r) for r in runs] and d["seeds"]["n_seeds"] == 3
    # the C = 0 rows only set R0; the early window (0.1 of 9,750) leaves out 250, 500 and 750
    assert d["n_points"] == 3 * (40 - 1 - 3)
    assert d["predictions"][0]["seed_std"] == pytest.approx(0, abs=1e-6)  # identical seeds


def bad_inputs(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    words = tmp_path / "words.csv"
    words.write_text("c,acc\n1,high\n2,low\n")
    few = tmp_path / "few.csv"
    few.write_text("c,acc\n" + "".join(f"{i},{0.1 * i}\n" for i in range(1, 5)))
    const = tmp_path / "const.csv"
    const.write_text("c,acc\n" + "".join(f"{i},0.5\n" for i in range(1, 9)))
    big = tmp_path / "big.csv"
    big.write_text("c,acc\n" + "".join(f"{i},{10 * i}\n" for i in range(1, 9)))
    neg = tmp_path / "neg.csv"
    neg.write_text("c,acc\n" + "".join(f"{i - 3},{0.1 * i}\n" for i in range(1, 9)))
    return [
        (tmp_path / "nope.jsonl", "no such file"),
        (empty, "empty"),
        (words, "no numeric value"),
        (few, "only 4 points in the fit window"),
        (const, "constant"),
        (big, "in \\[0, 1\\]"),
        (neg, "compute must be positive"),
    ]


def test_bad_inputs_one_line_errors(tmp_path, capsys):
    for path, msg in bad_inputs(tmp_path):
        code, out, err = run_cli(capsys, path, "--x", "c", "--y", "acc")
        assert code == 2, (path, out)
        assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err, err
        assert re.search(msg, err), (msg, err)


def test_unknown_column_lists_columns(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    code, _, err = run_cli(capsys, run, "--y", "val/acc")
    assert code == 2 and "no column 'val/acc'" in err and "val/pass_rate" in err and "train/loss" in err


def test_cli_subprocess_is_torch_free_and_tracebackless(tmp_path):
    code = "import scalerl.scaling, scalerl.commands.fit, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    proc = subprocess.run(
        [sys.executable, "-m", "scalerl", "fit", str(tmp_path / "missing")], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "missing" in proc.stderr


def test_demo_writes_outputs(tmp_path, capsys):
    from scalerl import demo

    assert demo.main(tmp_path) == 0
    out = capsys.readouterr().out
    assert "forecast at GPU-hours = 16,000" in out and "ceiling A" in out
    assert "verdict at GPU-hours = 8,000" in out and "=> " in out
    fits = json.loads((tmp_path / "fit.json").read_text())
    assert math.isclose(fits["fit_to_16k"]["A"], 0.61, abs_tol=0.02)  # the example's Table 1 ceiling
    assert (tmp_path / "forecast.png").stat().st_size < 200_000


def test_sparse_csv_columns_warn_only_for_present_but_invalid_values(tmp_path):
    f = tmp_path / "trl.csv"  # TRL / W&B: loss every step, eval accuracy every third
    f.write_text("step,loss,eval_acc\n1,0.9,\n2,0.8,\n3,0.7,0.25\n4,0.6,\n5,0.5,\n6,0.4,0.5\n7,0.3,n/a\n")
    x, y, warns = read_metrics(f, "step", "eval_acc")
    assert list(x) == [3, 6] and list(y) == [0.25, 0.5]
    assert warns == [f"{f}: skipped 1 row(s) with a missing or non-finite 'step' or 'eval_acc'"]  # the n/a
    s = read_run(f, y="eval_acc", compute=Compute("steps", per_step=2.0))
    assert list(s.x) == [6.0, 12.0] and s.warnings == [f"{f}: skipped 1 row(s) with a missing or non-finite 'eval_acc'"]
