"""Where a decoding process's memory goes between two calls: glibc's heap against its other mappings.

Runs the engine (`Engine.generate`, the evaluation's call; the training stream decodes the same
way) on the SmolLM2 command's validation prompts, `--calls` times, in a fresh process per glibc
setting, and prints after each call the process's resident `[heap]` (blocks under the mmap
threshold: glibc's main arena), its other anonymous mappings (larger tensors, thread arenas) and the
call's seconds. Settings, each `threshold:trim:gc:freeze`: glibc's mmap threshold (bytes; glibc
serves larger blocks by their own mapping, returned when freed; 0: glibc's dynamic default),
malloc_trim after every call (1/0), Python's cyclic garbage collector run after every call (1/0),
`gc.freeze()` once the engine is built (1/0). Also printed: one full collection's milliseconds.

    .venv/bin/python benchmarks/engine_heap.py --calls 4 --settings 1048576:1:0:0 1048576:1:1:0 1048576:1:0:1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2 = [
    "run.seed=3",
    "model.name=smollm2-135m",
    "task.name=rg:chain_sum",
    "task.options={min_terms: 2, max_terms: 3, max_digits: 1}",
    "task.train_size=512",
]


def resident() -> dict[str, float]:
    """Resident MiB of this process's `[heap]` and of its other anonymous mappings."""
    out, name = {"heap_mb": 0.0, "anon_mb": 0.0}, None
    with open("/proc/self/smaps", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                name = parts[5] if len(parts) > 5 else ""
            elif parts and parts[0] == "Rss:" and name in ("", "[heap]"):
                out["heap_mb" if name == "[heap]" else "anon_mb"] += int(parts[1]) / 1024
    return out


def child(
    threshold: int, trim_after: bool, calls: int, prompts: int, samples: int, threads: int, collect: bool, freeze: bool
) -> None:
    import gc

    import torch

    from scalerl.run.memory import ARENA_MAX, M_ARENA_MAX, M_MMAP_THRESHOLD, _libc, trim

    libc = _libc()
    if threshold:
        libc.mallopt(M_MMAP_THRESHOLD, threshold)
    libc.mallopt(M_ARENA_MAX, ARENA_MAX)
    torch.set_num_threads(threads)
    from scalerl.assembly.generator import build_components
    from scalerl.configure import load_config

    cfg = load_config("scalerl", overrides=SMOLLM2)
    comps = build_components(cfg, "cpu")
    gen = comps.stage(comps.model, 7919, cfg.eval.temperature).generator
    val = comps.task.val_prompts(prompts)
    if freeze:
        gc.freeze()  # what was built so far never again scanned by the cyclic collector
    t0 = time.monotonic()
    gc.collect()
    collect_s = time.monotonic() - t0
    for call in range(calls):
        gen.reseed()
        t0 = time.monotonic()
        gen.generate(val, samples)
        seconds = time.monotonic() - t0
        if collect:
            t0 = time.monotonic()
            gc.collect()
            collect_s = time.monotonic() - t0
        if trim_after:
            trim()
        print(
            json.dumps(
                {
                    "threshold": threshold,
                    "trim": trim_after,
                    "gc": collect,
                    "freeze": freeze,
                    "collect_ms": round(collect_s * 1000, 1),
                    "call": call,
                    "seconds": round(seconds, 1),
                    **{k: round(v) for k, v in resident().items()},
                }
            ),
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--settings",
        nargs="+",
        default=["1048576:1:0:0", "1048576:1:1:0", "1048576:1:0:1"],
        help="threshold:trim:gc:freeze, each in a fresh process (gc: gc.collect() after every call; "
        "freeze: gc.freeze() once the engine is built)",
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        threshold, trim_after, collect, freeze = (int(x) for x in a.child.split(":"))
        child(threshold, bool(trim_after), a.calls, a.prompts, a.samples, a.threads, bool(collect), bool(freeze))
        return
    for setting in a.settings:
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                setting,
                "--calls",
                str(a.calls),
                "--prompts",
                str(a.prompts),
                "--samples",
                str(a.samples),
                "--threads",
                str(a.threads),
            ],
            check=True,
            cwd=ROOT,
        )


if __name__ == "__main__":
    main()
