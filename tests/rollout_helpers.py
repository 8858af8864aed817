"""A random-init Llama and a character tokenizer for the rollout tests (no other scalerl area)."""

from __future__ import annotations

import string

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from scalerl.types import Prompt

CHARS = string.digits + string.ascii_letters + string.punctuation + " "
SPECIALS = ["<pad>", "</s>", "<unk>"]


def char_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate([*SPECIALS, *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>")])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def tiny_llama(vocab_size: int, seed: int = 0, head_bias: bool = False, attn: str = "sdpa") -> LlamaForCausalLM:
    """hidden 64, 2 layers, GQA (4 heads, 2 kv heads); a spread-out head so sampling is not uniform."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        initializer_range=0.2,
        attn_implementation=attn,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=1,
    )  # ids of char_tokenizer()
    model = LlamaForCausalLM(cfg).eval()
    if head_bias:
        old = model.lm_head
        model.lm_head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
        with torch.no_grad():
            model.lm_head.weight.copy_(old.weight)
            model.lm_head.bias.zero_()
    return model


def prompts(texts: list[str]) -> list[Prompt]:
    return [Prompt(id=f"p{i}", text=t, answer="") for i, t in enumerate(texts)]


TEXTS = ["12+7=", "What is 3*4?", "a", "<think>x", "The quick brown fox jumps over", "99-1="]


LONG_AND_SHORT = [
    "a fairly long prompt about 12+34=46 and more text to fill the row: 1234567890",
    "1+1=",
    "7*8=",
    "another long one: the quick brown fox jumps over the lazy dog",
    "9-3=",
    "x",
    "12+7=",
    "What is 3*4?",
]


def smollm2_shape(vocab: int, layers: int = 2, seed: int = 0) -> LlamaForCausalLM:
    """SmolLM2-135M's shape with `layers` layers and random weights (spread out, so that greedy
    choices are not near-ties)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=max(vocab, 49152),
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        initializer_range=0.1,
        attn_implementation="sdpa",
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=1,
    )
    return LlamaForCausalLM(cfg).eval()


MODELS = {"tiny": lambda vocab: tiny_llama(vocab, seed=2), "smollm2-shape": smollm2_shape}
