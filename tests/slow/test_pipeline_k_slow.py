"""PipelineRL-k through the real loop, slow tier: the generator process's start-up is not compute
(tests/loop/test_pipeline_k.py holds the rest)."""

import time

import pytest

from scalerl.loop import train
from scalerl.transport.protocol import GeneratorBuild
from train_helpers import fake_components, small_cfg, train_rows

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def slow_start(*args, **given):
    """The fake generator process's setup, with a slow start-up (imports, a model build)."""
    from doubles import build_fake

    time.sleep(4.0)
    return build_fake(*args, **given)


@pytest.mark.slow  # spawns the generator process: 10-20 s of imports on a busy 2-core machine
def test_the_generators_start_up_is_not_compute(tmp_path):
    cfg = small_cfg(extra=["run.max_steps=2", "eval.every=100", "pipeline.transport=process", "run.threads=2"])
    comps, _ = fake_components(cfg)
    comps.build = GeneratorBuild(slow_start, (list(range(5, 40)), (3, 8), 8, 0.0))
    t0 = time.monotonic()
    train(cfg, tmp_path, comps=comps, progress=False)
    assert time.monotonic() - t0 > 4.0                      # the start-up did happen ...
    first = train_rows(tmp_path)[0]
    assert first["time/step"] < 3.0                         # ... but not inside the first step's clock
    assert first["compute/device_hours"] == pytest.approx(first["time/step"] * 2 / 3600)
