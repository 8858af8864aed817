"""Sample the memory of a process tree every few seconds, from /proc, into a JSON-lines file.

What a run's own rows cannot show: the memory between two rows (an evaluation, a checkpoint) and
where it sits. Each line: the time, and per process (the root, e.g. `scalerl train`, and its
descendants, by pid) its RSS, PSS (shared pages divided among the processes that map them) and
USS, the resident size of its `[heap]` (glibc's main arena: small blocks), of its other anonymous
mappings (large tensors, thread arenas) and of its shared-memory mappings (/dev/shm), in MiB.

    .venv/bin/python benchmarks/memory_sample.py --pid 1234 --out runs/x/memory_samples.jsonl
    .venv/bin/python benchmarks/memory_sample.py --summary runs/x/memory_samples.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import psutil

KB = 1024


def mappings(pid: int) -> dict[str, float]:
    """Resident MiB of the process's `[heap]`, other anonymous mappings and /dev/shm mappings (smaps)."""
    out = {"heap_mb": 0.0, "anon_mb": 0.0, "shm_mb": 0.0}
    name = None
    with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
                name = parts[5] if len(parts) > 5 else ""
                continue
            if parts[0] == "Rss:":
                mb = int(parts[1]) / KB
                if name == "[heap]":
                    out["heap_mb"] += mb
                elif name == "":
                    out["anon_mb"] += mb
                elif name.startswith("/dev/shm") or "torch_" in name:
                    out["shm_mb"] += mb
    return out


def sample(root: int) -> dict:
    procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    row: dict = {"t": time.time(), "procs": {}}
    for p in procs:
        try:
            full = p.memory_full_info()
            entry = {
                "cmd": " ".join(p.cmdline())[-80:],
                "rss_mb": full.rss / KB / KB,
                "pss_mb": full.pss / KB / KB,
                "uss_mb": full.uss / KB / KB,
                **mappings(p.pid),
            }
        except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError, ProcessLookupError):
            continue
        row["procs"][str(p.pid)] = entry
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pid", type=int)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--summary", type=Path, help="print the peaks of a samples file and exit")
    a = ap.parse_args()
    if a.summary is not None:
        rows = [json.loads(line) for line in a.summary.read_text().splitlines() if line.strip()]
        peaks: dict[str, dict[str, float]] = {}
        for r in rows:
            for pid, e in r["procs"].items():
                p = peaks.setdefault(pid, {"cmd": e["cmd"]})
                for k, v in e.items():
                    if k.endswith("_mb"):
                        p[k] = max(p.get(k, 0.0), v)
            total = sum(e["pss_mb"] for e in r["procs"].values())
            peaks.setdefault("total", {"cmd": "sum over the processes"})
            peaks["total"]["pss_mb"] = max(peaks["total"].get("pss_mb", 0.0), total)
        for pid, p in peaks.items():
            print(pid, json.dumps({k: (round(v) if isinstance(v, float) else v) for k, v in p.items()}))
        return
    if a.pid is None or a.out is None:
        ap.error("--pid and --out (or --summary)")
    with open(a.out, "a", encoding="utf-8") as f:
        while psutil.pid_exists(a.pid):
            try:
                row = sample(a.pid)
            except psutil.NoSuchProcess:
                break
            f.write(json.dumps(row) + "\n")
            f.flush()
            time.sleep(a.every)


if __name__ == "__main__":
    main()
