"""Run an untrusted Python program (a model's answer) and get back what it printed.

    from scalerl.sandbox import run_program
    r = run_program("print(int(input()) * 2)", stdin="21\\n", timeout_s=5, memory_mb=256)
    r.status, r.stdout   # ('ok', '42\\n')

Each program runs in fresh user, mount, network, pid, IPC and UTS namespaces (`jail.py` builds
them with `unshare`, no setuid helper): a root holding only the interpreter and system
libraries read-only plus a size-limited tmpfs working directory, no network interface but a
loopback that is down, pid 1 of its own pid namespace so that nothing it starts outlives it,
an unprivileged uid with no capabilities, rlimits (CPU, address space, processes, open files,
file size, core 0), no-new-privileges and, where libseccomp is present, a seccomp filter
(no ptrace, mount, namespaces, bpf, keyrings). The wall limit kills the whole namespace;
output beyond `output_limit` bytes per stream stops the program.

Where the namespaces cannot be made (a container whose seccomp profile forbids `unshare`, a
kernel with unprivileged user namespaces off), every call returns status `refused` with a
one-line reason, unless the caller opts out by name with `allow_unisolated=True` (config
`sandbox.allow_unisolated: true`, never as root): then only the limits and a process group hold; see
docs/sandbox.md for which guarantee holds where. Python audit hooks are not used: they are no
boundary.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from scalerl.errors import ScaleRLError

STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "refused")
JAIL = str(Path(__file__).with_name("jail.py"))
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")


@dataclass(frozen=True)
class SandboxResult:
    """One program's run. `returncode`: the program's exit code, negative for the signal that
    ended it, None when it did not end by itself (timeout, output limit, refused)."""
    status: str
    stdout: str
    stderr: str
    returncode: int | None
    seconds: float


@dataclass(frozen=True)
class Limits:
    """What one program may use. `cpu_s` defaults to the wall limit rounded up."""
    timeout_s: float = 10.0
    memory_mb: int = 256              # address space per process: a program holds at most nproc x memory_mb
    output_limit: int = 1 << 20       # bytes per stream
    nproc: int = 8                    # processes and threads of the sandbox's uid, in its own namespace
    nofile: int = 64
    fsize_mb: int = 16
    disk_mb: int = 32                 # the working directory's tmpfs

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "output_limit", "nproc", "nofile", "fsize_mb", "disk_mb"):
            value = getattr(self, name)
            if not value > 0:
                raise ScaleRLError(f"sandbox limit {name}={value!r}: expected a positive number")


def interpreter() -> str:
    """The real interpreter behind this one (a venv's python is a symlink into its base)."""
    return os.path.realpath(sys._base_executable)


def readonly_paths(python: str) -> list[str]:
    """The system directories, and the interpreter's installation when it lives outside them."""
    paths = [p for p in SYSTEM_DIRS if os.path.lexists(p)]
    prefix = os.path.realpath(sys.base_prefix)
    if not any(prefix == p or prefix.startswith(p + "/") for p in SYSTEM_DIRS):
        paths.append(prefix)
    home = os.path.dirname(os.path.dirname(python))
    if home != prefix and not any(home.startswith(p + "/") for p in SYSTEM_DIRS):
        paths.append(home)
    return paths


def run_program(source: str, stdin: str = "", timeout_s: float = 10.0, memory_mb: int = 256, *,
                output_limit: int = 1 << 20, allow_unisolated: bool = False, limits: Limits | None = None
                ) -> SandboxResult:
    """Run `source` (Python) on `stdin` in the sandbox; see the module docstring.

    `limits` overrides `timeout_s`, `memory_mb` and `output_limit` when given."""
    lim = limits or Limits(timeout_s=timeout_s, memory_mb=memory_mb, output_limit=output_limit)
    why = unisolated_refusal(allow_unisolated)
    if why:
        return SandboxResult("refused", "", why, None, 0.0)
    return _run(source, stdin, lim, isolate=isolation_unavailable() is None)


def unisolated_refusal(allow_unisolated: bool) -> str | None:
    """Why a program may not run here: isolation unavailable and not opted out, or opted out as
    root (without a pid namespace a root program could signal every process on the machine)."""
    why = isolation_unavailable()
    if why is None:
        return None
    if not allow_unisolated:
        return why
    if os.getuid() == 0:
        return f"{why}; sandbox.allow_unisolated does not run programs as root (uid 0): run as an unprivileged user"
    return None


@lru_cache(maxsize=1)
def isolation_unavailable() -> str | None:
    """None when the namespaces can be made here, else the one-line reason (probed once)."""
    if sys.platform != "linux":
        return f"sandbox isolation unavailable: needs Linux namespaces, this is {sys.platform}"
    r = _run("print('ok')", "", Limits(timeout_s=10.0), isolate=True)
    if r.status == "refused":
        return r.stderr
    if r.status != "ok" or r.stdout != "ok\n":
        return f"sandbox isolation unavailable: the probe program ended {r.status}: {r.stderr.strip()[-300:]}"
    return None


def require_isolation(allow_unisolated: bool = False) -> None:
    """Raise the one-line refusal now (a task that scores code calls this when it is built)."""
    why = unisolated_refusal(allow_unisolated)
    if why and not allow_unisolated:
        raise ScaleRLError(f"{why}; running model-written programs needs it (set sandbox.allow_unisolated=true "
                           "to run them with limits only, see docs/sandbox.md)")
    if why:
        raise ScaleRLError(why)


def _run(source: str, stdin: str, lim: Limits, isolate: bool) -> SandboxResult:
    start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="scalerl-sandbox-")
    status_r, status_w = os.pipe()
    try:
        Path(tmp, "prog.py").write_text(source)
        Path(tmp, "stdin").write_text(stdin)
        if not isolate:
            os.mkdir(os.path.join(tmp, "work"))
        python = interpreter()
        spec = {"dir": tmp, "python": python, "ro": readonly_paths(python), "isolate": isolate,
                "status_fd": status_w, "parent": os.getpid(), "timeout_s": lim.timeout_s,
                "cpu_s": int(lim.timeout_s) + 1, "memory_mb": lim.memory_mb, "nproc": lim.nproc,
                "nofile": lim.nofile, "fsize_mb": lim.fsize_mb, "disk_mb": lim.disk_mb}
        proc = subprocess.Popen([python, "-I", "-S", "-B", JAIL, json.dumps(spec)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(status_w,),
                                start_new_session=True, env={}, cwd=tmp)
        os.close(status_w)
        status_w = -1
        out, err, lines, over, backstop = _collect(proc, status_r, lim)
    finally:
        if status_w >= 0:
            os.close(status_w)
        os.close(status_r)
        shutil.rmtree(tmp)
    return _result(out, err, lines, over, backstop, proc.returncode, time.monotonic() - start)


def _collect(proc: subprocess.Popen, status_r: int, lim: Limits) -> tuple[bytes, bytes, list[dict], bool, bool]:
    """Read stdout, stderr and the status pipe until the launcher ends; stop it past the output limit
    (SIGTERM: it kills the namespace) or, as a backstop, kill its process group past the wall limit."""
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray(), status_r: bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + lim.timeout_s + 5.0
    over = backstop = False
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                _kill_group(proc.pid)
                backstop = True
                break
            for key, _ in sel.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                room = lim.output_limit - len(buf) if key.fd != status_r else len(chunk)
                buf += chunk[:max(room, 0)]
                if len(chunk) > room and not over:
                    over = True
                    proc.send_signal(signal.SIGTERM)
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        proc.wait()
    _kill_group(proc.pid)      # the opted-out mode's leftovers; isolated runs leave none
    lines = [json.loads(line) for line in bufs[status_r].decode().splitlines() if line.strip()]
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), lines, over, backstop


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:      # the group is already empty
        return


def _result(out: bytes, err: bytes, lines: list[dict], over: bool, backstop: bool, launcher_rc: int,
            seconds: float) -> SandboxResult:
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    events = {k: v for line in lines for k, v in line.items()}
    if "refused" in events:
        return SandboxResult("refused", "", events["refused"], None, seconds)
    if over:
        return SandboxResult("output_limit", stdout, stderr, None, seconds)
    if events.get("timeout") or backstop:
        return SandboxResult("timeout", stdout, stderr, None, seconds)
    if "returncode" not in events:
        return SandboxResult("error", stdout, f"{stderr}sandbox: the launcher ended without reporting the program's "
                             f"exit (launcher exit code {launcher_rc})", None, seconds)
    rc = events["returncode"]
    if rc == 0:
        status = "ok"
    elif rc in (-signal.SIGXCPU, -signal.SIGKILL):
        status = "timeout"
    elif "MemoryError" in stderr[-2000:] or rc == -signal.SIGSEGV and "memory" in stderr:
        status = "memory"
    else:
        status = "error"
    return SandboxResult(status, stdout, stderr, rc, seconds)
