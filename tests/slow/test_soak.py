"""Soak (slow tier): a run killed with -9 at 10 random moments, start-up included, and resumed each time.

Compared with an uninterrupted run of the same seed and command: the same train steps and
evaluations, no row twice, compute never going back, and no process of a killed run (the
generator process, multiprocessing's helpers) still alive afterwards.
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from scalerl.run.metrics import read_rows


ROOT = Path(__file__).resolve().parents[1]
STEPS = 16
SETS = ["model.name=tiny-random", "batch.prompts=2", "batch.generations=4", "rollout.max_new_tokens=12",
        "rollout.batch_slots=8", "eval.every=2", "eval.prompts=4", "eval.samples=2", "run.checkpoint_every=2",
        "optim.warmup_steps=1", "pipeline.transport=process", "run.threads=2", "run.seed=3",
        "rollout.length.think_min=4", "rollout.length.think_max=6", "rollout.length.answer_budget=4",
        "rollout.length.phrase=</think>"]
# `scalerl train` on tiny-random with the parity reward (a model that never passes would stall the loop)
CLI = ("import sys\n"
       f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
       "from doubles import tiny_random_components\n"
       "import scalerl.assembly.run as b\n"
       "b.build_components = lambda cfg, device: tiny_random_components(cfg, device)\n"
       "from scalerl.cli import main\n"
       "sys.exit(main(sys.argv[1:]))\n")


def _command(run: Path) -> list[str]:
    args = ["train", "--no-progress", "--run-dir", str(run), "--max-steps", str(STEPS)]
    if (run / "config.yaml").exists():
        args.append("--resume")
    else:
        args += [a for s in SETS for a in ("--set", s)]
    return [sys.executable, "-c", CLI, *args]


def _launch(run: Path, log) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen(_command(run), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def _descendants(pid: int) -> list:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _survivors(procs: list, grace: float = 20.0) -> list:
    """The processes of `procs` still alive after `grace` seconds (their parent was killed)."""
    _, alive = psutil.wait_procs(procs, timeout=grace)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _check(rows: list[dict]) -> tuple[list[int], list[int]]:
    keys = [(r["step"], r["kind"]) for r in rows]
    assert len(keys) == len(set(keys)), "a metrics row written twice"
    hours = [r["compute/device_hours"] for r in rows if r["kind"] == "train"]
    assert all(a < b for a, b in zip(hours, hours[1:])), "compute went back"
    return [s for s, k in keys if k == "train"], [s for s, k in keys if k == "eval"]


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the process transport needs 2 cores")
def test_kill_9_at_ten_random_moments_then_resume_matches_an_uninterrupted_run(tmp_path):
    with open(tmp_path / "reference.log", "w") as log:
        t0 = time.monotonic()
        ref = _launch(tmp_path / "reference", log)
        assert ref.wait(timeout=600) == 0, (tmp_path / "reference.log").read_text()[-2000:]
        duration = time.monotonic() - t0
    run, rng, left_behind, kills = tmp_path / "soak", random.Random(17), [], 0
    with open(tmp_path / "soak.log", "w") as log:
        while kills < 10:
            proc = _launch(run, log)
            time.sleep(rng.uniform(0.0, 0.5 * duration))   # start-up (imports, model, generator) is ~1/3 of it
            children = _descendants(proc.pid)
            if proc.poll() is not None:                    # finished before the kill: the moment fell after the end
                assert proc.returncode == 0, (tmp_path / "soak.log").read_text()[-2000:]
                break
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            left_behind += _survivors(children)
        final = _launch(run, log)
        assert final.wait(timeout=600) == 0, (tmp_path / "soak.log").read_text()[-2000:]
    orphans = [f"{p.pid} ({' '.join(p.cmdline())[:80]})" for p in left_behind if p.is_running()]
    for p in left_behind:                                  # clean up before asserting
        p.kill()
    assert kills == 10
    ref_train, ref_eval = _check(read_rows(tmp_path / "reference" / "metrics.jsonl"))
    train, evals = _check(read_rows(run / "metrics.jsonl"))
    assert ref_train == train == list(range(1, STEPS + 1))
    assert evals == ref_eval
    assert not orphans, f"processes left behind by killed runs: {orphans}"


@pytest.mark.slow
def test_second_train_resume_on_a_running_run_is_refused_and_the_first_finishes_alone(tmp_path):
    """The issue's case: `train --resume` on a run that is still going (two real training processes)."""
    run = tmp_path / "run"
    with open(tmp_path / "first.log", "w") as log:
        first = _launch(run, log)
        deadline = time.monotonic() + 300
        while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").stat().st_size:
            assert time.monotonic() < deadline and first.poll() is None, (tmp_path / "first.log").read_text()
            time.sleep(0.2)
        config = (run / "config.yaml").read_bytes()
        second = subprocess.run(_command(run), env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                                capture_output=True, text=True, timeout=300)
        assert first.poll() is None, "the first run ended before the second tried: the test proves nothing"
        assert first.wait(timeout=600) == 0, (tmp_path / "first.log").read_text()[-2000:]
    assert second.returncode == 2
    assert second.stderr.strip().splitlines() == [f"scalerl: error: run directory {run} is in use by PID "
                                                  f"{first.pid}: one run writes to a directory at a time; wait for "
                                                  "it to finish or stop it, or choose another --run-dir"]
    assert (run / "config.yaml").read_bytes() == config
    train, _ = _check(read_rows(run / "metrics.jsonl"))
    assert train == list(range(1, STEPS + 1))
