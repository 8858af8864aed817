"""Is a tiny model's warm start the same on every machine? Runs the first `--steps` steps of the
`ladder-1m` warm start in several numeric environments (CPU kernel set, torch threads) and in
fp32 and fp64, each in its own process, and prints how far each one's weights are from the first
environment's, and from their own start (the size of what was learnt).

    python benchmarks/build_reproducibility.py --steps 300

An environment differs from another the way two machines do: `ATEN_CPU_CAPABILITY=avx2` on an
AVX-512 machine runs the kernels an AVX2-only machine runs; another thread count splits the
reductions differently. Where fp32 weights drift apart within a few hundred steps and fp64 ones
do not, the build's trajectory is chaotic in its rounding, and fp64 makes it reproducible.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ENVS = [
    ("AVX-512, 2 threads", {}, 2),
    ("AVX2, 2 threads", {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}, 2),
    ("AVX-512, 1 thread", {}, 1),
    ("AVX-512, 2 threads, again", {}, 2),
]  # the last: same as the first?

CHILD = r"""
import sys, torch
from dataclasses import replace
torch.set_num_threads({threads})
from scalerl.models import tiny
from scalerl.models.warmstart import warm_start
from scalerl.tasks.arith import ArithTask
settings = replace(tiny.ladder_settings(), max_steps={steps}, eval_from=10**9)
tok = tiny.build_tokenizer()
model = tiny.build_random(tok, seed=settings.seed, shape="tiny")
init = {{k: v.detach().double().clone() for k, v in model.state_dict().items()}}
if "{dtype}" == "fp64":
    model.double()
task = tiny._WrongOrderHabit(ArithTask(tiny.LADDER_WARM_TASK, seed=settings.seed), tiny.WRONG_ORDER_SHARE)
warm_start(model, tok, task, settings, log=lambda m: None)
torch.save({{"init": init, "final": {{k: v.detach().double() for k, v in model.state_dict().items()}},
            "capability": torch.backends.cpu.get_cpu_capability()}}, "{out}")
"""


def run(dtype: str, env_extra: dict, threads: int, steps: int, out: str) -> None:
    env = {**os.environ, **env_extra, "OMP_WAIT_POLICY": "PASSIVE"}
    code = CHILD.format(threads=threads, steps=steps, dtype=dtype, out=out)
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in ("fp32", "fp64"):
            results = []
            for name, extra, threads in ENVS:
                path = os.path.join(tmp, f"{dtype}-{len(results)}.pt")
                run(dtype, extra, threads, args.steps, path)
                results.append((name, torch.load(path)))
            ref = results[0][1]
            learnt = max_diff(ref["final"], ref["init"])
            for name, r in results:
                rows.append(
                    {
                        "dtype": dtype,
                        "env": name,
                        "capability": r["capability"],
                        "init_diff": max_diff(r["init"], ref["init"]),
                        "final_diff": max_diff(r["final"], ref["final"]),
                        "learnt": learnt,
                    }
                )
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{args.steps} warm-start steps of ladder-1m; max |weight difference| from the first environment")
    print(
        f"{'dtype':5}  {'environment':26} {'kernels':8} {'at init':>9} {'after':>10}"
        "  (largest change from init: learnt)"
    )
    for r in rows:
        print(
            f"{r['dtype']:5}  {r['env']:26} {r['capability']:8} {r['init_diff']:9.1e} {r['final_diff']:10.2e}  "
            f"({r['learnt']:.2f})"
        )


if __name__ == "__main__":
    main()
