"""Peak memory and time of the chunked FP32-head log-probs against a full-logits baseline.

    .venv/bin/python benchmarks/fp32_head_memory.py [--vocab 49152] [--positions 4096] [--hidden 64]

Each variant runs forward + backward in a fresh subprocess; on CPU the peak is the growth of
the process's maximum resident set (ru_maxrss) over a warmed-up baseline, on CUDA
torch.cuda.max_memory_allocated. Prints one line per variant and the ratios, from one run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import torch
from scalerl.rl.logprobs import token_logprobs
mode, (V, M, H, chunk) = sys.argv[1], map(int, sys.argv[2:6])
dtype, device, threads = sys.argv[6], sys.argv[7], int(sys.argv[8])
torch.set_num_threads(threads)
dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
g = torch.Generator().manual_seed(0)
h = torch.randn(1, M, H, generator=g).to(device, dt).requires_grad_()
w = (torch.randn(V, H, generator=g) * 0.05).to(device, dt).requires_grad_()
t = torch.randint(0, V, (1, M), generator=g).to(device)

def full(h, w, t):
    z = h.float() @ w.float().T                                  # (1, M, V) fp32 logits
    return torch.log_softmax(z, -1).gather(-1, t[..., None]).squeeze(-1)

def chunked(h, w, t):
    return token_logprobs(h, w, t, chunk_size=chunk)

fn = {"full": full, "chunked": chunked}[mode]
fn(h[:, :8], w, t[:, :8]).sum().backward()                       # warm-up: kernels, allocator
h.grad = w.grad = None
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if device == "cuda":
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated() / 2**20
else:
    base = rss()
t0 = time.perf_counter()
fn(h, w, t).sum().backward()
if device == "cuda":
    torch.cuda.synchronize(); peak = torch.cuda.max_memory_allocated() / 2**20
else:
    peak = rss()
print(json.dumps({"mode": mode, "delta_mib": peak - base, "seconds": time.perf_counter() - t0}))
"""


def measure(
    mode: str,
    vocab: int,
    positions: int,
    hidden: int,
    chunk: int,
    dtype: str = "fp32",
    device: str = "cpu",
    threads: int = 2,
) -> dict:
    """Run one variant in a fresh interpreter; {"mode", "delta_mib", "seconds"}."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            mode,
            str(vocab),
            str(positions),
            str(hidden),
            str(chunk),
            dtype,
            device,
            str(threads),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--positions", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--chunk", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    logits_mib = a.vocab * a.positions * 4 / 2**20
    print(
        f"V={a.vocab} positions={a.positions} H={a.hidden} dtype={a.dtype} device={a.device} "
        f"threads={a.threads}; one fp32 logits tensor = {logits_mib:.0f} MiB"
    )
    base = measure("full", a.vocab, a.positions, a.hidden, 0, a.dtype, a.device, a.threads)
    print(f"full logits        peak +{base['delta_mib']:7.0f} MiB  {base['seconds']:6.2f} s")
    for c in a.chunk:
        r = measure("chunked", a.vocab, a.positions, a.hidden, c, a.dtype, a.device, a.threads)
        print(
            f"chunked ({c:5d})    peak +{r['delta_mib']:7.0f} MiB  {r['seconds']:6.2f} s   "
            f"memory x{r['delta_mib'] / base['delta_mib']:.3f}  time x{r['seconds'] / base['seconds']:.2f} of full"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
