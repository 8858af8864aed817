"""Memory in the metrics (scalerl.run.memory): resident sizes in every training row, the warning at
85%, a failed child named in one line; the soak on the tiny model is in the slow tier (tests/slow/test_soak.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

from doubles import tiny_random_components
from scalerl.loop import train
from scalerl.run.memory import MemoryMonitor
from scalerl.run.metrics import read_rows
from scalerl.transport.local import exit_reason
from train_helpers import small_cfg

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def vm_rss_mb(pid: str | int = "self") -> float:
    """VmRSS of a process read from /proc (not through psutil, which scalerl uses)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def pss_from_smaps(pid: str | int = "self") -> float:
    """A process's PSS summed over /proc/<pid>/smaps, mapping by mapping (not through psutil)."""
    return (
        sum(
            int(line.split()[1])
            for line in Path(f"/proc/{pid}/smaps").read_text().splitlines()
            if line.startswith("Pss:")
        )
        / 1024
    )


def test_every_training_row_records_the_trainer_rss(tmp_path):
    cfg = small_cfg(extra=["run.max_steps=3"])
    train(cfg, tmp_path, comps=tiny_random_components(cfg), progress=False)
    measured = vm_rss_mb()
    rows = [r for r in read_rows(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    pss = pss_from_smaps()
    for r in rows:
        assert r["system/rss_mb"] > 50  # a python process with torch imported holds more than 50 MB
        assert 0 < r["system/pss_mb"] <= r["system/rss_mb"]  # shared library pages count in part
        assert r["system/rss_mb/total"] == r["system/pss_mb"]  # the thread transport: one process
        assert "system/cuda_allocated_mb" not in r  # no GPU here
    # the test's process is the trainer: its RSS and PSS a moment after the last row are about the recorded ones
    assert rows[-1]["system/rss_mb"] == pytest.approx(measured, rel=0.25)
    assert rows[-1]["system/pss_mb"] == pytest.approx(pss, rel=0.25)


def test_a_generator_process_is_measured_by_its_pid():
    hold = 300  # MB the child allocates and touches
    child = subprocess.Popen(
        [sys.executable, "-c", f"import time; b = bytearray({hold} << 20); print(1, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    try:
        child.stdout.readline()  # allocated
        row = MemoryMonitor(lambda: {"generator0": child.pid}, dict, limit_mb=1e9).row()
        child_rss = vm_rss_mb(child.pid)
    finally:
        child.kill()
        child.wait()
    assert row["system/rss_mb/generator0"] >= hold
    assert row["system/rss_mb/generator0"] == pytest.approx(child_rss, rel=0.05)
    assert row["system/pss_mb/generator0"] >= hold  # its bytearray is its own
    assert row["system/rss_mb/total"] == pytest.approx(row["system/pss_mb"] + row["system/pss_mb/generator0"])


def test_shared_memory_counts_once_in_the_total():
    """A 300 MB shared-memory tensor that this process and a child both touch: each one's RSS holds it,
    the run's total (PSS summed) holds it once."""
    import torch

    hold = 300
    buf = torch.ones(hold << 18).share_memory_()  # 300 MB of float32, touched
    ctx = torch.multiprocessing.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_touch, args=(buf, ready, done), daemon=True)
    child.start()
    try:
        assert ready.wait(120), "the child did not start"
        row = MemoryMonitor(lambda: {"generator0": child.pid}, dict, limit_mb=1e9).row()
    finally:
        done.set()
        child.join(30)
    rss_sum = row["system/rss_mb"] + row["system/rss_mb/generator0"]
    assert row["system/rss_mb"] >= hold and row["system/rss_mb/generator0"] >= hold
    assert rss_sum - row["system/rss_mb/total"] >= 0.9 * hold  # counted once, not twice


def _touch(buf, ready, done) -> None:
    assert float(buf.sum()) == buf.numel()  # every page read: resident in this process too
    ready.set()
    done.wait(120)


def test_warning_at_85_percent_names_the_largest_consumer_once_per_50_steps():
    consumers = {"trainer optimizer state": 300.0, "trainer model weights": 150.0}
    mon = MemoryMonitor(dict, lambda: consumers, limit_mb=1000.0)
    low = {"system/pss_mb": 500.0, "system/pss_mb/generator0": 340.0, "system/rss_mb/total": 840.0}
    high = {"system/pss_mb": 600.0, "system/pss_mb/generator0": 260.0, "system/rss_mb/total": 860.0}
    assert mon.check(low, 1) is None  # 84% of 1000 MB
    with pytest.warns(UserWarning) as caught:
        line = mon.check(high, 2)  # 86%
    assert len(caught) == 1 and str(caught[0].message) == line
    assert "\n" not in line and "86%" in line and "trainer process" in line
    assert "trainer optimizer state (300 MB)" in line
    assert mon.check(high, 51) is None  # within 50 steps of the last warning
    with pytest.warns(UserWarning):
        assert mon.check(high, 52) is not None


def test_a_run_past_85_percent_warns_once_naming_the_optimizer_state(tmp_path, monkeypatch):
    """In the loop: with 100 MB "available" the first step warns, and the largest consumer scalerl
    knows of is AdamW's state, two fp32 values per trainable parameter."""
    import scalerl.run.memory as memory

    monkeypatch.setattr(memory, "available_mb", lambda: 100.0)
    cfg = small_cfg(extra=["run.max_steps=3"])
    comps = tiny_random_components(cfg)
    adam_mb = 2 * 4 * sum(p.numel() for p in comps.model.parameters() if p.requires_grad) / 2**20
    with pytest.warns(UserWarning, match="memory at") as caught:
        train(cfg, tmp_path, comps=comps, progress=False)
    lines = [str(w.message) for w in caught if "memory at" in str(w.message)]
    assert len(lines) == 1 and lines[0].startswith("step 1: ")  # once: not again within 50 steps
    assert f"largest consumer scalerl knows of: trainer optimizer state ({adam_mb:.0f} MB)" in lines[0]


@pytest.mark.parametrize(
    "code, line",
    [
        (-9, "generator process exited with code -9 (killed: out of memory?)"),
        (-15, "generator process exited with code -15 (ended by SIGTERM)"),
        (1, "generator process exited with code 1"),
    ],
)
def test_a_failed_child_is_named_in_one_line(code, line):
    assert exit_reason("generator process", code) == line
