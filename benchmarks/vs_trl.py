"""scalerl against TRL's `GRPOTrainer` (loss_type="cispo"): one invocation, one after the other.

Same model (SmolLM2-135M-Instruct via `scalerl.models.load_model("smollm2-135m")`, fp32
weights), same built-in task and reward (`arith-easy` by default, +1/-1 from the task's
checker through `scalerl.rewards.RewardFn`), same batch (8 prompts x 8 completions),
same maximum completion length (32), same loss (CISPO, eps_max = TRL's epsilon_high = 5), the
same learning rate (TRL's default, 1e-6), the same number of optimizer steps. TRL runs twice,
fp32 and bf16 (its `bf16=True` mixed precision), with its defaults otherwise, as its users
would run it; scalerl runs its ScaleRL recipe (PipelineRL-8, FP32 head, prompt aggregation,
batch normalisation) with `model.compute_dtype=bf16` (mixed precision on fp32 master weights,
like TRL's bf16=True; `--scalerl-compute fp32` for all-fp32), training each group's prompt
once for its 8 completions (`model.share_prompt`, exact).

Printed per side: seconds per optimizer step, completion tokens per second (completions of the
trained batch / step time), validation pass rate after the steps (both sides' final weights
evaluated by the same function: `scalerl.evaluate.evaluate` with the scalerl engine,
same prompts, same samples), achieved model FLOP/s (8 N per token of the 64 sequences, prompt and
completion: 2 N to generate or prefill it, 6 N to train on it; N = all parameters; the same
analytic count on both sides, whatever each does with shared prompts or recomputation) as a
fraction of this machine's matmul peak in the side's compute dtype (scalerl bf16: the bf16
peak), measured here in the same run, and the ratios scalerl / TRL (TRL: the faster of fp32
and bf16).

Settings that differ (printed too): aggregation (scalerl: prompt; TRL cispo: token),
advantage normalisation (scalerl: batch std; TRL: group std), learning-rate schedule
(scalerl: constant after warm-up 0; TRL: linear decay), gradient checkpointing (TRL default
on; scalerl off), off-policy mode (scalerl: PipelineRL-8, generation overlapped with
training; TRL: on-policy, generate then train), zero-variance filter (off on scalerl here so
both sides train on all 64 completions: with an untrained model every group can fail and
the filter would leave nothing to train on), length control (none on either side), compute
(scalerl bf16 mixed precision with the FP32 head, its generator decoding a bf16 copy; TRL fp32
and bf16 autocast), shared prompts (scalerl's trainer runs each prompt once for its group;
TRL every completion as a full sequence).

    .venv/bin/python benchmarks/vs_trl.py                 # 6 steps each, ~10 min (TRL ~50 s/step fp32 here)
    .venv/bin/python benchmarks/vs_trl.py --steps 5 --skip-bf16
    .venv/bin/python benchmarks/vs_trl.py --only scalerl --steps 3 --set model.share_prompt=false

Timings depend on the machine's load: compare sides only within one invocation.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

P, G, MAX_LEN, EPS_MAX, LR = 8, 8, 32, 5.0, 1e-6


def matmul_peak(dtype: torch.dtype, device: str = "cpu", seconds: float = 2.0) -> float:
    """Best FLOP/s of an n x n matmul in `dtype` over ~`seconds` (n = 1024 on CPU, 8192 on CUDA)."""
    n = 8192 if device.startswith("cuda") else 1024
    a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch.matmul(a, b)
    sync()
    best, t_end = 0.0, time.monotonic() + seconds
    while time.monotonic() < t_end:
        t0 = time.perf_counter()
        for _ in range(4):
            torch.matmul(a, b)
        sync()
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t0))
    return best


def scalerl_config(task: str, steps: int, eval_prompts: int, eval_samples: int, threads: int,
                   compute: str = "bf16", extra: tuple[str, ...] = (), model: str = "smollm2-135m",
                   device: str = "cpu"):
    from scalerl.config import load_config

    return load_config("scalerl", overrides=[
        f"model.name={model}", f"model.device={device}", "model.dtype=fp32", f"model.compute_dtype={compute}", f"task.name={task}", f"batch.prompts={P}",
        f"batch.generations={G}", f"rollout.max_new_tokens={MAX_LEN}", "rollout.length.type=none",
        f"loss.eps_max={EPS_MAX}", f"optim.lr={LR}", "optim.warmup_steps=0", "filter.zero_variance=false",
        f"run.max_steps={steps}", f"eval.every={steps}", f"eval.prompts={eval_prompts}",
        f"eval.samples={eval_samples}", "eval.temperature=1.0", f"run.checkpoint_every={steps}",
        f"run.threads={threads}", *extra])


def run_scalerl(cfg, out: Path) -> dict:
    from scalerl.loop import train
    from scalerl.run.metrics import read_rows

    out.mkdir(parents=True)
    tr = train(cfg, out, progress=False)
    rows = read_rows(out / "metrics.jsonl")
    steps = [r for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    return {"step_s": [r["time/step"] for r in steps], "tokens": [r["tokens/generated"] for r in steps],
            "pass_rate": evals[-1]["val/pass_rate"], "pass_rate_start": evals[0]["val/pass_rate"],
            "n_params": sum(p.numel() for p in tr.model.parameters()),
            "dtype": torch.bfloat16 if cfg.model.compute_dtype == "bf16" else torch.float32}


class _StepTimer:
    """A TRL `TrainerCallback`: wall-clock of every optimizer step (generation included)."""

    def __init__(self):
        from transformers import TrainerCallback

        timer = self

        class CB(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                timer.t0 = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):
                timer.step_s.append(time.perf_counter() - timer.t0)

        self.callback, self.step_s, self.t0 = CB(), [], 0.0


def run_trl(cfg, dtype: str, steps: int, out: Path, threads: int) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from scalerl.models import load_model
    from scalerl.tasks import get_task
    from scalerl.rewards import RewardFn
    from scalerl.types import Completion, Prompt

    model, tokenizer = load_model(cfg.model.name, dtype="fp32")
    task = get_task(cfg.task, tokenizer)
    reward_fn = RewardFn(task, cfg.reward)
    prompts = [task.train_prompt(i) for i in range(P * steps)]
    data = Dataset.from_list([{"prompt": p.text, "answer": p.answer, "pid": p.id} for p in prompts])
    tokens: list[int] = []

    def reward(prompts, completions, completion_ids, answer, pid, **kw) -> list[float]:
        tokens.append(sum(len(ids) for ids in completion_ids))
        out = []
        for text, ids, ans, i in zip(completions, completion_ids, answer, pid):
            c = Completion(id=i, prompt_id=i, prompt_tokens=[], tokens=list(ids), logprobs=[], versions=[],
                           text=text, finish_reason="length" if len(ids) >= MAX_LEN else "eos")
            reward_fn(Prompt(id=i, text="", answer=ans), c)
            out.append(c.reward)
        return out

    args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=P * G, num_generations=G,
                      max_completion_length=MAX_LEN, loss_type="cispo", epsilon_high=EPS_MAX, learning_rate=LR,
                      max_steps=steps, bf16=dtype == "bf16", use_cpu=cfg.model.device == "cpu", logging_steps=1, save_strategy="no",
                      report_to="none", seed=0, dataloader_num_workers=0)
    timer = _StepTimer()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=tokenizer, callbacks=[timer.callback])
    torch.set_num_threads(threads)
    trainer.train()
    trained = trainer.model.float().eval()
    return {"step_s": timer.step_s, "tokens": tokens[:len(timer.step_s)], "model": trained,
            "tokenizer": tokenizer, "n_params": sum(p.numel() for p in trained.parameters()),
            "dtype": torch.bfloat16 if dtype == "bf16" else torch.float32}


def evaluate_model(model, tokenizer, cfg) -> float:
    """The validation pass rate of `model` as scalerl's own evaluation computes it."""
    from scalerl.evaluate import evaluate
    from scalerl.rollout import Engine
    from scalerl.tasks import get_task
    from scalerl.rewards import RewardFn

    task = get_task(cfg.task, tokenizer)
    engine = Engine(model, tokenizer, cfg.rollout.model_copy(update={"temperature": cfg.eval.temperature}),
                    fp32_head=True, seed=cfg.run.seed + 7919)  # the seed scalerl's training loop evaluates with
    with torch.no_grad():
        row = evaluate(engine, task.val_prompts(cfg.eval.prompts), cfg.eval.samples, RewardFn(task, cfg.reward))
    return row["val/pass_rate"]


def mean_prompt_tokens(cfg, n: int) -> float:
    """Mean prompt length in tokens over the first `n` training prompts of the task."""
    from scalerl.models import load_model
    from scalerl.tasks import get_task

    _, tokenizer = load_model(cfg.model.name)
    task = get_task(cfg.task, tokenizer)
    return sum(len(tokenizer(task.train_prompt(i).text, add_special_tokens=False).input_ids)
               for i in range(n)) / n


def summarise(name: str, r: dict, peaks: dict, steady: bool, prompt_len: float) -> dict:
    """Per-side figures over every step (start-up included), or with step 1 left out (`steady`).

    Over few steps PipelineRL's steady figure flatters it (the generator runs ahead during
    step 1); the all-steps figure charges each side its own start-up. Both are printed.
    """
    keep = slice(1, None) if steady and len(r["step_s"]) > 1 else slice(None)
    secs, toks = sum(r["step_s"][keep]), sum(r["tokens"][keep])
    flops = 8.0 * r["n_params"] * (toks + P * G * prompt_len * len(r["step_s"][keep]))
    peak = peaks[r["dtype"]]
    return {"name": name, "s_per_step": secs / len(r["step_s"][keep]), "tok_per_s": toks / secs,
            "pass_rate": r["pass_rate"], "flop_s": flops / secs, "mfu": flops / secs / peak}


def print_table(results: dict, peaks: dict, steady: bool, prompt_len: float) -> None:
    title = "steps 2.. (step 1 left out)" if steady else "all steps (start-up included)"
    print(f"\n-- {title}\n{'side':<14} {'s/step':>9} {'tok/s':>10} {'val pass':>10} {'GFLOP/s':>10} {'of peak':>8}")
    rows = {name: summarise(name, r, peaks, steady, prompt_len) for name, r in results.items()}
    for name, s in rows.items():
        print(f"{name:<14} {s['s_per_step']:9.1f} {s['tok_per_s']:10.1f} {s['pass_rate']:10.3f} "
              f"{s['flop_s'] / 1e9:10.2f} {s['mfu']:8.1%}   steps: "
              f"{', '.join(f'{t:.1f}' for t in results[name]['step_s'])} s")
    trls = [v for k, v in rows.items() if k.startswith("TRL")]
    if not trls or "scalerl" not in rows:
        return
    trl = min(trls, key=lambda v: v["s_per_step"])
    ours = rows["scalerl"]
    print(f"scalerl / {trl['name']} (the faster TRL): completion tokens/s x{ours['tok_per_s'] / trl['tok_per_s']:.2f}, "
          f"seconds/step x{ours['s_per_step'] / trl['s_per_step']:.2f}, achieved FLOP/s "
          f"x{ours['flop_s'] / trl['flop_s']:.2f}; val pass rate {ours['pass_rate']:.3f} vs {trl['pass_rate']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per side (default 6)")
    ap.add_argument("--task", default="arith-easy", help="built-in task (default arith-easy)")
    ap.add_argument("--eval-prompts", type=int, default=16)
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--model", default="smollm2-135m",
                    help="smollm2-135m (default) | smollm2-shape-random (its shapes, random weights: throughput only)")
    ap.add_argument("--device", default="cpu", help="cpu (default) | cuda: both sides train and generate there")
    ap.add_argument("--skip-bf16", action="store_true", help="TRL in fp32 only")
    ap.add_argument("--only", choices=["scalerl", "trl"], help="run one side only (no ratios)")
    ap.add_argument("--scalerl-compute", choices=["bf16", "fp32"], default="bf16",
                    help="scalerl's model.compute_dtype (default bf16: mixed precision, as TRL's bf16=True)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="extra scalerl config override (repeatable), e.g. model.share_prompt=false")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = scalerl_config(a.task, a.steps, a.eval_prompts, a.eval_samples, a.threads, a.scalerl_compute,
                         tuple(a.overrides), a.model, a.device)
    peaks = {dt: matmul_peak(dt, a.device) for dt in (torch.float32, torch.bfloat16)}
    gpu = f", {torch.cuda.get_device_name()}" if a.device.startswith("cuda") else ""
    print(f"machine: {os.cpu_count()} cores{gpu}, {a.threads} torch threads, load average {os.getloadavg()[0]:.1f}; "
          f"matmul peak fp32 {peaks[torch.float32] / 1e9:.1f} GFLOP/s, bf16 {peaks[torch.bfloat16] / 1e9:.1f} GFLOP/s")
    print(f"setting: {a.model} on {a.device}, task {a.task}, {P} prompts x {G} completions, max {MAX_LEN} tokens, CISPO "
          f"eps_max {EPS_MAX}, lr {LR}, {a.steps} steps per side", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if a.only != "trl":
            print(f"== scalerl ({a.scalerl_compute} compute, fp32 weights, PipelineRL-8)", flush=True)
            results["scalerl"] = run_scalerl(cfg, Path(tmp) / "scalerl")
        for dtype in ([] if a.only == "scalerl" else ["fp32"] + ([] if a.skip_bf16 else ["bf16"])):
            print(f"== TRL GRPOTrainer ({dtype})", flush=True)
            r = run_trl(cfg, dtype, a.steps, Path(tmp) / f"trl-{dtype}", a.threads)
            r["pass_rate"] = evaluate_model(r.pop("model"), r.pop("tokenizer"), cfg)
            results[f"TRL {dtype}"] = r
    if "scalerl" in results:
        print(f"\nvalidation pass rate before training (scalerl's step-0 evaluation): "
              f"{results['scalerl']['pass_rate_start']:.3f}")
    prompt_len = mean_prompt_tokens(cfg, P * a.steps)
    print(f"mean prompt length {prompt_len:.1f} tokens (chat template included)")
    for steady in (False, True):
        print_table(results, peaks, steady, prompt_len)
    print("settings that differ: aggregation prompt (scalerl) vs token (TRL cispo); advantage norm batch vs group; "
          "lr schedule constant vs linear decay; gradient checkpointing off vs on (TRL default); PipelineRL-8 "
          "(generation overlapped) vs on-policy; FP32 head on scalerl; "
          f"scalerl compute {cfg.model.compute_dtype} (bf16: a bf16 trunk on bf16 casts of fp32 master weights, "
          "FP32 head, generator decodes a bf16 copy of the weights; its FLOP/s against the bf16 peak), TRL bf16 = "
          "its bf16=True autocast mixed precision; scalerl's trainer runs each group's prompt once "
          f"for its {G} completions (model.share_prompt={str(cfg.model.share_prompt).lower()}, exact), TRL every "
          "completion as a full sequence")


if __name__ == "__main__":
    main()
