"""`benchmarks/vs_trl.py`'s comparison of learning curves, on curves with known answers."""

import importlib.util
import json
import pathlib

import pytest


def _bench():
    path = pathlib.Path(__file__).parents[2] / "benchmarks" / "vs_trl.py"
    spec = importlib.util.spec_from_file_location("vs_trl", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_time_to_a_common_pass_rate_pass_rate_at_equal_time_and_tokens_per_second():
    bench = _bench()
    # (training seconds, pass rate, step): scalerl reaches 0.30 at 60 s, TRL at 240 s; TRL's best is 0.30
    results = {
        "scalerl": {
            "curve": [(0, 0.10, 0), (60, 0.30, 10), (120, 0.40, 20)],
            "step_s": [6.0] * 20,
            "tokens": [600] * 20,
        },
        "TRL fp32": {
            "curve": [(0, 0.10, 0), (120, 0.14, 5), (240, 0.30, 10), (300, 0.29, 12)],
            "step_s": [25.0] * 12,
            "tokens": [500] * 12,
        },
    }
    c = bench.compare(results)
    assert c["start"] == 0.10 and c["common_level"] == 0.30
    assert c["reach_s"][0.30] == {"scalerl": 60, "TRL fp32": 240}  # x4 to the common level
    assert c["reach_s"][0.15] == {"scalerl": 60, "TRL fp32": 240}  # start + 0.05: 0.14 at 120 s is below it
    # the pair's level: 90% of the rise from the start to the lower best, 0.10 + 0.9 * (0.30 - 0.10)
    assert sorted(c["reach_s"]) == [0.15, 0.28, 0.30]
    assert c["reach_s"][0.28] == {"scalerl": 60, "TRL fp32": 240}
    assert c["cross_s"][0.28] == {"scalerl": pytest.approx(54.0), "TRL fp32": pytest.approx(225.0)}
    # interpolated: scalerl 0.10 -> 0.30 over 0-60 s crosses 0.15 at 15 s; TRL 0.14 (120 s) -> 0.30 (240 s)
    # crosses it at 120 + 120 * 0.01 / 0.16 = 127.5 s; a level met exactly at an evaluation is that evaluation
    assert c["cross_s"][0.15]["scalerl"] == pytest.approx(15.0)
    assert c["cross_s"][0.15]["TRL fp32"] == pytest.approx(127.5)
    assert c["cross_s"][0.30] == {"scalerl": pytest.approx(60.0), "TRL fp32": pytest.approx(240.0)}
    assert c["equal_s"] == 120  # the shorter side's training time
    assert c["pass_at_equal"] == {"scalerl": 0.40, "TRL fp32": 0.14}
    assert c["tok_s"]["scalerl"] == pytest.approx(100.0) and c["tok_s"]["TRL fp32"] == pytest.approx(20.0)


def test_levels_include_what_scalerl_and_each_trl_side_reach_and_never_exceed_a_best():
    bench = _bench()
    # TRL bf16's best (0.41796) caps the common level; scalerl and TRL fp32 both reach 0.55, and the
    # pair levels are 90% of the rises: 0.06 + 0.9 * (0.55 - 0.06) = 0.501, 0.06 + 0.9 * (0.41796 - 0.06)
    results = {
        "scalerl": {"curve": [(0, 0.06, 0), (16, 0.45, 8), (40, 0.56, 20)], "step_s": [2.0] * 20, "tokens": [100] * 20},
        "TRL fp32": {
            "curve": [(0, 0.06, 0), (45, 0.48, 20), (116, 0.55, 50)],
            "step_s": [2.3] * 50,
            "tokens": [100] * 50,
        },
        "TRL bf16": {"curve": [(0, 0.06, 0), (248, 0.41796, 13)], "step_s": [19.0] * 13, "tokens": [100] * 13},
    }
    c = bench.compare(results)
    assert sorted(c["reach_s"]) == [0.11, 0.3821, 0.4179, 0.501]
    assert c["reach_s"][0.4179] == {"scalerl": 16, "TRL fp32": 45, "TRL bf16": 248}  # rounded down: bf16 reaches it
    assert c["reach_s"][0.501] == {"scalerl": 40, "TRL fp32": 116, "TRL bf16": None}
    assert c["cross_s"][0.501]["TRL bf16"] is None
    assert c["cross_s"][0.501]["scalerl"] == pytest.approx(16 + 24 * 0.051 / 0.11)  # 0.45 at 16 s, 0.56 at 40 s


def test_sides_run_in_separate_calls_combine_only_with_the_same_settings(tmp_path):
    bench = _bench()
    assert bench.trl_dtypes("trl-bf16", False) == ["bf16"] and bench.trl_dtypes("scalerl", False) == []
    assert bench.trl_dtypes(None, True) == ["fp32"] and bench.trl_dtypes("trl", False) == ["fp32", "bf16"]
    args = {
        "model": "smollm2-135m",
        "task": "rg:chain_sum",
        "device": "cuda",
        "minutes": 5.0,
        "eval_every": 10,
        "eval_prompts": 128,
        "eval_samples": 4,
        "lr": None,
        "max_new_tokens": None,
        "threads": None,
        "overrides": [],
        "only": "scalerl",
    }
    ours = {"curve": [[0, 0.10, 0], [60, 0.30, 10]], "step_s": [6.0] * 10, "tokens": [600] * 10}
    theirs = {"curve": [[0, 0.10, 0], [240, 0.30, 10]], "step_s": [24.0] * 10, "tokens": [600] * 10}
    (tmp_path / "a.json").write_text(json.dumps({"args": args, "results": {"scalerl": ours}}))
    (tmp_path / "b.json").write_text(
        json.dumps({"args": {**args, "only": "trl-fp32"}, "results": {"TRL fp32": theirs}})
    )
    results = bench.combine([str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    c = bench.compare(results)
    assert c["cross_s"][0.30] == {"scalerl": pytest.approx(60.0), "TRL fp32": pytest.approx(240.0)}
    assert c["tok_s"] == {"scalerl": pytest.approx(100.0), "TRL fp32": pytest.approx(25.0)}
    (tmp_path / "c.json").write_text(json.dumps({"args": {**args, "minutes": 4.0}, "results": {"TRL bf16": theirs}}))
    with pytest.raises(SystemExit, match="c.json: minutes = 4.0, but .*a.json has 5.0"):
        bench.combine([str(tmp_path / "a.json"), str(tmp_path / "c.json")])
    with pytest.raises(SystemExit, match="side 'scalerl' is in an earlier file too"):
        bench.combine([str(tmp_path / "a.json"), str(tmp_path / "a.json")])
    (tmp_path / "d.json").write_text("{}")
    with pytest.raises(SystemExit, match="d.json: not a --json output"):
        bench.combine([str(tmp_path / "d.json")])


def test_pass_rate_when_scalerl_reaches_the_common_level_is_read_between_evaluations():
    bench = _bench()
    results = {
        "scalerl": {"curve": [(0, 0.10, 0), (10, 0.20, 4), (20, 0.40, 8)], "step_s": [2.5] * 8, "tokens": [10] * 8},
        "TRL fp32": {"curve": [(0, 0.10, 0), (40, 0.30, 4), (80, 0.30, 8)], "step_s": [10.0] * 8, "tokens": [10] * 8},
    }
    c = bench.compare(results)
    assert c["common_level"] == 0.30 and c["early_s"] == pytest.approx(15.0)  # scalerl: 0.20 at 10 s, 0.40 at 20 s
    assert c["pass_at_early"]["scalerl"] == pytest.approx(0.30)
    assert c["pass_at_early"]["TRL fp32"] == pytest.approx(0.10 + 0.20 * 15 / 40)  # 0.175
    assert bench.interpolated_rate(results["TRL fp32"]["curve"], 100) == 0.30  # beyond the end: the last
