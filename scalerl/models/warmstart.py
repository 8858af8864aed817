"""Supervised warm start of the tiny model on a built-in task.

A randomly initialised model never passes, so RL would see only zero-variance groups. A short
supervised phase on teacher-forced targets (scratchpad + answer + EOS) from the task's
TRAINING split brings it to a low pass rate; the checkpoint is picked by the sampled pass
rate (temperature 1) on a monitoring set also drawn from the training distribution (indices
far from those used for training; never the validation split), as the one closest to
`target` inside [`lo`, `hi`].

Departures from the paper:
1. The paper starts RL from pretrained + instruction-tuned models; here a few hundred SFT
   steps stand in for that, deliberately stopped early so RL has room to improve.
2. Training targets longer than `max_target_tokens` (the default completion budget) are
   skipped: the model could never emit them within budget (the task's unlearnable tail).
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass

import torch

MONITOR_OFFSET = 10**12  # monitoring problems are train indices from here on


@dataclass(frozen=True)
class WarmStartSettings:
    seed: int = 0
    max_steps: int = 1200
    batch_size: int = 16  # more, smaller steps learn the digit look-ups sooner than batch 64
    lr: float = 1e-3  # 3e-3 plateaued with the copies at chance for 400 steps
    warmup_steps: int = 20
    eval_from: int = 250  # before ~300 steps the copies are at chance: nothing passes
    eval_every: int = 25
    monitor_size: int = 128
    max_target_tokens: int = 160
    target: float = 0.15  # aimed-for monitor pass rate
    lo: float = 0.07
    hi: float = 0.30  # training stops once the monitor passes this

    def to_dict(self) -> dict:
        return asdict(self)


def _examples(task, tokenizer, start: int, n: int, max_target_tokens: int) -> list[tuple[list[int], list[int]]]:
    """`n` (prompt_ids, target_ids) pairs from training indices `start`, `start+1`, ..."""
    out, index = [], start
    while len(out) < n:
        p = task.train_prompt(index)
        index += 1
        target = tokenizer(p.meta["target"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if len(target) <= max_target_tokens:
            out.append((tokenizer(p.text)["input_ids"], target))
    return out


def sft_batch(examples, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded `(input_ids, attention_mask, labels)`, labels -100 on prompt and padding."""
    width = max(len(p) + len(t) for p, t in examples)
    ids = torch.full((len(examples), width), pad_id)  # (B, T)
    labels = torch.full((len(examples), width), -100)  # (B, T)
    for row, (p, t) in enumerate(examples):
        ids[row, : len(p) + len(t)] = torch.tensor(p + t)
        labels[row, len(p) : len(p) + len(t)] = torch.tensor(t)
    return ids, (labels != -100) | (ids != pad_id), labels


@torch.no_grad()
def sampled_pass_rate(model, tokenizer, task, prompts, max_new_tokens: int, seed: int) -> float:
    """Share of `prompts` one temperature-1 sample of which passes `task.check`."""
    model.eval()
    enc = tokenizer([p.text for p in prompts], return_tensors="pt", padding=True).to(model.device)
    torch.manual_seed(seed)
    out = model.generate(
        **enc,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
    )
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=False)
    model.train()
    return sum(task.check(t, p) for t, p in zip(texts, prompts)) / len(prompts)


def warm_start(model, tokenizer, task, s: WarmStartSettings, log=print) -> dict:
    """Train `model` in place; load the chosen checkpoint into it; return a summary."""
    torch.manual_seed(s.seed)
    monitor = [task.train_prompt(MONITOR_OFFSET + i) for i in range(s.monitor_size)]
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / s.warmup_steps))
    history, best, t0 = [], None, time.time()
    model.train()
    for step in range(1, s.max_steps + 1):
        batch = sft_batch(
            _examples(task, tokenizer, step * s.batch_size, s.batch_size, s.max_target_tokens), tokenizer.pad_token_id
        )
        ids, mask, labels = (t.to(model.device) for t in batch)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step == 1 or step % max(1, s.max_steps // 20) == 0:  # progress from the first seconds
            spent = time.time() - t0
            log(
                f"warm start: step {step}/{s.max_steps} loss {loss.item():.3f} "
                f"({spent:.0f}s, about {spent / step * (s.max_steps - step):.0f}s left)"
            )
        if step < s.eval_from or step % s.eval_every:
            continue
        rate = sampled_pass_rate(model, tokenizer, task, monitor, s.max_target_tokens, s.seed + step)
        history.append(
            {"step": step, "loss": round(loss.item(), 4), "monitor_pass": rate, "s": round(time.time() - t0, 1)}
        )
        log(f"warm start: step {step} loss {loss.item():.3f} monitor pass {rate:.3f} ({time.time() - t0:.0f}s)")
        if s.lo <= rate <= s.hi and (best is None or abs(rate - s.target) < abs(best[0] - s.target)):
            best = (rate, step, copy.deepcopy(model.state_dict()))
        if rate > s.hi:
            break
    if best is not None:
        model.load_state_dict(best[2])
    return {
        "chosen_step": best[1] if best else step,
        "chosen_monitor_pass": best[0] if best else None,
        "history": history,
        "seconds": round(time.time() - t0, 1),
    }
