"""The small training configuration and the fake generators of the loop's tests, fast and slow tier (imported
as `train_helpers`: tests/ is on sys.path under pytest, and a spawned child puts it there)."""

import random

from doubles import FakeTask, fake_build, parity_reward, scored
from scalerl.assembly.generator import Components
from scalerl.configure import load_config
from scalerl.run.metrics import read_rows
from scalerl.types import Completion, Group, Prompt

SMALL = [
    "model.name=tiny-random",
    "batch.prompts=2",
    "batch.generations=4",
    "rollout.max_new_tokens=12",
    "rollout.batch_slots=8",
    "eval.every=2",
    "eval.prompts=4",
    "eval.samples=2",
    "run.checkpoint_every=2",
    "optim.warmup_steps=1",
    "pipeline.transport=thread",
    "run.threads=1",
]


def small_cfg(recipe="scalerl", extra=()):
    cfg = load_config(recipe, overrides=SMALL + list(extra))
    if cfg.rollout.length.type == "interrupt":  # keep the forced-interruption path inside a 12-token budget
        cfg.rollout.length.think_min, cfg.rollout.length.think_max, cfg.rollout.length.answer_budget = 4, 6, 4
        cfg.rollout.length.phrase = "</think>"  # 1 token: 6 + 1 + 4 <= 12
    if cfg.rollout.length.type == "penalty":
        cfg.rollout.length.tolerance, cfg.rollout.length.max_len = 4, 10
    return cfg


def fake_components(cfg, step_seconds=0.0):
    from scalerl.models import load_model

    model, tokenizer = load_model("tiny-random")
    gens = []
    return Components(model, tokenizer, FakeTask(), parity_reward, fake_build(cfg, gens, step_seconds)), gens


def train_rows(run):
    """The training rows of the run in folder `run`."""
    return [r for r in read_rows(run / "metrics.jsonl") if r["kind"] == "train"]


# prompt lengths: 1 (no context to share: all-padding prompt row), 2, 5, 11 (left padding of
# every length in between); completion lengths per group differ, down to 0 and 1 tokens
PROMPT_LENS = [1, 2, 5, 11]
COMPLETION_LENS = [[3, 0, 7, 1], [9, 2, 2, 5], [1, 12, 4, 6], [8, 8, 3, 0]]


def random_groups(seed: int = 0, prompt_lens=PROMPT_LENS, completion_lens=COMPLETION_LENS) -> list[Group]:
    """Groups of random tokens (ids 3-59) of the given lengths, some tokens forced, rewards +-1 by turn."""
    rng = random.Random(seed)
    groups = []
    for p, (plen, lens) in enumerate(zip(prompt_lens, completion_lens)):
        prompt = [rng.randrange(3, 60) for _ in range(plen)]
        comps = []
        for g, n in enumerate(lens):
            forced = [rng.random() < 0.2 for _ in range(n)]
            comps.append(
                Completion(
                    id=f"{p}/{g}",
                    prompt_id=str(p),
                    prompt_tokens=list(prompt),
                    tokens=[rng.randrange(3, 60) for _ in range(n)],
                    logprobs=[-rng.uniform(0.5, 4.0) for _ in range(n)],
                    versions=[0] * n,
                    text="",
                    finish_reason="eos",
                    forced_mask=forced,
                )
            )
        groups.append(scored(Prompt(str(p), "", ""), comps, [1.0 if g % 2 == 0 else -1.0 for g in range(len(lens))]))
    return groups


def completion(pid, i, prompt_tokens, tokens, forced=None):
    """A completion of `tokens` after `prompt_tokens`, every token of version 0."""
    n = len(tokens)
    return Completion(
        id=f"{pid}/{i}",
        prompt_id=pid,
        prompt_tokens=prompt_tokens,
        tokens=tokens,
        logprobs=[-1.0 - 0.1 * t for t in range(n)],
        versions=[0] * n,
        text="",
        finish_reason="eos",
        forced_mask=forced or [False] * n,
    )


def step_groups(P=6, G=4, seed=0):
    """P scored groups of G random completions (short or long), each with reward variance."""
    rng = random.Random(seed)
    groups = []
    for p in range(P):
        plen, base = rng.randint(3, 8), rng.choice([4, 30])
        comps, rewards = [], []
        for g in range(G):
            n = base + rng.randint(0, 5)
            comps.append(
                completion(
                    str(p), g, [rng.randrange(5, 60) for _ in range(plen)], [rng.randrange(5, 60) for _ in range(n)]
                )
            )
            rewards.append(rng.choice([1.0, -1.0]))
        rewards[:2] = [1.0, -1.0]  # every group has reward variance
        groups.append(scored(Prompt(str(p), "", ""), comps, rewards))
    return groups
