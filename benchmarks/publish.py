"""Publishing weights to Ray generator actors: the object store against a gloo broadcast, on CPU.

Method (fixed before running): a local Ray (2 CPUs), 2 receiving actors (0.5 CPU each, 1 torch
thread) standing in for the generator actors: they take the weights exactly as
`GeneratorWorker` does (object store: `ray.get` of the reference `RayRollouts.send` put;
broadcast: `Receiver.receive` into its buffers, scalerl/transport/broadcast.py) but build no
engine, so what is timed is the transport, not the engine's staging copy (the same in both).
The weights: the default testbed `ladder-1m` and `smollm2-shape-random` (SmolLM2-135M's shapes,
random values), fp32 state dicts as the trainer publishes them. Per publish, two clocks:
- `send s`: what the trainer's publish stage waits for (`time/publish`): object store, the
  `ray.put` of a CPU copy; broadcast, every bucket's broadcast from rank 0;
- `all hold s`: until both actors hold the whole new state dict (the driver waits on both).
Modes alternate within each round; the median over `--repeats` rounds is printed, with the range.

    nice -n 19 .venv/bin/python benchmarks/publish.py [--repeats 10] [--bucket-mb 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import ray
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scalerl.models import load_model  # noqa: E402
from scalerl.transport.broadcast import GroupLink, Receiver, Sender, open_link, plan_buckets  # noqa: E402

MODELS = ["ladder-1m", "smollm2-shape-random"]
TIMEOUT_S = 300


class Holder:
    """A stand-in generator actor: receives the weights by either path."""

    def __init__(self):
        torch.set_num_threads(1)
        self.receiver = None

    def fetch(self, refs: list) -> int:
        weights = ray.get(refs[0])
        return sum(t.numel() for t in weights.values())

    def join(self, link: GroupLink, rank: int, layout) -> int:
        self.receiver = Receiver(link, rank, layout)
        return rank

    def receive(self) -> int:
        self.receiver.receive()
        return sum(t.numel() for t in self.receiver.tensors.values())


def object_store(holders, weights) -> tuple[float, float]:
    start = time.perf_counter()
    ref = ray.put({k: v.detach().to("cpu", copy=True) for k, v in weights.items()})
    sent = time.perf_counter() - start
    ray.get([h.fetch.remote([ref]) for h in holders], timeout=TIMEOUT_S)
    return sent, time.perf_counter() - start


def broadcast(holders, sender: Sender, weights, bucket_bytes: int) -> tuple[float, float]:
    start = time.perf_counter()
    pending = [h.receive.remote() for h in holders]
    sender.send(weights, 1, bucket_bytes)
    sent = time.perf_counter() - start
    ray.get(pending, timeout=TIMEOUT_S)
    return sent, time.perf_counter() - start


def measure(name: str, repeats: int, bucket_mb: float) -> list[str]:
    model, _ = load_model(name)
    weights = model.state_dict()
    nbytes = sum(t.numel() * t.element_size() for t in {t.data_ptr(): t for t in weights.values()}.values())
    holders = [ray.remote(Holder).options(num_cpus=0.5).remote() for _ in range(2)]
    bucket_bytes = int(bucket_mb * 2**20)
    layout = plan_buckets(weights, bucket_bytes)
    link, store = open_link("127.0.0.1", 3, "gloo", TIMEOUT_S)
    joins = [h.join.remote(link, r + 1, layout) for r, h in enumerate(holders)]
    sender = Sender(link, layout, store)
    ray.get(joins, timeout=TIMEOUT_S)
    times: dict[str, list[tuple[float, float]]] = {"object store": [], "broadcast": []}
    object_store(holders, weights), broadcast(holders, sender, weights, bucket_bytes)  # warm-up, not counted
    for _ in range(repeats):
        times["object store"].append(object_store(holders, weights))
        times["broadcast"].append(broadcast(holders, sender, weights, bucket_bytes))
    for h in holders:
        ray.kill(h)
    rows = []
    for mode, ts in times.items():
        sends, alls = [t[0] for t in ts], [t[1] for t in ts]
        rows.append(
            f"{name:<22} {nbytes / 2**20:8.1f} {len(layout) if mode == 'broadcast' else '-':>7} {mode:<13} "
            f"{statistics.median(sends):8.4f} {statistics.median(alls):11.4f}   "
            f"{min(alls):.4f}-{max(alls):.4f}"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--bucket-mb", type=float, default=64.0)
    ap.add_argument("--models", nargs="+", default=MODELS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        rows = [row for name in args.models for row in measure(name, args.repeats, args.bucket_mb)]
    finally:
        ray.shutdown()
    print(
        f"2 receiving actors, fp32, buckets of {args.bucket_mb:g} MiB, median of {args.repeats} interleaved "
        f"publishes; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    print(f"{'model':<22} {'MiB':>8} {'buckets':>7} {'path':<13} {'send s':>8} {'all hold s':>11}   all hold range")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
