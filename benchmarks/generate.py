"""Our rollout engine vs `transformers` `generate`: same model, prompts, batch and sampling.

Fixed length on every side (EOS ignored: `min_new_tokens` for HF, `ignore_eos` for ours), plain
sampling (temperature 1, top-p 1, no top-k). The sequences are `seqs / samples` distinct prompts
sampled `samples` times each, as in RL (HF: `num_return_sequences`; ours: `n`); `--samples 1`
makes every sequence a different prompt. Three sides, alternated `--repeats` times: HF
`generate`, our engine on its fixed-shape path (`rollout.decode=static`; on CUDA its steps
replayed as CUDA graphs), and our engine's eager reference path (`rollout.decode=eager`). Prints
tokens/s of each, the ratios, peak memory (process RSS sampled during each run on CPU; CUDA max
allocated on GPU) and, on CUDA, the fraction of the memory-bandwidth roofline our engine reaches.

    python benchmarks/generate.py --model smollm2-135m            # real weights (CPU, 64 x 64)
    python benchmarks/generate.py --model tiny                    # the tiny model (CPU, 64 x 64)
    python benchmarks/generate.py --model smollm2-shape-random    # same shapes, random weights
    python benchmarks/generate.py --model smollm2-shape-random --device cuda   # 256 sequences
    python benchmarks/generate.py --model smollm2-shape-random --device cuda --seqs 1024 --dtype bf16
    python benchmarks/generate.py --task rg:chain_sum --new-tokens 16   # a task's real prompts (system
                                                                         # prompt and solved examples shared)
    python benchmarks/generate.py --model smollm2-135m --vllm            # and a vLLM server (make vllm)

With `--vllm`, one more side: a vLLM server started on the same weights (`rollout.engine=vllm`, its
start-up timed apart, not in the side's time), our client asking it for the same sequences (one
request per sequence, all in flight at once, EOS ignored). The server computes in its own
processes: the side's CPU time adds theirs (the server's process tree) to this process's.

With `--task`, the prompts are the task's validation prompts as a run builds them (the model's
profile applies: SmolLM2 on reasoning-gym gets its system prompt and three solved examples, about
230 tokens that every prompt shares), and a third side runs our engine with the shared-prefix
prefill turned off, to show what prefilling that prefix once gains.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import psutil
import torch
from transformers import GenerationConfig

from scalerl.config import NoLengthControl, RolloutConfig
from scalerl.rollout import Engine
from scalerl.types import Prompt

PEAK_BANDWIDTH = {"H100 SXM": 3.35e12, "H100 PCIe": 2.0e12, "H100": 3.35e12, "H200": 4.8e12, "A100": 2.0e12}
TOPICS = [
    "What is 17 + 25?",
    "Name three primary colours.",
    "Write a haiku about the sea.",
    "Explain photosynthesis in one sentence.",
    "How many legs does a spider have?",
    "Translate 'good morning' into French.",
    "What is the capital of Australia?",
    "Give me a synonym for happy.",
]


def load(name: str, dtype: str, device: str):
    from scalerl.models import load_model

    return load_model(name, dtype=dtype, device=device)


class PeakMemory:
    """Peak process RSS (sampled every 5 ms) or CUDA max allocated, over a `with` block, in GiB."""

    def __init__(self, device: str):
        self.cuda, self.peak = device.startswith("cuda"), 0.0

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return self
        self._done, proc = threading.Event(), psutil.Process()

        def watch():
            while not self._done.wait(0.005):
                self.peak = max(self.peak, proc.memory_info().rss)

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
        else:
            self._done.set()
            self._thread.join()
        self.peak /= 2**30


def run_hf(model, tokenizer, texts: list[str], samples: int, new_tokens: int, device: str, seed: int):
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True).to(device)
    gen = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=new_tokens,
        num_return_sequences=samples,
        min_new_tokens=new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(**enc, generation_config=gen)
    return out.shape[1] - enc["input_ids"].shape[1]


def run_ours(
    model,
    tokenizer,
    texts: list[str],
    samples: int,
    new_tokens: int,
    seed: int,
    shared: bool = True,
    decode: str = "static",
):
    from scalerl.rollout import state

    saved = state.MIN_SHARED_PREFIX
    if not shared:
        state.MIN_SHARED_PREFIX = 10**9
    try:
        return _run_ours(model, tokenizer, texts, samples, new_tokens, seed, decode)
    finally:
        state.MIN_SHARED_PREFIX = saved


def _run_ours(model, tokenizer, texts: list[str], samples: int, new_tokens: int, seed: int, decode: str):
    cfg = RolloutConfig(
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=new_tokens,
        batch_slots=len(texts) * samples,
        length=NoLengthControl(),
        decode=decode,
    )
    engine = Engine(model, tokenizer, cfg, fp32_head=True, seed=seed, ignore_eos=True)
    out = engine.generate([Prompt(id=str(i), text=t, answer="") for i, t in enumerate(texts)], n=samples)
    return min(len(c.tokens) for c in out)


class VllmSide:
    """A vLLM server on `model`'s weights, started once (`seconds`: its start-up), and its client."""

    def __init__(self, model, tokenizer, seqs: int, new_tokens: int, seed: int):
        from scalerl.config import VllmEngineConfig
        from scalerl.rollout import make_engine

        self.cfg = RolloutConfig(
            temperature=1.0,
            top_p=1.0,
            max_new_tokens=new_tokens,
            length=NoLengthControl(),
            engine=VllmEngineConfig(max_inflight=seqs, kv_cache_mb=1024, start_timeout_s=1800),
        )
        t0 = time.perf_counter()
        self.client = make_engine(model, tokenizer, self.cfg, seed=seed, ignore_eos=True)
        self.seconds = time.perf_counter() - t0

    def __call__(self, texts: list[str], samples: int) -> int:
        out = self.client.generate([Prompt(id=str(i), text=t, answer="") for i, t in enumerate(texts)], n=samples)
        return min(len(c.tokens) for c in out)

    def server_cpu(self) -> float:
        """CPU seconds (user + system) the server's processes have used so far."""
        root = psutil.Process(self.client.server.proc.pid)
        return sum(sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)])


def timed(fn, device: str, other_cpu=None):
    """(tokens per sequence, wall seconds, CPU seconds of this process and of `other_cpu()`'s processes,
    peak memory in GiB)."""
    other_cpu = other_cpu or (lambda: 0.0)
    with PeakMemory(device) as mem:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0, c0, o0 = time.perf_counter(), time.process_time(), other_cpu()
        n = fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0 + other_cpu() - o0
    return n, seconds, cpu, mem.peak


def roofline(model, seqs: int, prompt_len: float, new_tokens: int, seconds: float) -> tuple[float, str]:
    """Fraction of peak memory bandwidth: (weights + mean KV read per step) x steps/s / peak."""
    name = torch.cuda.get_device_name()
    peak = next((bw for key, bw in PEAK_BANDWIDTH.items() if key in name), None)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    if not model.config.tie_word_embeddings:  # the input embedding is gathered, not streamed
        weights -= model.get_input_embeddings().weight.numel() * model.get_input_embeddings().weight.element_size()
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv_per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * model.dtype.itemsize
    kv = seqs * (prompt_len + new_tokens / 2) * kv_per_token
    bytes_per_s = (weights + kv) * new_tokens / seconds
    return (bytes_per_s / peak if peak else float("nan")), name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model", default="smollm2-135m", help="smollm2-135m | smollm2-shape-random | tiny | a checkpoint dir"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--seqs", type=int, default=None, help="sequences (default 64 on CPU, 256 on CUDA)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--samples", type=int, default=8, help="samples per prompt (seqs / samples distinct prompts)")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: all cores on an idle machine, 1 on a busy one: multi-threaded "
        "GEMMs on oversubscribed cores stall)",
    )
    ap.add_argument("--repeats", type=int, default=1, help="alternate the sides this many times, keep the median")
    ap.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="untimed full-size rounds of every side before the timed ones (default 1 on CUDA, where a "
        "side's first call at a new size pays cuBLAS/allocator/graph set-up, 0 on CPU)",
    )
    ap.add_argument("--no-eager", action="store_true", help="leave out the eager reference path")
    ap.add_argument("--vllm", action="store_true", help="add a vLLM server side (rollout.engine=vllm)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--task", default=None, help="use this task's validation prompts (e.g. rg:chain_sum)")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override for --task (e.g. task.shots=1)",
    )
    args = ap.parse_args()
    cores, load_avg = os.cpu_count() or 1, os.getloadavg()[0]
    torch.set_num_threads(args.threads or (cores if load_avg < 0.5 * cores else 1))
    seqs = args.seqs or (256 if args.device.startswith("cuda") else 64)

    model, tokenizer = load(args.model, args.dtype, args.device)
    if seqs % args.samples:
        ap.error(f"--seqs ({seqs}) must be a multiple of --samples ({args.samples})")
    texts = [f"Question {i + 1}. {TOPICS[i % len(TOPICS)]}" for i in range(seqs // args.samples)]
    if args.task:
        from scalerl.configure import load_config
        from scalerl.tasks import get_task

        cfg = load_config(
            "scalerl",
            None,
            [f"model.name={args.model}", f"task.name={args.task}", f"task.val_size={len(texts)}", *args.overrides],
        )
        texts = [p.text for p in get_task(cfg.task, tokenizer).val_prompts(len(texts))]
    elif tokenizer.chat_template:
        texts = [
            tokenizer.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
            for t in texts
        ]
    prompt_len = sum(len(tokenizer(t)["input_ids"]) for t in texts) / len(texts)
    print(
        f"model {args.model} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, {args.dtype}) "
        f"on {args.device}, {torch.get_num_threads()} threads (load average {load_avg:.1f} on {cores} cores); "
        f"{seqs} seqs x {args.new_tokens} new tokens, "
        f"({len(texts)} prompts x {args.samples} samples), prompts {prompt_len:.0f} tokens on average; "
        "sampling T=1, top-p 1, EOS ignored"
    )
    vllm = VllmSide(model, tokenizer, seqs, args.new_tokens, args.seed) if args.vllm else None
    try:
        report(
            args,
            make_sides(args, model, tokenizer, texts, vllm),
            seqs,
            prompt_len,
            model,
            {"vllm": vllm.server_cpu} if vllm is not None else {},
        )
    finally:
        if vllm is not None:
            vllm.client.close()


def make_sides(args, model, tokenizer, texts: list[str], vllm: VllmSide | None) -> dict:
    """The sides to time, each warmed up once at a tiny size."""
    run_hf(model, tokenizer, texts[:2], 1, 2, args.device, args.seed)  # warm-up every path
    run_ours(model, tokenizer, texts[:2], 1, 2, args.seed)
    run_ours(model, tokenizer, texts[:2], 1, 2, args.seed, decode="eager")
    sides = {
        "hf": lambda: run_hf(model, tokenizer, texts, args.samples, args.new_tokens, args.device, args.seed),
        "ours": lambda: run_ours(model, tokenizer, texts, args.samples, args.new_tokens, args.seed),
    }
    if not args.no_eager:
        sides["eager"] = lambda: run_ours(
            model, tokenizer, texts, args.samples, args.new_tokens, args.seed, decode="eager"
        )
    if args.task:
        sides["ours-np"] = lambda: run_ours(
            model, tokenizer, texts, args.samples, args.new_tokens, args.seed, shared=False
        )
    if vllm is not None:
        print(f"{'vLLM server start-up':>24}: {vllm.seconds:.1f} s (not in its side's time)")
        vllm(texts[:2], 1)
        sides["vllm"] = lambda: vllm(texts, args.samples)
    return sides


def report(args, sides: dict, seqs: int, prompt_len: float, model, other_cpu: dict | None = None) -> None:
    """Time every side (alternated, `--repeats` times) and print tokens/s and the ratios. `other_cpu`:
    a side's function giving the CPU seconds its other processes have used (the vLLM server's)."""
    other_cpu = other_cpu or {}
    warmup = args.warmup if args.warmup is not None else int(args.device.startswith("cuda"))
    for _ in range(warmup):  # not timed: the first call of a side at this size (HF's took 2.8x its second, 2026-11-26)
        for fn in sides.values():
            fn()
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    for _ in range(args.repeats):
        for name, fn in sides.items():
            n, seconds, cpu, peak = timed(fn, args.device, other_cpu.get(name))
            assert n == args.new_tokens, f"{name} generated {n} tokens per sequence, expected {args.new_tokens}"
            runs[name].append((seconds, cpu, peak))
    mem = "CUDA max allocated" if args.device.startswith("cuda") else "peak RSS"
    rate, best, cpu_of = {}, {}, {}
    labels = {
        "hf": "transformers generate",
        "ours": "scalerl Engine (static)",
        "eager": "scalerl Engine (eager)",
        "ours-np": "... no shared prefix",
        "vllm": "vLLM server (our client)",
    }
    for name, label in labels.items():
        if name not in runs:
            continue
        seconds = statistics.median(s for s, _, _ in runs[name])
        cpu = cpu_of[name] = statistics.median(c for _, c, _ in runs[name])
        peak = max(p for _, _, p in runs[name])
        best[name] = (seconds, peak)
        rate[name] = seqs * args.new_tokens / seconds
        each = ", ".join(f"{s:.2f}" for s, _, _ in runs[name])
        print(
            f"{label:>24}: {rate[name]:8.1f} tokens/s  (median of {len(runs[name])}: {each} s; CPU {cpu:.2f} s)  "
            f"{mem} {peak:.2f} GiB"
        )
    print(f"{'ratio static / hf':>24}: {rate['ours'] / rate['hf']:.2f}x")
    if "eager" in rate:
        print(f"{'ratio eager / hf':>24}: {rate['eager'] / rate['hf']:.2f}x")
        print(f"{'ratio static / eager':>24}: {rate['ours'] / rate['eager']:.2f}x")
    if "vllm" in rate:
        print(
            f"{'ratio vllm / static':>24}: {rate['vllm'] / rate['ours']:.2f}x "
            f"(CPU time: {cpu_of['ours'] / cpu_of['vllm']:.2f}x; the vLLM side's peak RSS is this process's only)"
        )
        print(f"{'ratio vllm / hf':>24}: {rate['vllm'] / rate['hf']:.2f}x")
    if "ours-np" in rate:
        print(f"{'shared prefix gain':>24}: {rate['ours'] / rate['ours-np']:.2f}x")
    print(f"{'load average after':>24}: {os.getloadavg()[0]:.1f}")
    if args.device.startswith("cuda"):
        frac, name = roofline(model, seqs, prompt_len, args.new_tokens, best["ours"][0])
        print(
            f"{'bandwidth roofline':>22}: {frac:.1%} of {name} peak (weights + KV per step x steps/s; "
            "prefill included in the time)"
        )


if __name__ == "__main__":
    main()
