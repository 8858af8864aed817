"""`build_run`: everything one run trains with, built in order (threads, components, the run's tasks,
the Ray it needs, the Trainer with its step strategy and its restore, the evaluation's engine, the source
of scored groups (`make_mode`), the trainer's ranks, the memory monitor), as a `Run`.

The evaluation decodes the trainer's current weights: in the trainer's process, with the trainer's
own model (thread transport, PPO-off-policy, Ray's driver), or, under the process transport, in
the generator process on the published weights (which are the trainer's after each step's
publish), so that the trainer's process never holds a second engine and its K/V cache."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from scalerl.assembly.generator import Components, build_components, decode_dtype
from scalerl.assembly.modes import make_mode
from scalerl.assembly.ranks import start_ray
from scalerl.assembly.resources import Threads, eval_threads, generator_host, split_threads, use_process
from scalerl.config import DEFAULT_VAL_SIZE, Config, InterruptConfig
from scalerl.evaluate import Downstream, EvalEngine, Evaluator, SplitEvaluator
from scalerl.lora import apply_lora
from scalerl.rollout import engine_spec
from scalerl.rollout.length import check_budget, phrase_ids
from scalerl.run.memory import MemoryMonitor, freeze, tune_malloc
from scalerl.tasks import RunTasks, run_tasks
from scalerl.trainer.state import Trainer, make_strategy
from scalerl.transport.local import EvalSpec, ProcessRollouts
from scalerl.transport.protocol import RolloutSource
from scalerl.transport.window import GroupAssembler

EVAL_SEED_OFFSET = 7919  # the evaluation engine's seed: run.seed + this (its own random streams)
SPLIT_SEED_OFFSET = 1  # the trainer process's share of a split evaluation: the evaluation's seed + this


@dataclass
class Run:
    """One run, built: the Trainer (its step strategy started), the source of scored groups, the evaluation,
    the components, the threads and devices, and the run's tasks (built here, only read by the loop)."""

    trainer: Trainer
    source: RolloutSource
    evaluator: Evaluator
    comps: Components
    threads: Threads
    memory: MemoryMonitor
    tasks: RunTasks  # the training task, validation prompts, downstream sets
    started: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # what `close` stops

    def close(self) -> None:
        """Close the source, then the trainer's ranks, then their Ray (each runs, even if one raises)."""
        self.started.close()


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
    if isinstance(cfg.rollout.length, InterruptConfig):  # refused here, before a generator process starts
        check_budget(cfg.rollout, len(phrase_ids(comps.tokenizer, cfg.rollout.length.phrase)))
    comps.model.train()
    with contextlib.ExitStack() as started:  # on an error, stop what was started (last first)
        placement = start_ray(cfg, generator_host(cfg, device), started)
        strategy = make_strategy(cfg, options=placement.trainer if placement is not None else None)
        tr = Trainer(cfg, comps.model, comps.tokenizer.pad_token_id, Path(run_dir), strategy)
        if resume:
            tr.restore()
        freeze()  # the model, tokenizer, task and optimizer, built for the whole run: out of the collector's sight
        evals = EvalSpec(
            cfg.run.seed + EVAL_SEED_OFFSET, cfg.eval.temperature, eval_threads(cfg, threads, tr.meter.n_params, device)
        )
        here = _local_engine(cfg, comps, tr, device, evals)
        tr.model.train()
        started.callback(tr.close)  # the ranks, once the source is closed
        source = make_mode(tr, comps, device, threads, evals, placement)
        started.callback(source.close)
        tr.start()  # the trainer's ranks, from the restored weights
        evaluator = _evaluator(
            cfg, comps, tasks, _eval_engine(cfg, comps, tr, device, threads, evals, source, here), evals.threads
        )
        memory = MemoryMonitor(source.processes, _consumers(tr, source), devices=source.device_memory)
        return Run(tr, source, evaluator, comps, threads, memory, tasks, started.pop_all())


def _evaluator(cfg: Config, comps: Components, tasks: RunTasks, engine: EvalEngine, n_threads: int) -> Evaluator:
    """The run's evaluation: the validation prompts and the downstream sets, decoded by `engine`."""
    downstream = tuple(
        Downstream(name, prompts, reward, GroupAssembler.workers_for(task))
        for name, task, prompts, reward in tasks.downstream
    )
    return Evaluator(
        engine,
        tasks.val_prompts,
        cfg.eval.samples,
        comps.reward_fn,
        GroupAssembler.workers_for(comps.task),
        n_threads,
        downstream,
    )


def _consumers(tr: Trainer, source: RolloutSource) -> Callable[[], dict[str, float]]:
    """What holds memory, name -> MiB (the memory warning names the largest): the trainer's, and the
    process transport's published weights."""
    if not isinstance(source, ProcessRollouts):
        return tr.memory_consumers

    def consumers() -> dict[str, float]:
        return {**tr.memory_consumers(), "published weights (shared by both processes)": source.published_mb()}

    return consumers


def _local_engine(cfg: Config, comps: Components, tr: Trainer, device: str, evals: EvalSpec) -> EvalEngine | None:
    """The evaluation's engine over the trainer's own model, built before the source (none under the
    process transport: the generator process evaluates): on the local engine when the run's engine
    decodes no model here (a server's client)."""
    if use_process(cfg, device):
        return None
    local = not engine_spec(cfg.rollout.engine).needs.copy
    return comps.stage(tr.model, evals.seed, evals.temperature, local=local).generator


def _eval_engine(
    cfg: Config,
    comps: Components,
    tr: Trainer,
    device: str,
    threads: Threads,
    evals: EvalSpec,
    source: RolloutSource,
    here: EvalEngine | None,
) -> EvalEngine:
    """What the evaluation decodes with: the generator process's engine under the process transport (and,
    with `eval.split`, an engine over the trainer's model for its share: `split_share`), else `here`."""
    if not isinstance(source, ProcessRollouts):
        assert here is not None, "an in-process evaluation engine is built for every source but a process"
        return here
    remote = source.evaluator()
    share = split_share(cfg, threads, evals.threads, device)
    if not share:
        return remote
    local = not engine_spec(cfg.rollout.engine).needs.copy
    mine = comps.stage(tr.model, evals.seed + SPLIT_SEED_OFFSET, evals.temperature, local=local).generator
    return SplitEvaluator(remote, mine, share)


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
        print(
            f"task {task.name}: {task.train_size} training prompts, {task.val_size} held out for validation (a "
            f"tenth of the distinct rows, at most {DEFAULT_VAL_SIZE}; task.val_size sets it); evaluation: "
            f"{cfg.eval.prompts_for(task.val_size)} prompts x {cfg.eval.samples} samples"
            + (
                f"; {cfg.task.shots} more shown as solved examples before each question (task.shots)"
                if cfg.task.shots
                else ""
            )
        )
