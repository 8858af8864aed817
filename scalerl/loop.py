"""`train(cfg, run_dir)`: the RL loop of `scalerl train`, in the paper's stages (`_loop`):

    generate -> filter -> advantages -> train -> publish -> log -> [evaluate] [checkpoint]

each timed as `time/<stage>` in the step's metrics row; scoring runs in the transport as groups
complete (`time/score`). What each stage does and where: docs/design.md, "The loop". Everything
is built below the loop (scalerl.assembly); the rows and warnings are in scalerl.monitor.
Departures from the paper: see trainer/step.py, batching.py, evaluate.py and run/compute.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from scalerl.assembly.generator import Components
from scalerl.assembly.run import Run, build_run
from scalerl.batching import BatchFiller, filter_groups
from scalerl.config import Config
from scalerl.errors import ScaleRLError
from scalerl.evaluate import eval_curve, forecast_row
from scalerl.lora import merged_state_dict
from scalerl.monitor import Clock, Warnings, check_rewards, eval_postfix, step_row
from scalerl.rl.staleness import StalenessBound
from scalerl.run.compute import FIT_X, StepCompute
from scalerl.run.memory import settle
from scalerl.run.metrics import MetricsWriter
from scalerl.trainer.step import batch_advantages
from scalerl.transport.protocol import MiniBatch, TrainerUpdate

MAX_EMPTY_BATCHES = 50


def train(cfg: Config, run_dir: Path, resume: bool = False, comps: Components | None = None, progress: bool = True):
    """Train to `cfg.run.max_steps` optimizer steps (or `run.max_minutes`); return the Trainer."""
    run = build_run(cfg, Path(run_dir), resume, comps)
    metrics = MetricsWriter(run_dir)
    try:
        _loop(Stages(run, metrics, progress))
    finally:
        run.close()
        metrics.close()
    return run.trainer


class Stages:
    """The loop's stages over one run (see `_loop`): what each does to the Trainer, the source of
    scored groups (`source`, the one seam to generation), metrics.jsonl and the progress bar.

    Step time (`time/step`, the compute clock) runs from the end of one step to the end of the
    next, including generating, skipped batches, training and publishing, excluding evaluation and
    checkpoints; each stage's own seconds are `time/<stage>` (evaluation and checkpoints since the
    previous row included)."""

    def __init__(self, run: Run, metrics: MetricsWriter, progress: bool):
        from tqdm import tqdm

        tr = run.trainer
        self.run, self.tr, self.cfg, self.source, self.metrics = run, tr, tr.cfg, run.source, metrics
        task = run.tasks.train
        self.eval_steps = set(self.cfg.eval.steps(self.cfg.run.max_steps))
        self.bar = tqdm(total=self.cfg.run.max_steps, initial=tr.state.step, disable=not progress, dynamic_ncols=True)
        self.postfix: dict[str, str] = {}
        self.clock, self.warn = Clock(), Warnings(task.answer_marker)
        self.memory = run.memory
        self.retired: list[str] = []  # retired since the last message to the generator
        p = self.cfg.pipeline
        self.bound = StalenessBound(p.k, p.max_kl) if p.mode == "pipeline_rl" and p.max_kl is not None else None
        self.empty_in_a_row, self.no_answer, self.reported_params = 0, 0.0, False
        budget = self.cfg.run.max_minutes
        self.t_budget = budget * 60 if budget else float("inf")
        self.t_start = self.last = time.monotonic()

    def start(self) -> None:
        """The step-0 evaluation and checkpoint of a fresh run; then wait for the generator (its
        start-up is not compute: the clocks start once it can generate)."""
        if self.tr.state.step == 0 and not eval_curve(self.tr.run_dir):
            self.evaluate()
            self.checkpoint()
        self.t_start = time.monotonic() - self.tr.counters.train_seconds  # carries on after a resume
        self.source.ready()
        self.last = time.monotonic()
        self.clock.take()

    def running(self) -> bool:
        return not self.done() and time.monotonic() - self.t_start < self.t_budget

    def done(self) -> bool:
        return self.tr.state.step >= self.cfg.run.max_steps

    def generate(self) -> list[MiniBatch]:
        """The next mini-batches from the source, by its policy (groups arrive scored); each group drawn goes
        through the curriculum's pass history, and the batch rule says when a batch is full."""

        def observe(group) -> None:
            if self.tr.curriculum is not None and self.tr.curriculum.update(group):
                self.retired.append(group.prompt.id)

        with self.clock.stage("generate"):
            return self.source.collect(self.tr.state.step, lambda: BatchFiller.from_config(self.cfg), observe)

    def filter(self, mb: MiniBatch) -> list | None:
        """The groups the step trains on; None (the batch skipped and counted) when none survived."""
        tr, step = self.tr, self.tr.state.step + 1
        with self.clock.stage("filter"):
            check_rewards(mb, step)
            self.no_answer = self.warn.no_answer(mb, step)
            kept, dropped = filter_groups(mb.groups, self.cfg)
        c = tr.counters
        c.stale_dropped += mb.stale_dropped
        c.groups_drawn += len(mb.groups) + mb.stale_dropped
        c.zero_variance_dropped += dropped
        if kept:
            return kept
        self.skip(mb)
        self.empty_in_a_row += 1
        if self.empty_in_a_row >= MAX_EMPTY_BATCHES:
            raise ScaleRLError(
                f"{MAX_EMPTY_BATCHES} batches in a row had no group with unequal rewards at step "
                f"{tr.state.step}: the model passes all or none of its prompts (check the task's difficulty)"
            )
        return None

    def skip(self, mb: MiniBatch) -> None:
        """A batch that trains nothing: its tokens count, its time goes into the next step's."""
        self.tr.meter.add_generated(mb.tokens_generated)
        self.tr.counters.skipped_batches += 1

    def advantages(self, kept: list) -> torch.Tensor:
        with self.clock.stage("advantages"):
            return batch_advantages(kept, self.cfg)

    def train(self, mb: MiniBatch, kept: list, advantages: torch.Tensor) -> dict | None:
        """One optimizer step (None, and the batch skipped, if no token was trainable)."""
        with self.clock.stage("train"):
            loss_row = self.tr.train_on(kept, advantages)
        if loss_row is None:
            self.clock.seconds.pop("train")  # a skipped batch's time goes into the next step's time/step only
            self.skip(mb)
            return None
        self.empty_in_a_row = 0
        self.tr.state.step += 1
        return loss_row

    def publish(self, loss_row: dict) -> None:
        """One message to the generator: the new weights and version, the prompts retired since the last,
        and (with `pipeline.max_kl`) the staleness bound the step's measured KL allows (`pipeline/bound`)."""
        with self.clock.stage("publish"):
            bound = None
            if self.bound is not None:
                bound = loss_row["pipeline/bound"] = self.bound.update(loss_row)
            self.source.send(
                TrainerUpdate(self.tr.state.step, merged_state_dict(self.tr.model), tuple(self.retired), bound)
            )
            self.retired = []

    def log(self, mb: MiniBatch, kept: list, loss_row: dict) -> None:
        """The step's metrics row, the truncation and memory warnings, the progress bar."""
        tr, now = self.tr, time.monotonic()
        times = {"step": now - self.last, **self.clock.take()}
        self.last = now
        row = {
            **loss_row,
            **step_row(
                mb, kept, tr.state.step, tr.counters, tr.curriculum.n_retired if tr.curriculum is not None else 0
            ),
        }
        row.update(
            tr.meter.add(
                StepCompute(
                    times["step"], self.run.threads.devices, mb.tokens_generated, loss_row["tokens/trained_step"]
                )
            )
        )
        row.update({f"time/{name}": seconds for name, seconds in times.items()})
        row.update(
            {
                "tokens/per_second": mb.tokens_generated / max(times["step"], 1e-9),
                "curriculum/pool_size": len(self.run.comps.task),
                "train/no_answer_rate": self.no_answer,
                "curriculum/epoch": self.source.sampler_state().get("epoch", 0),
            }
        )
        if not self.reported_params:  # the first train row this process writes
            row["train/trainable_params"] = tr.trainable_params
            self.reported_params = True
        self.warn.truncation(row, tr.state.step)
        settle()  # the step's garbage freed, its heap pages back, before measuring
        row.update(self.memory.row())
        self.memory.check(row, tr.state.step)
        tr.counters.train_seconds = time.monotonic() - self.t_start
        self.metrics.write({"step": tr.state.step, "kind": "train", **row})
        self.postfix.update(
            {
                "pass": f"{row['train/pass_rate']:.2f}",
                "reward": f"{row['train/reward_mean']:.2f}",
                "tok/s": f"{row['tokens/per_second']:.0f}",
            }
        )
        self.bar.update(1)

    def evaluate(self) -> None:
        """mean@k on the validation set (the generator paused, the trainer's model in eval mode meanwhile)
        + live forecast: an eval row (its own `time/eval`)."""
        tr, t0 = self.tr, time.monotonic()
        with self.clock.stage("evaluate"):
            self.source.pause()
            tr.model.eval()
            try:
                row = self.run.evaluator()
            finally:
                tr.model.train()
                self.source.resume()
            row.update(tr.meter.totals())
            row.update(forecast_row(tr.run_dir, row, self.cfg.eval.fit_min_frac))
            erow = {"step": tr.state.step, "kind": "eval", **row, "time/eval": time.monotonic() - t0}
            self.metrics.write(erow)
        self.postfix.update(eval_postfix(erow))
        self.warn.fell(erow)
        self.bar.set_postfix(self.postfix, refresh=True)

    def checkpoint(self) -> None:
        with self.clock.stage("checkpoint"):
            self.tr.checkpoint(self.metrics, self.source.sampler_state())

    def off_the_clock(self, stage) -> None:
        """Run `stage` off the step clock and off `run.max_minutes` (evaluation, checkpoints)."""
        t0 = time.monotonic()
        stage()
        self.last += time.monotonic() - t0
        self.t_start += time.monotonic() - t0

    def every(self) -> None:
        """Evaluate on the `eval` schedule and checkpoint every `run.checkpoint_every`, and at the end."""
        step, done = self.tr.state.step, self.done()
        if step in self.eval_steps or done:
            self.off_the_clock(self.evaluate)
        if step % self.cfg.run.checkpoint_every == 0 or done:
            self.off_the_clock(self.checkpoint)
        self.bar.set_postfix(self.postfix, refresh=False)

    def finish(self) -> None:
        """Stopped by `run.max_minutes`: end on an evaluation and a checkpoint."""
        if not self.done():
            curve = eval_curve(self.tr.run_dir)
            if not curve or curve[-1][0] < self.tr.meter.totals()[FIT_X]:
                self.evaluate()
            self.checkpoint()
        self.bar.close()


def _loop(run: Stages) -> None:
    """The pipeline, one optimizer step per mini-batch, in the paper's stages."""
    run.start()
    while run.running():
        for mb in run.generate():  # scored groups from the source
            if run.done():
                break
            kept = run.filter(mb)  # zero-variance filter; None: skipped and counted
            if kept is None:
                continue
            advantages = run.advantages(kept)  # baseline, batch-level normalisation
            loss_row = run.train(mb, kept, advantages)  # the optimizer step
            if loss_row is None:
                continue
            run.publish(loss_row)  # weights + version + retired prompts to the generator
            run.log(mb, kept, loss_row)  # the step's metrics row
            run.every()  # evaluation, checkpoint
    run.finish()
