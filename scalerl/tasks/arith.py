"""Built-in task `arith`: multi-digit addition written least-significant digit first.

A problem is a list of operands of a fixed number of digits. Every number (operands and
answer) is written least-significant digit first, which a tiny transformer learns about 10x
faster than the usual order (docs/design.md, "The machines"), and each digit follows its column letter
("index hints", Zhou et al. 2023, "What Algorithms can Transformers Learn?"), which turns
"find digit i of operand k" into a content lookup a 1M-parameter model learns in a few
hundred steps. The completion is a carry scratchpad inside `<think>...</think>`, then the
answer, then EOS:

    prompt      "a4b3c2d1+a8b7c6d5="                         (1234 + 5678)
    completion  "<think>a4+8+0=12,b3+7+1=11,c2+6+1=09,d1+5+0=06,</think>a2b1c9d6"

Each scratchpad step is `column, digits + carry_in = two-digit column sum`; its last digit is
the answer digit and its first the carry out; a non-zero final carry is the answer's last
digit (6912 is written a2b1c9d6; 1005 as a5b0c0d1).

Difficulty: a `Level(operands, digits)`; a task samples levels from a weighted mix (the task
name: `arith`, `arith-tail`, `arith-mixed`, `arith-easy`, `arith-<D>`, `arith-<K>x<D>`, or a mix
`arith-<K>x<D>:<w>,...`). The default (`arith`, since 2026-11-25) is a ladder of 3-, 5- and 7-digit
sums in equal shares (docs/study.md, "The default testbed"). Every rung's scratchpad fits the
default thinking budget (the 7-digit one closes `</think>` at its 72nd token, the interruption comes
at 88-104), so no item is out of reach by construction: how many of the longer sums pass is set by
the model, whose per-column errors compound over 3, 5 or 7 columns. The ladder models are
warm-started on this same ladder: a model warm-started on 3-, 5- and 8-digit sums passed none of
the 4-, 6- or 7-digit ones (measured: 0.00 over 40 steps of RL), so a rung the warm start never
showed is one RL cannot reach. Earlier ladders, kept by name: `arith-358` (3, 5 and 8 digits: its
8-digit rung stayed under 0.1 in a 120-step run) and `arith-2to7` (every length 2-7: the same
warm-start budget spread over six lengths left the 5- to 7-digit rungs at 0.00). `arith-tail` is
the testbed before 2026-11-24: 62% 3-digit sums and a 38% tail of 16-digit sums whose 160-character
scratchpad no thinking budget of that testbed held, so no sample ever passed them and the task
capped every run at 0.62 (docs/history/study-history.md). The `tiny` and `tiny-order` models are
warm-started on `arith-mixed` (2-4 digit sums; the tail's targets are over budget and skipped),
the ladder models on `arith` itself.

Splits: a problem belongs to the validation split iff a salted hash of its operands falls in
the lowest `VAL_SHARE` of hash space; training draws reject such problems. The two splits are
disjoint by construction, whatever the seed and however many prompts are drawn.

Training pool: the first `train_size` training problems (`task.train_size`, default
`DEFAULT_TRAIN_SIZE` = 4096), ids `arith/s<seed>/train/<index>`; the curriculum sampler
traverses them in a seeded order that changes every epoch (on the `tiny-order` testbed a pool of
1,024 starved the 120-step run: by step ~70 what was left were prompts every sample failed, which
the filter dropped, 50 empty batches in a row; docs/history/study-history.md).
`train_prompt(index)` still generates any index (the warm start reads problems beyond the pool).

Departures from the paper:
1. The paper trains on maths/code datasets (Polaris-53k etc.); this synthetic task exists so a
   ~1M-parameter model shows a full sigmoid on a CPU in minutes (docs/design.md, "The machines").
2. The ceiling of the default task is the model's: no rung is beyond the thinking budget, so
   which sums pass depends on how accurately the model carries out a long scratchpad.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass
from typing import Iterator

from scalerl.config import DEFAULT_VAL_SIZE, ArithTaskConfig
from scalerl.errors import ScaleRLError
from scalerl.rewards import answer_section
from scalerl.tasks.registry import TaskContext, at_least, register
from scalerl.types import Prompt

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
VAL_SHARE = 0.05  # share of problem space held out for validation
_SPLIT_SALT = "scalerl-arith-split-v1"
_MAX_DRAWS = 10_000  # rejection-sampling bound (validation share is tiny)
DEFAULT_TRAIN_SIZE = 4096  # training pool of the built-in tasks (see "Training pool")
COLUMNS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"  # column letters (index hints)


@dataclass(frozen=True)
class Level:
    """One difficulty: `operands` numbers of exactly `digits` digits each."""

    operands: int
    digits: int


# The default task (`arith`): a ladder of 3-, 5- and 7-digit sums in equal shares. Every rung's
# scratchpad fits the default thinking budget (the longest, 7 columns, closes at 72 tokens), so
# nothing is unlearnable by construction: how many of the longer sums pass is set by the model (a
# per-column error compounds over 3, 5 or 7 columns), not by the task (docs/study.md).
DEFAULT_MIX: tuple[tuple[Level, float], ...] = (
    (Level(2, 3), 1 / 3),
    (Level(2, 5), 1 / 3),
    (Level(2, 7), 1 / 3),
)

# the six-rung ladder of 2026-11-25 (2- to 7-digit sums): a 2,500-step warm start spread over six
# lengths left the 5-, 6- and 7-digit rungs at 0.00 (docs/study.md), out of RL's reach
LADDER_2TO7: tuple[tuple[Level, float], ...] = tuple((Level(2, d), 1 / 6) for d in range(2, 8))

# the ladder of 2026-11-24 (docs/study.md, "The three-rung ladder"): 3-, 5- and 8-digit sums. Its top
# rung stayed under 0.1 for the 120-step run, so a budget cutting it moved nothing measurable
LADDER_358: tuple[tuple[Level, float], ...] = (
    (Level(2, 3), 1 / 3),
    (Level(2, 5), 1 / 3),
    (Level(2, 8), 1 / 3),
)

# the testbed before 2026-11-24 (`tiny-order`'s studies): 3-digit sums and a 16-digit tail no
# sample can pass within the thinking budget, which fixed the ceiling at the tail's complement
TAIL_MIX: tuple[tuple[Level, float], ...] = (
    (Level(2, 3), 0.62),
    (Level(2, 16), 0.38),
)

# the broader mix the `tiny` and `tiny-order` models are warm-started on (2-4 digit sums; the tail is never trained)
WARM_MIX: tuple[tuple[Level, float], ...] = (
    (Level(2, 2), 0.20),
    (Level(2, 3), 0.25),
    (Level(2, 4), 0.30),
    (Level(2, 16), 0.25),
)

MIXES: dict[str, tuple[tuple[Level, float], ...]] = {
    "arith": DEFAULT_MIX,
    "arith-358": LADDER_358,
    "arith-2to7": LADDER_2TO7,
    "arith-tail": TAIL_MIX,
    "arith-mixed": WARM_MIX,
    # 2-4 digit sums without the tail: ceiling near 1 (docs/design.md: plain addition ran to about 0.9)
    "arith-easy": tuple((lv, w) for lv, w in WARM_MIX if lv.digits <= 5),
}


def parse_mix(name: str) -> tuple[tuple[Level, float], ...]:
    """`arith`, `arith-easy`, `arith-<D>` / `arith-<K>x<D>` (K operands of D digits), or a weighted
    mix `arith-<K>x<D>:<w>,<K>x<D>:<w>,...` (e.g. `arith-2x2:0.62,2x16:0.38`; weights normalised)."""
    if name in MIXES:
        return MIXES[name]
    spec = name.removeprefix("arith-")
    parts = [p.partition(":") for p in spec.split(",")]
    if len(parts) == 1 and not parts[0][1]:
        return ((_level(name, spec), 1.0),)
    mix = []
    for level, colon, weight in parts:
        try:
            w = float(weight)
        except ValueError:
            w = -1.0
        if not colon or not w > 0:
            raise ScaleRLError(
                f"task.name {name!r}: in a mix every part is '<operands>x<digits>:<weight>' with a "
                f"positive weight, got {level + colon + weight!r}"
            )
        mix.append((_level(name, level), w))
    total = sum(w for _, w in mix)
    return tuple((lv, w / total) for lv, w in mix)


def _level(name: str, spec: str) -> Level:
    ops, _, digits = spec.rpartition("x")
    try:
        level = Level(int(ops) if ops else 2, int(digits))
    except ValueError:
        raise ScaleRLError(
            f"task.name {name!r}: expected one of {sorted(MIXES)}, 'arith-<digits>' / 'arith-<operands>x<digits>' "
            "or a mix 'arith-<operands>x<digits>:<weight>,...'"
        ) from None
    if not (2 <= level.operands <= 9 and 1 <= level.digits <= 48):
        raise ScaleRLError(f"task.name {name!r}: operands must be 2..9 and digits 1..48")
    return level


# ---------------------------------------------------------------- problem -> text
def rev(n: int, width: int = 0) -> str:
    """`n`'s digits least-significant first, zero-padded to `width` digits."""
    return str(n).zfill(width)[::-1]


def hinted(n: int, width: int = 0) -> str:
    """`n` least-significant digit first, each digit after its column letter: 1234 -> a4b3c2d1."""
    return "".join(COLUMNS[i] + d for i, d in enumerate(rev(n, width)))


def scratchpad(operands: tuple[int, ...], digits: int) -> str:
    """The carry scratchpad: one `<column><a>+<b>+<carry>=<SS>,` step per column."""
    cols = [rev(x, digits) for x in operands]
    steps, carry = [], 0
    for i in range(digits):
        col = [int(c[i]) for c in cols]
        total = sum(col) + carry
        steps.append(COLUMNS[i] + "+".join(map(str, col)) + f"+{carry}={total:02d},")
        carry = total // 10
    return "".join(steps)


def completion_text(operands: tuple[int, ...], digits: int) -> str:
    """The target completion (without EOS): scratchpad in think tags, then the answer."""
    return THINK_OPEN + scratchpad(operands, digits) + THINK_CLOSE + hinted(sum(operands))


def most_significant_first(target: str) -> str:
    """`target` with its answer's digits in the other order (a2b1c9d6 -> d6c9b1a2): the same
    column-tagged digits, which the checker (least-significant first) refuses."""
    head, sep, answer = target.rpartition(THINK_CLOSE)
    pairs = [answer[i : i + 2] for i in range(0, len(answer), 2)]
    return head + sep + "".join(reversed(pairs))


def problem_text(operands: tuple[int, ...]) -> str:
    return "+".join(hinted(x) for x in operands) + "="


# ---------------------------------------------------------------- sampling and splits
def is_validation(operands: tuple[int, ...]) -> bool:
    """True iff the problem lies in the held-out part of problem space (salted hash)."""
    key = (_SPLIT_SALT + ":" + ",".join(map(str, operands))).encode()
    h = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
    return h < VAL_SHARE * 2**64


def _draw(rng: random.Random, mix: tuple[tuple[Level, float], ...]) -> tuple[Level, tuple[int, ...]]:
    level = rng.choices([lv for lv, _ in mix], weights=[w for _, w in mix])[0]
    lo = 10 ** (level.digits - 1) if level.digits > 1 else 0
    return level, tuple(rng.randrange(lo, 10**level.digits) for _ in range(level.operands))


def draw_problem(seed: int, split: str, index: int, mix) -> tuple[Level, tuple[int, ...]]:
    """The `index`-th problem of `split`: a pure function of (seed, split, index, mix)."""
    rng = random.Random(f"{seed}:{split}:{index}")
    want_val = split == "val"
    for _ in range(_MAX_DRAWS):
        level, ops = _draw(rng, mix)
        if is_validation(ops) == want_val:
            return level, ops
    raise ScaleRLError(f"arith: no {split} problem found for mix {mix} (problem space too small)")


class ArithTask:
    """A finite training pool of `train_size` problems, a disjoint validation split; see the module docstring."""

    isolate_checker = False  # bounded work: `checker` runs inline in the calling thread
    score_workers = 0

    def __init__(
        self,
        name: str = "arith",
        seed: int = 0,
        tokenizer=None,
        train_size: int = DEFAULT_TRAIN_SIZE,
        answer_marker: str = THINK_CLOSE,
        val_size: int = 512,
    ):
        self.name = name
        self.seed = seed
        self.val_size = val_size  # validation prompts evaluated by default; val_prompts draws any number
        self.mix = parse_mix(name)
        self.train_size = train_size
        self.answer_marker = answer_marker
        self.checker = functools.partial(prompt_check, marker=answer_marker)
        self._template = _chat_wrapper(tokenizer)

    def __len__(self) -> int:
        return self.train_size

    def _prompt(self, split: str, index: int) -> Prompt:
        level, ops = draw_problem(self.seed, split, index, self.mix)
        return Prompt(
            id=f"{self.name}/s{self.seed}/{split}/{index}",
            text=self._template(problem_text(ops)),
            answer=hinted(sum(ops)),
            meta={
                "operands": level.operands,
                "digits": level.digits,
                "subset": f"{level.operands}x{level.digits}",
                "target": completion_text(ops, level.digits),
            },
        )

    def train_prompt(self, index: int) -> Prompt:
        return self._prompt("train", index)

    def train_prompts(self, start: int = 0) -> Iterator[Prompt]:
        """Problems `start`, `start + 1`, ... of the training split (beyond the pool too)."""
        index = start
        while True:
            yield self.train_prompt(index)
            index += 1

    def val_prompts(self, n: int) -> list[Prompt]:
        """`n` distinct validation problems (the same ones for every call with this seed)."""
        out, seen, index = [], set(), 0
        while len(out) < n:
            p = self._prompt("val", index)
            index += 1
            if p.text not in seen:
                seen.add(p.text)
                out.append(p)
            elif index > 100 * n:
                raise ScaleRLError(f"task {self.name!r}: only {len(out)} distinct validation problems, asked for {n}")
        return out

    def check(self, completion_text: str, prompt: Prompt) -> bool:
        return self.checker(completion_text, prompt)


def prompt_check(completion_text: str, prompt: Prompt, marker: str = THINK_CLOSE) -> bool:
    """`exact_check` against the prompt's answer (a task's picklable `checker`)."""
    return exact_check(completion_text, prompt.answer, marker)


def exact_check(completion_text: str, answer: str, marker: str = THINK_CLOSE) -> bool:
    """True iff the answer section (after the last `</think>`, or `marker`) is exactly `answer`."""
    return extract_answer(completion_text, marker) == answer


def extract_answer(text: str, marker: str = THINK_CLOSE) -> str | None:
    """The final answer (`scalerl.rewards.answer_section`): after the last `</think>`,
    without whitespace/end markers; None without one. Bounded work (linear, 4 kB at most)."""
    return answer_section(text, marker)


def _chat_wrapper(tokenizer):
    """Raw problem text for tokenizers without a chat template; an instruction otherwise."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return lambda text: text

    def wrap(text: str) -> str:
        msg = (
            "Add the numbers. Every number is written least-significant digit first. "
            "Think step by step inside <think></think>, then write only the sum, also "
            f"least-significant digit first.\n{text}"
        )
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": msg}], tokenize=False, add_generation_prompt=True
        )

    return wrap


@register(ArithTaskConfig)
def build(cfg: ArithTaskConfig, ctx: TaskContext) -> ArithTask:
    task = ArithTask(
        cfg.problems,
        seed=cfg.seed,
        tokenizer=ctx.tokenizer,
        train_size=cfg.train_size or DEFAULT_TRAIN_SIZE,
        answer_marker=cfg.answer_marker or THINK_CLOSE,
        val_size=cfg.val_size or DEFAULT_VAL_SIZE,
    )
    return at_least(task, ctx.min_train)
