"""`scalerl fit` refuses nonsense in one line (exit 2), always writes valid JSON, skips a torn last line."""

import json
import math

import pytest

from scalerl.cli import main

X, Y = "compute/device_hours", "val/pass_rate"


def truth(c):
    return 0.4 + 0.2 / (1 + (2500 / c) ** 2) if c > 0 else 0.4  # Eq. 1: A 0.6, B 2, C_mid 2500, R0 0.4


def write_log(path, n=40):
    rows = [{"step": i, X: 250.0 * i, Y: round(truth(250.0 * i) + 0.003 * (-1) ** i, 5)} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def fit_cli(capsys, *argv):
    code = main(["fit", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def strict_json(text):
    def refuse(name):
        raise AssertionError(f"invalid JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def assert_refused(code, err, *words):
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("scalerl: error: ") and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--predict", "-5"], ["--predict -5", "positive"]),
        (["--predict", "nan"], ["--predict nan"]),
        (["--predict", "20000", "0"], ["--predict 0"]),
        (["--predict", "inf"], ["--predict inf"]),
        (["--bootstrap", "-5"], ["--bootstrap -5", "at least 1"]),
        (["--bootstrap", "0"], ["--bootstrap 0"]),
        (["--a-range", "2", "3"], ["--a-range 2 3", "[0, 1]"]),
        (["--a-range", "0.7", "0.6"], ["--a-range 0.7 0.6", "LO < HI"]),
        (["--fit-min-frac", "1.5"], ["--fit-min-frac 1.5"]),
        (["--plot", "no/such/folder/f.png"], ["no/such/folder", "does not exist"]),
        (["--plot", "PLOT.xyz"], ["'.xyz'", ".png"]),
        (["--compute", "tokens"], ["--compute tokens needs --params"]),
        (["--compute", "wall"], ["--compute wall needs --devices"]),
        (["--compute", "wall", "--devices", "0"], ["--devices 0"]),
        (["--compute", "steps", "--per-step", "-1"], ["--per-step -1"]),
    ],
)
def test_nonsense_is_refused_in_one_line(tmp_path, capsys, argv, words):
    log = write_log(tmp_path / "m.jsonl")
    argv = [a.replace("PLOT", str(tmp_path / "plot")) for a in argv]
    code, out, err = fit_cli(capsys, log, *argv)
    assert_refused(code, err, *words)
    assert out == "" and not list(tmp_path.glob("plot*"))


def test_a_range_outside_0_1_is_accepted_for_an_unbounded_power_law(tmp_path, capsys):
    log = tmp_path / "loss.jsonl"
    log.write_text("".join(json.dumps({"c": c, "score": 3 - 2 / c**0.5}) + "\n" for c in range(1, 30)))
    code, out, err = fit_cli(
        capsys,
        log,
        "--x",
        "c",
        "--y",
        "score",
        "--model",
        "powerlaw",
        "--a-range",
        "2",
        "5",
        "--json",
        "--bootstrap",
        "5",
    )
    assert code == 0, err
    assert strict_json(out)["A"] == pytest.approx(3, abs=0.05)


def test_one_compute_value_is_refused(tmp_path, capsys):
    log = tmp_path / "flat.jsonl"
    log.write_text("".join(json.dumps({X: 100.0, Y: 0.3 + 0.01 * (i % 7)}) + "\n" for i in range(39)))
    code, _, err = fit_cli(capsys, log)
    assert_refused(code, err, "only 1 distinct compute value", "39 points", str(log))
    two = tmp_path / "two.jsonl"
    two.write_text("".join(json.dumps({X: 100.0 * (1 + i % 2), Y: 0.3 + 0.01 * (i % 7)}) + "\n" for i in range(39)))
    code, _, err = fit_cli(capsys, two, "--fit-min-frac", "0")
    assert_refused(code, err, "only 2 distinct compute value", "at least 3")


def test_json_is_valid_for_every_shape_of_output(tmp_path, capsys):
    a, b = write_log(tmp_path / "a.jsonl"), write_log(tmp_path / "b.jsonl")
    for argv in ([a, "--predict", "20000", "1e300"], [a, "--model", "powerlaw"], [a, b], [a, b, "--seeds-of-one"]):
        code, out, err = fit_cli(capsys, *argv, "--json", "--bootstrap", "5", "--no-grid-check")
        assert code == 0, err
        strict_json(out)  # no bare NaN or Infinity
    d = strict_json(fit_cli(capsys, a, "--json", "--bootstrap", "5", "--predict", "1e300")[1])
    assert d["predictions"][0]["y"] == pytest.approx(d["A"])  # far beyond: the ceiling, a number


def test_finite_json_replaces_non_finite_numbers():
    import numpy as np

    from scalerl.scaling.forecast import finite_json

    out = finite_json({"a": math.nan, "b": [np.float64("inf"), 1.5], "c": np.int64(3), "d": np.bool_(True)})
    assert out == {"a": None, "b": [None, 1.5], "c": 3, "d": True}
    json.dumps(out, allow_nan=False)


def test_torn_last_line_is_skipped_with_a_warning(tmp_path, capsys):
    log = write_log(tmp_path / "m.jsonl")
    whole = fit_cli(capsys, log, "--json", "--bootstrap", "5", "--no-grid-check")
    with open(log, "a") as f:
        f.write('{"step": 40, "compute/device_hours": 100')  # what kill -9 mid-write leaves
    code, out, err = fit_cli(capsys, log, "--json", "--bootstrap", "5", "--no-grid-check")
    assert code == 0, err
    d, w = strict_json(out), strict_json(whole[1])
    assert d["A"] == w["A"] and d["n_points"] == w["n_points"]  # the complete lines, all of them
    assert any("m.jsonl:41: skipped a torn last line" in x for x in d["warnings"])


def test_invalid_line_before_the_last_is_an_error(tmp_path, capsys):
    log = write_log(tmp_path / "m.jsonl")
    lines = log.read_text().splitlines(keepends=True)
    lines[5] = "{oops\n"
    log.write_text("".join(lines))
    code, _, err = fit_cli(capsys, log)
    assert_refused(code, err, f"{log}:6: not valid JSON")


def test_non_utf8_log_is_one_line(tmp_path, capsys):
    log = tmp_path / "m.jsonl"
    log.write_bytes(b'{"a": 1}\n\xff\xfe\n')
    code, _, err = fit_cli(capsys, log)
    assert_refused(code, err, "not UTF-8", str(log))


def test_runs_with_the_same_folder_name_are_told_apart(tmp_path, capsys):
    """Seed folders of two configurations (a/seed0, b/seed0) are labelled by the shortest distinct
    path; a name alone stays alone."""
    for name in ("a", "b", "c"):
        (tmp_path / name / "seed0").mkdir(parents=True)
        write_log(tmp_path / name / "seed0" / "metrics.jsonl")
    (tmp_path / "solo").mkdir()
    write_log(tmp_path / "solo" / "metrics.jsonl")
    code, out, _ = fit_cli(
        capsys,
        tmp_path / "a" / "seed0",
        tmp_path / "b" / "seed0",
        tmp_path / "solo",
        "--bootstrap",
        "5",
        "--no-grid-check",
    )
    assert code == 0
    table = out[out.index("run ") :].splitlines()[2:]
    assert sorted(line.split()[0] for line in table) == ["a/seed0", "b/seed0", "solo"]


def test_a_scalerl_run_directory_is_fitted_on_its_own_axis(tmp_path, capsys):
    """`scalerl fit runs/<run>` uses compute/flops, the axis `scalerl train` fits; a folder that is
    not a run directory (no config.yaml) keeps compute/device_hours."""
    rows = [
        {
            "step": i,
            "kind": "eval",
            "compute/flops": 1e9 * i,
            "compute/device_hours": 250.0 * i,
            Y: round(truth(250.0 * i), 5),
        }
        for i in range(40)
    ]
    for name, config in (("run", True), ("plain", False)):
        d = tmp_path / name
        d.mkdir()
        d.joinpath("metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if config:
            d.joinpath("config.yaml").write_text("recipe: scalerl\n")
    code, out, _ = fit_cli(capsys, tmp_path / "run", "--json", "--bootstrap", "5", "--no-grid-check")
    data = strict_json(out)
    assert code == 0 and data["x"] == "compute/flops"
    assert data["C_mid"] == pytest.approx(2500 / 250 * 1e9, rel=0.02)  # the same curve in FLOPs
    code, out, _ = fit_cli(capsys, tmp_path / "plain", "--json", "--bootstrap", "5", "--no-grid-check")
    data = strict_json(out)
    assert code == 0 and data["x"] == "compute/device_hours"
    assert data["C_mid"] == pytest.approx(2500, rel=0.02)


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """`scalerl fit ... --json | head -1`: the pipe closed before the output was written ends the
    command with 141 (as a shell reports SIGPIPE) and no traceback."""
    import subprocess
    import sys

    log = write_log(tmp_path / "metrics.jsonl")
    p = subprocess.Popen(
        [sys.executable, "-m", "scalerl", "fit", str(log), "--json", "--bootstrap", "5", "--no-grid-check"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # the reader is gone before a byte is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and "Traceback" not in err and "BrokenPipe" not in err


def test_metric_fits_one_domain_of_a_mixed_task(tmp_path, capsys):
    """`--metric val/pass_rate/code` (the issue's name; `--y` is the same option) fits that domain's
    column, not the overall pass rate: the two are written from different curves (A 0.6 and 0.35)."""

    def code_truth(c):
        return 0.1 + 0.25 / (1 + (4000 / c) ** 1.5) if c > 0 else 0.1  # A 0.35, B 1.5, C_mid 4000, R0 0.1

    rows = [
        {
            "step": i,
            "kind": "eval",
            X: 250.0 * i,
            Y: round(truth(250.0 * i), 5),
            f"{Y}/code": round(code_truth(250.0 * i), 5),
        }
        for i in range(40)
    ]
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = fit_cli(capsys, log, "--x", X, "--metric", f"{Y}/code", "--bootstrap", 20, "--json")
    assert code == 0, err
    assert strict_json(out)["A"] == pytest.approx(0.35, abs=0.01)
    code, out, err = fit_cli(capsys, log, "--x", X, "--bootstrap", 20, "--json")
    assert strict_json(out)["A"] == pytest.approx(0.6, abs=0.01)
