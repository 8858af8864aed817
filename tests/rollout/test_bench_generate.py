"""benchmarks/generate.py's engine side runs (it was broken for a day after the shared-prefix rule
moved to scalerl.rollout.state, and no test ran it)."""

import importlib.util
import pathlib

import pytest

from scalerl.rollout import state


def _bench():
    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "generate.py"
    spec = importlib.util.spec_from_file_location("bench_generate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("shared", [True, False])
def test_the_engine_side_generates_every_token_and_restores_the_prefix_rule(shared):
    bench = _bench()
    model, tokenizer = bench.load("tiny-random", "fp32", "cpu")
    before = state.MIN_SHARED_PREFIX
    assert bench.run_ours(model, tokenizer, bench.TOPICS[:2], 2, 5, seed=0, shared=shared) == 5
    assert state.MIN_SHARED_PREFIX == before
