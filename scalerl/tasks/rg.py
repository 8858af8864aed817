"""reasoning-gym tasks: `task.name=rg:<dataset>` or a weighted mix `rg:<a>,<b>,...`.

reasoning-gym (`pip install reasoning-gym`) has about a hundred procedural datasets, each a
generator (`create_dataset(name, seed=, size=, **options)`) and a verifier
(`dataset.score_answer(answer, entry) -> float in [0, 1]`). Here:

- **Options** come from `task.options` (the dataset's own config fields, checked by name);
  for a mix, `task.options = {<dataset>: {...}}` and `task.weights` (one per dataset, default
  equal), built as reasoning-gym's `CompositeDataset`.
- **Pool and validation**: the training pool is entries 0..`train_size`-1 of the dataset
  seeded with `task.seed` (questions that repeat are kept once); validation entries come from
  the same generator under another seed, skipping every question of the pool, so the two are
  disjoint. Ids: `rg:<names>/s<seed>/train/<index>` (stable for a seed and options).
- **Format**, as reasoning-gym's own examples: the question, and the answer in
  `<answer>...</answer>` tags. Instruct models (a chat template) get reasoning-gym's system
  prompt (`task.system_prompt` to change it): its "DeepSeekZero" prompt with a `<think>`
  opened after the generation prompt when the recipe interrupts thinking, its "default"
  prompt otherwise. Tokenizers without a template get the question (+ `<think>`) after one
  sentence asking for the answer in `<answer>` tags (`task.answer_instruction`; null: none).
- **Examples** (`task.shots` = k > 0, instruct models): k solved entries shown as earlier chat
  turns (the question, then `<answer>answer</answer>`) before each question. They come from
  the generator under a third seed, and their questions are kept out of the pool and the
  validation set. A 135M model that ignores the system prompt's format often follows examples.
- **Scoring**: the answer is the content of the last `<answer>...</answer>` of the answer
  section (`task.answer_marker`, default `<answer>`; with `</think>`, the tags after it),
  scored with the dataset's `score_answer`; `RewardFn` passes it iff the score reaches
  `reward.threshold` (default 1.0), with optional partial credit (`reward.partial_credit`).
  The answer given to `score_answer` is at most `RG_ANSWER_MAX_CHARS` characters.

Departures from the paper:
1. The paper trains on maths (Polaris-53K) and code; reasoning-gym's tasks stand in for them
   where a small model on a CPU must show learning.
"""

from __future__ import annotations

import difflib
from dataclasses import fields

from scalerl.config import DEFAULT_VAL_SIZE, RgTaskConfig
from scalerl.errors import ScaleRLError
from scalerl.rewards import ANSWER_TAG, answer_section, instruction_for
from scalerl.tasks.pool import PromptPool, apply_limit, check_sizes, report_dropped
from scalerl.tasks.registry import TaskContext, register
from scalerl.types import Prompt

RG_ANSWER_MAX_CHARS = 2048
DEFAULT_TRAIN_SIZE = 1024  # training pool of a reasoning-gym task (`task.train_size`)
_VAL_SEED_OFFSET = 1_000_003  # validation entries come from the generator under seed + this
_SHOT_SEED_OFFSET = 2_000_006  # and the examples of `task.shots` under seed + this
_OVERDRAW = 4  # draw at most this many entries per wanted distinct one
_RESERVED = ("seed", "size")  # set by scalerl (task.seed, task.train_size / val_size)


def _registry() -> dict:
    try:
        import reasoning_gym  # noqa: F401  (registers the datasets)
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise ScaleRLError("task.name 'rg:...' needs reasoning-gym: pip install reasoning-gym") from None
    return DATASETS


def parse_names(name: str) -> list[str]:
    """`rg:a,b` -> ["a", "b"], each a known dataset (else the closest names are listed)."""
    names = [n.strip() for n in name.removeprefix("rg:").split(",")]
    registry = _registry()
    for n in names:
        if n not in registry:
            close = difflib.get_close_matches(n, list(registry), n=4, cutoff=0.5)
            hint = f" (closest: {', '.join(close)})" if close else f" (known: {len(registry)} datasets, e.g. chain_sum)"
            raise ScaleRLError(f"task.name {name!r}: unknown reasoning-gym dataset {n!r}{hint}")
    if len(set(names)) != len(names):
        raise ScaleRLError(f"task.name {name!r}: a dataset is named twice")
    return names


def dataset_options(names: list[str], options: dict) -> dict[str, dict]:
    """{dataset: its options}, every option checked against the dataset's config fields."""
    per = {names[0]: dict(options)} if len(names) == 1 else {n: dict(options.get(n) or {}) for n in names}
    if len(names) > 1 and set(options) - set(names):
        extra = sorted(set(options) - set(names))
        raise ScaleRLError(
            f"task.options: {extra} are not datasets of the mix {names}; give {{<dataset>: {{options}}}}"
        )
    registry = _registry()
    for n, opts in per.items():
        if not isinstance(opts, dict):
            raise ScaleRLError(f"task.options.{n}: expected a mapping of options, got {opts!r}")
        allowed = [f.name for f in fields(registry[n][1]) if f.name not in _RESERVED]
        for key in opts:
            if key not in allowed:
                why = "set by task.seed / task.train_size" if key in _RESERVED else f"its options: {', '.join(allowed)}"
                raise ScaleRLError(f"task.options: {key!r} is not an option of reasoning-gym dataset {n!r} ({why})")
    return per


def build_dataset(names: list[str], per: dict[str, dict], weights: list[float] | None, seed: int, size: int):
    """A reasoning-gym dataset (one, or a `CompositeDataset` mix) of `size` entries."""
    from reasoning_gym import create_dataset
    from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec

    if weights is not None and len(weights) != len(names):
        raise ScaleRLError(f"task.weights: {len(weights)} weights for {len(names)} datasets {names}")
    try:
        if len(names) == 1:
            return create_dataset(names[0], seed=seed, size=size, **per[names[0]])
        specs = [DatasetSpec(n, float(w), per[n]) for n, w in zip(names, weights or [1.0] * len(names))]
        return CompositeDataset(CompositeConfig(size=size, seed=seed, datasets=specs))
    except (AssertionError, ValueError, TypeError) as e:
        raise ScaleRLError(f"task.options for reasoning-gym {','.join(names)}: {e or type(e).__name__}") from None


class RgScorer:
    """The picklable checker: `(completion_text, prompt) -> score in [0, 1]`."""

    def __init__(self, dataset, marker: str):
        self.dataset, self.marker = dataset, marker

    def __call__(self, completion_text: str, prompt: Prompt) -> float:
        section = answer_section(completion_text, self.marker)
        if section is not None and self.marker != ANSWER_TAG:
            section = answer_section(section, ANSWER_TAG)
        if section is None or len(section) > RG_ANSWER_MAX_CHARS:
            return 0.0
        return float(self.dataset.score_answer(section, prompt.meta["entry"]))


@register(RgTaskConfig)
class RgTask(PromptPool):
    """reasoning-gym dataset(s) as a finite training pool and a disjoint validation set."""

    isolate_checker = False  # pure Python scorers on answers of at most RG_ANSWER_MAX_CHARS
    score_workers = 0

    def __init__(self, cfg: RgTaskConfig, ctx: TaskContext = TaskContext()):
        train_size, val_size = cfg.train_size or DEFAULT_TRAIN_SIZE, cfg.val_size or DEFAULT_VAL_SIZE
        seed, weights, limit, min_train = cfg.seed, cfg.weights, ctx.limit(cfg), ctx.min_train
        self.names = parse_names(cfg.name)
        self.name = "rg:" + ",".join(self.names)
        self.seed = seed
        per = dataset_options(self.names, cfg.options or {})
        examples = []
        if cfg.shots:
            shot_ds = build_dataset(self.names, per, weights, seed + _SHOT_SEED_OFFSET, _OVERDRAW * cfg.shots)
            examples = [(e["question"], str(e["answer"])) for e in (shot_ds[i] for i in range(len(shot_ds)))]
            examples = examples[: cfg.shots]
        self._format = _formatter(
            ctx.tokenizer, cfg.system_prompt, ctx.think, examples, instruction_for(cfg.answer_instruction, ANSWER_TAG)
        )
        held = {q for q, _ in examples}
        train_ds = build_dataset(self.names, per, weights, seed, _OVERDRAW * train_size)
        train = self._draw(train_ds, "train", train_size, exclude=held)
        val_ds = build_dataset(self.names, per, weights, seed + _VAL_SEED_OFFSET, _OVERDRAW * val_size)
        val = self._draw(val_ds, "val", val_size, exclude=held | {p.meta["question"] for p in train})
        train, over_t = apply_limit(train, limit, f"task {self.name}")
        val, over_v = apply_limit(val, limit, f"task {self.name}")
        dropped = report_dropped(f"task {self.name}", 0, over_t + over_v, limit)
        if len(val) < val_size:
            raise ScaleRLError(
                f"task {self.name}: only {len(val)} validation prompts distinct from the training "
                f"pool{dropped}, task.val_size is {val_size}; lower it or widen the dataset's options"
            )
        check_sizes(f"task {self.name}", len(train) + len(val), len(val), min_train, dropped)
        self._train, self._val = train, val
        self.answer_marker = cfg.answer_marker or ANSWER_TAG
        self.checker = RgScorer(train_ds, self.answer_marker)  # scores any entry (a mix dispatches by its source)

    def _draw(self, ds, split: str, n: int, exclude: set[str]) -> list[Prompt]:
        """Up to `n` entries of `ds` with distinct questions not in `exclude`, in index order."""
        out, seen = [], set(exclude)
        for index in range(len(ds)):
            if len(out) == n:
                break
            entry = ds[index]
            if entry["question"] in seen:
                continue
            seen.add(entry["question"])
            out.append(
                Prompt(
                    id=f"{self.name}/s{self.seed}/{split}/{index}",
                    text=self._format(entry["question"]),
                    answer=str(entry["answer"]),
                    meta={
                        "entry": entry,
                        "question": entry["question"],
                        "subset": entry["metadata"].get("source_dataset", self.names[0]),
                    },
                )
            )
        return out

    def check(self, completion_text: str, prompt: Prompt) -> bool:
        return self.checker(completion_text, prompt) >= 1.0


def _formatter(
    tokenizer,
    system_prompt: str | None,
    think: bool,
    examples: list[tuple[str, str]] = (),
    instruction: str | None = None,
):
    """question -> prompt text, as reasoning-gym's examples format it (see the module docstring);
    `examples`: (question, answer) pairs shown as earlier chat turns (`task.shots`); `instruction`:
    where the answer goes, before the question of a model without a chat template (an instruct
    model reads it in reasoning-gym's system prompt)."""
    opener = "<think>\n" if think else ""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        if examples:
            raise ScaleRLError("task.shots needs an instruct model (a tokenizer with a chat template)")
        head = f"{instruction}\n\n" if instruction else ""
        return lambda question: head + question + ("\n" + opener if think else "")
    from reasoning_gym.utils import SYSTEM_PROMPTS

    system = system_prompt if system_prompt is not None else SYSTEM_PROMPTS["DeepSeekZero" if think else "default"]
    shown = []
    for q, a in examples:
        reply = f"<answer>{a}</answer>"
        shown += [
            {"role": "user", "content": q},
            {"role": "assistant", "content": f"<think>\n</think>\n{reply}" if think else reply},
        ]

    def wrap(question: str) -> str:
        messages = (
            ([{"role": "system", "content": system}] if system else [])
            + shown
            + [{"role": "user", "content": question}]
        )
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + opener

    return wrap
