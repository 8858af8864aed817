"""Test doubles (imported as `doubles`: tests/ is on sys.path under pytest, and a spawned generator
process inherits it). A fake `Generator` for tests of the loops: no model, controllable speed, real versions.

Tests wait on its own loop, never on the clock: `wait_for(predicate, what)` returns once the
predicate holds after one of its loop turns (a decode step, a turn held, a turn idle at the window);
`idle_turns` counts the turns it had nothing it might decode (every prompt it may start is done).

It decodes `slots` sequences in lock-step, one token per `step_seconds`; every token records
the version current when it was "sampled", so in-flight weight updates show up in
`Completion.versions` exactly as with the real engine. Tokens are drawn from `vocab` with a
seeded RNG; the log-probability recorded is that of a uniform draw, -log(len(vocab)).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

from scalerl.transport.protocol import GeneratorBuild, Stage
from scalerl.types import Completion, Group, Prompt, Score


class FakeGenerator:
    def __init__(
        self,
        vocab: Sequence[int],
        length: tuple[int, int] = (4, 12),
        slots: int = 16,
        step_seconds: float = 0.0,
        seed: int = 0,
        eos: int | None = None,
    ):
        self.vocab = list(vocab)
        self.length = length
        self.slots = slots
        self.step_seconds = step_seconds
        self.seed = seed
        self.rng = random.Random(seed)
        self.eos = eos
        self._version = 0
        self._lock = threading.Lock()
        self.updates: list[int] = []
        self.held_steps = 0  # loop turns spent held (`stream`'s `hold`)
        self.idle_turns = 0  # loop turns with nothing to decode and no prompt it may start
        self.decode_steps = 0
        self._turn = threading.Condition()

    def _turned(self) -> None:
        with self._turn:
            self._turn.notify_all()

    def wait_for(self, predicate, what: str, timeout_s: float = 120.0) -> None:
        """Block until `predicate()` holds, checked after each of the generator's loop turns; fail naming
        `what` after `timeout_s` (an upper bound, not a pace)."""
        with self._turn:
            if not self._turn.wait_for(predicate, timeout=timeout_s):
                raise AssertionError(f"the fake generator: not {what} within {timeout_s:g} s")

    def wait_idle(self, what: str = "idle at the window", timeout_s: float = 120.0) -> None:
        """Block until the generator has spent a loop turn, from now on, with nothing it may decode."""
        start = self.idle_turns
        self.wait_for(lambda: self.idle_turns > start, what, timeout_s)

    @property
    def version(self) -> int:
        return self._version

    def update_weights(self, state_dict: Mapping[str, object], version: int) -> None:
        with self._lock:
            self._version = version
            self.updates.append(version)

    def reseed(self) -> None:
        self.rng.seed(self.seed)

    def _new(self, prompt: Prompt, i: int) -> dict:
        return {"prompt": prompt, "i": i, "n": self.rng.randint(*self.length), "tokens": [], "versions": []}

    def _finish(self, s: dict) -> Completion:
        p: Prompt = s["prompt"]
        toks = s["tokens"]
        return Completion(
            id=f"{p.id}/{s['i']}",
            prompt_id=p.id,
            prompt_tokens=[self.vocab[0]] * (1 + len(p.text) % 3),
            tokens=toks,
            logprobs=[-math.log(len(self.vocab))] * len(toks),
            versions=s["versions"],
            text=" ".join(map(str, toks)),
            finish_reason="eos",
            forced_mask=[False] * len(toks),
        )

    def _decode(self, active: list[dict]) -> list[dict]:
        """One lock-step decode step over `active`; returns the sequences that finished."""
        self.decode_steps += 1
        if self.step_seconds:
            time.sleep(self.step_seconds)
        with self._lock:
            v = self._version
        done = []
        for s in active:
            s["tokens"].append(self.rng.choice(self.vocab))
            s["versions"].append(v)
            if len(s["tokens"]) >= s["n"]:
                done.append(s)
        return done

    def stream(
        self,
        prompts: Iterable[Prompt],
        n: int,
        stop: threading.Event | None = None,
        hold: threading.Event | None = None,
    ) -> Iterator[Completion]:
        it = iter(prompts)
        waiting: list[dict] = []
        active: list[dict] = []
        exhausted = False
        while not (stop and stop.is_set()):
            if hold is not None and hold.is_set():
                self.held_steps += 1
                self._turned()
                time.sleep(0.002)
                continue
            while len(active) < self.slots and not exhausted:
                if not waiting:
                    try:
                        p = next(it)
                    except StopIteration:
                        exhausted = True
                        break
                    if p is None:  # no prompt may start now (Generator.stream): decode what is in flight
                        break
                    waiting = [self._new(p, i) for i in range(n)]
                active.append(waiting.pop(0))
            if not active:
                if exhausted:
                    return
                self.idle_turns += 1
                self._turned()
                time.sleep(0.002)
                continue
            for s in self._decode(active):
                active.remove(s)
                yield self._finish(s)
            self._turned()

    def generate(self, prompts: Sequence[Prompt], n: int) -> list[Completion]:
        out = {p.id: [] for p in prompts}
        for c in self.stream(list(prompts), n):
            out[c.prompt_id].append(c)
        return [c for p in prompts for c in sorted(out[p.id], key=lambda c: c.id)]


class FakeTask:
    """A pool of `train_size` prompts "<i>=" with answer "", for loop tests that do not need a
    real checker (a `scalerl.tasks.Task`: indices past the pool still generate)."""

    name = "fake"
    train_size = 1024
    val_size = 384
    isolate_checker = False
    score_workers = 0
    answer_marker = "</think>"

    def __len__(self) -> int:
        return self.train_size

    def train_prompt(self, index: int) -> Prompt:
        return Prompt(id=f"fake/train/{index}", text=f"{index}=", answer="")

    def val_prompts(self, n: int) -> list[Prompt]:
        return [Prompt(id=f"fake/val/{i}", text=f"{i}=", answer="") for i in range(n)]


def pass_fail(passed: bool) -> Score:
    """The default reward's score of a completion that passed or failed: +1 / -1."""
    return Score(1.0 if passed else -1.0, passed)


def scored(
    prompt: Prompt,
    completions: list[Completion],
    rewards: Sequence[float],
    draw: int = 0,
    passed: Sequence[bool] | None = None,
) -> Group:
    """A group scored by hand: `rewards[i]` for completion i; passed iff its reward is positive,
    unless `passed` says otherwise."""
    passed = [r > 0 for r in rewards] if passed is None else passed
    return Group(prompt, completions, [Score(r, ok) for r, ok in zip(rewards, passed, strict=True)], draw)


def parity_reward(prompt: Prompt, completion: Completion) -> Score:
    """Pass iff the completion's token ids sum to an even number: about half pass at random,
    so groups have reward variance even for an untrained model."""
    return pass_fail(sum(completion.tokens) % 2 == 0)


def build_fake(
    vocab: list[int],
    length: tuple[int, int],
    slots: int,
    step_seconds: float,
    *,
    seed: int,
    model=None,
    tokenizer=None,
    task=None,
    reward=None,
    temperature=None,
    weights=None,
    local: bool = False,
) -> Stage:
    """A `GeneratorBuild` function for tests (picklable: a generator process can run it): a
    FakeGenerator (which decodes no weights: `weights` ignored; it is its own engine: `local` ignored),
    and the given task and reward or FakeTask and parity_reward."""
    return Stage(
        FakeGenerator(vocab, length, slots, step_seconds, seed), task or FakeTask(), reward or parity_reward, 0
    )


def fake_build(cfg, gens: list, step_seconds: float = 0.0) -> GeneratorBuild:
    """An in-process `GeneratorBuild` for tests of the loop: each FakeGenerator it builds is
    appended to `gens` (the evaluation's first); the reward is the training reward of the one
    the loop passes (its `Components.reward_fn`), as `scalerl.assembly.generator.build_generator` makes it."""
    from scalerl.rewards import training_reward

    def build(*, seed, model=None, tokenizer=None, task=None, reward=None, temperature=None, weights=None) -> Stage:
        gens.append(FakeGenerator(vocab=range(5, 40), length=(3, 8), slots=8, step_seconds=step_seconds, seed=seed))
        return Stage(gens[-1], task or FakeTask(), training_reward(reward or parity_reward, cfg), 0)

    return GeneratorBuild(build)


def build_tiny_random_parity(
    cfg_json: str,
    device: str,
    *,
    seed: int,
    model=None,
    tokenizer=None,
    task=None,
    reward=None,
    temperature=None,
    weights=None,
    local=False,
) -> Stage:
    """A `GeneratorBuild` function for tests: the real builder on `tiny-random`, the configured
    task's prompts, and `parity_reward` (a random model never solves the task)."""
    from scalerl.assembly.generator import build_generator, decode_dtype
    from scalerl.config import Config
    from scalerl.models import load_model
    from scalerl.tasks import get_task

    cfg = Config.model_validate_json(cfg_json)
    if model is None:  # in the real builder's dtype: a bf16 copy under mixed precision (auto on CUDA)
        model, tokenizer = load_model("tiny-random", dtype=decode_dtype(cfg), device=device)
    task = task or get_task(cfg.task, tokenizer)
    if weights is not None:  # a generator process: decode from the published buffer
        from scalerl.transport.weights import adopt

        adopt(model, weights)
    return build_generator(
        cfg_json,
        device,
        seed=seed,
        model=model,
        tokenizer=tokenizer,
        task=task,
        reward=reward or parity_reward,
        temperature=temperature,
        local=local,
    )


def tiny_random_components(cfg, device: str = "cpu"):
    """`Components` for tests: tiny-random + the configured task's prompts + parity_reward."""
    from scalerl.assembly.generator import Components
    from scalerl.models import load_model
    from scalerl.tasks import get_task

    model, tokenizer = load_model("tiny-random", device=device)
    return Components(
        model,
        tokenizer,
        get_task(cfg.task, tokenizer),
        parity_reward,
        GeneratorBuild(build_tiny_random_parity, (cfg.model_dump_json(), device)),
    )


class PooledFakeTask(FakeTask):
    """FakeTask scored in a pool of 2 threads, as a code task is."""

    score_workers = 2


def failing_reward(prompt: Prompt, completion: Completion) -> Score:
    raise RuntimeError("scorer exploded")


def build_fake_failing_scorer(
    *, seed: int, model=None, tokenizer=None, task=None, reward=None, temperature=None, weights=None
) -> Stage:
    """A `GeneratorBuild` function whose pooled scorer raises on every completion."""
    return Stage(FakeGenerator(range(3, 9), (3, 6), 4, 0.001, seed), PooledFakeTask(), failing_reward, 0)


HOLD_LIMIT_S = 300.0  # the longest a held run waits for its release (an upper bound on a failure only)


def hold_after_first_checkpoint(hold: str) -> None:
    """In a `scalerl train` process a test started: once the loop has written its first checkpoint after
    step 0, it writes `<hold>.held` and waits until `<hold>.release` exists, so that the test acts while the
    run is certainly running (not "if it has not finished yet")."""
    from pathlib import Path

    from scalerl.loop import Stages

    real, held, release = Stages.checkpoint, Path(hold).with_suffix(".held"), Path(hold).with_suffix(".release")

    def checkpoint(self) -> None:
        real(self)
        if self.tr.state.step > 0 and not held.exists():
            held.touch()
            wait_for_file(release)

    Stages.checkpoint = checkpoint


def wait_for_file(path, proc=None, log=None, limit_s: float = HOLD_LIMIT_S) -> None:
    """Until `path` exists (what a process the test drives writes at a point of its own); fails at once if
    `proc` ended first, naming its `log`, and after `limit_s` (a bound on a failure only)."""
    from pathlib import Path

    deadline = time.monotonic() + limit_s
    while not Path(path).exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"ended (exit {proc.returncode}) before {path}: {Path(log).read_text()[-2000:] if log else ''}"
            )
        assert time.monotonic() < deadline, f"no {path} within {limit_s:g} s"
        time.sleep(0.05)
