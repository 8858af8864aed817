"""`task`: a union by `type` as the losses are (`task: {type: rg, datasets: [chain_sum]}`), each kind
with its own fields only, built by the builder its module registers (`module`, scalerl.tasks.registry).

The kinds are listed once, in `TASK_KINDS`; `TaskConfig` is their union, `TaskPart` that of every kind
but a mix (a mix's parts, a downstream set). A short name (`task.name=arith-2x7`, `code-expr-3`,
`rg:a,b`, `arith,code-expr`, `file`; `scalerl.config.task_names`) stands for a kind and its fields,
and the flat task section of old (a resolved config.yaml written before) reads as the same task
(`expand_task`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from scalerl.config.base import _Section
from scalerl.config.task_names import shorthand, task_name
from scalerl.errors import ScaleRLError

DEFAULT_VAL_SIZE = 512  # validation prompts of a generated task, and the most a file's share holds out
COLUMN_ROLES = ("prompt", "answer")  # the keys of task.columns


def _positive_weights(weights: list[float] | None) -> None:
    if weights is not None and not all(w > 0 and w != float("inf") for w in weights):
        raise ValueError(f"weights must each be positive and finite, got {weights}")


class _TaskKind(_Section):
    """What every kind of task is: a union member keyed by `type`, built by the builder its module
    registers (`module`, scalerl.tasks.registry), read back from a `task.name` shorthand (`expand_task`)."""

    module: ClassVar[str] = "scalerl.tasks"
    type: str = Field("", description="the kind of task")  # each kind's own literal (first in a dump)

    @property
    def name(self) -> str:
        """The task's short name (`task.name` of old; the metric and run names use it)."""
        return task_name(self.model_dump())

    @classmethod
    def expand(cls, value: Any) -> Any:
        return expand_task(value)


class _Generated(_TaskKind):
    """Fields of every task but a mix: the pool, the held-out set, the seed, the answer's place."""

    train_size: int | None = Field(
        None,
        ge=1,
        description="training pool size, traversed in epochs (none: 4096 for a built-in task, 1024 for a "
        "reasoning-gym one, every distinct row of a file)",
    )
    val_size: int | None = Field(
        None,
        ge=1,
        description="held-out validation prompts, disjoint from the training pool (none: 512; for a file, "
        "a tenth of its distinct rows, at least 1, at most 512)",
    )
    seed: int = Field(0, description="seed of the task generator / split")
    answer_marker: str | None = Field(
        None,
        description="where the checker reads the answer: after the last '</think>' (or 'Answer:', ...); an "
        "opening tag such as '<answer>' or '\\boxed{}' reads the content of the last one; a "
        "completion without it fails (none: the task's own: '<answer>' for a file, rg and a python "
        "task, '</think>' for arith, code and code_expr)",
    )

    @model_validator(mode="after")
    def _marker(self) -> _Generated:
        if self.answer_marker is not None and not self.answer_marker.strip():
            raise ValueError("answer_marker must not be empty")
        return self


class _Read(_Generated):
    """A task whose prompts come from outside (a file, a dataset library, the user's code): the prompt
    length rule and the answer instruction apply."""

    answer_instruction: str | None = Field(
        "auto",
        description="what the prompt says about where the answer goes (an rg task: only without a chat "
        "template): 'auto' asks for answer_marker's format (e.g. 'Put only your final answer "
        "between <answer> and </answer> tags'); any other text is used as it is; null: none. An "
        "instruct model (chat template) gets it in a system turn, any other model before the "
        "question",
    )
    max_prompt_tokens: int | None = Field(
        None, ge=1, description="longest prompt in tokens (none: the model's context minus rollout.max_new_tokens)"
    )
    overlong: Literal["skip", "refuse"] = Field(
        "skip", description="prompts over max_prompt_tokens: skip and count them, or refuse the task"
    )

    @model_validator(mode="after")
    def _instruction(self) -> _Read:
        if self.answer_instruction is not None and not self.answer_instruction.strip():
            raise ValueError(
                f"answer_instruction = {self.answer_instruction!r}: expected text, 'auto', or null to "
                "turn the instruction off"
            )
        return self


class _NeedsPath(_Read):
    """A task read from `path`."""

    path_help: ClassVar[str] = ""  # what `path` is for this kind, in the error when it is missing
    path: str | None = Field(
        None,
        description="where the task comes from: file: a JSONL/JSON/CSV/parquet file, a "
        "folder saved by datasets' save_to_disk, or a Hugging Face Hub dataset "
        "id, with prompt/answer (or problem/answer) columns, or those named in "
        "`columns`; code: a JSONL of prompts with tests (examples/code-tasks."
        "jsonl); python: '<file.py>', '<file.py>:<Class>' or '<module>:<Class>'"
        " (examples/custom_task.py; a file alone: its one class with prompts "
        "and check)",
    )

    @model_validator(mode="after")
    def _path(self) -> _NeedsPath:
        if not self.path:
            raise ValueError(f"task type {self.type!r} needs task.path ({self.path_help})")
        return self


_SHOTS = (
    "instruct models: solved examples shown as earlier chat turns before each question (only the answer, "
    "written where the checker reads it), for small models that do not follow the format otherwise; drawn "
    "apart from the pool and the validation set"
)


class ArithTaskConfig(_Generated):
    """Built-in addition (scalerl.tasks.arith)."""

    module: ClassVar[str] = "scalerl.tasks.arith"
    type: Literal["arith"] = Field("arith", description="built-in addition (scalerl.tasks.arith)")
    problems: str = Field(
        "arith",
        description="the problem set: arith (the default ladder), arith-easy, arith-358, "
        "arith-2to7, arith-tail, arith-mixed, arith-<D> or arith-<K>x<D> (K "
        "operands of D digits)",
    )


class CodeExprTaskConfig(_Generated):
    """Built-in code: print an expression of two integers, run in the sandbox (scalerl.tasks.code_expr)."""

    module: ClassVar[str] = "scalerl.tasks.code_expr"
    type: Literal["code_expr"] = Field("code_expr", description="built-in code task (scalerl.tasks.code_expr)")
    depth: int | None = Field(None, ge=1, le=6, description="expression depth (none: the mix of depths 1-3)")


class FileTaskConfig(_NeedsPath):
    """A user dataset (scalerl.tasks.files)."""

    module: ClassVar[str] = "scalerl.tasks.files"
    path_help: ClassVar[str] = (
        "a JSONL, JSON, CSV or parquet file, a folder saved by datasets' save_to_disk, or a Hub dataset id"
    )
    type: Literal["file"] = Field(
        "file", description="prompts and answers read from a file or dataset (scalerl.tasks.files)"
    )
    columns: dict[str, str] = Field(
        default_factory=dict,
        description="the file's column names for prompt and answer, e.g. {prompt: question, "
        "answer: solution} (none: prompt or problem, and answer)",
    )
    shots: int = Field(0, ge=0, le=8, description=_SHOTS + " (the file's first rows in content-hash order)")

    @model_validator(mode="after")
    def _columns(self) -> FileTaskConfig:
        unknown = sorted(set(self.columns) - set(COLUMN_ROLES))
        if unknown:
            raise ValueError(
                f"columns: {', '.join(unknown)} is not one of {', '.join(COLUMN_ROLES)} (expected "
                f"{{prompt: <column>, answer: <column>}})"
            )
        return self


class CodeTaskConfig(_NeedsPath):
    """Programming problems with tests, run in the sandbox (scalerl.tasks.code)."""

    module: ClassVar[str] = "scalerl.tasks.code"
    path_help: ClassVar[str] = "a JSONL of prompts with tests, see examples/code-tasks.jsonl"
    type: Literal["code"] = Field("code", description="programming problems with tests (scalerl.tasks.code)")


class RgTaskConfig(_Read):
    """reasoning-gym datasets and weighted mixes (scalerl.tasks.rg)."""

    module: ClassVar[str] = "scalerl.tasks.rg"
    type: Literal["rg"] = Field("rg", description="reasoning-gym datasets (scalerl.tasks.rg)")
    datasets: list[str] = Field(
        default_factory=list, description="reasoning-gym dataset names, e.g. [chain_sum]; more than one: a weighted mix"
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="dataset options (e.g. {min_terms: 2}); for a mix, {<dataset>: {options}} per dataset",
    )
    weights: list[float] | None = Field(None, description="mix weights, one per dataset (none: equal)")
    shots: int = Field(0, ge=0, le=8, description=_SHOTS)
    system_prompt: str | None = Field(
        None, description="system turn for instruct models (none: reasoning-gym's 'default')"
    )

    @model_validator(mode="after")
    def _named(self) -> RgTaskConfig:
        if not self.datasets:
            raise ValueError("task type 'rg' needs task.datasets, e.g. [chain_sum] (task.name=rg:chain_sum)")
        _positive_weights(self.weights)
        return self


class PythonTaskConfig(_NeedsPath):
    """The user's own task: a class in a Python file (scalerl.tasks.user, docs/your-data.md)."""

    module: ClassVar[str] = "scalerl.tasks.user"
    path_help: ClassVar[str] = "a Python file with a task class, see examples/custom_task.py"
    type: Literal["python"] = Field(
        "python", description="a class of the user's that yields prompts and checks answers (scalerl.tasks.user)"
    )
    options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the class")


def _expand_all(value: Any) -> Any:
    return [expand_task(v) for v in value] if isinstance(value, list) else value


class MixTaskConfig(_TaskKind):
    """A weighted mix of tasks from different domains (scalerl.tasks.mix)."""

    module: ClassVar[str] = "scalerl.tasks.mix"
    type: Literal["mix"] = Field(
        "mix", description="a weighted mix of tasks, per-domain pass rates (scalerl.tasks.mix)"
    )
    parts: list[TaskPart] = Field(
        default_factory=list,
        description="the mixed tasks, each a task of its own type (shorthand: task.name=arith,code-expr)",
    )
    weights: list[float] | None = Field(None, description="the parts' shares of the training pool (none: equal)")
    seed: int = Field(0, description="seed of the pool's order")
    train_size: int | None = Field(None, ge=1, description="training pool size (none: the parts' together)")

    _parts = field_validator("parts", mode="before")(_expand_all)

    @classmethod
    def spread(cls, data: dict, key: str, value: Any) -> dict | None:
        """`data` (a mix as a mapping) with `key` set on each part that has that field (`--set task.val_size=8`
        after `task.name=arith,code-expr`, as the flat section of old did); None when no part has it."""
        parts = [dict(p) for p in data.get("parts") or []]
        owners = [p for p in parts if key in getattr(TASK_KINDS.get(p.get("type")), "model_fields", {})]
        for part in owners:
            part[key] = value
        if not owners:
            return None
        return {**data, "parts": parts}

    @model_validator(mode="after")
    def _two_parts(self) -> MixTaskConfig:
        if len(self.parts) < 2:
            raise ValueError(f"task type 'mix' needs at least two parts, got {len(self.parts)}")
        _positive_weights(self.weights)
        return self


# The kinds of task, in the order the schema lists them (the reference page, `task.type`'s help): the one list.
TASK_KINDS: dict[str, type[_TaskKind]] = {
    c.model_fields["type"].default: c
    for c in (
        ArithTaskConfig,
        CodeExprTaskConfig,
        FileTaskConfig,
        CodeTaskConfig,
        RgTaskConfig,
        MixTaskConfig,
        PythonTaskConfig,
    )
}
TaskConfig = Annotated[Union[tuple(TASK_KINDS.values())], Field(discriminator="type")]  # type: ignore[valid-type]
TaskPart = Annotated[
    Union[tuple(c for c in TASK_KINDS.values() if c is not MixTaskConfig)],  # type: ignore[valid-type]
    Field(discriminator="type"),
]
MixTaskConfig.model_rebuild()  # its parts are `TaskPart`, defined from the kinds above
_TASK_ADAPTER: TypeAdapter = TypeAdapter(TaskConfig)

# the flat task section of old (one class of 14 fields): its defaults, dropped where they do not apply
LEGACY_DEFAULTS: dict[str, Any] = {
    "path": None,
    "columns": {},
    "train_size": None,
    "val_size": None,
    "seed": 0,
    "options": {},
    "weights": None,
    "shots": 0,
    "system_prompt": None,
    "answer_marker": None,
    "answer_instruction": "auto",
    "max_prompt_tokens": None,
    "overlong": "skip",
}


def expand_task(value: Any) -> Any:
    """A task given by its short name (a string, or a mapping with `name`: the flat task section of
    old, a resolved config.yaml's included) as a mapping of its type and fields; the old section's
    defaults are dropped where they do not apply, and any other field that does not apply is refused."""
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict) or "name" not in value:
        return value
    if "type" in value:
        raise ValueError(
            f"task.name ({value['name']!r}) and task.type ({value['type']!r}) together: give one (the "
            "name is the short form of a type and its fields)"
        )
    rest = {k: v for k, v in value.items() if k != "name"}
    kind = shorthand(value["name"])
    if kind["type"] != "mix":
        return _place(kind, rest, strict=True)
    own = {k: rest.pop(k) for k in ("weights",) if k in rest}
    shared = {k: rest[k] for k in ("seed", "train_size") if k in rest}
    parts = [_place(part, rest, strict=False) for part in kind["parts"]]
    for key, v in rest.items():
        if not any(key in TASK_KINDS[p["type"]].model_fields for p in parts) and LEGACY_DEFAULTS.get(key, ...) != v:
            raise ValueError(f"task.{key} is not a field of any part of the mix {value['name']!r}")
    return {"type": "mix", "parts": parts, **own, **shared}


def _place(kind: dict, fields: dict, strict: bool) -> dict:
    """`kind` with those of `fields` its type has; an old default it lacks is dropped, another value refused
    (`strict`) or left to another part of a mix."""
    cls = TASK_KINDS[kind["type"]]
    out = dict(kind)
    for key, v in fields.items():
        if key in cls.model_fields:
            out[key] = v
        elif strict and LEGACY_DEFAULTS.get(key, ...) != v:
            owners = [t for t, c in TASK_KINDS.items() if key in c.model_fields]
            where = f" (it belongs to type {', '.join(owners)})" if owners else ""
            raise ValueError(f"task.{key} is not a field of task type {kind['type']!r}{where}")
    return out


def task_config(value: Any = None, **fields: Any) -> TaskConfig:
    """A validated task: `task_config("rg:chain_sum", val_size=8)`, `task_config(name="file", path=...)`
    or `task_config(type="python", path=...)` (a ScaleRLError names what is wrong)."""
    data = {"name": value, **fields} if value is not None else fields
    try:
        return _TASK_ADAPTER.validate_python(expand_task(data or {"type": "arith"}))
    except (ValueError, ValidationError) as exc:
        raise ScaleRLError(_one_line(exc)) from None


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"task.{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg'].removeprefix('Value error, ')}".replace(
                "task.: ", "task: "
            )
            for e in exc.errors()
        )
    return str(exc)
