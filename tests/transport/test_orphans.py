"""No orphans: the generator process exits when the trainer dies, at any moment, start-up included."""

import os
import signal
import subprocess
import sys
import time

import psutil

from process_helpers import descendants


def test_kill_9_during_start_up_leaves_no_process_behind(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "scalerl",
        "train",
        "--run-dir",
        str(tmp_path / "run"),
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
        "--max-steps",
        "50",
    ]
    trainer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        generator = None
        while generator is None and time.monotonic() < deadline and trainer.poll() is None:
            for child in descendants(trainer.pid):
                try:  # the spawned generator: kill the trainer while the child is still starting up
                    if "spawn_main" in " ".join(child.cmdline()) and "resource_tracker" not in " ".join(
                        child.cmdline()
                    ):
                        generator = child
                except psutil.NoSuchProcess:
                    continue
            time.sleep(0.02)
        assert generator is not None, (
            f"the generator process never started: {trainer.poll()} "
            f"{trainer.stderr.read() if trainer.poll() is not None else ''}"
        )
        left = descendants(trainer.pid)
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(timeout=10)
        gone, alive = psutil.wait_procs(left, timeout=60)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        if trainer.poll() is None:
            trainer.kill()


def test_kill_9_of_a_parallel_study_leaves_no_run_training(tmp_path):
    sets = [
        "model.name=tiny-random",
        "batch.prompts=2",
        "batch.generations=4",
        "eval.prompts=4",
        "eval.samples=1",
        "rollout.max_new_tokens=12",
        "rollout.length.type=none",
        "filter.zero_variance=false",
    ]
    cmd = [
        sys.executable,
        "-m",
        "scalerl",
        "ablate",
        "--leave-one-out",
        "--only",
        "scalerl,token-agg",
        "--jobs",
        "2",
        "--budget",
        "10000",
        "--out",
        str(tmp_path / "study"),
        *[a for s in sets for a in ("--set", s)],
    ]
    study = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        runs = [tmp_path / "study" / "runs" / c / "seed0" / "metrics.jsonl" for c in ("scalerl", "token-agg")]
        while (
            time.monotonic() < deadline
            and study.poll() is None
            and not all(p.is_file() and p.stat().st_size for p in runs)
        ):
            time.sleep(0.1)
        assert study.poll() is None, study.stderr.read()
        left = descendants(study.pid)
        assert len([p for p in left if "spawn_main" in " ".join(p.cmdline())]) >= 2  # both runs' workers
        os.kill(study.pid, signal.SIGKILL)
        study.wait(timeout=10)
        gone, alive = psutil.wait_procs(left, timeout=60)
        assert not alive, [p.cmdline() for p in alive]  # no run trains on, nor holds its lock
    finally:
        if study.poll() is None:
            study.kill()
