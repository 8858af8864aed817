"""Config loading, presets, dotted overrides, suggestions, union switching, YAML round trip, CLI."""

import pytest
import yaml

from scalerl.cli import main
from scalerl.config import CispoLoss, Config, PPOClipLoss, dump_config, list_recipes
from scalerl.config.merge import parse_override
from scalerl.configure import load_config, profile_line
from scalerl.errors import ScaleRLError

# docs/design.md recipe list, written out independently of the preset files.
TABLE = {
    "scalerl": ("cispo", "prompt", "batch"),
    "grpo": ("ppo_clip", "sample", "prompt"),
    "dapo": ("ppo_clip", "token", "prompt"),
    "gspo": ("gspo", "sample", "prompt"),
    "magistral": ("ppo_clip", "token", "batch"),
    "minimax": ("cispo", "token", "prompt"),
}


def test_presets_match_the_design_table():
    assert list_recipes()[0] == "scalerl" and set(list_recipes()) == set(TABLE)
    for name, (loss, agg, norm) in TABLE.items():
        cfg = load_config(name)
        assert (cfg.recipe, cfg.loss.type, cfg.loss.aggregation, cfg.advantage.norm) == (name, loss, agg, norm)


def test_preset_details():
    assert load_config("scalerl") == Config()  # the defaults are the ScaleRL recipe
    s = load_config("scalerl")
    assert (s.loss.eps_max, s.filter.zero_variance, s.curriculum.threshold, s.model.fp32_head) == (5, True, 0.9, True)
    assert (s.pipeline.mode, s.pipeline.k, s.rollout.length.type) == ("pipeline_rl", 8, "interrupt")
    d = load_config("dapo")
    assert (d.loss.eps_low, d.loss.eps_high, d.loss.kl_beta) == (0.2, 0.28, 0.0)
    assert d.filter.dynamic_sampling and d.rollout.length.type == "penalty"
    m = load_config("magistral")
    assert 0.26 <= m.loss.eps_high <= 0.28 and m.loss.kl_beta == 0 and m.rollout.length.type == "penalty"
    assert load_config("gspo").loss.eps_high < 1e-3


def test_every_preset_file_has_paper_comments():
    from scalerl.config import recipe_path

    for name in TABLE:
        text = recipe_path(name).read_text()
        assert text.startswith("#") and ("Section" in text or "Eq." in text)


def test_dotted_overrides_and_value_types():
    cfg = load_config(
        "scalerl",
        overrides=[
            "loss.eps_max=8",
            "run.max_minutes=2.5",
            "task.name=file",
            "task.path=/tmp/a:b.jsonl",
            "optim.betas=[0.8, 0.9]",
            "model.fp32_head=false",
            "run.threads=null",
        ],
    )
    assert cfg.loss.eps_max == 8 and cfg.run.max_minutes == 2.5 and cfg.task.path == "/tmp/a:b.jsonl"
    assert cfg.optim.betas == (0.8, 0.9) and cfg.model.fp32_head is False and cfg.run.threads is None
    assert parse_override("a.b.c=1") == {"a": {"b": {"c": 1}}}


def test_switching_union_type_keeps_shared_fields_only():
    cfg = load_config("scalerl", overrides=["loss.type=ppo_clip", "loss.eps_high=0.28"])
    assert cfg.loss == PPOClipLoss(eps_high=0.28, aggregation="prompt")  # aggregation carried over
    cfg = load_config("dapo", overrides=["loss=cispo"])
    assert cfg.loss == CispoLoss(aggregation="token")
    cfg = load_config("scalerl", overrides=["rollout.length.type=penalty", "rollout.length.tolerance=8"])
    assert cfg.rollout.length.type == "penalty" and cfg.rollout.length.tolerance == 8


@pytest.mark.parametrize(
    "override,match",
    [
        ("loss.eps_mx=8", r"unknown config key 'loss.eps_mx' \(did you mean 'loss.eps_max'"),
        ("eps_max=8", r"unknown config key 'eps_max' \(did you mean 'loss.eps_max'\?\)"),
        ("model.fp32_hed=true", r"did you mean 'model.fp32_head'"),
        (
            "loss.eps_high=0.3",
            r"'loss.eps_high' is not a field of loss type 'cispo'.*ppo_clip, gspo.*--set loss.type=ppo_clip",
        ),
        (
            "loss.type=ppo_clp",
            r"loss.type = 'ppo_clp' is not one of cispo, ppo_clip, gspo, reinforce, custom; did you "
            r"mean 'ppo_clip'",
        ),
        ("loss.eps_max=0", r"--set loss.eps_max=0: loss.eps_max = 0: Input should be greater than 0"),
        ("curriculum.threshold=1.5", r"curriculum.threshold = 1.5: Input should be less than or equal to 1"),
        ("curriculum.threshold=0", r"curriculum.threshold = 0: Input should be greater than 0"),
        ("rollout.length.think_min=500", r"think_min \(500\) must be <= think_max \(104\)"),
        ("batch.generations=1", r"batch.generations = 1: Input should be greater than or equal to 2"),
        ("batch.activation_budget_mb=0", r"batch.activation_budget_mb = 0: Input should be greater than 0"),
        ("loss.aggregation=tokens", r"loss.aggregation = 'tokens': Input should be 'prompt', 'sample' or 'token'"),
        ("noequals", r"expected KEY=VALUE"),
    ],
)
def test_bad_overrides_give_one_clear_error(override, match):
    with pytest.raises(ScaleRLError, match=match):
        load_config("scalerl", overrides=[override])


def test_unknown_recipe_suggests():
    with pytest.raises(ScaleRLError, match=r"unknown recipe 'gpro' \(available: scalerl, .*\); did you mean .*'grpo'"):
        load_config("gpro")


def test_config_file_layers_and_errors(tmp_path):
    f = tmp_path / "my.yaml"
    f.write_text("recipe: dapo\nloss:\n  eps_high: 0.3\nbatch: {prompts: 4}\n")
    cfg = load_config(None, f)  # the file's recipe is the base
    assert cfg.recipe == "dapo" and cfg.loss.eps_high == 0.3 and cfg.loss.aggregation == "token"
    cfg = load_config("grpo", f, ["batch.prompts=6"])  # explicit recipe wins; --set last
    assert cfg.recipe == "grpo" and cfg.loss.eps_high == 0.3 and cfg.batch.prompts == 6
    f.write_text("batch:\n  prompt: 4\n")
    with pytest.raises(ScaleRLError, match=rf"{f}: unknown config key 'batch.prompt' \(did you mean 'batch.prompts'"):
        load_config(config_file=f)
    f.write_text("loss: [1, 2\n")
    with pytest.raises(ScaleRLError, match="not valid YAML"):
        load_config(config_file=f)
    with pytest.raises(ScaleRLError, match="not found"):
        load_config(config_file=tmp_path / "missing.yaml")


@pytest.mark.parametrize("name", list(TABLE))
def test_dump_round_trips(tmp_path, name):
    cfg = load_config(name, overrides=["loss.aggregation=sample", "run.max_steps=7"])
    text = dump_config(cfg)
    assert yaml.safe_load(text)["loss"]["aggregation"] == "sample"
    (tmp_path / "c.yaml").write_text(text)
    assert load_config(None, tmp_path / "c.yaml") == cfg


def test_every_field_has_help():
    def walk(cls):
        for name, field in cls.model_fields.items():
            assert field.description, f"{cls.__name__}.{name}"
            ann = field.annotation
            subs = getattr(ann, "__args__", (ann,))
            for sub in subs:
                if isinstance(sub, type) and hasattr(sub, "model_fields"):
                    walk(sub)

    walk(Config)


def test_cli_recipes_list_and_show(capsys):
    assert main(["recipes"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(TABLE)
    for line in lines:
        name = line.split()[0]
        loss, agg, norm = TABLE[name]
        assert f"loss={loss}" in line and f"aggregation={agg}" in line and f"norm={norm}" in line
        assert "mode=pipeline_rl-8" in line
    assert main(["recipes", "show", "gspo", "--set", "loss.eps_high=1e-3"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["loss"] == {"type": "gspo", "eps_low": 3e-4, "eps_high": 1e-3, "aggregation": "sample"}
    assert main(["recipes", "show", "nope"]) == 2
    assert "unknown recipe 'nope'" in capsys.readouterr().err


def test_overrides_are_validated_together_in_any_order():
    for order in (["task.val_size=128", "eval.prompts=128"], ["eval.prompts=128", "task.val_size=128"]):
        cfg = load_config("scalerl", overrides=order)
        assert (cfg.task.val_size, cfg.eval.prompts) == (128, 128)
    cfg = load_config("scalerl", overrides=["loss.eps_max=6", "task.val_size=100"])  # eval.prompts follows it
    assert cfg.eval.prompts is None and cfg.eval.prompts_for(100) == 100
    with pytest.raises(
        ScaleRLError, match=r"^--set eval.prompts=101: eval.prompts \(101\) must be <= task.val_size \(100\)$"
    ):
        load_config("scalerl", overrides=["task.val_size=100", "eval.prompts=101"])
    with pytest.raises(
        ScaleRLError, match=r"^--set rollout.length.think_min=500: .*think_min \(500\) must be <= think_max"
    ):
        load_config("scalerl", overrides=["rollout.length.think_min=500", "batch.prompts=4"])


def test_model_dependent_profile_fills_only_keys_the_user_left():
    builtin = load_config("scalerl", overrides=["model.name=tiny"])  # built-in: the defaults
    assert builtin.optim.lr == 5e-5 and builtin.rollout.max_new_tokens == 160 and profile_line(builtin) is None
    plain = load_config("scalerl", overrides=["model.name=smollm2-135m", "model.device=cpu"])  # derived only
    assert (plain.optim.lr, plain.optim.warmup_steps, plain.rollout.max_new_tokens) == (1e-5, 0, 256)
    cfg = load_config("scalerl", overrides=["model.name=smollm2-135m", "task.name=rg:chain_sum", "optim.lr=3e-6"])
    assert cfg.optim.lr == 3e-6  # the user's value wins
    assert (cfg.rollout.max_new_tokens, cfg.rollout.length.think_max, cfg.batch.prompts) == (64, 24, 8)
    length = cfg.rollout.length
    assert length.think_max + 20 + length.answer_budget <= cfg.rollout.max_new_tokens  # the phrase: 20 SmolLM2 tokens
    pen = load_config(
        "scalerl", overrides=["model.name=smollm2-135m", "task.name=rg:chain_sum", "rollout.length.type=penalty"]
    )
    assert pen.rollout.length.type == "penalty" and pen.rollout.max_new_tokens == 64


def _hf_folder(path, hidden=64, layers=2, vocab=300, chat=True, context=2048, tied=False):
    """A Llama checkpoint folder made by transformers (random weights) with a tokenizer config."""
    import json

    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=context,
        tie_word_embeddings=tied,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(path)
    tok = {"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"} if chat else {}
    (path / "tokenizer_config.json").write_text(json.dumps(tok))
    return model.num_parameters()


def test_model_facts_of_a_folder_count_its_weights_and_read_template_and_context(tmp_path):
    from scalerl.models.facts import estimate_params, folder_facts

    n = _hf_folder(tmp_path / "m", tied=False)
    facts = folder_facts(tmp_path / "m")
    assert (facts.params, facts.chat_template, facts.context, facts.params_from) == (n, True, 2048, "safetensors")
    import json

    assert estimate_params(json.loads((tmp_path / "m" / "config.json").read_text())) == n  # the shape formula
    n2 = _hf_folder(tmp_path / "t", tied=True, chat=False, context=512)
    facts = folder_facts(tmp_path / "t")
    assert (facts.params, facts.chat_template, facts.context) == (n2, False, 512)


def test_derived_profile_follows_the_model_size_lora_and_context(tmp_path):
    from scalerl.configure import derived_lr

    assert derived_lr(135e6, False) == 1e-5 and derived_lr(8e9, False) == 5e-7  # the two anchors
    assert derived_lr((135e6 * 8e9) ** 0.5, False) == 2.2e-6  # sqrt(1e-5 * 5e-7) = 2.24e-6
    assert derived_lr(1e6, False) == 1e-5 and derived_lr(1e12, False) == 1e-7  # clipped both ways
    assert derived_lr(8e9, True) == 5e-6  # LoRA: x10
    _hf_folder(tmp_path / "m", context=512)
    cfg = load_config(
        "scalerl",
        overrides=[
            f"model.name={tmp_path / 'm'}",
            "model.device=cpu",
            "task.name=file",
            "task.path=data.jsonl",
            "batch.generations=4",
        ],
    )
    length = cfg.rollout.length
    assert cfg.optim.lr == 1e-5 and cfg.rollout.max_new_tokens == 128  # a quarter of the context
    assert (length.answer_budget, length.think_max, length.think_min) == (16, 128 - 16 - 24, round(0.85 * 88))
    assert (cfg.batch.prompts, cfg.batch.generations, cfg.task.val_size) == (8, 4, None)  # the user's 4 stays
    assert cfg.task.shots == 3  # an instruct model under 1B on a file: examples
    line = profile_line(cfg)
    assert line.startswith(f"model profile (derived from {tmp_path / 'm'} (") and "context 512)" in line
    assert "optim.lr=1e-05" in line and "batch.prompts=8" in line and "batch.generations" not in line
    lora = load_config("scalerl", overrides=[f"model.name={tmp_path / 'm'}", "model.device=cpu", "model.lora={r: 4}"])
    assert lora.optim.lr == 1e-4 and lora.task.val_size == 128 and lora.eval.prompts == 128  # generated task
    assert "shots" not in lora.task.model_dump()  # arith: no chat turns to show examples in


def test_a_hub_id_that_is_not_cached_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ScaleRLError, match=r"^model 'someorg/some-model': not in the local Hugging Face cache"):
        load_config("scalerl", overrides=["model.name=someorg/some-model"])
    with pytest.raises(ScaleRLError, match=r"^model 'runs/typo': not a known model name"):  # a path, not a Hub id
        (tmp_path / "runs").mkdir()
        load_config("scalerl", overrides=["model.name=runs/typo"])


# ---------------------------------------------------------------- TRL and verl key names
@pytest.mark.parametrize(
    "typed,ours",
    [
        ("beta", "loss.kl_beta"),
        ("max_completion_length", "rollout.max_new_tokens"),
        ("learning_rate", "optim.lr"),
        ("eval.steps", "eval.every"),
        ("eval_steps", "eval.every"),
        ("num_generations", "batch.generations"),
        ("temperature", "rollout.temperature"),
        ("per_device_train_batch_size", "batch.prompts"),
        ("actor_rollout_ref.actor.optim.lr", "optim.lr"),
        ("data.max_response_length", "rollout.max_new_tokens"),
        ("actor_rollout_ref.rollout.n", "batch.generations"),
        ("algorithm.kl_ctrl.kl_coef", "loss.kl_beta"),
    ],
)
def test_trl_and_verl_names_get_the_scalerl_key(typed, ours):
    origin = "verl" if typed.split(".")[0] in ("actor_rollout_ref", "algorithm", "data") else "TRL"
    with pytest.raises(
        ScaleRLError,
        match=rf"^--set {typed}=3: unknown config key '{typed}': {origin}'s name; in "
        rf"scalerl it is {ours}( \(|$)",
    ):
        load_config("scalerl", overrides=[f"{typed}=3"])


def test_verl_nested_yaml_keys_get_the_scalerl_key(tmp_path):
    f = tmp_path / "verl.yaml"
    f.write_text("actor_rollout_ref:\n  rollout:\n    n: 8\n")
    with pytest.raises(
        ScaleRLError,
        match=r"unknown config key 'actor_rollout_ref.rollout.n': verl's name; in "
        r"scalerl it is batch.generations$",
    ):
        load_config(None, f)


def test_the_docs_table_is_the_code_table():
    from pathlib import Path

    from scalerl.config.merge import FOREIGN_KEYS, all_paths

    text = (Path(__file__).parents[2] / "docs" / "training.md").read_text()
    section = text.split("## Coming from TRL or verl", 1)[1].split("\n## ", 1)[0]
    rows = [
        [c.strip().strip("`") for c in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    assert {r[0]: r[1] for r in rows} == {k: v for k, (v, _) in FOREIGN_KEYS.items()}
    assert set(v for v, _ in FOREIGN_KEYS.values()) <= set(all_paths(Config)) | {"loss.type", "task.columns"}


@pytest.mark.parametrize("key,section", [("rollout.capture", "rollout"), ("eval.split", "eval")])
def test_an_auto_off_switch_takes_yamls_unquoted_off(key, section):
    """YAML reads `off` as false: `--set rollout.capture=off` was refused before 2026-11-26."""
    field = key.split(".")[1]
    assert getattr(getattr(load_config("scalerl", overrides=[f"{key}=off"]), section), field) == "off"
    assert getattr(getattr(load_config("scalerl", overrides=[f"{key}='off'"]), section), field) == "off"
    assert getattr(getattr(load_config("scalerl"), section), field) == "auto"


def test_run_threads_is_checked_against_the_machine_where_a_config_is_read_not_where_it_is_rebuilt():
    """`run.threads` above this process's cores is refused in one line when a user's config is read; a process of
    the run rebuilding the config it was handed (a generator process, a trainer rank on another node) does not
    check it against its own machine again."""
    import os

    cores = len(os.sched_getaffinity(0))
    with pytest.raises(ScaleRLError, match=rf"run.threads = {cores + 1}: this machine gives the process {cores} core"):
        load_config("scalerl", overrides=[f"run.threads={cores + 1}"])
    fits = load_config("scalerl", overrides=[f"run.threads={cores}"])  # the control: within the cores
    handed = fits.model_dump(mode="json")
    handed["run"]["threads"] = cores + 1
    assert Config.model_validate(handed).run.threads == cores + 1
