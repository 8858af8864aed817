"""`scalerl generate`: sample completions of a task's prompts and show them with their rewards."""

from __future__ import annotations

import argparse
import time

from scalerl.commands import require_train
from scalerl.configure import add_config_arguments

HELP = "sample completions for a task's prompts with the rollout engine and print them with rewards"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", default=None, help="model name or checkpoint dir (sets model.name; default: the recipe's)"
    )
    p.add_argument("--task", default=None, help="task name (sets task.name; default: the recipe's)")
    p.add_argument("--n", type=int, default=4, help="samples per prompt (default: %(default)s)")
    p.add_argument("--prompts", type=int, default=4, help="how many prompts (default: %(default)s)")
    p.add_argument("--split", choices=["val", "train"], default="val", help="which prompts (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    p.add_argument("--greedy", action="store_true", help="argmax decoding instead of sampling")
    add_config_arguments(p)


def run(args: argparse.Namespace) -> int:
    require_train("generate")
    from scalerl.configure import load_config
    from scalerl.errors import ScaleRLError

    if args.n < 1 or args.prompts < 1:
        raise ScaleRLError(f"--n ({args.n}) and --prompts ({args.prompts}) must be at least 1")
    picked = [
        f"{key}={value}" for key, value in (("model.name", args.model), ("task.name", args.task)) if value is not None
    ]
    cfg = load_config(args.recipe, args.config, [*picked, *args.overrides])
    print(show(cfg, args))
    return 0


def show(cfg, args: argparse.Namespace) -> str:
    """The samples of `args` under the loaded config `cfg`, with their rewards and the summary. The engine is
    built as `scalerl train` builds its generators (`scalerl.rollout.build_engine`)."""
    from scalerl.models import load_model
    from scalerl.rewards import RewardFn, answer_section
    from scalerl.rollout import build_engine
    from scalerl.tasks import get_task

    if cfg.run.threads is not None:
        import torch

        torch.set_num_threads(cfg.run.threads)
    model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype, device=cfg.model.device)
    task = get_task(cfg.task, tokenizer)
    prompts = (
        task.val_prompts(args.prompts) if args.split == "val" else [task.train_prompt(i) for i in range(args.prompts)]
    )
    engine = build_engine(cfg, model, tokenizer, seed=args.seed, greedy=args.greedy)
    try:
        start = time.perf_counter()
        completions = engine.generate(prompts, args.n)
        seconds = time.perf_counter() - start
    finally:
        getattr(engine, "close", lambda: None)()
    reward = RewardFn(task, cfg.reward)
    try:
        by_prompt = {p.id: p for p in prompts}
        scores = [reward(by_prompt[c.prompt_id], c) for c in completions]
    finally:
        reward.close()
    answered = [answer_section(c.text, task.answer_marker) is not None for c in completions]
    wrong = "wrong answer" if cfg.reward.function is None else "scored below reward.threshold"
    return (
        format_samples(prompts, completions, scores, args.n, answered, wrong)
        + "\n"
        + format_summary(completions, scores, seconds, cfg.model.name, task.name, answered)
    )


def format_samples(prompts, completions, scores, n: int, answered: list[bool], wrong: str = "wrong answer") -> str:
    """Each prompt and its samples: PASS, or fail with why (no answer section found, or `wrong`)."""
    lines = []
    for i, prompt in enumerate(prompts):
        lines.append(f"=== {prompt.id}  (answer {prompt.answer!r})\n{prompt.text}")
        part = slice(i * n, (i + 1) * n)
        for c, s, has in zip(completions[part], scores[part], answered[part]):
            mark = "PASS" if s.passed else f"fail ({wrong})" if has else "fail (no answer found)"
            extra = f"  checker error: {s.error}" if s.error else ""
            lines.append(f"--- {mark} reward {s.reward:+g}  {c.finish_reason}, {len(c.tokens)} tokens{extra}\n{c.text}")
    return "\n".join(lines)


def format_summary(completions, scores, seconds: float, model: str, task: str, answered: list[bool]) -> str:
    k = len(completions)
    missing = 1 - sum(answered) / k
    tokens = sum(len(c.tokens) for c in completions)
    rate = sum(s.passed for s in scores) / k
    cut = sum(c.truncated for c in completions) / k
    interrupted = sum(c.interrupted for c in completions) / k
    return (
        f"\n{model} on {task}: pass rate {rate:.3f} over {k} completions; mean length {tokens / k:.1f} tokens; "
        f"no answer found in {missing:.1%}; truncated {cut:.1%}, interrupted {interrupted:.1%}; "
        f"{tokens / seconds:.0f} tokens/s"
    )
