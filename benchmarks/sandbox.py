"""Sandbox throughput: programs per second through `scalerl.sandbox.run_program`.

    .venv/bin/python benchmarks/sandbox.py [--programs 60] [--workers 1 2 4] [--paths launcher server] [--rounds 2]

Each program is a small correct answer to a stdin/stdout test (reads two numbers, prints their
sum: Python's start-up dominates, as for most model answers); `--workers` threads run them
concurrently (the scoring pool's shape). `--paths` chooses how an isolated run starts:
`server` (each thread's fork server, the default since 2026-11-26) or `launcher` (a launcher
interpreter per run, as before: `scalerl.sandbox.FORK_SERVER = False`); with both, they alternate
round by round (A/B/A/B) so that both see the same machine. Printed per round: programs per second
and the median and 95th-percentile latency of one run (namespaces, root, interpreter start,
teardown), with the load average; then per worker count the median over rounds of each path and
the ratio server / launcher. A hostile program costs at most its limit: the last line times an
infinite loop under a 1 s wall limit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import scalerl.sandbox as sandbox
from scalerl.sandbox import Limits, isolation_unavailable, run_program

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
PATHS = ("launcher", "server")


def one(i: int) -> float:
    r = run_program(PROGRAM, stdin=f"{i} {i}\n", limits=Limits(timeout_s=10.0, memory_mb=256))
    if r.status != "ok" or r.stdout != f"{2 * i}\n":
        raise RuntimeError(f"program {i} ended {r.status}: {r.stderr.strip()[-200:]}")
    return r.seconds


def measure(programs: int, workers: int) -> tuple[float, float, float]:
    """(programs per second, median latency, p95 latency) of `programs` runs from `workers` threads."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        latencies = sorted(pool.map(one, range(programs)))
    wall = time.monotonic() - t0
    return programs / wall, statistics.median(latencies), latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=60)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--paths", nargs="+", choices=PATHS, default=["server"])
    ap.add_argument("--rounds", type=int, default=1, help="rounds per path and worker count, alternating the paths")
    args = ap.parse_args()
    why = isolation_unavailable()
    if why:
        raise SystemExit(why)
    cores = len(os.sched_getaffinity(0))
    print(f"{args.programs} programs per round, {cores} cores, load average {os.getloadavg()[0]:.1f}")
    for workers in args.workers:
        got: dict[str, list[tuple[float, float, float]]] = {p: [] for p in args.paths}
        for rnd in range(args.rounds):
            for path in args.paths:
                sandbox.FORK_SERVER = path == "server"
                measure(min(args.programs, 2 * workers), workers)  # start the pool's servers, warm caches
                rate, median, p95 = measure(args.programs, workers)
                got[path].append((rate, median, p95))
                print(
                    f"workers {workers} {path:8s} round {rnd}: {rate:6.1f} programs/s   latency median "
                    f"{median * 1000:5.0f} ms, p95 {p95 * 1000:5.0f} ms   (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
        med = {p: [statistics.median(r[k] for r in rows) for k in range(3)] for p, rows in got.items()}
        line = "   ".join(
            f"{p} {m[0]:.1f}/s, median {m[1] * 1000:.0f} ms, p95 {m[2] * 1000:.0f} ms" for p, m in med.items()
        )
        if len(med) == 2:
            line += (
                f"   server / launcher: programs/s x{med['server'][0] / med['launcher'][0]:.2f}, "
                f"median latency x{med['server'][1] / med['launcher'][1]:.2f}"
            )
        print(f"workers {workers} (median of {args.rounds}): {line}", flush=True)
    sandbox.FORK_SERVER = True
    t0 = time.monotonic()
    r = run_program("while True:\n    pass\n", timeout_s=1.0)
    print(f"infinite loop under a 1 s limit: {r.status} after {time.monotonic() - t0:.2f} s")


if __name__ == "__main__":
    main()
