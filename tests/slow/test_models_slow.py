"""Model loading, slow tier: the warm start of `tiny` and SmolLM2 (tests/models/test_models.py holds the rest)."""

import pytest

from scalerl.models import load_model


@pytest.mark.slow
def test_tiny_warm_start_validation_pass_rate_in_band():
    """Builds (or reuses) the cached tiny model; pass rate at temperature 1 on 256 val prompts."""
    from scalerl.config import task_config
    from scalerl.models.warmstart import sampled_pass_rate
    from scalerl.tasks import get_task

    model, tok = load_model("tiny")
    task = get_task(task_config(), tok)
    rate = sampled_pass_rate(model, tok, task, task.val_prompts(256), max_new_tokens=160, seed=0)
    assert 0.05 <= rate <= 0.40


@pytest.mark.slow
def test_smollm2_loads_offline_and_answers():
    model, tok = load_model("smollm2-135m")
    assert model.config.model_type == "llama" and model.config.hidden_size == 576
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is 17 + 25?"}], tokenize=False, add_generation_prompt=True
    )
    enc = tok(text, return_tensors="pt")
    out = model.generate(**enc, do_sample=False, max_new_tokens=12)
    reply = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert any(ch.isdigit() for ch in reply)
    model.train()  # a converted checkpoint is trainable (not flagged quantised)
    loss = model(**enc, labels=enc["input_ids"]).loss
    loss.backward()
    assert model.get_input_embeddings().weight.grad is not None
