"""PipelineRL-k through the real loop, slow tier: the generator process's start-up is not compute
(tests/loop/test_pipeline_k.py holds the rest)."""

import time

import pytest

from scalerl.loop import train
from scalerl.transport.protocol import GeneratorBuild
from train_helpers import fake_components, small_cfg, train_rows

pytestmark = pytest.mark.usefixtures("one_torch_thread")


STARTUP_FILE = "SCALERL_TEST_STARTUP_FILE"  # where `slow_start` writes when it began and ended (monotonic)
STARTUP_S = 2.0


def slow_start(*args, **given):
    """The fake generator process's setup, with a slow start-up (imports, a model build): it writes when
    the start-up began and ended (CLOCK_MONOTONIC: one clock for every process of the machine)."""
    import os

    from doubles import build_fake

    began = time.monotonic()
    time.sleep(STARTUP_S)  # what a start-up costs; the test's verdict is the order of the clocks, not this length
    built = build_fake(*args, **given)
    with open(os.environ[STARTUP_FILE], "w") as f:
        f.write(f"{began!r} {time.monotonic()!r}")
    return built


@pytest.mark.slow  # spawns the generator process: 10-20 s of imports on a busy 2-core machine
def test_the_generators_start_up_is_not_compute(tmp_path, monkeypatch, two_cores):
    """By the clocks' order, whatever the machine's speed: the loop's `ready()` returned after the generator's
    start-up had ended, and the first step's clock holds only what came after `ready()` returned."""
    from scalerl.run.metrics import MetricsWriter
    from scalerl.transport.local import ProcessRollouts

    cfg = small_cfg(extra=["run.max_steps=2", "eval.every=100", "pipeline.transport=process", "run.threads=2"])
    comps, _ = fake_components(cfg)
    comps.build = GeneratorBuild(slow_start, (list(range(5, 40)), (3, 8), 8, 0.0))
    monkeypatch.setenv(STARTUP_FILE, str(tmp_path / "startup"))
    seen: dict[str, list[float]] = {"ready": [], "train_row": []}
    ready, write = ProcessRollouts.ready, MetricsWriter.write

    def timed_ready(self) -> None:
        ready(self)
        seen["ready"].append(time.monotonic())

    def timed_write(self, row: dict) -> None:
        if row.get("kind") == "train" and not seen["train_row"]:
            seen["train_row"].append(time.monotonic())
        write(self, row)

    monkeypatch.setattr(ProcessRollouts, "ready", timed_ready)
    monkeypatch.setattr(MetricsWriter, "write", timed_write)
    train(cfg, tmp_path, comps=comps, progress=False)
    began, ended = map(float, (tmp_path / "startup").read_text().split())
    assert ended - began >= STARTUP_S  # the start-up did happen ...
    ready_at = seen["ready"][0]
    assert ready_at >= ended  # ... the loop waited for it ...
    first = train_rows(tmp_path)[0]
    assert first["time/step"] <= seen["train_row"][0] - ready_at  # ... outside the first step's clock
    assert first["compute/device_hours"] == pytest.approx(first["time/step"] * 2 / 3600)
