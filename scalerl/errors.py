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
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<") and not os.path.abspath(f.filename).startswith(_LIBRARIES)
    ]
    return bool(frames) and is_user_file(frames[-1].filename)


def first_line(exc: BaseException) -> str:
    """`Type: the message's first line`."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def located(exc: BaseException, anywhere: bool = False) -> str:
    """`Type: message (file:line in function)`, at the innermost of the user's frames (`anywhere`: else at
    the innermost frame)."""
    frames = user_frames(exc.__traceback__) or (traceback.extract_tb(exc.__traceback__)[-1:] if anywhere else [])
    return (
        f"{first_line(exc)} ({frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})"
        if frames
        else first_line(exc)
    )


Frame = tuple[str, int, str, str]  # (file, line, function, source line): what `traceback.format_list` takes


def _portable(frames) -> tuple[Frame, ...]:
    return tuple(
        (f[0], f[1], f[2], f[3] or "") if isinstance(f, tuple) else (f.filename, f.lineno, f.name, f.line or "")
        for f in frames
    )


class UserCodeError(ScaleRLError):
    """An exception the user's code raised: `what` (e.g. "task.path 'tasks.py': Bad.prompts") raised it.
    `frames`: the user's own frames of it, outermost first. Pickles with its frames (a generator process's,
    a Ray actor's error reaches the trainer whole)."""

    def __init__(self, what: str, exc: BaseException | None = None, frames=()):
        self.frames = _portable(user_frames(exc.__traceback__) if exc is not None else frames)
        super().__init__(f"{what} raised {located(exc)}" if exc is not None else what)

    def __reduce__(self):
        return _user_code_error, (str(self), self.frames, tuple(getattr(self, "__notes__", ())))


def _user_code_error(message: str, frames: tuple[Frame, ...], notes: tuple[str, ...] = ()) -> UserCodeError:
    error = UserCodeError(message, frames=frames)
    for note in notes:
        error.add_note(note)
    return error


class UserFailure(str):
    """The text of an exception of the user's code that travels as text (a completion's `Score.error`, through
    a thread, a generator process or a Ray actor) with the user's own frames (`frames`, outermost first)."""

    frames: tuple[Frame, ...]

    def __new__(cls, text: str, frames=()):
        failure = super().__new__(cls, text)
        failure.frames = _portable(frames)
        return failure

    def __reduce__(self):
        return UserFailure, (str(self), self.frames)


def retold(message: str, exc: BaseException) -> RuntimeError:
    """A `RuntimeError(message)` that keeps `exc`'s user frames (`failure` tells it with them): for what a
    scoring thread records as a completion's error when the user's code raised `exc`."""
    error = RuntimeError(message)
    error.user_frames = _portable(user_frames(exc.__traceback__))
    return error


def failure(exc: BaseException, text: str | None = None) -> str:
    """`text` (default `located(exc)`), as a `UserFailure` carrying the user's frames of `exc` (`retold`'s, or
    its own) when it has some."""
    frames = getattr(exc, "user_frames", None) or user_frames(exc.__traceback__)
    text = located(exc) if text is None else text
    return UserFailure(text, frames) if frames else text


def told(message: str, cause: str | None = None) -> ScaleRLError:
    """`message` as the error a user sees: a `UserCodeError` with `cause`'s frames when `cause` is a
    `UserFailure` (the CLI prints them after the line), else a `ScaleRLError`."""
    frames = getattr(cause, "frames", ())
    return UserCodeError(message, frames=frames) if frames else ScaleRLError(message)


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
