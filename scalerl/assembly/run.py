"""`build_run`: everything one run trains with, built in order (threads, components, the run's tasks,
the Trainer and its restore, the evaluation's generator, the off-policy mode over its transport, the memory
monitor), as a `Run`.

The evaluation decodes the trainer's current weights: in the trainer's process, with the trainer's
own model (thread transport, PPO-off-policy, Ray's driver), or, under the process transport, in
the generator process on the published weights (which are the trainer's after each step's
publish), so that the trainer's process never holds a second engine and its K/V cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from scalerl.assembly.generator import Components, build_components, decode_dtype
from scalerl.assembly.modes import Mode, make_mode
from scalerl.assembly.ranks import local_ranks
from scalerl.assembly.resources import Threads, eval_threads, generator_host, split_threads, use_process
from scalerl.assembly.state import Trainer
from scalerl.config import DEFAULT_VAL_SIZE, Config, InterruptConfig
from scalerl.evaluate import SplitEvaluator
from scalerl.lora import apply_lora
from scalerl.rollout import engine_spec
from scalerl.rollout.length import check_budget, phrase_ids
from scalerl.run.memory import MemoryMonitor, freeze, tune_malloc
from scalerl.tasks import RunTasks, run_tasks
from scalerl.transport.local import EvalSpec

EVAL_SEED_OFFSET = 7919   # the evaluation engine's seed: run.seed + this (its own random streams)
SPLIT_SEED_OFFSET = 1     # the trainer process's share of a split evaluation: the evaluation's seed + this


@dataclass
class Run:
    """One run, built: the Trainer, the mode over its transport, the evaluation's generator (decoding
    with the trainer's own model), the threads and devices, the evaluation's threads, and the run's
    tasks (built here, only read by the loop)."""

    trainer: Trainer
    mode: Mode
    eval_gen: object
    threads: Threads
    eval_threads: int
    memory: MemoryMonitor
    tasks: RunTasks                               # the training task, validation prompts, downstream sets
    closers: list = field(default_factory=list)   # the local backend's trainer ranks and their Ray

    def close(self) -> None:
        """Close the mode, then the trainer ranks (each closer runs, even if one raises)."""
        import contextlib

        with contextlib.ExitStack() as stack:
            for close in reversed(self.closers):
                stack.callback(close)
            self.mode.close()


def build_run(cfg: Config, run_dir: Path, resume: bool = False, comps: Components | None = None) -> Run:
    """Build the run (restored from its newest checkpoint when `resume`); `comps` given: tests' fakes."""
    from scalerl.models import resolve_device

    tune_malloc()
    device = resolve_device(cfg.model.device)
    threads = split_threads(cfg, device)
    torch.set_num_threads(threads.train)
    torch.manual_seed(cfg.run.seed)
    comps = comps or build_components(cfg, device)
    if cfg.model.lora is not None:
        comps.model = apply_lora(comps.model, cfg.model.lora)
    tasks = run_tasks(cfg, comps.tokenizer, comps.model, comps.task)
    _report_split(cfg, comps.task)
    if isinstance(cfg.rollout.length, InterruptConfig):   # refused here, before a generator process starts
        check_budget(cfg.rollout, len(phrase_ids(comps.tokenizer, cfg.rollout.length.phrase)))
    comps.model.train()
    tr = Trainer(cfg, comps, Path(run_dir))
    if resume:
        tr.restore()
    freeze()   # the model, tokenizer, task and optimizer, built for the whole run: out of the collector's sight
    n_eval_threads = eval_threads(cfg, threads, tr.meter.n_params, device)
    evals = EvalSpec(cfg.run.seed + EVAL_SEED_OFFSET, cfg.eval.temperature, n_eval_threads)
    eval_gen = None
    # the evaluation decodes the trainer's model in place: on the local engine when the run's engine
    # decodes no model here (a server's client)
    local = not engine_spec(cfg.rollout.engine).needs.copy
    if not use_process(cfg, device):   # else the generator process evaluates (below)
        eval_gen = comps.stage(tr.model, evals.seed, evals.temperature, local=local).generator
    tr.model.train()
    mode, source = make_mode(tr, device, threads, evals)
    closers = []
    if generator_host(cfg, device) != "ray":   # the Ray backend starts its ranks with its actors
        try:
            closers = local_ranks(tr)
        except BaseException:
            mode.close()
            raise
    consumers = tr.memory_consumers
    if source is not None:
        eval_gen = source.evaluator()
        share = split_share(cfg, threads, n_eval_threads, device)
        if share:
            here = comps.stage(tr.model, evals.seed + SPLIT_SEED_OFFSET, evals.temperature, local=local).generator
            eval_gen = SplitEvaluator(eval_gen, here, share)
        def consumers() -> dict[str, float]:
            return {**tr.memory_consumers(), "published weights (shared by both processes)": source.published_mb()}
    memory = MemoryMonitor(mode.processes, consumers, devices=source.device_memory if source is not None else dict)
    return Run(tr, mode, eval_gen, threads, n_eval_threads, memory, tasks, closers)


def split_share(cfg: Config, threads: Threads, n_eval_threads: int, device: str) -> float:
    """The share of an evaluation's prompts the trainer's process decodes (`eval.split`), 0 for
    none: under the process transport on a CPU, when the generator process evaluates on its own
    threads only (`eval_threads`: a model whose decode step is Python-bound) and decodes the
    trainer's weights in their own dtype, the trainer's threads take their share of the cores."""
    if cfg.eval.split == "off" or device != "cpu" or n_eval_threads != threads.decode:
        return 0.0
    if decode_dtype(cfg) != cfg.model.dtype:
        return 0.0
    return threads.train / (threads.train + n_eval_threads)


def _report_split(cfg: Config, task) -> None:
    """One line when a file's validation split is its default share (`task.val_size` unset)."""
    if cfg.task.type == "file" and cfg.task.val_size is None:
        print(f"task {task.name}: {task.train_size} training prompts, {task.val_size} held out for validation (a "
              f"tenth of the distinct rows, at most {DEFAULT_VAL_SIZE}; task.val_size sets it); evaluation: "
              f"{cfg.eval.prompts_for(task.val_size)} prompts x {cfg.eval.samples} samples"
              + (f"; {cfg.task.shots} more shown as solved examples before each question (task.shots)"
                 if cfg.task.shots else ""))
