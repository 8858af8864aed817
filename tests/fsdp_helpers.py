"""FSDP2 trainer ranks against one process, on the CPU and on CUDA: the cases, the groups, the tolerance (imported
as `fsdp_helpers`: tests/ is on sys.path under pytest)."""

from __future__ import annotations

from doubles import scored
from scalerl.configure import load_config
from scalerl.types import Completion, Group, Prompt

BASE = ["model.name=tiny-random", "optim.lr=1e-2", "optim.eps=1e-3", "optim.warmup_steps=0"]
CASES = [  # (overrides, groups used): each loss x aggregation; unequal micro-batch counts; 1 group for 2 ranks
    (["loss.type=cispo", "loss.aggregation=prompt"], 3),
    (["loss.type=cispo", "loss.aggregation=sample"], 3),
    (["loss.type=cispo", "loss.aggregation=token", "batch.activation_budget_mb=0.001"], 3),
    (["loss.type=ppo_clip", "loss.aggregation=prompt", "batch.activation_budget_mb=0.001"], 3),
    (["loss.type=ppo_clip", "loss.aggregation=sample"], 3),
    (["loss.type=ppo_clip", "loss.aggregation=token"], 3),
    (["loss.type=cispo", "loss.aggregation=token"], 1),
]
TOL = 1e-5


def fsdp_groups(offset: int = 0) -> list[Group]:
    """3 prompts x 3 completions of unequal lengths sharing their group's prompt, one forced token."""
    groups = []
    for p, lengths in enumerate([(3, 9, 5), (2, 4, 6), (7, 1, 3)]):
        pid = f"p{p + offset}"
        prompt = [5 + p, 6, 7 + offset][: 2 + p % 2]
        cs = [
            Completion(
                id=f"{pid}/{i}",
                prompt_id=pid,
                prompt_tokens=prompt,
                tokens=[10 + p + 3 * i + j for j in range(t)],
                logprobs=[-3.0 + 0.1 * j for j in range(t)],
                versions=[0] * t,
                text="",
                finish_reason="eos",
                forced_mask=[i == 1 and j == t - 1 for j in range(t)],
            )
            for i, t in enumerate(lengths)
        ]
        groups.append(scored(Prompt(pid, "x", ""), cs, [(1.0, -1.0, 0.0), (-1.0, 1.0, 1.0), (0.0, 1.0, -1.0)][p]))
    return groups


def fsdp_cfg(overrides: list[str]):
    """The base configuration with `overrides`."""
    return load_config("scalerl", overrides=BASE + overrides)


def max_diff(a: dict, b: dict) -> float:
    """The largest absolute difference between two state dicts of the same keys."""
    assert set(a) == set(b)
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)
