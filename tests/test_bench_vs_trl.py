"""`benchmarks/vs_trl.py`'s comparison of learning curves, on curves with known answers."""

import importlib.util
import pathlib

import pytest


def _bench():
    path = pathlib.Path(__file__).parents[1] / "benchmarks" / "vs_trl.py"
    spec = importlib.util.spec_from_file_location("vs_trl", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_time_to_a_common_pass_rate_pass_rate_at_equal_time_and_tokens_per_second():
    bench = _bench()
    # (training seconds, pass rate, step): scalerl reaches 0.30 at 60 s, TRL at 240 s; TRL's best is 0.30
    results = {
        "scalerl": {"curve": [(0, 0.10, 0), (60, 0.30, 10), (120, 0.40, 20)], "step_s": [6.0] * 20,
                    "tokens": [600] * 20},
        "TRL fp32": {"curve": [(0, 0.10, 0), (120, 0.14, 5), (240, 0.30, 10), (300, 0.29, 12)],
                     "step_s": [25.0] * 12, "tokens": [500] * 12},
    }
    c = bench.compare(results)
    assert c["start"] == 0.10 and c["common_level"] == 0.30
    assert c["reach_s"][0.30] == {"scalerl": 60, "TRL fp32": 240}      # x4 to the common level
    assert c["reach_s"][0.15] == {"scalerl": 60, "TRL fp32": 240}      # start + 0.05: 0.14 at 120 s is below it
    assert c["equal_s"] == 120                                         # the shorter side's training time
    assert c["pass_at_equal"] == {"scalerl": 0.40, "TRL fp32": 0.14}
    assert c["tok_s"]["scalerl"] == pytest.approx(100.0) and c["tok_s"]["TRL fp32"] == pytest.approx(20.0)
