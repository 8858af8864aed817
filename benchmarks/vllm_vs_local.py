"""A step of the default testbed on the vLLM engine beside the local engine's, itemised, in one invocation.

    .venv/bin/python benchmarks/vllm_vs_local.py                 # 8 steps each, evaluation every 4
    .venv/bin/python benchmarks/vllm_vs_local.py --steps 12 --every 3 --rounds 2
    .venv/bin/python benchmarks/vllm_vs_local.py --vllm-set pipeline.transport=process

Each round runs `scalerl train --no-progress --set run.max_steps=N --set eval.schedule=linear --set
eval.every=E` on the default run (ladder-1m, arith ladder, PipelineRL-8), first with the local
engine, then with `rollout.engine=vllm`, in this interpreter (vLLM must be installed), each in a
fresh run directory under a temporary folder. From each run's metrics.jsonl, over its training rows
after the first (the first waits for the generator's start): the medians of `time/generate` (the
trainer waiting for its batch), `time/train`, `time/publish` and `time/step` (a step, evaluation
excluded), and of `time/eval` over its evaluation rows (step 0's included); for the vLLM run the
publish's parts from `<server log>.publish.jsonl` (`VllmClient.update_weights`: save the safetensors
folder, pause keep, reload, label the version, resume). Then a step with its share of the
evaluations, (sum of time/step + sum of time/eval) / steps, and every ratio vLLM / local. The
machine's load (/proc/loadavg) is printed before and after each run: the two engines are compared in
one invocation because a shared machine's speed changes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ITEMS = ["generate", "train", "publish", "step", "eval"]
PARTS = ["save", "pause", "reload", "label", "resume"]
SERVER_LINE = re.compile(r"vLLM server: \S+, log (\S+)")


def load() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0]


def run_once(engine: str, out: Path, steps: int, every: int, seed: int, timeout_s: float, vllm_sets: list[str]) -> dict:
    """One `scalerl train` on `engine`; its medians and, for vLLM, the publish's parts."""
    sets = [f"run.max_steps={steps}", f"run.seed={seed}", "eval.schedule=linear", f"eval.every={every}"]
    if engine == "vllm":
        sets += ["rollout.engine=vllm", *vllm_sets]
    cmd = [
        sys.executable,
        "-m",
        "scalerl",
        "train",
        "--no-progress",
        "--run-dir",
        str(out),
        *[a for s in sets for a in ("--set", s)],
    ]
    before = load()
    done = subprocess.run(
        cmd,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{engine}: scalerl train exited {done.returncode}: {done.stderr.strip()[-600:]}")
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"][1:]
    evals = [r["time/eval"] for r in rows if r["kind"] == "eval"]
    got = {item: statistics.median(r.get(f"time/{item}", 0.0) for r in train) for item in ITEMS[:-1]}
    got["eval"] = statistics.median(evals)
    got["step+eval share"] = (sum(r["time/step"] for r in train) + sum(evals)) / max(len(train), 1)
    got["staleness/max"] = max(r["staleness/max"] for r in train)
    found = SERVER_LINE.search(done.stdout)
    if found and Path(found.group(1) + ".publish.jsonl").exists():
        parts = [json.loads(ln) for ln in Path(found.group(1) + ".publish.jsonl").read_text().splitlines()]
        got.update({f"publish/{p}": statistics.median(x[p] for x in parts) for p in PARTS})
    got["load"] = f"{before} -> {load()}"
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=3600)
    ap.add_argument(
        "--vllm-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the vLLM run only, e.g. pipeline.transport=process",
    )
    args = ap.parse_args()
    results: dict[str, list[dict]] = {"local": [], "vllm": []}
    with tempfile.TemporaryDirectory(prefix="scalerl-vllm-vs-local-") as tmp:
        for r in range(args.rounds):
            for engine, runs in results.items():
                got = run_once(
                    engine,
                    Path(tmp) / f"{engine}-{r}",
                    args.steps,
                    args.every,
                    args.seed,
                    args.timeout_s,
                    args.vllm_set,
                )
                print(
                    f"round {r} {engine}: "
                    + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in got.items()),
                    flush=True,
                )
                runs.append(got)
    print(f"\nmedians over {args.rounds} round(s), {args.steps} steps, evaluation every {args.every} (seconds):")
    print(f"{'item':<18}{'local':>10}{'vllm':>10}{'vllm/local':>12}")
    for key in [*ITEMS, "step+eval share", *[f"publish/{p}" for p in PARTS]]:
        a = [g[key] for g in results["local"] if key in g]
        b = [g[key] for g in results["vllm"] if key in g]
        la = f"{statistics.median(a):10.3f}" if a else f"{'-':>10}"
        lb = f"{statistics.median(b):10.3f}" if b else f"{'-':>10}"
        ratio = f"{statistics.median(b) / statistics.median(a):12.2f}" if a and b and statistics.median(a) else ""
        print(f"{key:<18}{la}{lb}{ratio}")


if __name__ == "__main__":
    main()
