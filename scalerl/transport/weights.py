"""The weights a generator process decodes straight from: one buffer that the trainer's and the
generator's processes both map, the policy version it holds, and the lock that keeps every write
between two decode steps. The same code on a CPU and on CUDA.

    trainer                                         generator process
    SharedWeights.write(version) ──the lock──>      StepGate (the engine's `hold`): before every
      writes the buffer (or, aliased, the           decode step, lets a waiting writer in, then
      optimizer steps the parameters in it),        holds the lock for the step; a new version is
      then sets version and horizon                 staged (`update_weights({}, v)`, nothing copied)

- **One copy.** The buffer holds every weight once (tied weights once). On a CPU it lives in shared
  memory (torch's file-descriptor sharing: nothing is left in /dev/shm); on CUDA it is device
  memory the generator process maps through CUDA IPC (the tensors travel once, as the process's
  arguments, through torch.multiprocessing). The generator's model uses these tensors as its
  parameters (`adopt`): no copy of its own, no copy staged per version.
- **Aliased.** When the generator decodes in the trainer's dtype and device without adapters
  (`alias`), the buffer *is* the trainer's parameters: publishing copies nothing, and the
  optimizer's step runs under the lock instead (`write`, through `Optimizer.step_guard`), so the
  weights still change only between two decode steps.
- **Exact versions.** The generator holds the lock from one step boundary to the next and reads
  the version under it; a writer sets the version before it releases the lock. So every token is
  decoded with the weights of the version it records (PipelineRL, paper Section 3.1).
- **Device work finished.** On CUDA both sides synchronise the device before they release the
  lock (kernels are asynchronous): a write is complete before a step reads it, a step before a
  write starts.
- **A writer is never starved.** The writer raises `want`; the generator, at its next boundary,
  releases the lock and waits for `want` to fall before it takes the lock again.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import torch

from scalerl.errors import ScaleRLError

WAIT_S = 0.0005  # the generator's poll while a writer holds the lock
LOCK_POLL_S = 1.0  # the writer's wait between two checks that the generator process is alive


@dataclass
class WeightsLink:
    """What travels to the generator process (picklable by torch.multiprocessing)."""

    tensors: dict[str, torch.Tensor]  # name -> the tensor to decode from (tied names: the same tensor)
    head32: tuple[str, torch.Tensor] | None  # (head weight's name, its fp32 copy): a low-precision engine's fp32 head
    lock: Any  # multiprocessing Lock: a decode step and a write exclude each other
    want: Any  # multiprocessing Value('b'): a writer waits for the lock
    version: Any  # multiprocessing Value('q'): the policy version the buffer holds
    horizon: Any  # multiprocessing Value('q'): the PipelineRL-k horizon of that version
    cuda_mb: Any  # multiprocessing Array('d', 2): the generator's CUDA allocated / reserved MiB


def _storage_key(t: torch.Tensor) -> tuple:
    return (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)


def _sync(tensors) -> None:
    """Wait for the device's queued work on `tensors` (CUDA kernels are asynchronous); nothing on a CPU."""
    devices = {t.device for t in tensors if t.device.type == "cuda"}
    for device in devices:
        torch.cuda.synchronize(device)


class SharedWeights:
    """Trainer side: the buffer, its version, and `write` / `publish`.

    `weights`: the trainer's published state (name -> tensor, tied names sharing a storage);
    `dtype`: the generator's decode dtype; `alias`: the buffer may be the trainer's own tensors
    (same dtype and device; the caller knows no adapter is merged); `head`: the name of the LM
    head's weight, whose fp32 values a lower-precision engine keeps for its fp32 head.
    `alive()` raises when the generator process is gone (checked while waiting for the lock)."""

    def __init__(
        self,
        ctx,
        weights: Mapping[str, torch.Tensor],
        version: int,
        horizon: int,
        dtype: torch.dtype,
        alias: bool,
        head: str | None = None,
        alive: Callable[[], None] = lambda: None,
    ):
        self.alive = alive
        self.names: dict[str, str] = {}  # name -> the first name of its storage (tied weights)
        self.buffers: dict[str, torch.Tensor] = {}  # first name -> buffer
        seen: dict[tuple, str] = {}
        with torch.no_grad():
            for name, t in weights.items():
                key = _storage_key(t)
                if key in seen:
                    self.names[name] = seen[key]
                    continue
                seen[key] = self.names[name] = name
                if alias and t.dtype == dtype:
                    buf = t.detach()
                    if buf.device.type == "cpu":
                        buf.share_memory_()  # in place: the trainer's parameter now lives in shared memory
                else:
                    buf = torch.empty(t.shape, dtype=dtype, device=t.device)
                    if buf.device.type == "cpu":
                        buf.share_memory_()
                    buf.copy_(t)
                self.buffers[name] = buf
            self.head32 = None
            if head is not None and dtype != torch.float32:
                src = weights[head]
                self.head32 = (head, torch.empty(src.shape, dtype=torch.float32, device=src.device))
                if src.device.type == "cpu":
                    self.head32[1].share_memory_()
                self.head32[1].copy_(src)
        self.aliased = all(self._is_source(n, weights[n]) for n in self.buffers) and self.head32 is None
        self.link = WeightsLink(
            {n: self.buffers[first] for n, first in self.names.items()},
            self.head32,
            ctx.Lock(),
            ctx.Value("b", 0, lock=False),
            ctx.Value("q", version, lock=False),
            ctx.Value("q", horizon, lock=False),
            ctx.Array("d", 2, lock=False),
        )

    def _is_source(self, name: str, t: torch.Tensor) -> bool:
        buf = self.buffers[name]
        return buf.data_ptr() == t.data_ptr() and buf.dtype == t.dtype and buf.device == t.device

    @property
    def version(self) -> int:
        return self.link.version.value

    def nbytes(self) -> int:
        """Bytes of the buffer (each storage once; aliased: the trainer's own parameters)."""
        n = sum(b.numel() * b.element_size() for b in self.buffers.values())
        return n + (0 if self.head32 is None else self.head32[1].numel() * 4)

    @contextmanager
    def write(self, version: int, horizon: int) -> Iterator[None]:
        """Hold the lock (waiting for the generator's step under way to end), let the caller change
        the buffer, then publish `version` (and its window `horizon`) before releasing it."""
        link = self.link
        link.want.value = 1
        try:
            while not link.lock.acquire(timeout=LOCK_POLL_S):
                self.alive()
            try:
                yield
                _sync(self.buffers.values())
                link.horizon.value = horizon
                link.version.value = version
            finally:
                link.lock.release()
        finally:
            link.want.value = 0

    def publish(self, weights: Mapping[str, torch.Tensor], version: int, horizon: int) -> None:
        """Copy `weights` (name -> tensor, cast to the buffer's dtype) into the buffer as `version`.
        Aliased weights are already there: then only the version is set (if the optimizer's guarded
        step has not set it already)."""
        copies = [
            (self.buffers[first], weights[name])
            for name, first in self.names.items()
            if name == first and not self._is_source(name, weights[name])
        ]
        if self.head32 is not None:
            copies.append((self.head32[1], weights[self.head32[0]]))
        if not copies and self.version == version:
            return
        with self.write(version, horizon), torch.no_grad():
            for dst, src in copies:
                dst.copy_(src)


def adopt(model: torch.nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    """Make `model` decode from `tensors` (a `WeightsLink`'s): each state-dict entry named there
    takes that tensor as its data (tied weights stay tied: their names carry the same tensor); the
    model's own copies are freed. Every entry must be there, in its shape and dtype."""
    own = model.state_dict(keep_vars=True)
    missing = sorted(set(own) - set(tensors))
    if missing:
        raise ScaleRLError(f"the published weights lack {len(missing)} of the model's entries (first: {missing[0]!r})")
    for name, target in own.items():
        src = tensors[name]
        if src.shape != target.shape or src.dtype != target.dtype or src.device != target.device:
            raise ScaleRLError(
                f"published weight {name!r} is {tuple(src.shape)} {src.dtype} on {src.device}; the "
                f"model's is {tuple(target.shape)} {target.dtype} on {target.device}"
            )
    for name, target in own.items():
        target.data = tensors[name]
    if any(t.device.type == "cuda" for t in own.values()):
        torch.cuda.empty_cache()  # the model's own copy, now unused, back to the device


class StepGate:
    """Generator side, passed to `Generator.stream` as its `hold`, which the engine asks before
    every decode step: here the step boundary. Lets a waiting writer in, takes the lock for the
    step that follows, stages a new version (`update_weights` with nothing to copy but a low-precision
    engine's fp32 head) and records its window horizon (`on_version`); says "held" while `paused`."""

    def __init__(self, link: WeightsLink, generator, paused, on_version: Callable[[int, int], None]):
        self.link, self.generator, self.paused, self.on_version = link, generator, paused, on_version
        self.holding = False
        self.version: int | None = None
        self.cuda = any(t.device.type == "cuda" for t in link.tensors.values())

    def is_set(self) -> bool:
        link = self.link
        if self.holding and link.want.value:
            self.release()
            while link.want.value:
                time.sleep(WAIT_S)
        if not self.holding:
            link.lock.acquire()
            self.holding = True
        version = link.version.value
        if version != self.version:
            self.on_version(version, link.horizon.value)
            head = {} if link.head32 is None else {link.head32[0]: link.head32[1]}
            self.generator.update_weights(head, version)
            self.version = version
            self._record_cuda()
        return self.paused.is_set()

    def release(self) -> None:
        """End of a step (or of streaming): the device's work done, the lock free for a writer."""
        if self.holding:
            _sync(self.link.tensors.values())
            self.holding = False
            self.link.lock.release()

    def _record_cuda(self) -> None:
        if self.cuda:
            self.link.cuda_mb[0] = torch.cuda.memory_allocated() / 2**20
            self.link.cuda_mb[1] = torch.cuda.memory_reserved() / 2**20
