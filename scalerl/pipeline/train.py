"""`train(cfg, run_dir)`: the RL loop of `scalerl train`, over either off-policy mode.

    generator --scored groups--> collect (mode) --> curriculum, zero-var filter --> train_step
        ^                                                                             |
        +------------------- weights, version (PipelineRL: every step) <-------------+
    every step: metrics row (compute, tokens, times, staleness, rewards, truncation)
    every eval.every steps: mean@k on the validation set + live forecast; then checkpoint

Departures from the paper: see step.py, modes.py, evaluate.py and run/compute.py headers.
"""

from __future__ import annotations

import copy
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from scalerl.config import Config
from scalerl.errors import ScaleRLError
from scalerl.pipeline.evaluate import evaluate, live_forecast
from scalerl.pipeline.modes import PipelineRL, PPOOffPolicy, staleness
from scalerl.pipeline.step import Optimizer, group_stats, train_step
from scalerl.pipeline.transport import PromptSampler, ThreadedRollouts
from scalerl.run.checkpoint import TrainState, latest_checkpoint, load_checkpoint, save_checkpoint
from scalerl.run.compute import ComputeMeter, StepCompute
from scalerl.run.metrics import MetricsWriter, roll_back

TRUNCATION_WARN = 0.10
MAX_EMPTY_BATCHES = 50


@dataclass
class Components:
    """What the loop trains with; tests swap in fakes (e.g. a fake generator or reward)."""

    model: torch.nn.Module
    tokenizer: object
    task: object
    reward_fn: Callable
    make_generator: Callable[[torch.nn.Module, float, int], object]  # (model, temperature, seed)


def build_components(cfg: Config, device: str) -> Components:
    from scalerl.models import load_model
    from scalerl.rollout import Engine
    from scalerl.tasks import get_task
    from scalerl.tasks.rewards import RewardFn

    model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype, device=device)
    task = get_task(cfg.task, tokenizer)

    def make_generator(m, temperature, seed):
        return Engine(m, tokenizer, cfg.rollout.model_copy(update={"temperature": temperature}),
                      fp32_head=cfg.model.fp32_head, seed=seed)

    return Components(model, tokenizer, task, RewardFn(task, cfg.reward), make_generator)


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def split_threads(cfg: Config, device: str) -> tuple[int, float, float]:
    """(torch threads, generator devices, trainer devices) for this mode and machine."""
    total = cfg.run.threads or os.cpu_count() or 1
    if device != "cpu":
        return total, 1.0, 1.0
    if cfg.pipeline.mode == "pipeline_rl" and total >= 2:
        gen = total // 2
        return max(1, total - gen), float(gen), float(total - gen)
    return total, float(total), float(total)


class Trainer:
    """The state of one run: model, optimizer, curriculum, counters; restores from checkpoints."""

    def __init__(self, cfg: Config, comps: Components, run_dir: Path):
        from scalerl.rl.curriculum import NoPositiveResampling

        self.cfg = cfg
        self.comps = comps
        self.run_dir = run_dir
        self.model = comps.model
        self.optim = Optimizer(self.model, cfg)
        self.curriculum = NoPositiveResampling(cfg.curriculum.threshold)
        self.meter = ComputeMeter(sum(p.numel() for p in self.model.parameters()))
        self.state = TrainState(generator_seed=cfg.run.seed)
        self.counters = {"skipped_batches": 0, "stale_dropped": 0, "zero_variance_dropped": 0}
        self.evals: list[tuple[float, float]] = []

    def restore(self) -> None:
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is None:
            roll_back(self.run_dir, 0)
            return
        opt_state, self.state = load_checkpoint(ckpt, self.model)
        self.optim.load_state_dict(opt_state)
        self.curriculum.load_state_dict(self.state.curriculum)
        self.meter.load_state_dict(self.state.compute)
        self.counters.update(self.state.counters)
        self.evals = [tuple(e) for e in self.state.evals]
        roll_back(self.run_dir, self.state.metrics_offset)

    def checkpoint(self, metrics: MetricsWriter, sampler: PromptSampler) -> None:
        self.state.compute = self.meter.state_dict()
        self.state.curriculum = self.curriculum.state_dict()
        self.state.sampler_position = sampler.position
        self.state.metrics_offset = metrics.offset()
        self.state.counters = dict(self.counters)
        self.state.evals = [list(e) for e in self.evals]
        save_checkpoint(self.run_dir, self.model, self.optim.state_dict(), self.state)

    def weights(self) -> dict:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}


def _filter(cfg: Config, groups, curriculum, counters) -> list:
    from scalerl.rl.filters import zero_variance_filter

    if cfg.curriculum.no_positive_resampling:
        for g in groups:
            curriculum.update(g)
    if not cfg.filter.zero_variance:
        return groups
    kept, dropped = zero_variance_filter(groups)
    counters["zero_variance_dropped"] += dropped
    return kept


def _eval_row(tr: Trainer, eval_gen, val_prompts, mode) -> dict:
    cfg = tr.cfg
    t0 = time.monotonic()
    mode.pause()
    tr.model.eval()
    with torch.no_grad():
        row = evaluate(eval_gen, val_prompts, cfg.eval.samples, tr.comps.reward_fn)
    tr.model.train()
    mode.resume()
    totals = tr.meter.totals()
    tr.evals.append((totals["compute/device_hours"], row["val/pass_rate"]))
    row.update(totals)
    forecast = live_forecast(tr.evals, cfg.eval.fit_min_frac)
    if forecast:
        row.update(forecast)
    row["time/eval"] = time.monotonic() - t0
    return {"step": tr.state.step, "kind": "eval", **row}


def train(cfg: Config, run_dir: Path, resume: bool = False, comps: Components | None = None,
          progress: bool = True) -> Trainer:
    """Train until `cfg.run.max_steps` optimizer steps (or `run.max_minutes`); return the Trainer."""
    device = resolve_device(cfg.model.device)
    n_threads, gen_devices, train_devices = split_threads(cfg, device)
    torch.set_num_threads(n_threads)
    torch.manual_seed(cfg.run.seed)
    comps = comps or build_components(cfg, device)
    tr = Trainer(cfg, comps, run_dir)
    if resume:
        tr.restore()
    metrics = MetricsWriter(run_dir)
    sampler = PromptSampler(comps.task, tr.curriculum.is_retired, tr.state.sampler_position)
    val_prompts = comps.task.val_prompts(cfg.eval.prompts)
    eval_gen = comps.make_generator(tr.model, cfg.eval.temperature, cfg.run.seed + 7919)
    gen_seed = cfg.run.seed * 1_000_003 + tr.state.step  # a resumed run draws fresh samples
    generator = comps.make_generator(copy.deepcopy(tr.model), cfg.rollout.temperature, gen_seed)
    if hasattr(generator, "update_weights"):
        generator.update_weights(tr.weights(), tr.state.step)
    P, G, k = cfg.batch.prompts, cfg.batch.generations, cfg.pipeline.k
    if cfg.pipeline.mode == "pipeline_rl":
        in_flight = -(-cfg.rollout.batch_slots // G)  # prompts decoding at once
        source = ThreadedRollouts(generator, sampler, G, comps.reward_fn, max_queued=max(1, P * k - in_flight))
        mode = PipelineRL(source, k, P)
    else:
        mode = PPOOffPolicy(generator, sampler, comps.reward_fn, k, P, G)
    try:
        _loop(tr, mode, metrics, sampler, eval_gen, val_prompts, gen_devices, train_devices, progress)
    finally:
        mode.close()
        metrics.close()
    return tr


def _loop(tr: Trainer, mode, metrics: MetricsWriter, sampler, eval_gen, val_prompts,
          gen_devices: float, train_devices: float, progress: bool) -> None:
    from tqdm import tqdm

    cfg = tr.cfg
    bar = tqdm(total=cfg.run.max_steps, initial=tr.state.step, disable=not progress, dynamic_ncols=True)
    postfix: dict[str, str] = {}
    if tr.state.step == 0 and not tr.evals:
        row = _eval_row(tr, eval_gen, val_prompts, mode)
        metrics.write(row)
        tr.checkpoint(metrics, sampler)
    t_budget = cfg.run.max_minutes * 60 if cfg.run.max_minutes else float("inf")
    t_start = time.monotonic() - tr.counters.get("train_seconds", 0.0)  # carries on after a resume
    last = time.monotonic()
    empty_in_a_row = 0
    while tr.state.step < cfg.run.max_steps and time.monotonic() - t_start < t_budget:
        for mb in mode.collect(tr.state.step):
            if tr.state.step >= cfg.run.max_steps:
                break
            tr.counters["stale_dropped"] += mb.stale_dropped
            ages = [staleness(g, tr.state.step) for g in mb.groups]
            stats = group_stats(mb.groups)
            tokens_generated = sum(len(c.tokens) for g in mb.groups for c in g.completions)
            kept = _filter(cfg, mb.groups, tr.curriculum, tr.counters)
            if not kept:
                tr.counters["skipped_batches"] += 1
                empty_in_a_row += 1
                if empty_in_a_row >= MAX_EMPTY_BATCHES:
                    raise ScaleRLError(
                        f"{MAX_EMPTY_BATCHES} batches in a row had no group with unequal rewards at step "
                        f"{tr.state.step}: the model passes all or none of its prompts (check task difficulty)")
                continue
            empty_in_a_row = 0
            t_train = time.monotonic()
            row = train_step(tr.model, tr.optim, kept, cfg, tr.comps.tokenizer.pad_token_id, tr.state.step)
            tr.state.step += 1
            mode.after_step(tr.weights(), tr.state.step)
            now = time.monotonic()
            train_s, interval = now - t_train, now - last
            last = now
            if isinstance(mode, PipelineRL):
                sc = StepCompute(interval, interval, gen_devices, train_devices, tokens_generated, row["tokens/trained_step"])
            else:
                sc = StepCompute(mb.gen_seconds, train_s, gen_devices, train_devices, tokens_generated, row["tokens/trained_step"])
            row.update(stats)
            row.update(tr.meter.add(sc))
            row.update({
                "staleness/mean": sum(ages) / len(ages), "staleness/max": max(ages),
                "staleness/dropped": tr.counters["stale_dropped"], "train/groups": len(mb.groups),
                "train/groups_kept": len(kept), "train/zero_variance_dropped": tr.counters["zero_variance_dropped"],
                "train/skipped_batches": tr.counters["skipped_batches"],
                "curriculum/retired": tr.curriculum.n_retired, "time/step": interval, "time/train": train_s,
                "time/gen_wait": mb.wait_seconds, "time/gen": mb.gen_seconds,
                "tokens/per_second": tokens_generated / max(interval, 1e-9), "version": tr.state.step,
            })
            if row["train/truncation_rate"] > TRUNCATION_WARN:
                warnings.warn(f"step {tr.state.step}: truncation rate {row['train/truncation_rate']:.0%} > "
                              f"{TRUNCATION_WARN:.0%}: training tends to degrade (paper Section 2)")
            tr.counters["train_seconds"] = time.monotonic() - t_start
            metrics.write({"step": tr.state.step, "kind": "train", **row})
            postfix.update(reward=f"{row['train/reward_mean']:.2f}", tok_s=f"{row['tokens/per_second']:.0f}")
            pause_start = time.monotonic()
            done = tr.state.step >= cfg.run.max_steps
            if tr.state.step % cfg.eval.every == 0 or done:
                erow = _eval_row(tr, eval_gen, val_prompts, mode)
                metrics.write(erow)
                postfix["val"] = f"{erow['val/pass_rate']:.3f}"
                if "forecast/A" in erow:
                    postfix["A"] = f"{erow['forecast/A']:.3f}[{erow['forecast/A_lo']:.2f},{erow['forecast/A_hi']:.2f}]"
            if tr.state.step % cfg.run.checkpoint_every == 0 or done:
                tr.checkpoint(metrics, sampler)
            last += time.monotonic() - pause_start  # eval and checkpoint time is not step time
            bar.update(1)
            bar.set_postfix(postfix, refresh=False)
        if hasattr(mode, "after_round"):
            mode.after_round()
    if tr.state.step < cfg.run.max_steps:  # stopped by max_minutes: end on an eval + checkpoint
        if not tr.evals or tr.evals[-1][0] < tr.meter.totals()["compute/device_hours"]:
            metrics.write(_eval_row(tr, eval_gen, val_prompts, mode))
        tr.checkpoint(metrics, sampler)
    bar.close()
