"""`scalerl` command line: a thin dispatcher over `scalerl.commands.*`."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from scalerl import __version__
from scalerl.errors import ScaleRLError, UserCodeError, one_line, raised_in_user_code, user_report

# Failures of the machine rather than of scalerl: one line, like a ScaleRLError (a full disk
# anywhere, e.g. in a TensorBoard write; a directory that cannot be written).
USER_OS_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS)

# name -> module under scalerl.commands; order is the order of `scalerl --help`.
COMMANDS: dict[str, str] = {
    "train": "train",
    "fit": "fit",
    "watch": "watch",
    "plan": "plan",
    "generate": "generate",
    "export": "export",
    "recipes": "recipes",
    "ablate": "ablate",
    "check": "check",
}


def _available() -> dict[str, object]:
    mods = {}
    for name, mod in COMMANDS.items():
        try:
            mods[name] = importlib.import_module(f"scalerl.commands.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"scalerl.commands.{mod}":
                raise
    return mods


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scalerl",
        description="Predictable RL post-training: fit and forecast compute-scaling curves, "
        "train with the ScaleRL recipe, run ablations.",
    )
    parser.add_argument("--version", action="version", version=f"scalerl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in _available().items():
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except BrokenPipeError:  # the reader went away (`scalerl fit ... --json | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 141
    except KeyboardInterrupt:
        print("scalerl: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # told in one line when a user can act on it; scalerl's own failures re-raised
        if (code := report(exc)) is None:
            raise
        return code


def report(exc: Exception) -> int | None:
    """Print what a user can act on as `scalerl: error: <one line>` (a failure of the user's own code: then
    the user's frames alone) and return the exit code; None for a failure of scalerl's own (its traceback)."""
    if isinstance(exc, OSError) and exc.errno in USER_OS_ERRORS:  # the machine's, wherever it was raised
        where = f" ({exc.filename})" if exc.filename else ""
        print(
            f"scalerl: error: {exc.strerror}{where}: free space or fix the permissions, then rerun "
            "(a training run continues with --resume)",
            file=sys.stderr,
        )
        return 2
    if isinstance(exc, UserCodeError) or (not isinstance(exc, ScaleRLError) and raised_in_user_code(exc)):
        print(f"scalerl: error: {user_report(exc)}".rstrip("\n"), file=sys.stderr)
        return 2
    if isinstance(exc, ScaleRLError):
        print(f"scalerl: error: {one_line(exc)}", file=sys.stderr)
        return 2
    return None


if __name__ == "__main__":
    sys.exit(main())
