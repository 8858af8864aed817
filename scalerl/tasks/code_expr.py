"""Built-in task `code-expr`: write a program that reads two integers and prints an expression of them.

    prompt   "Write a Python program that reads two integers a and b (one line, separated by a
              space) from standard input and prints the value of max(a, b) * 3 - a. ..."
    answer   "<think>...</think>```python\\na, b = map(int, input().split())\\nprint(max(a, b) * 3 - a)\\n```"

The expression is a random tree over `a`, `b` and constants 1-9 with `+ - *`, `max`, `min` and
`abs`; its depth is the level (`code-expr` mixes depths 1, 2 and 3 in equal shares, `code-expr-<D>`
is depth D alone; `val/pass_rate/depth<D>` per level). Each problem has three stdin/stdout tests with
operands in [-50, 50], their outputs computed here by walking the tree (nothing is `eval`ed); the
answer is scored in the sandbox as any code task is (`scalerl.tasks.code.code_check`). Splits and
pool as in `scalerl.tasks.arith`: a salted hash of the expression puts a problem in validation;
the training pool is the first `train_size` training problems, ids `code-expr/s<seed>/train/<i>`.

Departures from the paper:
1. The paper's code data is DeepCoder's; this procedural task gives the CPU testbed a second,
   learnable domain beside `arith` (`task.name=arith,code-expr`). `ladder-code-1m` is the tiny
   model warm-started on both (`scalerl.models.tiny`): the character tokenizer writes Python as any
   other text; the other built-in models saw no code.
"""

from __future__ import annotations

import hashlib
import random

from scalerl.config import DEFAULT_VAL_SIZE, CodeExprTaskConfig
from scalerl.errors import ScaleRLError
from scalerl.rewards import THINK_CLOSE
from scalerl.tasks.code import SCORE_WORKERS, STDIO_INSTRUCTION, CodeTest, sandboxed_checker
from scalerl.tasks.registry import TaskContext, at_least, register
from scalerl.types import Prompt

DEFAULT_TRAIN_SIZE = 4096
VAL_SHARE = 0.05
LEVELS = (1, 2, 3)
TESTS = 3
BINARY = ("+", "-", "*")
CALLS = ("max", "min")


def random_tree(rng: random.Random, depth: int):
    """An expression tree of exactly `depth` operator levels: ('a',), ('b',), ('k', c), (op, l, r), ('abs', x)."""
    if depth == 0:
        r = rng.random()
        return ("a",) if r < 0.4 else ("b",) if r < 0.8 else ("k", rng.randint(1, 9))
    kind = rng.random()
    if kind < 0.1:
        return ("abs", random_tree(rng, depth - 1))
    op = rng.choice(BINARY + CALLS)
    deep, shallow = random_tree(rng, depth - 1), random_tree(rng, rng.randint(0, depth - 1))
    left, right = (deep, shallow) if rng.random() < 0.5 else (shallow, deep)
    return (op, left, right)


def render(tree) -> str:
    """Python source of the tree, fully parenthesised below the top so precedence is never in doubt."""

    def inner(t) -> str:
        s = render(t)
        return f"({s})" if t[0] in BINARY else s

    head = tree[0]
    if head in ("a", "b"):
        return head
    if head == "k":
        return str(tree[1])
    if head == "abs":
        return f"abs({render(tree[1])})"
    if head in CALLS:
        return f"{head}({render(tree[1])}, {render(tree[2])})"
    return f"{inner(tree[1])} {head} {inner(tree[2])}"


def uses_a_variable(tree) -> bool:
    return tree[0] in ("a", "b") or any(isinstance(t, tuple) and uses_a_variable(t) for t in tree[1:])


def value(tree, a: int, b: int) -> int:
    head = tree[0]
    if head == "a":
        return a
    if head == "b":
        return b
    if head == "k":
        return tree[1]
    if head == "abs":
        return abs(value(tree[1], a, b))
    x, y = value(tree[1], a, b), value(tree[2], a, b)
    return {"+": x + y, "-": x - y, "*": x * y, "max": max(x, y), "min": min(x, y)}[head]


def reference_program(expr: str) -> str:
    return f"a, b = map(int, input().split())\nprint({expr})\n"


def warm_target(expr: str) -> str:
    """The completion a built-in model is warm-started on (`scalerl.models.tiny`, `ladder-code-1m`):
    empty thinking, then the reference program in a fenced block (what `extract_program` reads)."""
    return f"<think></think>```python\n{reference_program(expr)}```"


def is_val(expr: str) -> bool:
    """Whether an expression belongs to the validation split (a salted hash, the same for every seed)."""
    h = int(hashlib.sha256(f"code-expr:{expr}".encode()).hexdigest()[:8], 16)
    return h < VAL_SHARE * 0xFFFFFFFF


def problem(seed: int, levels: tuple[int, ...], split: str, index: int, tokenizer=None) -> Prompt:
    """Problem `index` of `split` ('train' | 'val'): its prompt, tests and reference program; no
    program runs here (the warm start builds its examples with this, outside any sandbox)."""
    rng = random.Random(f"{seed}/{split}/{index}")
    while True:
        depth = rng.choice(levels)
        tree = random_tree(rng, depth)
        expr = render(tree)
        if is_val(expr) == (split == "val") and uses_a_variable(tree):
            break
    pairs = [(rng.randint(-50, 50), rng.randint(-50, 50)) for _ in range(TESTS)]
    tests = [CodeTest("stdio", input=f"{a} {b}\n", output=f"{value(tree, a, b)}\n") for a, b in pairs]
    text = (
        f"Write a Python program that reads two integers a and b (one line, separated by a space) from "
        f"standard input and prints the value of {expr}.\n\n{STDIO_INSTRUCTION}"
    )
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    return Prompt(
        id=f"code-expr/s{seed}/{split}/{index}",
        text=text,
        answer=reference_program(expr),
        meta={
            "subset": f"depth{depth}",
            "tests": tests,
            "expression": expr,
            "kind": "code",
            "target": warm_target(expr),
        },
    )


def parse_name(name: str) -> tuple[int, ...]:
    if name == "code-expr":
        return LEVELS
    depth = name.removeprefix("code-expr-")
    if not depth.isdigit() or not 1 <= int(depth) <= 6:
        raise ScaleRLError(f"task.name {name!r}: expected code-expr or code-expr-<depth 1-6>")
    return (int(depth),)


@register(CodeExprTaskConfig)
class ExprCodeTask:
    """See the module docstring."""

    isolate_checker = False
    score_workers = SCORE_WORKERS

    def __init__(self, cfg: CodeExprTaskConfig | None = None, ctx: TaskContext = TaskContext()):
        cfg = CodeExprTaskConfig() if cfg is None else cfg
        self.answer_marker = cfg.answer_marker or THINK_CLOSE
        self.checker = sandboxed_checker(self.answer_marker, ctx)
        self.name, self.seed, self.levels = cfg.name, cfg.seed, parse_name(cfg.name)
        self.train_size, self.val_size = cfg.train_size or DEFAULT_TRAIN_SIZE, cfg.val_size or DEFAULT_VAL_SIZE
        self.tokenizer = ctx.tokenizer
        at_least(self, ctx.min_train)

    def __len__(self) -> int:
        return self.train_size

    def train_prompt(self, index: int) -> Prompt:
        return problem(self.seed, self.levels, "train", index, self.tokenizer)

    def val_prompts(self, n: int) -> list[Prompt]:
        if n > self.val_size:
            raise ScaleRLError(f"task {self.name}: asked for {n} validation prompts, task.val_size is {self.val_size}")
        return [problem(self.seed, self.levels, "val", i, self.tokenizer) for i in range(n)]

    def check(self, completion_text: str, prompt: Prompt) -> bool:
        return self.checker(completion_text, prompt) >= 1.0
