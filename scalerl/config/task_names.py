"""A task's short name (`task.name=rg:chain_sum`, `arith-2x7`, `code-expr-3`, `arith,code-expr`, `file`, a data
file, a Python file): `shorthand` reads one as a task's type and fields, `task_name` writes one back.
"""

from __future__ import annotations

FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
SHORTHANDS = (
    "arith, arith-easy, arith-<D>, arith-<K>x<D>, code-expr, code-expr-<D>, file, code, python, "
    "rg:<dataset>, rg:<a>,<b>,..., a mix <a>,<b>,..., a data file (.jsonl, .json, .csv, .parquet) or a "
    "Python file (.py[:<Class>])"
)


def shorthand(name: str) -> dict:
    """A short task name (`rg:chain_sum`, `arith-2x7`, `code-expr-3`, `arith,code-expr`, `file`, a data
    file `data.jsonl`, a Python file `my_task.py`) as its type and that type's own fields."""
    name = str(name).strip()
    if name.startswith("rg:"):
        return {"type": "rg", "datasets": [n.strip() for n in name.removeprefix("rg:").split(",")]}
    if "," in name:
        parts = [n.strip() for n in name.split(",")]
        if any(not n or n.startswith("rg:") for n in parts):
            raise ValueError(
                f"task.name {name!r}: expected built-in, 'code' or 'file' parts separated by commas (a "
                "reasoning-gym mix is 'rg:<a>,<b>')"
            )
        return {"type": "mix", "parts": [shorthand(n) for n in parts]}
    if name in ("file", "code", "python"):
        return {"type": name}
    if name.lower().endswith(FILE_SUFFIXES):  # a data file: task.name=data.jsonl
        return {"type": "file", "path": name}
    if name.endswith(".py") or ".py:" in name:  # the user's class: task.name=my_task.py:Class
        return {"type": "python", "path": name}
    if name == "code-expr" or name.startswith("code-expr-"):
        depth = name.removeprefix("code-expr").removeprefix("-")
        if depth and not depth.isdigit():
            raise ValueError(f"task.name {name!r}: expected code-expr or code-expr-<depth 1-6>")
        return {"type": "code_expr", **({"depth": int(depth)} if depth else {})}
    if name == "arith" or name.startswith("arith-"):
        return {"type": "arith", "problems": name}
    raise ValueError(f"task.name {name!r}: expected {SHORTHANDS}")


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
