"""A user's own code named by a spec, as `reward.function`, `loss.function` and `task.path` name it:
`<module>:<name>` (imported) or `<path/to/file.py>:<name>` (loaded from the file, its path made
absolute so that another process finds the same file). A missing file or name, or an import that
raises, is one line naming the setting and the spec (`ScaleRLError`; `UserCodeError` with the
user's own frames when their module raised)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from typing import Callable

from scalerl.errors import ScaleRLError, UserCodeError


def resolve_spec(spec: str, key: str = "reward.function") -> str:
    """`spec` with a file path made absolute (so that another process finds the same file)."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise ScaleRLError(f"{key} {spec!r}: expected <module>:<name> or <path/to/file.py>:<name>")
    return f"{Path(target).resolve()}:{name}" if target.endswith(".py") else spec


def load_module(target: str, key: str, spec: str):
    """The module `target` names (a `.py` file, or a module imported by name); a missing file or an
    import that raises is one `ScaleRLError` naming `key` and `spec`."""
    if target.endswith(".py") and not Path(target).is_file():
        raise ScaleRLError(f"{key} {spec!r}: no such file {target!r}")
    try:
        return _load_file(target) if target.endswith(".py") else importlib.import_module(target)
    except Exception as e:  # the user's module failed to import: report it, naming the spec
        raise UserCodeError(f"{key} {spec!r}: importing {target}", e) from None


def load_function(spec: str, key: str = "reward.function") -> Callable:
    """The callable that `spec` names (a file path relative to the working directory); any
    problem is one `ScaleRLError` naming `key` and `spec` as written."""
    target, _, name = resolve_spec(spec, key).rpartition(":")
    module = load_module(target, key, spec)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ScaleRLError(f"{key} {spec!r}: {spec.rpartition(':')[0]} has no function {name!r}")
    return fn


def _load_file(path: str):
    spec = importlib.util.spec_from_file_location(f"scalerl_user_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_call(fn: Callable, spec: str, key: str, arguments: tuple[str, ...], options: dict) -> None:
    """`fn` can be called with `arguments` and `options` by keyword; else one `ScaleRLError` naming `key`,
    `spec`, the signature it has and the call it will get."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without one: its call will tell
        return
    try:
        signature.bind(**dict.fromkeys(arguments), **options)
    except TypeError as e:
        call = ", ".join([*arguments, *(f"{k}=..." for k in options)])
        raise ScaleRLError(
            f"{key} {spec!r}: {getattr(fn, '__name__', 'it')}{signature} cannot be called as ({call}): {e}"
        ) from None
