"""`ray.publish: broadcast`: the trainer's weights sent to the generator actors by a collective
broadcast, bucket by bucket, over a process group of their own.

    rank 0: the trainer process (`scalerl train`)      ranks 1..N: the generator actors
    Sender.send(weights) ──bucket 0, bucket 1, ...──>  Receiver.receive(): into buffers allocated once
        (one bucket copied at a time)                   then Generator.update_weights(views, version)

- **Its own group.** Not the trainer ranks' group (the `scalerl train` process is rank 0 of
  ddp's, and no rank under fsdp): a `TCPStore` on the trainer's node and a `ProcessGroupGloo` or
  `ProcessGroupNCCL` built on it directly (no default group, so a process can belong to this one
  and to another; vLLM's `StatelessProcessGroup` and OpenRLHF's named groups do the same).
- **Backend.** nccl when the published tensors are on CUDA and every generator has a GPU
  (`ray.generator_gpus` > 0; NCCL needs a distinct GPU per member), else gloo (CUDA tensors are
  then copied to the host one bucket at a time).
- **Buckets.** The state dict's storages (tied names once) in order, packed into flat buckets of
  one dtype up to `ray.publish_bucket_mb`; a larger tensor is a bucket of its own and is sent
  from its own storage (no copy). The sender holds at most one bucket besides the weights; each
  receiver holds one set of receive buffers for the run (allocated once, reused every publish).
- **Layout.** Fixed for the run: the receivers get it once, when they join; a publish whose
  weights differ in names, shapes or dtypes is refused.
- **Timeouts.** Joining and every broadcast are bounded by `ray.publish_timeout_s`; a failure
  (a member gone, a timeout) raises a one-line ScaleRLError naming the group and what it waited for.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Mapping

import torch
import torch.distributed as dist

from scalerl.errors import ScaleRLError
from scalerl.run.ports import host_store
from scalerl.transport.weights import _storage_key


@dataclass(frozen=True)
class Entry:
    """One storage in a bucket: its state-dict names (tied weights: several), shape, place."""

    names: tuple[str, ...]
    shape: tuple[int, ...]
    offset: int  # elements into the bucket
    numel: int


@dataclass(frozen=True)
class Bucket:
    dtype: torch.dtype
    numel: int
    entries: tuple[Entry, ...]


def plan_buckets(weights: Mapping[str, torch.Tensor], bucket_bytes: int) -> list[Bucket]:
    """The storages of `weights` in order (tied names together), packed into buckets of one dtype
    of at most `bucket_bytes` (a larger tensor alone in its own)."""
    storages: dict[tuple, list[str]] = {}
    for name, t in weights.items():
        storages.setdefault(_storage_key(t), []).append(name)
    buckets: list[Bucket] = []
    entries: list[Entry] = []
    dtype, size = None, 0
    for names in storages.values():
        t = weights[names[0]]
        if entries and (t.dtype != dtype or (size + t.numel()) * t.element_size() > bucket_bytes):
            buckets.append(Bucket(dtype, size, tuple(entries)))
            entries, size = [], 0
        dtype = t.dtype
        entries.append(Entry(tuple(names), tuple(t.shape), size, t.numel()))
        size += t.numel()
    if entries:
        buckets.append(Bucket(dtype, size, tuple(entries)))
    return buckets


def backend_for(weights: Mapping[str, torch.Tensor], generator_gpus: float) -> str:
    """nccl for CUDA tensors with a GPU in every generator, gloo otherwise."""
    on_cuda = any(t.device.type == "cuda" for t in weights.values())
    return "nccl" if on_cuda and generator_gpus > 0 else "gloo"


@dataclass(frozen=True)
class GroupLink:
    """Where the group meets (picklable: sent to every generator actor)."""

    host: str
    port: int
    world: int  # 1 + the number of generators
    backend: str  # gloo | nccl
    timeout_s: float

    def describe(self, rank: int) -> str:
        return (
            f"the weight-publishing group ({self.backend}, {self.world} members at {self.host}:{self.port}, "
            f"this process rank {rank})"
        )


def open_link(host: str, world: int, backend: str, timeout_s: float) -> tuple[GroupLink, dist.TCPStore]:
    """The group's link and its store, hosted here (rank 0's process) at a port the OS picked and this
    process keeps: no port chosen, released and bound again (scalerl.run.ports). Give both to `Sender`."""
    store = host_store(host, "the weight-publishing group", timeout_s)
    return GroupLink(host, store.port, world, backend, timeout_s), store


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


class _Member:
    """One member of the group: the store, the process group, and bounded broadcasts from rank 0."""

    def __init__(self, link: GroupLink, rank: int, store: dist.TCPStore | None = None):
        self.link, self.rank, self.what = link, rank, link.describe(rank)
        timeout = datetime.timedelta(seconds=link.timeout_s)
        try:  # rank 0 brings the store it hosts (`open_link`); the others join it
            self.store = (
                store
                if store is not None
                else dist.TCPStore(link.host, link.port, link.world, is_master=False, timeout=timeout)
            )
            if link.backend == "nccl":
                options = dist.ProcessGroupNCCL.Options()
                options._timeout = timeout
                self.group = dist.ProcessGroupNCCL(self.store, rank, link.world, options)
            else:
                self.group = dist.ProcessGroupGloo(self.store, rank, link.world, timeout=timeout)
        except (RuntimeError, dist.DistError) as exc:
            raise ScaleRLError(
                f"{self.what}: not every member joined within ray.publish_timeout_s = "
                f"{link.timeout_s:g} s: {_first_line(exc)}"
            ) from None
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if link.backend == "nccl" else torch.device("cpu")
        )

    def broadcast(self, tensor: torch.Tensor, what: str) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = 0
        start = time.monotonic()
        try:
            self.group.broadcast([tensor], options).wait()
            if tensor.device.type == "cuda":
                torch.cuda.synchronize(tensor.device)
        except (RuntimeError, dist.DistError) as exc:
            raise ScaleRLError(
                f"{self.what}: {what} failed after {time.monotonic() - start:.1f} s (limit "
                f"ray.publish_timeout_s = {self.link.timeout_s:g} s; a member gone?): "
                f"{_first_line(exc)}"
            ) from None


class Sender(_Member):
    """Rank 0: broadcasts the trainer's weights, one bucket at a time. Blocks until every member joined.
    `store`: the one `open_link` hosts for `link`."""

    def __init__(self, link: GroupLink, layout: list[Bucket], store: dist.TCPStore):
        super().__init__(link, 0, store)
        self.layout = layout

    def send(self, weights: Mapping[str, torch.Tensor], version: int, bucket_bytes: int) -> int:
        """Broadcast `weights` (the layout's names, shapes and dtypes) as `version`; the bytes sent."""
        if plan_buckets(weights, bucket_bytes) != self.layout:
            raise ScaleRLError(
                f"{self.what}: version {version}'s weights differ in names, shapes or dtypes from "
                "the layout the generators joined with"
            )
        sent = 0
        with torch.no_grad():
            for i, bucket in enumerate(self.layout):
                flat = self._flat(weights, bucket)
                self.broadcast(flat, f"the broadcast of bucket {i + 1}/{len(self.layout)} of version {version}")
                sent += flat.numel() * flat.element_size()
        return sent

    def _flat(self, weights: Mapping[str, torch.Tensor], bucket: Bucket) -> torch.Tensor:
        parts = [weights[e.names[0]].detach().reshape(-1) for e in bucket.entries]
        flat = parts[0] if len(parts) == 1 else torch.cat(parts)
        return flat.to(self.device).contiguous()


class Receiver(_Member):
    """Rank 1..N (a generator actor): receive buffers for the layout, allocated once."""

    def __init__(self, link: GroupLink, rank: int, layout: list[Bucket]):
        super().__init__(link, rank)
        self.buffers = [torch.empty(b.numel, dtype=b.dtype, device=self.device) for b in layout]
        self.tensors = {
            name: buf[e.offset : e.offset + e.numel].view(e.shape)
            for b, buf in zip(layout, self.buffers)
            for e in b.entries
            for name in e.names
        }

    def receive(self) -> None:
        """One publish into the buffers (`tensors`: name -> a view of them)."""
        for i, buf in enumerate(self.buffers):
            self.broadcast(buf, f"receiving bucket {i + 1}/{len(self.buffers)} of a publish")
