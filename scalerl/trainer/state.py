"""The state of one run (`Trainer`): the model, its optimizer, the curriculum, the compute meter and
the run's typed totals (`Counters`); one optimizer step (`train_on`) by the step strategy it is built
with (`StepStrategy`: `LocalStep` here, the ddp or fsdp ranks: `make_strategy`); checkpoint and restore."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Protocol

import torch

from scalerl.config import Config
from scalerl.errors import ScaleRLError
from scalerl.lora import trainable_params
from scalerl.rl.losses import uses_reference
from scalerl.run.checkpoint import SHARDS, TrainState, save_checkpoint
from scalerl.run.compute import ComputeMeter
from scalerl.run.memory import optimizer_mb, tensor_mb
from scalerl.run.metrics import MetricsWriter, roll_back
from scalerl.run.resume import restore_checkpoint
from scalerl.trainer.step import Optimizer, train_step


class StepStrategy(Protocol):
    """How the Trainer's optimizer step runs (`trainer.strategy`), given to the Trainer when it is built:
    `LocalStep` (this process), `scalerl.trainer.data_parallel.DataParallelStep` (ddp: this process is
    rank 0), `scalerl.trainer.sharded.ShardedStep` (fsdp rank actors). Its ranks start from the
    restored weights (`Trainer.start`, after `Trainer.restore`)."""

    def start(self, model: torch.nn.Module, optim: Optimizer, restored: Path | None) -> None:
        """Start the ranks from `model` and `optim` as restored from checkpoint `restored` (None: a new run)."""
        ...

    def __call__(
        self,
        model,
        optim: Optimizer,
        groups: list,
        cfg: Config,
        pad_id: int,
        step: int,
        ref_model=None,
        advantages: torch.Tensor | None = None,
    ) -> dict[str, float] | None:
        """`train_step`'s contract: one optimizer step, its loss row (None: no trainable token)."""
        ...

    def checkpoint_parts(self) -> Callable[[Path], None] | None:
        """What writes the strategy's own part of a checkpoint (fsdp: the ranks' `dcp/` shards), or None."""
        ...

    def close(self) -> None: ...


class LocalStep:
    """`trainer.strategy: single`: this process steps (`train_step`)."""

    def start(self, model: torch.nn.Module, optim: Optimizer, restored: Path | None) -> None: ...

    def __call__(
        self,
        model,
        optim: Optimizer,
        groups: list,
        cfg: Config,
        pad_id: int,
        step: int,
        ref_model=None,
        advantages: torch.Tensor | None = None,
    ) -> dict[str, float] | None:
        # looked up at each call: tests swap `train_step` in this module
        return train_step(model, optim, groups, cfg, pad_id, step, ref_model, advantages)

    def checkpoint_parts(self) -> Callable[[Path], None] | None:
        return None

    def close(self) -> None: ...


def make_strategy(cfg: Config, options: Callable[[int], dict] | None = None) -> StepStrategy:
    """The step strategy of `trainer.strategy` with `ray.trainers` ranks (their actors placed by `options`, the
    rank -> Ray options of the run's placement; their Ray must be up before `Trainer.start`)."""
    strategy = cfg.trainer.resolved(cfg.ray.trainers)
    if strategy == "single":
        return LocalStep()
    if strategy == "ddp":
        from scalerl.trainer.data_parallel import DataParallelStep

        return DataParallelStep(cfg, options=options)
    from scalerl.trainer.sharded import ShardedStep

    return ShardedStep(cfg, options=options)


@dataclass
class Counters:
    """The run's totals, checkpointed with it (`TrainState.counters`)."""

    skipped_batches: int = 0  # batches that trained nothing (no group kept, no trainable token)
    stale_dropped: int = 0  # groups older than k (never, under the PipelineRL-k rule)
    zero_variance_dropped: int = 0  # groups the zero-variance filter dropped
    groups_drawn: int = 0  # every group the trainer received
    train_seconds: float = 0.0  # training wall-clock (`run.max_minutes` counts it; carries over a resume)

    @classmethod
    def from_dict(cls, d: dict) -> Counters:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


class Trainer:
    """The state of one run: model, optimizer, curriculum, counters; saves and restores them. Its steps run by
    `strategy` (started by `start`, after `restore`); `pad_id`: the tokenizer's padding token."""

    def __init__(self, cfg: Config, model: torch.nn.Module, pad_id: int, run_dir: Path, strategy: StepStrategy):
        from scalerl.rl.curriculum import NoPositiveResampling

        self.cfg = cfg
        self.pad_id = pad_id
        self.run_dir = Path(run_dir)
        self.model = model
        self.strategy = strategy
        self.optim = Optimizer(self.model, cfg)
        self.curriculum = NoPositiveResampling.from_config(cfg.curriculum)
        self.meter = ComputeMeter(sum(p.numel() for p in self.model.parameters()))
        self.state = TrainState()
        self.trainable_params = trainable_params(self.model)
        if cfg.model.lora is not None:
            lora = cfg.model.lora
            print(
                f"LoRA r={lora.r}, alpha={lora.alpha:g} on {', '.join(lora.targets)}: {self.trainable_params:,} "
                f"trainable parameters of {self.meter.n_params:,}"
            )
        self.counters = Counters()
        # the initial policy (copied before any checkpoint is loaded), for the KL penalty only
        self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False) if uses_reference(cfg.loss) else None
        self.restored: Path | None = None  # the checkpoint restored from

    def train_on(self, groups: list, advantages: torch.Tensor) -> dict | None:
        """One optimizer step on the step's kept groups and their (P, G) advantages: its loss row, or
        None when no token was trainable."""
        try:
            return self.strategy(
                self.model, self.optim, groups, self.cfg, self.pad_id, self.state.step + 1, self.ref_model, advantages
            )
        finally:  # gradients live within a step only: one copy of the parameters freed between steps
            self.optim.opt.zero_grad(set_to_none=True)

    def start(self) -> None:
        """Start the step strategy's ranks from the weights as restored (`restore` first, when resuming)."""
        self.strategy.start(self.model, self.optim, self.restored)

    def close(self) -> None:
        """Stop the step strategy's ranks."""
        self.strategy.close()

    def memory_consumers(self) -> dict[str, float]:
        """What scalerl knows holds memory in the trainer process, name -> MiB (the memory warning names
        the largest): weights, gradients, optimizer state, the frozen reference model."""
        params = list(self.model.parameters())
        out = {
            "trainer model weights": tensor_mb(params),
            "trainer gradients": tensor_mb(p.grad for p in params if p.grad is not None),
            "trainer optimizer state": optimizer_mb(self.optim.opt),
        }
        if self.ref_model is not None:
            out["reference model (KL penalty)"] = tensor_mb(self.ref_model.parameters())
        return out

    def restore(self) -> None:
        """Carry on from the newest intact checkpoint (damaged ones are named and set aside, metrics.jsonl
        is checked up to it, see scalerl.run.resume); roll metrics.jsonl back to it."""
        found = restore_checkpoint(self.run_dir, self.model)
        if found is None:
            roll_back(self.run_dir, 0)
            return
        opt_state, self.state, ckpt = found
        self.restored = ckpt
        try:
            self.optim.load_state_dict(opt_state)
        except (KeyError, ValueError, TypeError) as exc:
            raise ScaleRLError(
                f"{ckpt / 'optimizer.pt'} does not fit this run's optimizer ({exc}): was "
                "config.yaml changed? (--set on --resume cannot change the model or the optimizer's "
                "parameters)"
            ) from None
        if (ckpt / SHARDS).is_dir() and self.cfg.trainer.resolved(self.cfg.ray.trainers) != "fsdp":
            from scalerl.trainer.sharded import load_shards  # FSDP ranks wrote it: AdamW's state is there

            load_shards(ckpt / SHARDS, self.model, self.optim, self.cfg)
        if self.curriculum is not None:
            self.curriculum.load_state_dict(self.state.curriculum)
        self.meter.load_state_dict(self.state.compute)
        self.counters = Counters.from_dict(self.state.counters)
        roll_back(self.run_dir, self.state.metrics_offset)

    def checkpoint(self, metrics: MetricsWriter, sampler_state: dict) -> None:
        self.state.compute = self.meter.state_dict()
        self.state.curriculum = self.curriculum.state_dict() if self.curriculum is not None else {}
        self.state.sampler = sampler_state
        self.state.metrics_offset = metrics.offset()
        self.state.counters = asdict(self.counters)
        save_checkpoint(
            self.run_dir, self.model, self.optim.state_dict(), self.state, shards=self.strategy.checkpoint_parts()
        )
