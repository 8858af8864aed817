"""Sandbox throughput: programs per second through `scalerl.sandbox.run_program`.

    .venv/bin/python benchmarks/sandbox.py [--programs 60] [--workers 1 2 4]

Each program is a small correct answer to a stdin/stdout test (reads two numbers, prints their
sum: Python's start-up dominates, as for most model answers); `--workers` threads run them
concurrently (the scoring pool's shape). Printed per worker count: programs per second, and the
median and 95th-percentile latency of one run (namespaces, root, interpreter start, teardown).
A hostile program costs at most its limit: the last line times an infinite loop under a 1 s
wall limit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from scalerl.sandbox import Limits, isolation_unavailable, run_program

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"


def one(i: int) -> float:
    r = run_program(PROGRAM, stdin=f"{i} {i}\n", limits=Limits(timeout_s=10.0, memory_mb=256))
    if r.status != "ok" or r.stdout != f"{2 * i}\n":
        raise RuntimeError(f"program {i} ended {r.status}: {r.stderr.strip()[-200:]}")
    return r.seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=60)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args()
    why = isolation_unavailable()
    if why:
        raise SystemExit(why)
    cores = len(os.sched_getaffinity(0))
    print(f"{args.programs} programs per setting, {cores} cores, load average {os.getloadavg()[0]:.1f}")
    for workers in args.workers:
        t0 = time.monotonic()
        with ThreadPoolExecutor(workers) as pool:
            latencies = sorted(pool.map(one, range(args.programs)))
        wall = time.monotonic() - t0
        p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
        print(f"workers {workers}: {args.programs / wall:6.1f} programs/s   latency median "
              f"{statistics.median(latencies) * 1000:5.0f} ms, p95 {p95 * 1000:5.0f} ms")
    t0 = time.monotonic()
    r = run_program("while True:\n    pass\n", timeout_s=1.0)
    print(f"infinite loop under a 1 s limit: {r.status} after {time.monotonic() - t0:.2f} s")


if __name__ == "__main__":
    main()
