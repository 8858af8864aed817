"""One writer per run directory: an exclusive lock held for the life of a run.

`RunLock(run_dir)` takes an advisory `flock` on `<run_dir>/.lock` and writes the holder's PID
into it. A second `scalerl train` / `--resume` / `ablate` run on the same directory (from any
process) is refused with one line naming that PID. The kernel drops the lock when its
holder dies, however it dies (`kill -9` included), so a lock left by a dead process is never
an obstacle: the next run takes it over and says whose it was. A clean release empties the
file; a PID still in it at the next start therefore means the last holder stopped without
releasing it.

The lock file is never deleted (deleting a lock file races with a process about to lock it);
it is a few bytes and is ignored when a directory is checked for being empty. The file
descriptor is not inherited by child processes (Python's default), and generator processes
are spawned, not forked, so a generator that outlives its parent cannot keep the lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from scalerl.errors import ScaleRLError

LOCK_FILE = ".lock"


class RunDirInUse(ScaleRLError):
    """Another live process writes to this run directory."""


class RunLock:
    """`with RunLock(run_dir) as lock:` ... ; `lock.previous_pid` is the PID a dead holder left behind."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self.previous_pid: int | None = None
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ScaleRLError(f"cannot write to run directory {self.path.parent}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"PID {holder}" if holder is not None else "another process (PID not yet written)"
            raise RunDirInUse(
                f"run directory {self.path.parent} is in use by {who}: one run writes to a directory at a time; "
                "wait for it to finish or stop it, or choose another --run-dir"
            ) from None
        self.previous_pid = _read_pid(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # empty: released cleanly (a PID left here means its holder died)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def took_over(self) -> str | None:
        """A line to print when the lock was left by a process that died holding it."""
        if self.previous_pid is None or self.previous_pid == os.getpid():
            return None
        return (
            f"{self.path.parent}: took over the lock of PID {self.previous_pid}, which stopped without "
            "releasing it (killed or crashed)"
        )

    def __enter__(self) -> RunLock:
        return self.acquire() if self._fd is None else self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None
