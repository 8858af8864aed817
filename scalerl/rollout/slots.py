"""How many sequences an engine decodes at once (`rollout.batch_slots`), from a K/V budget.

The fixed-shape path (`rollout.decode: static`) preallocates every slot's K/V to its longest
span, so its memory is known before the first token:

    kv_per_token = layers x 2 (K and V) x kv_heads x head_dim x dtype bytes
    capacity     = the longest context admitted so far, rounded up to CONTEXT_ROUND, + max_new_tokens,
                   rounded up to a multiple of 16 (an aligned mask for CUDA's attention kernels)
    slot_bytes   = kv_per_token x capacity
    slots        = clamp(budget // slot_bytes, 1, SLOTS_MAX[device])     (batch_slots: auto)

and the K/V cache holds `slots x slot_bytes <= max(budget, slot_bytes)` bytes. The budget is
`rollout.kv_budget_mb` MiB; unset, it is KV_BUDGET_CPU_MB on a CPU (bounded by a tenth of the
memory available, so a small machine keeps room for the weights) and KV_BUDGET_GPU_FRACTION of
the device memory free when the engine starts on a GPU. A given `batch_slots` (a number) is used
as it is, and the K/V is then `batch_slots x slot_bytes`.

SLOTS_MAX: on a CPU more rows stop paying once a decode step is compute-bound (docs/rollout.md,
"Slots"); on a GPU a step of a 135M model is still bound by reading the weights at 1,024 rows.
"""

from __future__ import annotations

import psutil
import torch

CONTEXT_ROUND = 64  # contexts are allocated in steps of this many columns
SLOTS_MAX = {"cpu": 256, "cuda": 1024}
KV_BUDGET_CPU_MB = 512  # the CPU's default K/V budget (MiB), at most a tenth of the memory available
KV_BUDGET_GPU_FRACTION = 0.25  # of the device memory free when the engine starts


def kv_bytes_per_token(n_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes of K and V one token holds across the layers."""
    return n_layers * 2 * kv_heads * head_dim * dtype.itemsize


def capacity_for(context: int, max_new_tokens: int) -> int:
    """Columns a slot holds for contexts up to `context` tokens: the context rounded up to
    CONTEXT_ROUND, plus the completion budget, rounded up to a multiple of 16."""
    columns = -(-max(context, 1) // CONTEXT_ROUND) * CONTEXT_ROUND + max_new_tokens
    return -(-columns // 16) * 16


def kv_budget(budget_mb: float | None, device: torch.device) -> int:
    """The K/V budget in bytes: `budget_mb` MiB, or the default for `device` (module docstring)."""
    if budget_mb is not None:
        return int(budget_mb * 2**20)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * KV_BUDGET_GPU_FRACTION)
    return min(KV_BUDGET_CPU_MB * 2**20, psutil.virtual_memory().available // 10)


def auto_slots(budget: int, slot_bytes: int, device: torch.device) -> int:
    """Slots that fit `budget` bytes of K/V at `slot_bytes` each: at least 1, at most SLOTS_MAX."""
    return max(1, min(SLOTS_MAX.get(device.type, SLOTS_MAX["cuda"]), budget // slot_bytes))
