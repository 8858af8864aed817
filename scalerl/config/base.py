"""What every section of the config is (`_Section`: unknown keys refused, assignments validated), and
walking the schema: a union's variants by `type` tag, a section field's class, the dotted keys of raw
data (`merge`, `Config`'s checks across sections).
"""

from __future__ import annotations

import types
import typing
from typing import Any, Union

from pydantic import BaseModel, ConfigDict


def _yaml_off(value: Any) -> Any:
    """YAML reads an unquoted `off` as false: an "auto" | "off" switch takes false as "off"."""
    return "off" if value is False else value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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
