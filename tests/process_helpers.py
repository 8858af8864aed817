"""Processes a test started: whether they still run, and waiting (bounded) until none does (imported as
`process_helpers`: tests/ is on sys.path under pytest)."""

from __future__ import annotations

import time

import psutil


def running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `procs` that run (a zombie has ended)."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def gone_within(procs: list[psutil.Process], timeout: float) -> float:
    """Seconds until none of `procs` runs, asserted within `timeout`."""
    t0 = time.monotonic()
    while running(procs) and time.monotonic() - t0 < timeout:
        time.sleep(0.05)
    left = [(p.pid, p.name()) for p in running(procs)]
    assert not left, f"still running {timeout} s after: {left}"
    return time.monotonic() - t0


def descendants(pid: int) -> list[psutil.Process]:
    """The processes under `pid` (none once it has ended)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
