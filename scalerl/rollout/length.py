"""The length budget of forced interruptions, counted with the run's tokenizer.

An interrupted completion is `thinking (up to think_max) + phrase + answer (answer_budget)`
tokens; it answers only if that fits in `rollout.max_new_tokens`. The phrase's length depends on
the tokenizer (the paper's phrase is 74 tokens with the tiny model's character tokenizer and 20
with SmolLM2's), so the check runs where the tokenizer is known: when an `Engine` is built
(the trainer builds its evaluation engine in the main process, before any generator process)
and when a study scales its length windows (`scalerl.study.variants.fit_length_control`).

Departures from the paper: none; the paper interrupts at 10-12k thinking tokens of a 16k
budget, which leaves room for its phrase and answer: the same inequality.
"""

from __future__ import annotations

import functools

from scalerl.config import InterruptConfig, RolloutConfig
from scalerl.errors import ScaleRLError


def phrase_ids(tokenizer, phrase: str) -> list[int]:
    """Token ids of the interruption phrase, encoded on its own without special tokens."""
    ids = tokenizer(phrase, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ScaleRLError(f"rollout.length.phrase = {phrase!r}: tokenises to nothing")
    unk = tokenizer.unk_token_id
    if unk is not None and unk in ids:
        raise ScaleRLError(
            f"rollout.length.phrase = {phrase!r}: has characters this tokenizer does not know "
            "(an unknown token); choose a phrase the model's vocabulary can write"
        )
    return ids


def check_budget(cfg: RolloutConfig, n_phrase: int) -> None:
    """Refuse, in one line naming the four numbers, an interruption that cannot be answered."""
    length = cfg.length
    if not isinstance(length, InterruptConfig):
        return
    need = length.think_max + n_phrase + length.answer_budget
    if need > cfg.max_new_tokens:
        raise ScaleRLError(
            f"rollout.length: think_max ({length.think_max}) + interruption phrase ({n_phrase} tokens with this "
            f"tokenizer) + answer_budget ({length.answer_budget}) = {need} > rollout.max_new_tokens "
            f"({cfg.max_new_tokens}): an interrupted completion would be cut before its answer; lower think_max "
            "or answer_budget, shorten rollout.length.phrase, or raise rollout.max_new_tokens"
        )


@functools.lru_cache(maxsize=8)
def _tokenizer(model_name: str):
    from scalerl.models import base_model

    model_name = base_model(model_name)  # a trained checkpoint keeps its base model's tokenizer
    from scalerl.models import CHAR_TOKENIZER_MODELS

    if model_name in CHAR_TOKENIZER_MODELS:  # the cached tiny models save this tokenizer
        from scalerl.models.tiny import build_tokenizer

        return build_tokenizer()
    from transformers import AutoTokenizer

    from scalerl.models import checkpoint_dir

    return AutoTokenizer.from_pretrained(checkpoint_dir(model_name))


def phrase_tokens(model_name: str, phrase: str) -> int:
    """Length of `phrase` in tokens of the tokenizer of `model.name` (no model weights loaded
    for the tiny models; other models: their checkpoint's tokenizer, converted once if needed)."""
    return len(phrase_ids(_tokenizer(model_name), phrase))
