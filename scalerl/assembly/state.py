"""The state of one run (`Trainer`): the model, its optimizer, the curriculum, the compute meter and
the run's typed totals (`Counters`); one optimizer step (`train_on`); checkpoint and restore."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

import torch

from scalerl.assembly.generator import Components
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


@dataclass
class Counters:
    """The run's totals, checkpointed with it (`TrainState.counters`)."""

    skipped_batches: int = 0          # batches that trained nothing (no group kept, no trainable token)
    stale_dropped: int = 0            # groups older than k (never, under the PipelineRL-k rule)
    zero_variance_dropped: int = 0    # groups the zero-variance filter dropped
    groups_drawn: int = 0             # every group the trainer received
    train_seconds: float = 0.0        # training wall-clock (`run.max_minutes` counts it; carries over a resume)

    @classmethod
    def from_dict(cls, d: dict) -> Counters:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


class Trainer:
    """The state of one run: model, optimizer, curriculum, counters; saves and restores them."""

    def __init__(self, cfg: Config, comps: Components, run_dir: Path):
        from scalerl.rl.curriculum import NoPositiveResampling

        self.cfg = cfg
        self.comps = comps
        self.run_dir = Path(run_dir)
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
        self.counters = Counters()
        # the initial policy (copied before any checkpoint is loaded), for the KL penalty only
        self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False) if uses_reference(cfg.loss) else None
        self.step_fn: Callable | None = None  # ddp or fsdp ranks (scalerl.assembly.ranks) set their step
        self.shards = None                    # fsdp: the ranks' ShardedStep (checkpoints: their dcp/ parts)
        self.restored: Path | None = None     # the checkpoint restored from

    def train_on(self, groups: list, advantages: torch.Tensor) -> dict | None:
        """One optimizer step on the step's kept groups and their (P, G) advantages: its loss row, or
        None when no token was trainable."""
        step = self.step_fn or train_step   # looked up here: tests swap `train_step` in this module
        try:
            return step(self.model, self.optim, groups, self.cfg, self.comps.tokenizer.pad_token_id,
                        self.state.step + 1, self.ref_model, advantages)
        finally:   # gradients live within a step only: one copy of the parameters freed between steps
            self.optim.opt.zero_grad(set_to_none=True)

    def memory_consumers(self) -> dict[str, float]:
        """What scalerl knows holds memory in the trainer process, name -> MiB (the memory warning names
        the largest): weights, gradients, optimizer state, the frozen reference model."""
        params = list(self.model.parameters())
        out = {"trainer model weights": tensor_mb(params),
               "trainer gradients": tensor_mb(p.grad for p in params if p.grad is not None),
               "trainer optimizer state": optimizer_mb(self.optim.opt)}
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
            raise ScaleRLError(f"{ckpt / 'optimizer.pt'} does not fit this run's optimizer ({exc}): was "
                               "config.yaml changed? (--set on --resume cannot change the model or the optimizer's "
                               "parameters)") from None
        if (ckpt / SHARDS).is_dir() and self.cfg.trainer.resolved(self.cfg.ray.trainers) != "fsdp":
            from scalerl.trainer.sharded import load_shards   # FSDP ranks wrote it: AdamW's state is there

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
        save_checkpoint(self.run_dir, self.model, self.optim.state_dict(), self.state,
                        shards=self.shards.save if self.shards is not None else None)
