"""The task section as a typed union (scalerl.config.TaskConfig): every recipe and every committed study
config.yaml still loads, the short names and the flat section of old build the same tasks as the tree
before the union did (tests/fixtures/tasks_before.json, written by tests/fixtures/make_tasks_before.py
on commit a2b54a9), misapplied fields are refused on load in one line."""

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from scalerl.config import Config, expand_task, list_recipes, recipe_path, task_config
from scalerl.config.merge import merge, validate
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError

ROOT = Path(__file__).resolve().parents[2]
BEFORE = json.loads((ROOT / "tests" / "fixtures" / "tasks_before.json").read_text())


def _yaml(path: Path) -> dict:
    return yaml.load(path.read_bytes(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def _distinct_study_configs() -> dict[str, Path]:
    """Every committed studies/**/config.yaml, one per content."""
    out: dict[str, Path] = {}
    for path in sorted((ROOT / "studies").rglob("config.yaml")):
        out.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), path)
    return out


def test_every_recipe_and_committed_study_config_loads_and_round_trips():
    """Parsed and validated as load_config does (defaults -> recipe -> file; the model profile, which
    loads the model, left out); the resolved config dumps and reads back to itself; the task is the
    old section's name, or a section written since, unchanged. Files with the same content are checked once."""
    configs = _distinct_study_configs()
    assert len(configs) > 100  # the studies are there: the check is not vacuous
    base = Config().model_dump(mode="json")
    recipes = {name: merge(base, _yaml(recipe_path(name)), Config, name) for name in list_recipes()}
    for name, data in recipes.items():
        validate(data, name)
    kinds = set()
    for path in configs.values():
        data = _yaml(path)
        cfg = validate(merge(recipes[data.get("recipe", "scalerl")], data, Config, str(path)), str(path))
        if "name" in data["task"]:  # the flat section of old: the kind its name stood for
            assert cfg.task.name == data["task"]["name"], path
        else:  # written since: the union's own section, kept as it was
            assert cfg.task.model_dump(mode="json") == {**cfg.task.model_dump(mode="json"), **data["task"]}, path
        again = Config.model_validate(json.loads(cfg.model_dump_json()))
        assert again == cfg, path
        kinds.add(cfg.task.name)
    assert kinds == {"arith", "arith-tail"}


def _prompts(task) -> dict:
    val = task.val_prompts(min(3, task.val_size))
    return {
        "name": task.name,
        "train_size": len(task),
        "val_size": task.val_size,
        "train": [[p.id, p.text, p.answer] for p in (task.train_prompt(i) for i in (0, 1, 7))],
        "val": [[p.id, p.text, p.answer] for p in val],
    }


@pytest.mark.parametrize("name", list(BEFORE["named"]))
def test_short_names_build_the_tasks_they_built_before(name, tmp_path, monkeypatch):
    from scalerl.tasks import get_task

    before = BEFORE["named"][name]
    monkeypatch.chdir(tmp_path)
    rows = [{"prompt": f"What is {i} + {i + 3}?", "answer": str(2 * i + 3)} for i in range(12)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "code-tasks.jsonl").write_bytes((ROOT / "examples" / "code-tasks.jsonl").read_bytes())
    cfg = task_config(name=name, **before["fields"])
    assert cfg.name == name
    got = _prompts(get_task(cfg))
    assert got == {k: before[k] for k in got}


@pytest.mark.parametrize("path", list(BEFORE["studies"]))
def test_committed_study_runs_build_the_tasks_they_built_before(path):
    """load_config and task_for_run, as the study's runs built their task (model tokenizer, batch, limit)."""
    from scalerl.models import load_model
    from scalerl.tasks import task_for_run

    cfg = load_config(None, ROOT / path)
    model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype, device="cpu")
    got = _prompts(task_for_run(cfg, tokenizer, model))
    assert got == BEFORE["studies"][path]


@pytest.mark.parametrize("recipe", ["default", *list_recipes()])
def test_recipes_resolve_to_the_values_they_had_but_the_task_section(recipe):
    before = BEFORE["resolved"][recipe]
    now = (Config() if recipe == "default" else load_config(recipe)).model_dump(mode="json")
    assert {k: v for k, v in now.items() if k != "task"} == {k: v for k, v in before.items() if k != "task"}
    assert now["task"] == task_config(**expand_task(before["task"])).model_dump(mode="json")
    assert now["task"] == {
        "type": "arith",
        "problems": "arith",
        "train_size": None,
        "val_size": None,
        "seed": 0,
        "answer_marker": None,
    }


def test_short_names_and_their_typed_form():
    assert task_config("rg:chain_sum,leg_counting").model_dump()["datasets"] == ["chain_sum", "leg_counting"]
    assert task_config("code-expr-3").depth == 3 and task_config("code-expr").depth is None
    mix = task_config(name="arith,code", path="p.jsonl", weights=[3, 1])
    assert [p.type for p in mix.parts] == ["arith", "code"] and mix.parts[1].path == "p.jsonl"
    assert "path" not in mix.parts[0].model_dump() and mix.weights == [3, 1]
    for name in ("arith", "arith-2x7", "code-expr-3", "rg:a,b", "arith,code-expr", "file", "python"):
        assert (
            expand_task(name)["type"]
            and task_config(**expand_task(name), **({"path": "x"} if name in ("file", "python") else {})).name == name
        )
    cfg = load_config("scalerl", overrides=["task.name=rg:chain_sum", "task.val_size=8", "task.options={min_terms: 2}"])
    assert (cfg.task.type, cfg.task.datasets, cfg.task.val_size, cfg.task.options) == (
        "rg",
        ["chain_sum"],
        8,
        {"min_terms": 2},
    )
    typed = load_config(
        "scalerl",
        overrides=["task.type=rg", "task.datasets=[chain_sum]", "task.val_size=8", "task.options={min_terms: 2}"],
    )
    assert typed.task == cfg.task
    assert task_config("data/train.jsonl").model_dump()["path"] == "data/train.jsonl"
    assert (task_config("my_task.py:Letters").type, task_config("my_task.py:Letters").path) == (
        "python",
        "my_task.py:Letters",
    )
    mix = load_config("scalerl", overrides=["task.name=arith,code", "task.path=p.jsonl", "task.val_size=8"]).task
    assert [(p.type, p.val_size) for p in mix.parts] == [("arith", 8), ("code", 8)] and mix.parts[1].path == "p.jsonl"
    downstream = load_config("scalerl", overrides=["eval.downstream=[arith-2x12, code-expr-4]"]).eval.downstream
    assert [d.name for d in downstream] == ["arith-2x12", "code-expr-4"]


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["task.shots=2"], "'task.shots' is not a field of task type 'arith' (it belongs to type file, rg"),
        (["task.name=code-expr", "task.columns={prompt: q}"], "'task.columns' is not a field of task type 'code_expr'"),
        (["task.name=file"], "task type 'file' needs task.path"),
        (["task.name=rg:chain_sum", "task.path=x.jsonl"], "'task.path' is not a field of task type 'rg'"),
        (["task.name=poetry"], "task.name 'poetry': expected arith, arith-easy"),
        (["task.name=code-expr-x"], "expected code-expr or code-expr-<depth 1-6>"),
        (["task.type=python"], "task type 'python' needs task.path"),
        (["task.type=mix"], "task type 'mix' needs at least two parts"),
    ],
)
def test_misapplied_task_fields_are_refused_on_load_in_one_line(overrides, expected):
    with pytest.raises(ScaleRLError, match="^[^\n]*$") as err:
        load_config("scalerl", overrides=[f"{o}" for o in overrides])
    assert expected in str(err.value)


def test_a_config_file_with_a_misapplied_field_names_the_field_and_the_kind(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("task: {name: arith-tail, shots: 2, path: null}\n")
    with pytest.raises(ScaleRLError) as err:
        load_config(None, path)
    assert str(err.value) == f"{path}: task.shots is not a field of task type 'arith' (it belongs to type file, rg)"
