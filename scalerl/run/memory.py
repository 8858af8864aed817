"""Memory of a run's processes: resident sizes in every training row, a warning before the kernel acts.

Every training row of metrics.jsonl carries (`MemoryMonitor.row`):

    system/rss_mb              resident set of the trainer process (MiB)
    system/rss_mb/generator0   resident set of each generator process the transport runs
                               (the process transport's one generator; none for the thread
                               transport, whose generator lives in the trainer process, nor for
                               Ray, whose actors report through Ray's own dashboard)
    system/pss_mb              proportional set size of the trainer process: its private pages, and
    system/pss_mb/<name>       each shared page divided by the processes that map it; the same for
                               each generator process
    system/rss_mb/total        the run's memory: the sum of those PSS, so a page that two processes
                               map (the published weights, in shared memory) counts once, where a
                               sum of RSS would count it in each
    system/rss_peak_mb         the most the trainer held since the previous row (Linux's VmHWM,
    system/rss_peak_mb/<name>  reset at each row): the step's activations, an evaluation, a resize;
                               the same for each generator process
    system/cuda_allocated_mb   on a GPU: torch's allocated and reserved CUDA memory of the trainer
    system/cuda_reserved_mb    process, and `/<name>` of each generator process (as it last reported)

When the run's processes together (`system/rss_mb/total`) pass `WARN_SHARE` of the memory
available to them (the cgroup's limit, else the machine's RAM) one line is printed (again at most
every `WARN_EVERY` steps), naming the process that holds most and the largest consumer scalerl
knows of (its stated bound, docs/design.md "Memory").

`tune_malloc` fixes glibc's mmap threshold (see its docstring for the measurement) in this
process; a generator process calls it too. `settle` frees what reference cycles hold (the
engine's K/V caches are such cycles) and gives the heap's free pages back; `freeze` makes its
collection cheap by moving what a process built at start-up out of the collector's sight.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import warnings
from pathlib import Path
from typing import Callable

import psutil
import torch

WARN_SHARE = 0.85  # of the memory available: the warning's threshold
WARN_EVERY = 50  # steps between two warnings
MMAP_THRESHOLD = 1 << 20  # bytes: glibc serves larger blocks by mmap, returned to the kernel when freed
M_MMAP_THRESHOLD = -3  # mallopt parameters (glibc's malloc.h)
M_ARENA_MAX = -8
ARENA_MAX = 2  # malloc arenas (glibc's default is 8 per core)
MB = 1 << 20


def _libc():
    """glibc, or None (musl, macOS, Windows: nothing to tune)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def tune_malloc() -> bool:
    """Fix glibc's mmap threshold at `MMAP_THRESHOLD` and cap its arenas at `ARENA_MAX`, in this
    process; False where the C library is not glibc.

    glibc raises its mmap threshold (up to 32 MiB on 64-bit) each time a mmapped block is freed,
    after which the activations and per-step tensors of the next steps (up to 32 MiB each, of
    sizes that change with every batch's lengths) come from the heap, whose free holes are
    rarely given back: the trainer grew by about 90 MB a step (docs/design.md "Memory" has the
    measurement). With the threshold fixed, every block of 1 MiB or more is its own mapping and
    returns to the kernel when freed."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_ARENA_MAX, ARENA_MAX))


def trim() -> None:
    """Give the heap's free pages back to the kernel (glibc's malloc_trim; nothing elsewhere)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def settle() -> None:
    """Free what unreachable reference cycles hold (a full `gc.collect()`), then `trim`.

    The engine's K/V caches are reference cycles (each layer points back at its cache, which lists
    its layers): dropped, they wait for a full collection, which CPython starts rarely in a process
    that holds many long-lived objects (torch, transformers). Measured on SmolLM2-135M,
    `benchmarks/engine_heap.py`: without a collection a process grew by about 290 MB for every 64
    completions (200 MB of K/V buffers, 90 MB of heap) and kept it; with one after each call it
    stayed flat. Called once a step by the trainer, every `SETTLE_EVERY_S` and after every
    evaluation by a generator process."""
    gc.collect()
    trim()


def freeze() -> None:
    """Collect, then move every object this process holds now (modules, the model, the tokenizer) to
    the collector's permanent generation (`gc.freeze`), where no later collection scans it: a full
    collection then takes milliseconds instead of half a second (SmolLM2, `engine_heap.py`). Call it
    once what lives for the whole run is built, and before anything that makes cycles meant to die
    (the engine's caches) exists: a frozen cycle is never freed."""
    gc.collect()
    gc.freeze()


def rss_mb(pid: int | None = None) -> float | None:
    """Resident set size of process `pid` (this one by default) in MiB; None when it is gone."""
    try:
        return psutil.Process(pid).memory_info().rss / MB
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def pss_mb(pid: int | None = None) -> float | None:
    """Proportional set size of process `pid` (this one by default) in MiB: its private resident
    pages plus each shared one divided by the number of processes mapping it (/proc/<pid>/smaps_rollup,
    through psutil); its RSS where the kernel gives no PSS; None when it is gone."""
    try:
        proc = psutil.Process(pid)
        full = proc.memory_full_info()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return rss_mb(pid)
    pss = getattr(full, "pss", None)  # Linux only: psutil's other platforms have no such field
    return (pss if pss is not None else full.rss) / MB


def peak_rss_mb(pid: int | None = None, reset: bool = True) -> float | None:
    """The most resident memory process `pid` (this one by default) held since the last reset
    (Linux's VmHWM, MiB), then reset (`/proc/<pid>/clear_refs`); None where /proc has no such figure."""
    proc = Path(f"/proc/{pid or 'self'}")
    try:
        status = (proc / "status").read_text()
    except OSError:
        return None
    peak = next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")), None)
    if reset and peak is not None:
        try:
            (proc / "clear_refs").write_text("5")
        except OSError:
            pass  # an older kernel, or no permission: the figure is then the peak since the process started
    return peak


def available_mb() -> float:
    """The memory the run's processes may hold: the cgroup's limit where one is set, else the RAM."""
    total = psutil.virtual_memory().total / MB
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        p = Path(path)
        if p.is_file():
            text = p.read_text().strip()
            if text.isdigit():
                total = min(total, int(text) / MB)
    return total


def cuda_mb() -> dict[str, float]:
    """torch's CUDA memory (allocated, reserved) in MiB; empty without CUDA."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {
        "system/cuda_allocated_mb": torch.cuda.memory_allocated() / MB,
        "system/cuda_reserved_mb": torch.cuda.memory_reserved() / MB,
    }


class MemoryMonitor:
    """Samples the trainer's and the transport's processes once a step (`row`) and warns (`check`).

    `processes()`: name -> pid of the other processes (`generator0`, ...), asked each time (a
    transport may restart one). `consumers()`: what scalerl knows holds memory, name -> MiB
    (model weights, optimizer state, the published weights, ...), for the warning. `devices()`:
    name -> (allocated, reserved) CUDA MiB of the other processes, as they report it."""

    def __init__(
        self,
        processes: Callable[[], dict[str, int]],
        consumers: Callable[[], dict[str, float]],
        limit_mb: float | None = None,
        share: float = WARN_SHARE,
        every: int = WARN_EVERY,
        devices: Callable[[], dict[str, tuple[float, float]]] = dict,
    ):
        self.processes, self.consumers, self.devices = processes, consumers, devices
        self.limit_mb = limit_mb if limit_mb is not None else available_mb()
        self.share, self.every = share, every
        self.warned_at: int | None = None

    def row(self) -> dict[str, float]:
        """`system/rss_mb` and `system/pss_mb` (this process and `/<name>` per other process), the run's
        total (their PSS summed), peaks; CUDA."""
        row = {"system/rss_mb": rss_mb() or 0.0, "system/pss_mb": pss_mb() or 0.0}
        peaks = {"system/rss_peak_mb": peak_rss_mb()}
        for name, pid in self.processes().items():
            rss, pss = rss_mb(pid), pss_mb(pid)
            if rss is not None and pss is not None:
                row[f"system/rss_mb/{name}"] = rss
                row[f"system/pss_mb/{name}"] = pss
                peaks[f"system/rss_peak_mb/{name}"] = peak_rss_mb(pid)
        row["system/rss_mb/total"] = sum(v for k, v in row.items() if k.startswith("system/pss_mb"))
        row.update({k: v for k, v in peaks.items() if v is not None})
        row.update(cuda_mb())
        for name, (allocated, reserved) in self.devices().items():
            row[f"system/cuda_allocated_mb/{name}"] = allocated
            row[f"system/cuda_reserved_mb/{name}"] = reserved
        return row

    def check(self, row: dict[str, float], step: int) -> str | None:
        """The warning line (also issued) when the processes pass `share` of the limit, else None."""
        total = row["system/rss_mb/total"]
        if total < self.share * self.limit_mb:
            return None
        if self.warned_at is not None and step < self.warned_at + self.every:
            return None
        self.warned_at = step
        procs = {
            ("trainer" if k == "system/pss_mb" else k.rsplit("/", 1)[1]): v
            for k, v in row.items()
            if k.startswith("system/pss_mb")
        }
        top = max(procs, key=procs.get)
        known = self.consumers()
        largest = max(known, key=known.get) if known else None
        what = f"; largest consumer scalerl knows of: {largest} ({known[largest]:.0f} MB)" if largest else ""
        line = (
            f"step {step}: memory at {total / 1024:.1f} GB of {self.limit_mb / 1024:.1f} GB available "
            f"({total / self.limit_mb:.0%}), most in the {top} process ({procs[top] / 1024:.1f} GB){what}; "
            'see system/rss_mb in metrics.jsonl and docs/design.md "Memory"'
        )
        warnings.warn(line, stacklevel=1)
        return line


def tensor_mb(tensors) -> float:
    """MiB held by `tensors` (their storages, each once)."""
    seen, total = set(), 0
    for t in tensors:
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total / MB


def optimizer_mb(opt: torch.optim.Optimizer) -> float:
    """MiB of an optimizer's state tensors (AdamW: two per parameter)."""
    return tensor_mb(
        v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0
    )
