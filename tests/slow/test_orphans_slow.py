"""No orphans, slow tier: a generator process killed once the run has its first checkpoint
(tests/transport/test_orphans.py holds the rest)."""

import subprocess
import sys
import time

import pytest

from process_helpers import descendants


@pytest.mark.slow  # a run to its first checkpoint, then a kill: ~20 s idle, minutes on a loaded machine
def test_a_killed_generator_stops_the_run_in_one_line_and_keeps_the_checkpoint(tmp_path):
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "scalerl",
        "train",
        "--run-dir",
        str(run),
        "--no-progress",
        "--set",
        "model.name=tiny-random",
        "--set",
        "pipeline.transport=process",
        "--set",
        "batch.prompts=2",
        "--set",
        "batch.generations=4",
        "--set",
        "eval.prompts=4",
        "--set",
        "run.checkpoint_every=1",
        "--set",
        "rollout.length.type=none",
        "--set",
        "rollout.max_new_tokens=16",
        "--set",
        "eval.samples=1",
        "--set",
        "eval.every=10000",
        "--max-steps",
        "10000",
    ]
    trainer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not list((run / "checkpoints").glob("step_*")):
            time.sleep(0.1)
        generator = [
            c
            for c in descendants(trainer.pid)
            if "spawn_main" in " ".join(c.cmdline()) and "resource_tracker" not in " ".join(c.cmdline())
        ]
        assert len(generator) == 1
        generator[0].kill()  # the out-of-memory killer, say
        err = trainer.communicate(timeout=60)[1]
    finally:
        if trainer.poll() is None:
            trainer.kill()
    assert trainer.returncode == 2
    lines = [line for line in err.splitlines() if line.startswith("scalerl: error:")]
    assert len(lines) == 1 and "generator process died" in lines[0] and "--resume" in lines[0]
    assert "Traceback" not in err
    kept = sorted((run / "checkpoints").glob("step_*/model.safetensors"))
    assert kept, "the last checkpoint before the failure is kept (carry on with --resume)"
