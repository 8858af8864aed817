"""The tiny model: a ~1M-parameter Llama with a character-level tokenizer.

Both are real `transformers` objects (`LlamaForCausalLM`, `PreTrainedTokenizerFast` over a
`tokenizers` WordLevel model), saved together with `save_pretrained`, so every part of
scalerl treats the tiny model like any Hugging Face checkpoint.

Tokenizer: one token per character (digits, letters, punctuation, space, newline), so the
forced-interruption phrase encodes; `<think>` and `</think>` are single added tokens (not
"special" in the HF sense, so decoding never strips them and the checker sees them);
`<s>`, `</s>`, `<pad>`, `<unk>` are special. Nothing is added automatically when encoding:
the ids of `tokenizer(prompt.text)` are the same with and without `add_special_tokens`.

Departures from the paper:
1. The paper's models are 8B-17Bx16 pretrained LLMs; this one exists so the whole system runs
   on a laptop CPU (docs/design.md, "The machines", has its measurements).
"""

from __future__ import annotations

import string

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = {"pad": "<pad>", "bos": "<s>", "eos": "</s>", "unk": "<unk>"}
THINK_TOKENS = ("<think>", "</think>")
CHARS = string.digits + string.ascii_letters + string.punctuation + " \n"

MODEL_SHAPE = dict(
    hidden_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=512,
    max_position_embeddings=512,
)
# `small`: the same recipe at ~25M parameters (issue: do the toy findings hold at a larger size?)
SMALL_SHAPE = dict(
    hidden_size=512,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=8,
    intermediate_size=1536,
    max_position_embeddings=512,
)
# `mid`: ~4.2M parameters (width 256, 4 layers), the larger model of the default testbed's controls
MID_SHAPE = dict(
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=1024,
    max_position_embeddings=512,
)
# `w192`: ~2.4M parameters (width 192, 4 layers), the middle size of the scaling-axes study
W192_SHAPE = dict(
    hidden_size=192,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=768,
    max_position_embeddings=512,
)
SHAPES = {"tiny": MODEL_SHAPE, "mid": MID_SHAPE, "small": SMALL_SHAPE, "w192": W192_SHAPE}


def build_tokenizer(vocab_size: int | None = None) -> PreTrainedTokenizerFast:
    """The character-level tokenizer (deterministic: same ids on every build).

    `vocab_size` pads the vocabulary with unused `<unusedN>` entries up to that size, so a model
    with a real LLM's embedding shape (49,152 rows for SmolLM2) can be paired with it; a random
    model samples those ids and they decode as `<unusedN>`.
    """
    names = [*SPECIAL.values(), *CHARS]
    if vocab_size is not None:
        names += [f"<unused{i}>" for i in range(vocab_size - len(THINK_TOKENS) - len(names))]
    vocab = {tok: i for i, tok in enumerate(names)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL["unk"]))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL.values()])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=SPECIAL["bos"],
        eos_token=SPECIAL["eos"],
        pad_token=SPECIAL["pad"],
        unk_token=SPECIAL["unk"],
        padding_side="left",
    )


def model_config(tokenizer: PreTrainedTokenizerFast, shape: str = "tiny") -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        rope_theta=10000.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **SHAPES[shape],
    )


def build_random(tokenizer: PreTrainedTokenizerFast, seed: int = 0, shape: str = "tiny") -> LlamaForCausalLM:
    """A randomly initialised tiny (or `small`) Llama (deterministic given `seed`)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(model_config(tokenizer, shape))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


# ---------------------------------------------------------------- the cached, warm-started build
BUILD_VERSION = "tiny-v1"  # bump when the build procedure changes in a way the key misses
WARM_TASK = "arith-mixed"  # the broad 2-4 digit mix the tiny model is warm-started on (tasks/arith.py)


# `tiny-order`: a testbed probe (docs/study.md, "A testbed whose ceiling pins"). The warm start
# runs to an accurate scratchpad (2,700 steps, the last one kept) but writes 85% of its answers
# most-significant digit first, which the checker refuses: what RL then learns is one habit,
# the answer's order, so its curve is one sigmoid with a ceiling (the solvable share times the
# scratchpad's accuracy) reached within the default run.
WRONG_ORDER_SHARE = 0.85


def order_settings():
    from scalerl.models.warmstart import WarmStartSettings

    return WarmStartSettings(max_steps=2700, eval_from=2700, eval_every=2700, target=1.0, lo=0.0, hi=1.01)


class _WrongOrderHabit:
    """A task whose training targets write the answer most-significant digit first for a fixed,
    seeded `share` of indices (everything else is the task's)."""

    def __init__(self, task, share: float):
        self.task, self.share = task, share

    def __getattr__(self, name):
        return getattr(self.task, name)

    def train_prompt(self, index: int):
        import dataclasses

        from scalerl.tasks.arith import most_significant_first

        p = self.task.train_prompt(index)
        if (index * 2654435761 % 1_000_003) / 1_000_003 >= self.share:
            return p
        return dataclasses.replace(p, meta={**p.meta, "target": most_significant_first(p.meta["target"])})


class CodeProblems:
    """`code-expr` problems as warm-start examples (prompt and `meta["target"]`); nothing is run."""

    def __init__(self, name: str, seed: int):
        from scalerl.tasks.code_expr import parse_name

        self.levels, self.seed = parse_name(name), seed

    def train_prompt(self, index: int):
        from scalerl.tasks.code_expr import problem

        return problem(self.seed, self.levels, "train", index)

    @staticmethod
    def check(completion_text: str, prompt) -> bool:
        """The warm start's monitor: the program is the reference program, as text (no program runs
        during a build; an equivalent program counts as a miss)."""
        from scalerl.tasks.code import extract_program

        program = extract_program(completion_text)
        return program is not None and program.strip() == prompt.answer.strip()


class Interleaved:
    """Several warm-start tasks in turn: example i is task i mod n's example i // n; a prompt is
    checked by the task it came from (code problems carry tests, sums do not)."""

    def __init__(self, tasks: list):
        self.tasks = tasks

    def train_prompt(self, index: int):
        return self.tasks[index % len(self.tasks)].train_prompt(index // len(self.tasks))

    def check(self, completion_text: str, prompt) -> bool:
        owner = next(t for t in self.tasks if isinstance(t, CodeProblems) == ("tests" in prompt.meta))
        return owner.check(completion_text, prompt)


# The ladder models (the default testbed since 2026-11-24, docs/study.md): warm-started the same
# fixed number of steps on the default task's ladder (3-, 5- and 7-digit sums), with `tiny-order`'s
# wrong-order habit. The budget is fixed, not a target: the model learns the scratchpad as well as
# its size lets it in that many steps, so a larger model starts RL with fewer per-column errors and
# the ceiling RL reaches is the model's. `ladder-1m` is the tiny shape, `ladder-4m` the `mid` one.
# The budget was chosen between two measured builds of the 1M model (docs/study.md): 1,500 steps
# (on 2-8 digit sums) never passed (0 of 1,536 validation samples: no signal for RL); 3,000 steps
# wrote an accurate scratchpad, and RL took it to 0.98, a ceiling no larger model could beat.
# Those builds were on the 3/5/8 ladder (`arith-358`); the 2,500-step budget was kept unchanged when
# the ladder changed (2026-11-25: every length 2-7, then 3/5/7), so no later build was tuned.
LADDER_WARM_TASK = "arith"
LADDER_MODELS = {"ladder-1m": "tiny", "ladder-2m": "w192", "ladder-4m": "mid", "ladder-code-1m": "tiny"}
# `ladder-code-1m`: the two-domain testbed (math and code, as the paper's Fig. 11). The same build as
# `ladder-1m` (shape, 2,500 steps of 16 examples, the wrong-order habit on the sums) with every other
# example a `code-expr` problem (depths 1-3) whose target is its reference program. Chosen before a
# build, for these reasons: the budget is the arithmetic model's, not a target; the programs carry no
# made-up habit, because what a 1M model gets wrong in copying an expression of 5-30 characters out
# of a 290-character prompt into a program is its own imperfection for RL to work on, and the depths
# are a ladder of expression lengths. Half the budget goes to each domain, so its sums are weaker
# than `ladder-1m`'s. It is refuted as a testbed if a domain starts at 0 and stays there, or starts
# at its top (nothing to learn).
WARM_TASKS = {"ladder-code-1m": "arith+code-expr"}


def ladder_settings():
    from scalerl.models.warmstart import WarmStartSettings

    return WarmStartSettings(max_steps=2500, eval_from=2500, eval_every=2500, target=1.0, lo=0.0, hi=1.01)


def build_spec(settings, shape: str = "tiny", wrong_order_share: float = 0.0, warm_task: str = WARM_TASK) -> dict:
    """Everything that determines the built weights: the cache key is a hash of this."""
    tok = build_tokenizer()
    from scalerl.tasks.arith import parse_mix

    model = model_config(tok, shape).to_dict()
    model.pop("transformers_version", None)  # the installed library's, not the build's: a cache carried
    # to a machine with another transformers (a GPU image) is found there instead of rebuilt
    arith, *code = warm_task.split("+")
    spec = {
        "version": BUILD_VERSION,
        "model": model,
        "vocab": tok.get_vocab(),
        "task": warm_task,
        "mix": repr(parse_mix(arith)),
        "warm_start": settings.to_dict(),
    }
    if code:  # only then: the other models keep their cache keys
        from scalerl.tasks.code_expr import LEVELS, TESTS

        spec["code"] = {"tasks": code, "levels": list(LEVELS), "tests": TESTS}
    if wrong_order_share:  # only then: the other models keep their cache keys
        spec["wrong_order_share"] = wrong_order_share
    return spec


BUILD_THREADS = 2  # torch threads of every warm start, whatever the machine has: the trajectory depends on it
# (ladder-1m built with 1 thread starts RL at 0.175, with 2 at 0.050: docs/models-and-tasks.md)


def build_tiny(
    out_dir, settings, log=print, shape: str = "tiny", wrong_order_share: float = 0.0, warm_task: str = WARM_TASK
) -> None:
    """Build, warm-start and save the tiny (or `small`) model and its tokenizer into `out_dir`.
    The warm start runs on a CUDA GPU when there is one (the small model: ~1 min there against
    ~30 on 2 CPU cores), else on the CPU."""
    import json
    import sys

    from scalerl.tasks.arith import ArithTask

    tokenizer = build_tokenizer()
    model = build_random(tokenizer, seed=settings.seed, shape=shape)
    if shape != "tiny" and torch.cuda.is_available():
        model.cuda()
    arith, *code = warm_task.split("+")
    task = ArithTask(arith, seed=settings.seed)
    if wrong_order_share:
        task = _WrongOrderHabit(task, wrong_order_share)
    if code:
        task = Interleaved([task, *(CodeProblems(name, settings.seed) for name in code)])
    from scalerl.models.warmstart import warm_start

    threads = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        summary = warm_start(model, tokenizer, task, settings, log=lambda m: print(m, file=sys.stderr, flush=True))
    finally:
        torch.set_num_threads(threads)
    model.cpu().save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    with open(f"{out_dir}/warm_start.json", "w") as f:
        json.dump(summary, f, indent=1)
