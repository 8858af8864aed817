"""scalerl against TRL's `GRPOTrainer` when both learn: one invocation, the sides one after another.

Both sides train the same model (SmolLM2-135M-Instruct by default, fp32 weights) on the same
reasoning-gym task (`rg:chain_sum` by default; prompts from the same training pool, rewards from
the same `scalerl.rewards.RewardFn`: +1 / -1 on the dataset's own `score_answer`), with the same
batch (8 prompts x 8 completions), the same completion budget and learning rate (the model's
profile: 64 tokens and 1e-5 for SmolLM2 on reasoning-gym), the same loss (CISPO, eps_max = TRL's
epsilon_high = 5), each for the same wall-clock
training budget (`--minutes`). Every `--eval-every` optimizer steps each side's current weights
are evaluated by the same function (`scalerl.evaluate.evaluate` with the scalerl engine, the same
validation prompts and samples, temperature 1); evaluation time is left out of both sides'
clocks. TRL runs as its users run it: `GRPOTrainer` with its defaults, in fp32 and with
`bf16=True`; scalerl runs its ScaleRL recipe with the model's profile (`scalerl train --set
model.name=smollm2-135m --set task.name=rg:...`: PipelineRL-8, forced interruptions, FP32 head).

Printed, from the three learning curves (pass rate against training wall-clock):
- the wall-clock each side takes to first reach a validation pass rate that every side reaches
  (the highest such level, the start + 0.05, and 90% of the rise to the highest level scalerl
  and each TRL side both reach: the highest itself is touched by plateau noise), interpolated linearly
  between the evaluations around the crossing (the ratio is
  taken on these; the first evaluation at or above the level is printed beside them);
- the pass rate of each side after the same wall-clock (the shortest side's training time);
- completion tokens per second over all steps, the first included, and the ratios.
Target (issue 15): scalerl at least 3x the faster TRL on each.

    .venv/bin/python benchmarks/vs_trl.py                          # 3 x 20 min of training, plus evaluations
    .venv/bin/python benchmarks/vs_trl.py --minutes 5 --skip-bf16
    .venv/bin/python benchmarks/vs_trl.py --model smollm2-shape-random --device cuda --minutes 2 --eval-every 1000 \
        --set filter.zero_variance=false   # throughput only: a random model never passes, so no group has variance
    .venv/bin/python benchmarks/vs_trl.py --model tiny --task arith --minutes 1    # the plumbing, in minutes

Timings depend on the machine's load: compare sides only within one invocation, on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

import torch

P, G, EPS_MAX = 8, 8, 5.0
EVAL_SEED = 7919  # the seed scalerl's own evaluator adds to run.seed


def scalerl_config(a: argparse.Namespace, max_minutes: float | None = None):
    from scalerl.configure import load_config

    over = [
        f"model.name={a.model}",
        f"model.device={a.device}",
        "model.dtype=fp32",
        f"task.name={a.task}",
        f"batch.prompts={P}",
        f"batch.generations={G}",
        f"loss.eps_max={EPS_MAX}",
        f"eval.every={a.eval_every}",
        f"eval.prompts={a.eval_prompts}",
        f"eval.samples={a.eval_samples}",
        "eval.temperature=1.0",
        "run.max_steps=100000",
        "run.checkpoint_every=100000",
    ]
    if a.threads:
        over.append(f"run.threads={a.threads}")
    if a.lr is not None:
        over.append(f"optim.lr={a.lr}")
    if a.max_new_tokens is not None:
        over.append(f"rollout.max_new_tokens={a.max_new_tokens}")
    if max_minutes is not None:
        over.append(f"run.max_minutes={max_minutes}")
    return load_config("scalerl", overrides=[*over, *a.overrides])


# ---------------------------------------------------------------- scalerl
def run_scalerl(a, out: Path) -> dict:
    """A `scalerl train` run for `--minutes` of training; its curve on its own compute clock."""
    from scalerl.loop import train
    from scalerl.run.metrics import read_rows

    cfg = scalerl_config(a, a.minutes)
    out.mkdir(parents=True)
    train(cfg, out, progress=False)
    rows = read_rows(out / "metrics.jsonl")
    clock, curve, step_s, tokens = 0.0, [], [], []
    for r in rows:
        if r["kind"] == "train":
            clock += r["time/step"]
            step_s.append(r["time/step"])
            tokens.append(r["tokens/generated"])
        elif r["kind"] == "eval":
            curve.append((clock, r["val/pass_rate"], r["step"]))
    return {
        "curve": curve,
        "step_s": step_s,
        "tokens": tokens,
        "lr": cfg.optim.lr,
        "max_new_tokens": cfg.rollout.max_new_tokens,
        "length": cfg.rollout.length.type,
    }


# ---------------------------------------------------------------- TRL
def evaluator(cfg, tokenizer):
    """`score(model) -> pass rate` on the validation prompts, as scalerl's loop evaluates."""
    from scalerl.evaluate import evaluate
    from scalerl.rewards import RewardFn
    from scalerl.rollout import Engine
    from scalerl.tasks import get_task

    task = get_task(cfg.task, tokenizer)
    prompts = task.val_prompts(cfg.eval.prompts_for(task.val_size))
    reward = RewardFn(task, cfg.reward)
    rollout = cfg.rollout.model_copy(update={"temperature": cfg.eval.temperature})

    def score(model) -> float:
        was = model.training
        model.eval()
        engine = Engine(model, tokenizer, rollout, fp32_head=True, seed=cfg.run.seed + EVAL_SEED)
        with torch.no_grad():
            rate = evaluate(engine, prompts, cfg.eval.samples, reward)["val/pass_rate"]
        model.train(was)
        return rate

    return score


class Curve:
    """A TRL `TrainerCallback`: the training clock (each optimizer step, generation included,
    evaluation left out), an evaluation every `every` steps and at step 0, and a stop once the
    clock reaches `budget_s`."""

    def __init__(self, score, every: int, budget_s: float):
        from transformers import TrainerCallback

        me = self
        self.clock, self.step_s, self.curve = 0.0, [], []

        class CB(TrainerCallback):
            def on_train_begin(self, args, state, control, model=None, **kw):
                me.curve.append((0.0, score(model), 0))

            def on_step_begin(self, args, state, control, **kw):
                me.t0 = time.perf_counter()

            def on_step_end(self, args, state, control, model=None, **kw):
                dt = time.perf_counter() - me.t0
                me.clock += dt
                me.step_s.append(dt)
                done = me.clock >= budget_s
                if state.global_step % every == 0 or done:
                    me.curve.append((me.clock, score(model), state.global_step))
                if done:
                    control.should_training_stop = True

        self.callback = CB()


def run_trl(a, cfg, dtype: str, out: Path) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from scalerl.models import load_model
    from scalerl.rewards import RewardFn
    from scalerl.tasks import get_task
    from scalerl.types import Completion

    model, tokenizer = load_model(cfg.model.name, dtype="fp32")
    task = get_task(cfg.task, tokenizer)
    reward_fn = RewardFn(task, cfg.reward)
    pool = {p.id: p for p in (task.train_prompt(i) for i in range(len(task)))}  # the same pool scalerl draws
    data = Dataset.from_list([{"prompt": p.text, "pid": p.id} for p in pool.values()])
    tokens: list[int] = []
    max_len = cfg.rollout.max_new_tokens

    def reward(prompts, completions, completion_ids, pid, **kw) -> list[float]:
        tokens.append(sum(len(ids) for ids in completion_ids))
        out = []
        for text, ids, i in zip(completions, completion_ids, pid):
            c = Completion(
                id=i,
                prompt_id=i,
                prompt_tokens=[],
                tokens=list(ids),
                logprobs=[],
                versions=[],
                text=text,
                finish_reason="length" if len(ids) >= max_len else "eos",
            )
            out.append(reward_fn(pool[i], c).reward)
        return out

    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=P * G,
        num_generations=G,
        max_completion_length=max_len,
        loss_type="cispo",
        epsilon_high=EPS_MAX,
        learning_rate=cfg.optim.lr,
        max_steps=100_000,
        bf16=dtype == "bf16",
        use_cpu=cfg.model.device == "cpu",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    curve = Curve(evaluator(cfg, tokenizer), a.eval_every, a.minutes * 60)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[curve.callback],
    )
    if a.threads:
        torch.set_num_threads(a.threads)
    trainer.train()
    reward_fn.close()
    return {"curve": curve.curve, "step_s": curve.step_s, "tokens": tokens[: len(curve.step_s)]}


# ---------------------------------------------------------------- the comparison
def trl_dtypes(only: str | None, skip_bf16: bool) -> list[str]:
    """The TRL sides `--only` and `--skip-bf16` ask for."""
    if only == "scalerl":
        return []
    if only in ("trl-fp32", "trl-bf16"):
        return [only.removeprefix("trl-")]
    return ["fp32"] + ([] if skip_bf16 else ["bf16"])


SAME_SETTINGS = (
    "model",
    "task",
    "device",
    "minutes",
    "eval_every",
    "eval_prompts",
    "eval_samples",
    "lr",
    "max_new_tokens",
    "threads",
    "overrides",
)


def combine(paths: list[str]) -> dict:
    """The sides saved by several `--json` runs (e.g. one per lease call), checked to share every
    setting that shapes a curve; a side saved twice is refused."""
    results, first = {}, None
    for path in paths:
        try:
            saved = json.loads(Path(path).read_text())
            args, sides = saved["args"], saved["results"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"vs_trl --combine: {path}: not a --json output of this benchmark ({exc})") from None
        if first is None:
            first = (path, args)
        for key in SAME_SETTINGS:
            if args.get(key) != first[1].get(key):
                raise SystemExit(
                    f"vs_trl --combine: {path}: {key} = {args.get(key)!r}, but {first[0]} has "
                    f"{first[1].get(key)!r}: the sides must share their settings"
                )
        for name, side in sides.items():
            if name in results:
                raise SystemExit(f"vs_trl --combine: {path}: side {name!r} is in an earlier file too")
            results[name] = side
    return results


def first_reach(curve, level: float) -> float | None:
    """Training seconds at the first evaluation at or above `level` (None: never)."""
    return next((t for t, rate, _ in curve if rate >= level), None)


def crossing(curve, level: float) -> float | None:
    """Training seconds at which the curve first reaches `level`, linearly interpolated between
    the evaluation before and the first one at or above it (None: never). Unlike `first_reach`
    it does not charge a side for the spacing of its evaluations (every `--eval-every` steps is
    more seconds on the side with slower steps)."""
    for i, (t, rate, _) in enumerate(curve):
        if rate >= level:
            if i == 0:
                return t
            t0, r0, _ = curve[i - 1]
            return t0 + (level - r0) / (rate - r0) * (t - t0)
    return None


def interpolated_rate(curve, seconds: float) -> float:
    """The pass rate at `seconds` of training, linear between the evaluations around it (the last
    evaluation's beyond the curve's end)."""
    for (t0, r0, _), (t1, r1, _) in zip(curve, curve[1:]):
        if t0 <= seconds <= t1:
            return r0 + (r1 - r0) * (seconds - t0) / (t1 - t0) if t1 > t0 else r1
    return curve[-1][1] if seconds > curve[-1][0] else curve[0][1]


def rate_at(curve, seconds: float) -> float:
    """The pass rate of the last evaluation at or before `seconds` of training."""
    return [rate for t, rate, _ in curve if t <= seconds + 1e-9][-1]


RISE = 0.9  # the share of the rise to the best pass rate a pair of sides both reach, timed for each pair


def compare(results: dict) -> dict:
    """The three figures of the module docstring, from the sides' curves."""
    idle = [n for n, r in results.items() if not r["step_s"]]
    if idle:  # e.g. a random model under scalerl's zero-variance filter: every group fails alike
        raise SystemExit(
            f"vs_trl: {', '.join(idle)} made no optimizer step in the budget; with a model that never "
            "passes, turn scalerl's filter off (--set filter.zero_variance=false)"
        )
    start = min(r["curve"][0][1] for r in results.values())
    best = {n: max(rate for _, rate, _ in r["curve"]) for n, r in results.items()}
    common = min(best.values())
    # every side reaches `common`; scalerl and each TRL side reach 90% of the rise to the lower of
    # their two bests (a best itself sits in the plateau's evaluation noise, so the first evaluation
    # to touch it times the noise, not the learning) (levels rounded down: rounded up, one could sit
    # above the slower side's best and read "never")
    pairs = (
        {start + RISE * (min(best["scalerl"], b) - start) for n, b in best.items() if n != "scalerl"}
        if "scalerl" in best
        else set()
    )
    levels = sorted({math.floor(v * 1e4 + 1e-6) / 1e4 for v in {common, start + 0.05} | pairs})
    reach = {lv: {n: first_reach(r["curve"], lv) for n, r in results.items()} for lv in levels}
    cross = {lv: {n: crossing(r["curve"], lv) for n, r in results.items()} for lv in levels}
    equal_s = min(r["curve"][-1][0] for r in results.values())
    at_equal = {n: rate_at(r["curve"], equal_s) for n, r in results.items()}
    # the same at the moment scalerl reached the common level: by the end of the shortest side
    # every side may sit at the task's ceiling, which says nothing about speed
    early_s = cross[math.floor(common * 1e4 + 1e-6) / 1e4].get("scalerl")
    at_early = {n: interpolated_rate(r["curve"], early_s) for n, r in results.items()} if early_s else {}
    tok_s = {n: sum(r["tokens"]) / sum(r["step_s"]) for n, r in results.items()}
    return {
        "start": start,
        "common_level": common,
        "reach_s": reach,
        "cross_s": cross,
        "equal_s": equal_s,
        "pass_at_equal": at_equal,
        "early_s": early_s,
        "pass_at_early": at_early,
        "tok_s": tok_s,
    }


def report(results: dict, c: dict) -> None:
    trls = [n for n in results if n.startswith("TRL")]
    print(f"\n{'side':<10} {'steps':>6} {'train s':>8} {'s/step':>7} {'tok/s':>8}   curve (train s: pass rate)")
    for n, r in results.items():
        pts = ", ".join(f"{t:.0f}: {rate:.3f}" for t, rate, _ in r["curve"])
        print(
            f"{n:<10} {len(r['step_s']):>6} {sum(r['step_s']):>8.0f} {sum(r['step_s']) / len(r['step_s']):>7.1f} "
            f"{c['tok_s'][n]:>8.1f}   {pts}"
        )
    for level, reach in c["reach_s"].items():
        cross = c["cross_s"][level]
        shown = ", ".join(
            f"{n} {'never' if s is None else f'{cross[n]:.1f} s (evaluation at {s:.0f} s)'}" for n, s in reach.items()
        )
        print(f"wall-clock to pass rate {level:.3f}, interpolated between evaluations: {shown}")
        if "scalerl" in cross and trls and cross["scalerl"]:
            best = min((cross[n] for n in trls if cross[n] is not None), default=None)
            print(
                f"  scalerl x{best / cross['scalerl']:.2f} faster than the faster TRL"
                if best
                else "  no TRL side reached it"
            )
    shown = ", ".join(f"{n} {v:.3f}" for n, v in c["pass_at_equal"].items())
    print(f"pass rate after {c['equal_s']:.0f} s of training: {shown}")
    if c["pass_at_early"]:
        shown = ", ".join(f"{n} {v:.3f} (+{v - c['start']:.3f})" for n, v in c["pass_at_early"].items())
        print(
            f"pass rate after {c['early_s']:.1f} s of training (scalerl at the common level), interpolated "
            f"between evaluations (gain over the start): {shown}"
        )
    if "scalerl" in results and trls:
        best = max(trls, key=lambda n: c["tok_s"][n])
        print(f"completion tokens/s over all steps: scalerl / {best} x{c['tok_s']['scalerl'] / c['tok_s'][best]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--model",
        default="smollm2-135m",
        help="smollm2-135m (default) | smollm2-shape-random (its shapes, random weights: throughput only)",
    )
    ap.add_argument("--task", default="rg:chain_sum", help="task (default rg:chain_sum)")
    ap.add_argument("--device", default="cpu", help="cpu (default) | cuda: both sides train and generate there")
    ap.add_argument("--minutes", type=float, default=20.0, help="training wall-clock per side (default 20)")
    ap.add_argument("--eval-every", type=int, default=10, help="optimizer steps between evaluations (default 10)")
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument("--eval-samples", type=int, default=2)
    ap.add_argument(
        "--lr", type=float, default=None, help="both sides (default: the model's profile, 1e-5 for SmolLM2)"
    )
    ap.add_argument(
        "--max-new-tokens", type=int, default=None, help="both sides (default: the profile's, 64 for SmolLM2)"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    ap.add_argument("--skip-bf16", action="store_true", help="TRL in fp32 only")
    ap.add_argument(
        "--only",
        choices=["scalerl", "trl", "trl-fp32", "trl-bf16"],
        help="run these sides only (for a lease that caps a command's time; join them with --combine)",
    )
    ap.add_argument("--json", metavar="FILE", help="also write the curves and figures as JSON")
    ap.add_argument(
        "--combine",
        nargs="+",
        metavar="FILE",
        help="run nothing: compare the sides saved by earlier --json runs with the same settings",
    )
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra scalerl config override (repeatable)",
    )
    a = ap.parse_args()
    if a.combine:
        results = combine(a.combine)
        c = compare(results)
        report(results, c)
        return
    cfg = scalerl_config(a)
    gpu = f", {torch.cuda.get_device_name()}" if a.device.startswith("cuda") else ""
    print(f"machine: {os.cpu_count()} cores{gpu}, load average {os.getloadavg()[0]:.1f}")
    print(
        f"setting: {a.model} on {a.device}, task {a.task}, {P} prompts x {G} completions, max "
        f"{cfg.rollout.max_new_tokens} new tokens, CISPO eps_max {EPS_MAX}, lr {cfg.optim.lr}, {a.minutes:g} min of "
        f"training per side, evaluation every {a.eval_every} steps on {a.eval_prompts} x {a.eval_samples}",
        flush=True,
    )
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if a.only in (None, "scalerl"):
            print("== scalerl (ScaleRL recipe, the model's profile)", flush=True)
            results["scalerl"] = run_scalerl(a, Path(tmp) / "scalerl")
        for dtype in trl_dtypes(a.only, a.skip_bf16):
            print(f"== TRL GRPOTrainer ({dtype})", flush=True)
            results[f"TRL {dtype}"] = run_trl(a, cfg, dtype, Path(tmp) / f"trl-{dtype}")
    c = compare(results)
    report(results, c)
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                {
                    "args": vars(a),
                    "results": results,
                    "figures": {
                        **c,
                        "reach_s": {str(k): v for k, v in c["reach_s"].items()},
                        "cross_s": {str(k): v for k, v in c["cross_s"].items()},
                    },
                },
                indent=1,
            )
        )
    length = {
        "interrupt": "forced interruptions with the profile's thinking budget",
        "penalty": "an overlong length penalty",
        "none": "no length control",
    }[cfg.rollout.length.type]
    recipe = [
        f"PipelineRL-{cfg.pipeline.k} with in-flight weight updates"
        if cfg.pipeline.mode == "pipeline_rl"
        else f"PPO-off-policy-{cfg.pipeline.k}",
        length,
        "FP32 head" if cfg.model.fp32_head else "bf16 head",
        f"{cfg.loss.aggregation}-level aggregation",
        f"{cfg.advantage.norm} advantage normalisation",
        "zero-variance filter" if cfg.filter.zero_variance else "no zero-variance filter",
        "No-Positive-Resampling" if cfg.curriculum.no_positive_resampling else "no NPR",
        f"lr warmed up linearly over {cfg.optim.warmup_steps} steps then constant",
    ]
    # read from the run's config, so a --set shows here (the fixed sentence it replaced said "zero-variance filter"
    # and "forced interruptions" of GPU runs that had both turned off)
    print(
        f"settings that differ: scalerl runs its recipe ({', '.join(recipe)}) against TRL's defaults (on-policy, "
        "no length control, token-level cispo, group std normalisation, no warm-up and a linear lr decay, "
        "gradient checkpointing)"
    )


if __name__ == "__main__":
    main()
