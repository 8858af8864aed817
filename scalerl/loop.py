"""`train(cfg, run_dir)`: the RL loop of `scalerl train`, over either off-policy mode.

    generator --scored groups--> mode.collect --> curriculum, BatchFiller --> train_step
        ^                                                                        |
        +---------------- weights, version (PipelineRL: every step) <------------+
    every step: a metrics row (compute, tokens, times, staleness, rewards, truncation)
    on the eval schedule (geometric in steps by default): mean@k on the validation set + live forecast;
    checkpoints every run.checkpoint_every steps

Departures from the paper: see trainer/step.py, batching.py, evaluate.py and run/compute.py headers.
"""

from __future__ import annotations

import copy
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from scalerl.batching import BatchFiller, PipelineRL, PPOOffPolicy, staleness
from scalerl.config import DEFAULT_VAL_SIZE, Config, available_cores
from scalerl.errors import ScaleRLError
from scalerl.evaluate import evaluate, live_forecast
from scalerl.lora import apply_lora, merged_state_dict, trainable_params
from scalerl.rewards import has_answer, training_reward
from scalerl.rl.losses import uses_reference
from scalerl.run.checkpoint import TrainState, save_checkpoint
from scalerl.run.compute import FIT_X, ComputeMeter, StepCompute
from scalerl.run.memory import MemoryMonitor, optimizer_mb, tensor_mb, trim, tune_malloc
from scalerl.run.metrics import METRICS_FILE, MetricsWriter, read_rows, roll_back
from scalerl.run.resume import restore_checkpoint
from scalerl.trainer.step import Optimizer, group_stats, train_step
from scalerl.transport.local import ProcessRollouts, ThreadedRollouts
from scalerl.transport.protocol import GeneratorBuild, Stage
from scalerl.transport.window import GroupAssembler, LockedSampler, RetiredSet, Window

TRUNCATION_WARN = 0.10
NO_ANSWER_WARN = 0.5   # share of a batch's completions without an answer section that warns (once)
WARN_EVERY = 50  # steps between two truncation warnings
MAX_EMPTY_BATCHES = 50


@dataclass
class Components:
    """What the loop trains with; tests swap in fakes (a fake generator, a fake reward)."""

    model: torch.nn.Module
    tokenizer: object
    task: object
    reward_fn: Callable       # plain pass/fail: the evaluation's, and the training reward's base
    build: GeneratorBuild     # the generator stage, for every transport (`build_generator`)

    def stage(self, model: torch.nn.Module, seed: int, temperature: float | None = None) -> Stage:
        """The generator stage in this process, decoding with `model`."""
        return self.build(seed, model=model, tokenizer=self.tokenizer, task=self.task, reward=self.reward_fn,
                          temperature=temperature)


def decode_dtype(cfg: Config) -> str:
    """The generator's weight dtype: bf16 under mixed precision (`model.compute_dtype` bf16, or auto on
    a GPU: it decodes a bf16 copy of the trainer's fp32 weights, cast as they are published), else
    `model.dtype`."""
    from scalerl.models import compute_dtype

    return "bf16" if compute_dtype(cfg.model) == "bf16" else cfg.model.dtype


def generator_copy(model: torch.nn.Module, cfg: Config) -> torch.nn.Module:
    """The generator's own copy of the trainer's model, in `decode_dtype(cfg)`, computing its trunk
    as the trainer's forward does (RoPE frequencies in fp32, the trainer's attention kernel)."""
    from scalerl.models import cast_model
    from scalerl.lora import merged_copy
    from scalerl.trainer.forward import match_trainer_attention

    return match_trainer_attention(cast_model(merged_copy(model), decode_dtype(cfg)), cfg.model.share_prompt)


def build_generator(cfg_json: str, device: str, *, seed: int, model: torch.nn.Module | None = None,
                    tokenizer=None, task=None, reward: Callable | None = None,
                    temperature: float | None = None) -> Stage:
    """The engine's generator stage from a run's config (`GeneratorBuild`'s function for real runs).
    Given nothing (a generator process, a Ray actor) it loads the model in `decode_dtype`, the task
    and the reward itself; given `model` (with `tokenizer`), it decodes with that model."""
    from scalerl.models import load_model
    from scalerl.rewards import RewardFn
    from scalerl.rollout import Engine
    from scalerl.tasks import task_for_run
    from scalerl.trainer.forward import match_trainer_attention

    cfg = Config.model_validate_json(cfg_json)
    if model is None:
        model, tokenizer = load_model(cfg.model.name, dtype=decode_dtype(cfg), device=device)
        match_trainer_attention(model, cfg.model.share_prompt)
    task = task if task is not None else task_for_run(cfg, tokenizer, model)
    reward = training_reward(reward if reward is not None else RewardFn(task, cfg.reward), cfg)
    rollout = cfg.rollout if temperature is None else cfg.rollout.model_copy(update={"temperature": temperature})
    return Stage(Engine(model, tokenizer, rollout, fp32_head=cfg.model.fp32_head, seed=seed), task, reward,
                 cfg.run.seed)


def build_components(cfg: Config, device: str) -> Components:
    from scalerl.models import load_model
    from scalerl.rewards import RewardFn
    from scalerl.tasks import task_for_run

    model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype, device=device)
    task = task_for_run(cfg, tokenizer, model)
    return Components(model, tokenizer, task, RewardFn(task, cfg.reward),
                      GeneratorBuild(build_generator, (cfg.model_dump_json(), device)))


@dataclass
class Threads:
    train: int          # torch threads of the trainer
    decode: int         # torch threads of generation and evaluation
    devices: float      # devices the run holds (compute accounting: device-hours = wall-clock x devices)
    eval: int = 0       # torch threads of the evaluation (set by `train` from `eval_threads`)


def run_cores(cfg: Config) -> int:
    """The cores a run divides among its stages: `run.threads`, else every core it may run on."""
    return cfg.run.threads or available_cores()


EVAL_ALL_CORES_PARAMS = 20e6   # a model this large decodes faster on every core (set in `eval_threads`)


def eval_threads(cfg: Config, threads: Threads, n_params: int, device: str) -> int:
    """Threads for the evaluation, which runs while the generator is paused: every core the run
    holds for a model large enough for its decode step to be compute-bound (SmolLM2-135M, 512
    evaluation completions: 49.0 s on 2 threads against 59.6 s on 1), the generator's share
    for the tiny model, whose decode step is Python-bound (more threads only add synchronisation)."""
    if device != "cpu" or n_params < EVAL_ALL_CORES_PARAMS:
        return threads.decode
    if cfg.pipeline.backend == "ray":
        return threads.train                       # the driver's threads; the generators are actors
    return run_cores(cfg)


def split_threads(cfg: Config, device: str) -> Threads:
    """How the cores are divided, and how many devices the run holds.

    On a GPU both stages share the one device, which counts once. On a CPU a device is a core.
    Decoding runs on one torch thread per generator: the tiny model's decode step is
    Python-bound and intra-op threads only add synchronisation (measured slower with 2 threads
    than with 1, see docs/training.md). PipelineRL gives the generator process half the cores
    (at least 1) and the trainer the rest; PPO-off-policy holds all cores for both of its
    alternating phases. On Ray the actors' reserved devices count too (`ray_devices`).
    """
    total = run_cores(cfg)
    if device != "cpu":
        threads = Threads(total, total, 1.0)
    elif cfg.pipeline.mode == "pipeline_rl" and total >= 2 and cfg.pipeline.backend == "local":
        gen = total // 2
        threads = Threads(total - gen, gen, float(total))
    else:
        threads = Threads(total, 1, float(total))
    if cfg.pipeline.backend == "ray":
        threads.devices = ray_devices(cfg, device, threads.train)
    return threads


def ray_devices(cfg: Config, device: str, driver_threads: int) -> float:
    """Devices a Ray run holds: the driver's (its GPU, or its trainer threads) plus what every
    generator and trainer-worker actor reserves. GPUs are counted when the run uses any, else cores."""
    r = cfg.ray
    if device != "cpu" or r.generator_gpus > 0 or r.trainer_gpus > 0:
        return float(device != "cpu") + r.generators * r.generator_gpus + (r.trainers - 1) * r.trainer_gpus
    return float(driver_threads) + r.generators * r.generator_cpus + (r.trainers - 1) * r.trainer_cpus


def _use_process(cfg: Config, device: str) -> bool:
    if cfg.pipeline.transport == "auto":
        return device == "cpu" and run_cores(cfg) >= 2
    return cfg.pipeline.transport == "process"


class Trainer:
    """The state of one run: model, optimizer, curriculum, counters; saves and restores them."""

    def __init__(self, cfg: Config, comps: Components, run_dir: Path):
        from scalerl.rl.curriculum import NoPositiveResampling

        self.cfg = cfg
        self.comps = comps
        self.run_dir = run_dir
        self.model = comps.model
        self.optim = Optimizer(self.model, cfg)
        self.curriculum = NoPositiveResampling.from_config(cfg.curriculum)
        self.meter = ComputeMeter(sum(p.numel() for p in self.model.parameters()))
        self.state = TrainState()
        self.trainable_params = trainable_params(self.model)
        if cfg.model.lora is not None:
            lora = cfg.model.lora
            print(f"LoRA r={lora.r}, alpha={lora.alpha:g} on {', '.join(lora.targets)}: {self.trainable_params:,} "
                  f"trainable parameters of {self.meter.n_params:,}")
        self.counters: dict[str, float] = {"skipped_batches": 0, "stale_dropped": 0, "zero_variance_dropped": 0,
                                           "groups_drawn": 0}
        kl = uses_reference(cfg.loss)
        # the initial policy (copied before any checkpoint is loaded), for the KL penalty only
        self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False) if kl else None
        self.step_fn: Callable = train_step  # the ray backend swaps in a data-parallel step (ray.trainers > 1)

    def train_on(self, groups: list) -> dict | None:
        """One optimizer step on the step's kept groups: its loss row, or None when no token was trainable."""
        return self.step_fn(self.model, self.optim, groups, self.cfg, self.comps.tokenizer.pad_token_id,
                            self.state.step + 1, self.ref_model)

    def restore(self) -> None:
        """Carry on from the newest intact checkpoint (damaged ones are named and set aside, metrics.jsonl
        is checked up to it, see scalerl.run.resume); roll metrics.jsonl back to it."""
        found = restore_checkpoint(self.run_dir, self.model)
        if found is None:
            roll_back(self.run_dir, 0)
            return
        opt_state, self.state, ckpt = found
        try:
            self.optim.load_state_dict(opt_state)
        except (KeyError, ValueError, TypeError) as exc:
            raise ScaleRLError(f"{ckpt / 'optimizer.pt'} does not fit this run's optimizer ({exc}): was "
                               "config.yaml changed? (--set on --resume cannot change the model or the optimizer's "
                               "parameters)") from None
        if self.curriculum is not None:
            self.curriculum.load_state_dict(self.state.curriculum)
        self.meter.load_state_dict(self.state.compute)
        self.counters.update(self.state.counters)
        roll_back(self.run_dir, self.state.metrics_offset)

    def checkpoint(self, metrics: MetricsWriter, sampler_state: dict) -> None:
        self.state.compute = self.meter.state_dict()
        self.state.curriculum = self.curriculum.state_dict() if self.curriculum is not None else {}
        self.state.sampler = sampler_state
        self.state.metrics_offset = metrics.offset()
        self.state.counters = dict(self.counters)
        save_checkpoint(self.run_dir, self.model, self.optim.state_dict(), self.state)


def _make_mode(tr: Trainer, device: str, threads: Threads):
    """The configured off-policy mode over a generator (thread, process, or direct)."""
    from scalerl.rl.curriculum import CurriculumSampler

    cfg, comps = tr.cfg, tr.comps
    P, G, k = cfg.batch.prompts, cfg.batch.generations, cfg.pipeline.k
    gen_seed = cfg.run.seed * 1_000_003 + tr.state.step  # a resumed run draws fresh samples
    sampler_state = tr.state.sampler or {"seed": cfg.run.seed, "epoch": 0, "position": 0}
    if cfg.pipeline.backend == "ray":  # generator actors + data-parallel trainer ranks (scalerl.transport.ray_session)
        from scalerl.transport.ray_session import ray_mode

        return ray_mode(tr, comps.build, gen_seed, sampler_state)
    if cfg.pipeline.mode == "pipeline_rl" and _use_process(cfg, device):
        source = ProcessRollouts(comps.build, gen_seed, merged_state_dict(tr.model), tr.state.step,
                                 sampler_state, tr.curriculum, G, Window(P, k), threads.decode)
        return PipelineRL(source, k), source
    stage = comps.stage(generator_copy(tr.model, cfg), gen_seed)
    stage.generator.update_weights(merged_state_dict(tr.model), tr.state.step)
    retired = RetiredSet.of(tr.curriculum)
    sampler = CurriculumSampler(stage.task, retired, seed=stage.sampler_seed)
    sampler.load_state_dict(sampler_state)
    if cfg.pipeline.mode == "pipeline_rl":
        source = ThreadedRollouts(stage.generator, LockedSampler(sampler), G, stage.reward, Window(P, k),
                                  tr.state.step, retired, score_workers=GroupAssembler.workers_for(stage.task))
        return PipelineRL(source, k), source
    return PPOOffPolicy(stage.generator, LockedSampler(sampler), stage.reward, k, P, G, threads.decode, retired,
                        score_workers=GroupAssembler.workers_for(stage.task)), None


def train(cfg: Config, run_dir: Path, resume: bool = False, comps: Components | None = None,
          progress: bool = True) -> Trainer:
    """Train to `cfg.run.max_steps` optimizer steps (or `run.max_minutes`); return the Trainer."""
    from scalerl.models import resolve_device

    tune_malloc()
    device = resolve_device(cfg.model.device)
    threads = split_threads(cfg, device)
    torch.set_num_threads(threads.train)
    torch.manual_seed(cfg.run.seed)
    comps = comps or build_components(cfg, device)
    if cfg.model.lora is not None:
        comps.model = apply_lora(comps.model, cfg.model.lora)
    _report_split(cfg, comps.task)
    comps.model.train()
    tr = Trainer(cfg, comps, Path(run_dir))
    threads.eval = eval_threads(cfg, threads, tr.meter.n_params, device)
    if resume:
        tr.restore()
    metrics = MetricsWriter(run_dir)
    eval_gen = comps.stage(tr.model, cfg.run.seed + 7919, cfg.eval.temperature).generator
    tr.model.train()
    mode, _ = _make_mode(tr, device, threads)
    try:
        _loop(Stages(tr, mode, metrics, eval_gen, threads, progress))
    finally:
        mode.close()
        metrics.close()
    return tr


def _report_split(cfg: Config, task) -> None:
    """One line when a file's validation split is its default share (`task.val_size` unset)."""
    if cfg.task.name == "file" and cfg.task.val_size is None:
        print(f"task {task.name}: {task.train_size} training prompts, {task.val_size} held out for validation (a "
              f"tenth of the distinct rows, at most {DEFAULT_VAL_SIZE}; task.val_size sets it); evaluation: "
              f"{cfg.eval.prompts_for(task.val_size)} prompts x {cfg.eval.samples} samples"
              + (f"; {cfg.task.shots} more shown as solved examples before each question (task.shots)"
                 if cfg.task.shots else ""))


def eval_rows(run_dir) -> list[dict]:
    """The evaluation rows so far that hold FIT_X and val/pass_rate, from the run's metrics.jsonl
    (rolled back to the checkpoint on a resume): the live forecast reads the same record as the final fit."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    return [r for r in read_rows(path)
            if r.get("kind") == "eval" and r.get(FIT_X) is not None and r.get("val/pass_rate") is not None]


def eval_curve(run_dir) -> list[tuple[float, float]]:
    """(FIT_X, val/pass_rate) of every evaluation so far (`eval_rows`)."""
    return [(r[FIT_X], r["val/pass_rate"]) for r in eval_rows(run_dir)]


def downstream_sets(cfg: Config, tokenizer) -> list[tuple[str, list, Callable, int]]:
    """`eval.downstream`: (name, its first `eval.downstream_prompts` validation prompts, its reward,
    scoring threads) per set; each task is built as `task.name=<name>` would be, with the run's
    other task settings."""
    from scalerl.rewards import RewardFn
    from scalerl.tasks import get_task

    out = []
    for name in cfg.eval.downstream:
        task = get_task(cfg.task.model_copy(update={"name": name, "weights": None}), tokenizer, sandbox=cfg.sandbox,
                        think=cfg.rollout.length.type == "interrupt")
        n = min(cfg.eval.downstream_prompts, task.val_size)
        out.append((name, task.val_prompts(n), RewardFn(task, cfg.reward), GroupAssembler.workers_for(task)))
    return out


def _eval_row(tr: Trainer, eval_gen, val_prompts, mode, decode_threads: int, downstream=()) -> dict:
    cfg = tr.cfg
    t0 = time.monotonic()
    mode.pause()
    threads = torch.get_num_threads()
    torch.set_num_threads(decode_threads)  # the generator is paused meanwhile
    tr.model.eval()
    try:
        eval_gen.reseed()  # common random numbers across evaluations (Engine.reseed)
        row = evaluate(eval_gen, val_prompts, cfg.eval.samples, tr.comps.reward_fn,
                       workers=GroupAssembler.workers_for(tr.comps.task))
        for name, prompts, reward, workers in downstream:
            other = evaluate(eval_gen, prompts, cfg.eval.samples, reward, workers=workers)
            row[f"downstream/{name}/pass_rate"] = other["val/pass_rate"]
            row[f"downstream/{name}/pass_rate_se"] = other["val/pass_rate_se"]
    finally:
        tr.model.train()
        torch.set_num_threads(threads)
        mode.resume()
    totals = tr.meter.totals()
    row.update(totals)
    rows = [*eval_rows(tr.run_dir), row]   # metrics.jsonl: the one record, and this evaluation
    curve = [(r[FIT_X], r["val/pass_rate"]) for r in rows]
    se = [r.get("val/pass_rate_se") for r in rows]
    row.update(live_forecast(curve, cfg.eval.fit_min_frac, se=None if None in se else se))
    row["time/eval"] = time.monotonic() - t0
    return {"step": tr.state.step, "kind": "eval", **row}


def _step_row(tr: Trainer, mb, loss_row: dict, times: dict[str, float], devices: float, mode) -> dict:
    """The metrics row of one optimizer step."""
    ages = [staleness(g, tr.state.step - 1) for g in mb.kept]
    row = dict(loss_row)
    row.update(group_stats(mb.groups))
    row.update(tr.meter.add(StepCompute(times["step"], devices, mb.tokens_generated, loss_row["tokens/trained_step"])))
    row.update(mb.filler)
    drawn = tr.counters["groups_drawn"]
    row.update({
        "staleness/mean": sum(ages) / len(ages), "staleness/max": max(ages),
        "staleness/dropped": tr.counters["stale_dropped"],
        "staleness/dropped_share": tr.counters["stale_dropped"] / max(1.0, drawn),
        "train/skipped_batches": tr.counters["skipped_batches"],
        "curriculum/retired": tr.curriculum.n_retired if tr.curriculum is not None else 0,
        "time/gen_wait": mb.wait_seconds, "time/gen": mb.gen_seconds,
        "time/score": sum(g.score_seconds for g in mb.groups), "time/score_wait": sum(g.score_wait for g in mb.groups),
        "tokens/per_second": mb.tokens_generated / max(times["step"], 1e-9), "version": tr.state.step,
    })
    row.update({f"time/{name}": seconds for name, seconds in times.items()})
    row.update({"curriculum/pool_size": len(tr.comps.task),
                "curriculum/epoch": mode.sampler_state().get("epoch", 0)})
    return row


def known_consumers(tr: Trainer) -> dict[str, float]:
    """What scalerl knows holds memory in the trainer process, name -> MiB (the memory warning names
    the largest): weights, gradients, optimizer state, the frozen reference model."""
    params = [p for p in tr.model.parameters()]
    out = {"trainer model weights": tensor_mb(params),
           "trainer gradients": tensor_mb(p.grad for p in params if p.grad is not None),
           "trainer optimizer state": optimizer_mb(tr.optim.opt)}
    if tr.ref_model is not None:
        out["reference model (KL penalty)"] = tensor_mb(tr.ref_model.parameters())
    return out


def _check_rewards(mb, step: int) -> None:
    """Stop when the reward (the checker, or reward.function) failed on every answer of a batch:
    nothing could ever pass."""
    errors = [s.error for g in mb.groups for s in g.scores]
    if errors and all(e is not None for e in errors):
        raise ScaleRLError(f"step {step}: the reward failed on all {len(errors)} answers of the batch (first error: "
                           f"{errors[0]}); fix the checker, reward.function or the dataset's answers")


def _observer(tr: Trainer, mode) -> Callable:
    """The curriculum's pass history; a retired prompt goes back to the generator as one message."""
    def observe(group) -> None:
        if tr.curriculum is not None and tr.curriculum.update(group):
            mode.retire(group.prompt.id)
    return observe


class Clock:
    """Seconds per named stage since the last `take()`; `time/<stage>` in the step's metrics row."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - t0

    def take(self) -> dict[str, float]:
        seconds, self.seconds = self.seconds, {}
        return seconds


class Stages:
    """The loop's stages over one run (see `_loop`): what each does to the Trainer, the transport
    (`mode`), metrics.jsonl and the progress bar.

    Step time (`time/step`, the compute clock) runs from the end of one step to the end of the
    next, including collecting, skipped batches, training and publishing, excluding evaluation and
    checkpoints. `time/train` is the optimizer step, `time/publish` handing the weights to the
    generator, `time/checkpoint` the checkpoints saved since the previous step's row."""

    def __init__(self, tr: Trainer, mode, metrics: MetricsWriter, eval_gen, threads: Threads, progress: bool):
        from tqdm import tqdm

        self.tr, self.cfg, self.mode, self.metrics, self.eval_gen, self.threads = tr, tr.cfg, mode, metrics, eval_gen, threads
        task = tr.comps.task
        self.val_prompts = task.val_prompts(tr.cfg.eval.prompts_for(task.val_size))
        self.downstream = downstream_sets(tr.cfg, tr.comps.tokenizer)
        self.eval_steps = set(tr.cfg.eval.steps(tr.cfg.run.max_steps))
        self.bar = tqdm(total=tr.cfg.run.max_steps, initial=tr.state.step, disable=not progress, dynamic_ncols=True)
        self.postfix: dict[str, str] = {}
        self.clock = Clock()
        self.observe = _observer(tr, mode)
        self.memory = MemoryMonitor(mode.processes, lambda: known_consumers(tr))
        self.empty_in_a_row, self.warned_at, self.fell_warned = 0, -WARN_EVERY, False
        self.no_answer, self.no_answer_warned = 0.0, False
        self.reported_params = False
        budget = tr.cfg.run.max_minutes
        self.t_budget = budget * 60 if budget else float("inf")
        self.t_start = self.last = time.monotonic()

    def start(self) -> None:
        """The step-0 evaluation and checkpoint of a fresh run; then wait for the generator (its
        start-up is not compute: the clocks start once it can generate)."""
        tr = self.tr
        if tr.state.step == 0 and not eval_curve(tr.run_dir):
            self.evaluate()
            self.checkpoint()
        self.t_start = time.monotonic() - tr.counters.get("train_seconds", 0.0)  # carries on after a resume
        self.mode.ready()
        self.last = time.monotonic()
        self.clock.take()

    def running(self) -> bool:
        tr = self.tr
        return tr.state.step < self.cfg.run.max_steps and time.monotonic() - self.t_start < self.t_budget

    def done(self) -> bool:
        return self.tr.state.step >= self.cfg.run.max_steps

    def collect(self) -> list:
        """The next mini-batches from the transport (groups arrive scored), each through the curriculum
        and the filler."""
        cfg = self.cfg
        return self.mode.collect(self.tr.state.step, lambda: BatchFiller.from_config(cfg), self.observe)

    def batch(self, mb) -> bool:
        """Count what the mini-batch drew and dropped; False (and counted) when no group survived."""
        tr = self.tr
        _check_rewards(mb, tr.state.step + 1)
        self.warn_no_answer(mb)
        tr.counters["stale_dropped"] += mb.stale_dropped
        tr.counters["groups_drawn"] += len(mb.groups) + mb.stale_dropped
        tr.counters["zero_variance_dropped"] += mb.filler.get("batch/zero_variance_dropped", 0)
        if mb.kept:
            return True
        self.skip(mb)
        self.empty_in_a_row += 1
        if self.empty_in_a_row >= MAX_EMPTY_BATCHES:
            raise ScaleRLError(
                f"{MAX_EMPTY_BATCHES} batches in a row had no group with unequal rewards at step "
                f"{tr.state.step}: the model passes all or none of its prompts (check the task's difficulty)")
        return False

    def warn_no_answer(self, mb) -> None:
        """`train/no_answer_rate`: the share of the batch's completions with no answer section at all
        (not wrong answers: nothing where the checker reads); one warning, the first time it is most."""
        marker = self.tr.comps.task.answer_marker
        texts = [c.text for g in mb.groups for c in g.completions]
        self.no_answer = sum(not has_answer(t, marker) for t in texts) / max(1, len(texts))
        if self.no_answer > NO_ANSWER_WARN and not self.no_answer_warned:
            self.no_answer_warned = True
            warnings.warn(f"step {self.tr.state.step + 1}: {self.no_answer:.0%} of the completions have no answer "
                          f"section at all (nothing where the checker reads, task.answer_marker = {marker!r}), not "
                          "wrong answers: the model does not write the format the task asks for; look at samples "
                          "with `scalerl generate`, set task.answer_marker / task.answer_instruction, or raise "
                          "rollout.max_new_tokens if they are cut first", stacklevel=1)

    def skip(self, mb) -> None:
        """A batch that trains nothing: its tokens count, its wall-clock goes into the next step's."""
        self.tr.meter.add_generated(mb.tokens_generated)
        self.tr.counters["skipped_batches"] += 1

    def step(self, mb) -> dict | None:
        """One optimizer step on the kept groups (None, and the batch skipped, if no token was trainable)."""
        with self.clock.stage("train"):
            loss_row = self.tr.train_on(mb.kept)
        if loss_row is None:
            self.clock.seconds.pop("train")   # a skipped batch's time goes into the next step's time/step only
            self.skip(mb)
            return None
        self.empty_in_a_row = 0
        self.tr.state.step += 1
        return loss_row

    def publish(self) -> None:
        """The new weights and version to the generator (applied in flight under PipelineRL)."""
        with self.clock.stage("publish"):
            self.mode.after_step(merged_state_dict(self.tr.model), self.tr.state.step)

    def log(self, mb, loss_row: dict) -> None:
        """The step's metrics row, the truncation warning, the progress bar."""
        tr, now = self.tr, time.monotonic()
        times = {"step": now - self.last, **self.clock.take()}
        self.last = now
        row = _step_row(tr, mb, loss_row, times, self.threads.devices, self.mode)
        row["train/no_answer_rate"] = self.no_answer
        if not self.reported_params:   # the first train row this process writes
            row["train/trainable_params"] = tr.trainable_params
            self.reported_params = True
        self.warn_truncation(row)
        trim()                                # the step's freed heap pages back to the kernel before measuring
        row.update(self.memory.row())
        self.memory.check(row, tr.state.step)
        tr.counters["train_seconds"] = time.monotonic() - self.t_start
        self.metrics.write({"step": tr.state.step, "kind": "train", **row})
        self.postfix.update({"pass": f"{row['train/pass_rate']:.2f}", "reward": f"{row['train/reward_mean']:.2f}",
                             "tok/s": f"{row['tokens/per_second']:.0f}"})
        self.bar.update(1)

    def warn_truncation(self, row: dict) -> None:
        step = self.tr.state.step
        cut = row["train/truncation_rate"] + row["train/interrupted_rate"]  # the paper's "truncation rate"
        if cut > TRUNCATION_WARN and step >= self.warned_at + WARN_EVERY:
            self.warned_at = step
            warnings.warn(f"step {step}: {cut:.0%} of the completions were cut or interrupted (> "
                          f"{TRUNCATION_WARN:.0%}): training tends to degrade (paper Section 2); see "
                          "train/truncation_rate and train/interrupted_rate in metrics.jsonl", stacklevel=1)

    def evaluate(self) -> None:
        """mean@k on the validation set + live forecast: an eval row (its own `time/eval`)."""
        erow = _eval_row(self.tr, self.eval_gen, self.val_prompts, self.mode, self.threads.eval, self.downstream)
        self.metrics.write(erow)
        self.postfix["val"] = f"{erow['val/pass_rate']:.3f}"
        if "forecast/A" in erow:
            self.postfix["A"] = f"{erow['forecast/A']:.3f}[{erow['forecast/A_lo']:.2f},{erow['forecast/A_hi']:.2f}]"
        if erow.get("forecast/fell"):
            self.postfix["A"] = "fell"
            if not self.fell_warned:
                self.fell_warned = True
                warnings.warn(f"step {erow['step']}: the validation pass rate fell after its peak "
                              f"({erow['forecast/peak']:.3f} -> {erow['val/pass_rate']:.3f}): the run is collapsing and "
                              "its sigmoid forecast no longer holds; see forecast/fell and the training metrics in "
                              "metrics.jsonl", stacklevel=1)
        self.bar.set_postfix(self.postfix, refresh=True)

    def checkpoint(self) -> None:
        with self.clock.stage("checkpoint"):
            self.tr.checkpoint(self.metrics, self.mode.sampler_state())

    def pause_for(self, stage: Callable[[], None]) -> None:
        """Run `stage` off the step clock and off `run.max_minutes` (evaluation and checkpoint
        time is neither step time nor training time)."""
        t0 = time.monotonic()
        stage()
        self.last += time.monotonic() - t0
        self.t_start += time.monotonic() - t0

    def every(self) -> None:
        """Evaluate on the `eval` schedule and checkpoint every `run.checkpoint_every`, and at the end."""
        step, done = self.tr.state.step, self.done()
        if step in self.eval_steps or done:
            self.pause_for(self.evaluate)
        if step % self.cfg.run.checkpoint_every == 0 or done:
            self.pause_for(self.checkpoint)
        self.bar.set_postfix(self.postfix, refresh=False)

    def end_of_round(self) -> None:
        """PPO-off-policy: the generator gets the weights after its k steps (PipelineRL: nothing)."""
        self.mode.after_round(merged_state_dict(self.tr.model), self.tr.state.step)

    def finish(self) -> None:
        """Stopped by `run.max_minutes`: end on an evaluation and a checkpoint."""
        tr = self.tr
        if not self.done():
            curve = eval_curve(tr.run_dir)
            if not curve or curve[-1][0] < tr.meter.totals()[FIT_X]:
                self.evaluate()
            self.checkpoint()
        self.bar.close()


def _loop(run: Stages) -> None:
    """The pipeline, one optimizer step per mini-batch."""
    run.start()
    while run.running():
        for mb in run.collect():           # groups, scored in the transport, through curriculum and filler
            if run.done():
                break
            if not run.batch(mb):          # nothing kept: skipped and counted
                continue
            loss_row = run.step(mb)        # the optimizer step
            if loss_row is None:
                continue
            run.publish()                  # weights + version to the generator
            run.log(mb, loss_row)          # the step's metrics row
            run.every()                    # evaluation, checkpoint
        run.end_of_round()
    run.finish()
