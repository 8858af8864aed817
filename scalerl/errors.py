"""The one error type a user sees, and how a failure of the user's own code is told.

Anything raised as `ScaleRLError` is printed by the CLI as a single line
(`scalerl: error: <message>`) with a non-zero exit and no traceback. The message must
name the file, field or value at fault and say what was expected.

An exception raised by the user's own code (a task file's `prompts` or `check`, a reward function,
a loss of theirs) is a `UserCodeError`: one line naming the user's file and function and the
exception, then the user's own frames only (`user_frames`: not scalerl's, the standard library's
or an installed package's). Notes added to an exception (`add_note`: what a failed run kept) end
the line.
"""

from __future__ import annotations

import os
import site
import sysconfig
import traceback

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _library_dirs() -> tuple[str, ...]:
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    paths.add(site.getusersitepackages())
    return tuple(os.path.abspath(p) + os.sep for p in paths if p)


_LIBRARIES = _library_dirs()


class ScaleRLError(Exception):
    """A user-facing error: bad input, bad config, a run that cannot continue."""


def is_user_file(filename: str) -> bool:
    """A frame's file is the user's: not scalerl's, not Python's or an installed package's, not `<frozen ...>`."""
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    return not path.startswith(_PACKAGE) and not path.startswith(_LIBRARIES)


def user_frames(tb) -> list[traceback.FrameSummary]:
    """The frames of traceback `tb` in the user's own files, outermost first."""
    return [f for f in traceback.extract_tb(tb) if is_user_file(f.filename)]


def raised_in_user_code(exc: BaseException) -> bool:
    """The innermost frame of `exc` outside Python's and installed packages' own is the user's (a library the
    user's code called may have raised it); False when that frame is scalerl's (a scalerl bug: its traceback)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<") and not os.path.abspath(f.filename).startswith(_LIBRARIES)]
    return bool(frames) and is_user_file(frames[-1].filename)


def first_line(exc: BaseException) -> str:
    """`Type: the message's first line`."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def located(exc: BaseException, anywhere: bool = False) -> str:
    """`Type: message (file:line in function)`, at the innermost of the user's frames (`anywhere`: else at
    the innermost frame)."""
    frames = user_frames(exc.__traceback__) or (traceback.extract_tb(exc.__traceback__)[-1:] if anywhere else [])
    return f"{first_line(exc)} ({frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames \
        else first_line(exc)


class UserCodeError(ScaleRLError):
    """An exception the user's code raised: `what` (e.g. "task.path 'tasks.py': Bad.prompts") raised it.
    `frames`: the user's own frames of it, outermost first."""

    def __init__(self, what: str, exc: BaseException):
        self.frames = user_frames(exc.__traceback__)
        super().__init__(f"{what} raised {located(exc)}")


def one_line(exc: BaseException) -> str:
    """What the CLI prints after `scalerl: error: `: the message, then any notes, on one line."""
    return "; ".join([str(exc).strip().replace("\n", " "), *getattr(exc, "__notes__", ())])


def user_report(exc: BaseException) -> str:
    """A user's exception as the CLI reports it: the line naming the innermost of the user's frames (the
    file, the function, the exception), then those frames alone, as a traceback prints them."""
    frames = exc.frames if isinstance(exc, UserCodeError) else user_frames(exc.__traceback__)
    head = one_line(exc) if isinstance(exc, UserCodeError) else one_line(_described(exc, frames))
    body = "".join(traceback.format_list(frames))
    return f"{head}\n{body}" if body else head


def _described(exc: BaseException, frames: list[traceback.FrameSummary]) -> Exception:
    where = frames[-1]
    described = Exception(f"{os.path.basename(where.filename)}: {where.name} raised {located(exc)}")
    for note in getattr(exc, "__notes__", ()):
        described.add_note(note)
    return described
