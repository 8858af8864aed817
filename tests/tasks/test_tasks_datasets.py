"""Datasets as users have them: JSONL, CSV, parquet, `save_to_disk` folders, TRL conversational
prompts, renamed columns, and the validation share of a small file."""

import json

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli_helpers import SMALL, one_line, train_cli
from scalerl.config import task_config
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.run.metrics import read_rows
from scalerl.tasks import get_task

ROWS = [{"prompt": f"What is {i} + {i + 3}?", "answer": str(2 * i + 3), "level": i % 3} for i in range(12)]


def _pairs(task) -> set[tuple[str, str]]:
    prompts = [task.train_prompt(i) for i in range(len(task))] + task.val_prompts(task.val_size)
    return {(p.meta["question"], p.answer) for p in prompts}


def _write(tmp_path, fmt: str, rows: list[dict]):
    if fmt == "jsonl":
        path = tmp_path / "d.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "csv":
        path = tmp_path / "d.csv"
        keys = list(rows[0])
        path.write_text(",".join(keys) + "\n" + "".join(",".join(str(r[k]) for k in keys) + "\n" for r in rows))
    elif fmt == "parquet":
        path = tmp_path / "d.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif fmt == "saved":
        path = tmp_path / "saved"
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    else:  # a DatasetDict: its train split is read
        path = tmp_path / "saved_dict"
        datasets.DatasetDict(
            {"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows[:2])}
        ).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "saved", "saved_dict"])
def test_every_format_gives_the_rows_written(tmp_path, fmt):
    task = get_task(task_config(name="file", path=str(_write(tmp_path, fmt, ROWS)), val_size=2))
    assert _pairs(task) == {(r["prompt"], r["answer"]) for r in ROWS}
    assert (len(task), task.val_size) == (10, 2)
    by_text = {r["prompt"]: r["level"] for r in ROWS}
    p = task.train_prompt(0)
    assert str(p.meta["columns"]["level"]) == str(
        by_text[p.meta["question"]]
    )  # the other columns travel with the prompt


def test_columns_map_gsm8k_style_names(tmp_path):
    rows = [{"question": f"{i} apples and {i} more?", "solution": str(2 * i)} for i in range(6)]
    path = _write(tmp_path, "jsonl", rows)
    task = get_task(
        task_config(name="file", path=str(path), val_size=1, columns={"prompt": "question", "answer": "solution"})
    )
    assert _pairs(task) == {(r["question"], r["solution"]) for r in rows}
    with pytest.raises(
        ScaleRLError,
        match=r"^.*d.jsonl: expected columns prompt/answer or problem/answer, found "
        r"\['question', 'solution'\] \(set task.columns=",
    ):
        get_task(task_config(name="file", path=str(path), val_size=1))
    with pytest.raises(
        ScaleRLError,
        match=r"task.columns names 'answer', not a column of the file \(its columns: "
        r"question, solution\)$",
    ):
        get_task(task_config(name="file", path=str(path), val_size=1, columns={"prompt": "question"}))
    with pytest.raises(ScaleRLError, match=r"columns: question is not one of prompt, answer"):
        load_config("scalerl", overrides=["task.name=file", "task.path=d.jsonl", "task.columns={question: q}"])


class ChatTokenizer:
    """A tokenizer double with a chat template: renders `role: content` lines and a generation prompt."""

    chat_template = "roles"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + (
            "assistant:" if add_generation_prompt else ""
        )


def _texts(task) -> set[tuple[str, str]]:
    prompts = [task.train_prompt(i) for i in range(len(task))] + task.val_prompts(task.val_size)
    return {(p.text, p.answer) for p in prompts}


def test_conversational_prompts(tmp_path):
    rows = [
        {
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"{i} + 1?"}],
            "answer": str(i + 1),
        }
        for i in range(5)
    ]
    path = _write(tmp_path, "jsonl", rows)
    plain = get_task(task_config(name="file", path=str(path), val_size=1, answer_instruction=None))
    assert _texts(plain) == {(f"Be brief.\n{i} + 1?", str(i + 1)) for i in range(5)}
    chat = get_task(task_config(name="file", path=str(path), val_size=1, answer_instruction=None), ChatTokenizer())
    assert _texts(chat) == {(f"system: Be brief.\nuser: {i} + 1?\nassistant:", str(i + 1)) for i in range(5)}
    told = get_task(
        task_config(name="file", path=str(path), val_size=1, answer_instruction="Say it in <a> tags."), ChatTokenizer()
    )  # the row's own system turn, then the instruction
    assert _texts(told) == {
        (f"system: Be brief.\n\nSay it in <a> tags.\nuser: {i} + 1?\nassistant:", str(i + 1)) for i in range(5)
    }
    parquet = get_task(task_config(name="file", path=str(_write(tmp_path, "parquet", rows)), val_size=1))
    assert _pairs(parquet) == _pairs(plain)


def test_bad_messages_name_the_row(tmp_path):
    rows = [
        {"prompt": [{"role": "user", "content": "1 + 1?"}], "answer": "2"},
        {"prompt": [{"role": "user", "text": "2 + 2?"}], "answer": "4"},
    ]
    path = _write(tmp_path, "jsonl", rows)
    with pytest.raises(
        ScaleRLError,
        match=r"d.jsonl: row 1 'prompt': expected text or a list of \{role, content\} "
        r"messages, got \{\"role\": \"user\", \"text\": \"2 \+ 2\?\"\}$",
    ):
        get_task(task_config(name="file", path=str(path), val_size=1))


@pytest.mark.parametrize("rows,val", [(60, 6), (9, 1), (5000, 500), (6000, 512)])
def test_a_file_holds_out_a_tenth_of_its_rows_by_default(tmp_path, rows, val):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(rows)))
    task = get_task(task_config(name="file", path=str(path)))
    assert (task.val_size, len(task)) == (val, rows - val)


def test_a_small_file_trains_with_the_defaults(capsys, tmp_path):
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(60)))
    sets = [s for s in SMALL if not s.startswith("eval.prompts=")]
    # tiny-random rarely passes: keep the groups whose rewards are all equal, so that the step trains
    extra = ["task.name=file", f"task.path={path}", "run.max_steps=1", "filter.zero_variance=false"]
    args = [a for s in sets + extra for a in ("--set", s)]
    code, out, err = train_cli(capsys, *args, "--run-dir", str(tmp_path / "r"))
    assert code == 0, err
    assert (
        "task file:small.jsonl: 54 training prompts, 6 held out for validation (a tenth of the distinct rows, "
        "at most 512; task.val_size sets it); evaluation: 6 prompts x 2 samples"
    ) in out.splitlines()
    evals = [r for r in read_rows(tmp_path / "r" / "metrics.jsonl") if r.get("kind") == "eval"]
    assert evals and all(r["val/completions"] == 6 * 2 for r in evals)


def test_a_folder_not_saved_by_datasets(capsys, tmp_path):
    (tmp_path / "notes").mkdir()
    code, _, err = train_cli(
        capsys,
        "--set",
        "task.name=file",
        "--set",
        f"task.path={tmp_path / 'notes'}",
        "--set",
        "model.name=tiny-random",
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert code == 2 and "a folder, but not one saved by datasets' save_to_disk" in one_line(err)


def test_a_hub_id_offline_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no such file or folder here
    code, _, err = train_cli(
        capsys,
        "--set",
        "task.name=file",
        "--set",
        "task.path=someone/gsm8k-copy",
        "--set",
        "model.name=tiny-random",
        "--run-dir",
        str(tmp_path / "r"),
    )
    line = one_line(err)
    assert code == 2 and line.startswith(
        "scalerl: error: task.path 'someone/gsm8k-copy': no such file or folder, "
        "and not loadable as a Hugging Face Hub dataset ("
    )
