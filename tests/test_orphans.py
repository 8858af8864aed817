"""No orphans: the generator process exits when the trainer dies, at any moment, start-up included."""

import os
import signal
import subprocess
import sys
import time

import psutil


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_kill_9_during_start_up_leaves_no_process_behind(tmp_path):
    cmd = [sys.executable, "-m", "scalerl", "train", "--run-dir", str(tmp_path / "run"), "--no-progress",
           "--set", "model.name=tiny-random", "--set", "pipeline.transport=process", "--set", "run.threads=2",
           "--set", "batch.prompts=2", "--set", "batch.generations=4", "--set", "eval.prompts=4",
           "--max-steps", "50"]
    trainer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        generator = None
        while generator is None and time.monotonic() < deadline and trainer.poll() is None:
            for child in _descendants(trainer.pid):
                try:  # the spawned generator: kill the trainer while the child is still starting up
                    if "spawn_main" in " ".join(child.cmdline()) and "resource_tracker" not in " ".join(child.cmdline()):
                        generator = child
                except psutil.NoSuchProcess:
                    continue
            time.sleep(0.02)
        assert generator is not None, f"the generator process never started: {trainer.poll()} {trainer.stderr.read() if trainer.poll() is not None else ''}"
        left = _descendants(trainer.pid)
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(timeout=10)
        gone, alive = psutil.wait_procs(left, timeout=60)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        if trainer.poll() is None:
            trainer.kill()
