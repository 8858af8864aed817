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

Each calling thread has a fork server (`jail.py --serve`, started at its first run): a small
interpreter of its own, in the caller's namespaces and never running a program, that forks the
launcher of each run, so the launcher's start-up (half of a run) is paid once per thread. It dies
with its thread (PR_SET_PDEATHSIG), at interpreter exit (`close_servers`) and when its socket
closes; a server found dead is restarted, and a run whose server dies under it is made again once.

Where the namespaces cannot be made (a container whose seccomp profile forbids `unshare`, a
kernel with unprivileged user namespaces off), every call returns status `refused` with a
one-line reason, unless the caller opts out by name with `allow_unisolated=True` (config
`sandbox.allow_unisolated: true`, never as root): then only the limits and a process group hold; see
docs/sandbox.md for which guarantee holds where. Python audit hooks are not used: they are no
boundary.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from scalerl.errors import ScaleRLError

STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "refused")
JAIL = str(Path(__file__).with_name("jail.py"))
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
FORK_SERVER = True  # isolated runs through each thread's fork server; False: a launcher process per run


@dataclass(frozen=True)
class SandboxResult:
    """One program's run. `returncode`: the program's exit code, negative for the signal that
    ended it, None when it did not end by itself (timeout, output limit, refused)."""

    status: str
    stdout: str
    stderr: str
    returncode: int | None
    seconds: float
    # CPU time (user + system) of the run's processes: the launcher, the jail, init, the program
    # and what it started; None where the launcher did not report it (refused, killed by the
    # backstop). The caller's own time (sending the program, reading its output) is not in it.
    cpu_seconds: float | None = None


@dataclass(frozen=True)
class Limits:
    """What one program may use. `cpu_s` defaults to the wall limit rounded up."""

    timeout_s: float = 10.0
    memory_mb: int = 256  # address space per process: a program holds at most nproc x memory_mb
    output_limit: int = 1 << 20  # bytes per stream
    nproc: int = 8  # processes and threads of the sandbox's uid, in its own namespace
    nofile: int = 64
    fsize_mb: int = 16
    disk_mb: int = 32  # the working directory's tmpfs

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


def run_program(
    source: str,
    stdin: str = "",
    timeout_s: float = 10.0,
    memory_mb: int = 256,
    *,
    output_limit: int = 1 << 20,
    allow_unisolated: bool = False,
    limits: Limits | None = None,
) -> SandboxResult:
    """Run `source` (Python) on `stdin` in the sandbox; see the module docstring.

    `limits` overrides `timeout_s`, `memory_mb` and `output_limit` when given."""
    lim = limits or Limits(timeout_s=timeout_s, memory_mb=memory_mb, output_limit=output_limit)
    why = unisolated_refusal(allow_unisolated)
    if why:
        return SandboxResult("refused", "", why, None, 0.0)
    result = _run(source, stdin, lim, isolate=isolation_unavailable() is None)
    credit_cpu(result.cpu_seconds or 0.0)
    return result


_THREAD_CPU = threading.local()


def cpu_seconds_used() -> float:
    """CPU seconds of every run made from the calling thread so far (`SandboxResult.cpu_seconds`
    summed, plus what `credit_cpu` added): read it before and after a piece of work to know what
    the sandbox's processes cost for it, a figure that does not grow when the machine is loaded, as
    the work's wall time does."""
    return getattr(_THREAD_CPU, "total", 0.0)


def credit_cpu(seconds: float) -> None:
    """Add `seconds` to the calling thread's `cpu_seconds_used`: what runs made for it in another
    process cost (a checker worker process reports its runs' CPU back this way)."""
    _THREAD_CPU.total = cpu_seconds_used() + seconds


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
        raise ScaleRLError(
            f"{why}; running model-written programs needs it (set sandbox.allow_unisolated=true "
            "to run them with limits only, see docs/sandbox.md)"
        )
    if why:
        raise ScaleRLError(why)


def _run(source: str, stdin: str, lim: Limits, isolate: bool) -> SandboxResult:
    if isolate and FORK_SERVER:
        return _run_served(source, stdin, lim)
    start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="scalerl-sandbox-")
    status_r, status_w = os.pipe()
    try:
        Path(tmp, "prog.py").write_text(source)
        Path(tmp, "stdin").write_text(stdin)
        if not isolate:
            os.mkdir(os.path.join(tmp, "work"))
        spec = {**_spec(lim), "dir": tmp, "isolate": isolate, "status_fd": status_w, "parent": os.getpid()}
        proc = subprocess.Popen(
            [spec["python"], "-I", "-S", "-B", JAIL, json.dumps(spec)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(status_w,),
            start_new_session=True,
            env={},
            cwd=tmp,
        )
        os.close(status_w)
        status_w = -1
        try:
            got = _collect(
                proc.stdout.fileno(),
                proc.stderr.fileno(),
                status_r,
                lim,
                stop=lambda: proc.send_signal(signal.SIGTERM),
                kill=lambda: _kill_group(proc.pid),
            )
        finally:
            proc.stdout.close()
            proc.stderr.close()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()
        _kill_group(proc.pid)  # the opted-out mode's leftovers; isolated runs leave none
    finally:
        if status_w >= 0:
            os.close(status_w)
        os.close(status_r)
        shutil.rmtree(tmp)
    return _result(*got, proc.returncode, time.monotonic() - start)


def _spec(lim: Limits) -> dict:
    """What the launcher needs besides the program, its stdin and the status descriptor."""
    python = interpreter()
    return {
        "python": python,
        "ro": readonly_paths(python),
        "timeout_s": lim.timeout_s,
        "cpu_s": int(lim.timeout_s) + 1,
        "memory_mb": lim.memory_mb,
        "nproc": lim.nproc,
        "nofile": lim.nofile,
        "fsize_mb": lim.fsize_mb,
        "disk_mb": lim.disk_mb,
    }


def _collect(
    out_fd: int, err_fd: int, status_r: int, lim: Limits, stop: Callable[[], None], kill: Callable[[], None]
) -> tuple[bytes, bytes, list[dict], bool, bool]:
    """Read stdout, stderr and the status pipe until every writer is gone; `stop` the run past the
    output limit (the launcher's SIGTERM: it kills the namespace) or, as a backstop, `kill` it past
    the wall limit plus 5 s."""
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
                kill()
                backstop = True
                break
            for key, _ in sel.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                room = lim.output_limit - len(buf) if key.fd != status_r else len(chunk)
                buf += chunk[: max(room, 0)]
                if len(chunk) > room and not over:
                    over = True
                    stop()
    finally:
        sel.close()
    lines = [json.loads(line) for line in bufs[status_r].decode().splitlines() if line.strip()]
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), lines, over, backstop


SERVER_REPLY_S = 10.0  # how long a run waits for the server's answer once its outputs are closed


class _ServerDied(Exception):
    """The fork server ended or stopped answering (its one-line reason)."""


class _Server:
    """One thread's fork server (`jail.py --serve`, see `serve` there): a small interpreter of its
    own that forks a launcher per run, so the launcher's start-up (about half of a run) is paid once.
    It dies with the thread that started it (PR_SET_PDEATHSIG) and when `close`d."""

    def __init__(self):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [interpreter(), "-I", "-S", "-B", JAIL, "--serve", str(os.getpid()), str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                env={},
                cwd="/",
            )
        finally:
            theirs.close()
        os.set_blocking(self.proc.stderr.fileno(), False)
        self.owner = os.getpid()
        self.thread = threading.current_thread()

    def run(self, source: str, stdin: str, lim: Limits) -> tuple:
        """One program: `_collect`'s tuple and the launcher's exit code; `_ServerDied` if the server
        ended before answering (a run it had started is killed with it)."""
        pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, status
        theirs = [_sealed(source), _sealed(stdin)] + [w for _, w in pipes]
        try:
            socket.send_fds(self.sock, [json.dumps(_spec(lim)).encode()], theirs)
        except OSError as e:  # BrokenPipeError, ConnectionResetError: it is gone; nothing ran
            raise _ServerDied(self.why(e)) from None
        finally:
            for fd in theirs:
                os.close(fd)
        try:
            got = _collect(
                *(r for r, _ in pipes), lim, stop=lambda: self.tell(b"stop"), kill=lambda: self.tell(b"kill")
            )
        finally:
            for r, _ in pipes:
                os.close(r)
        self.sock.settimeout(SERVER_REPLY_S)
        try:
            reply = self.sock.recv(4096)
        except TimeoutError:
            self.kill()
            raise _ServerDied(
                f"the sandbox's fork server (pid {self.proc.pid}) did not answer within "
                f"{SERVER_REPLY_S:.0f} s of a run's end: killed"
            ) from None
        except OSError as e:
            raise _ServerDied(self.why(e)) from None
        if not reply:
            raise _ServerDied(self.why(None))
        return (*got, json.loads(reply)["exit"])

    def tell(self, what: bytes) -> None:
        try:
            self.sock.send(what)
        except OSError:  # it is gone: so is the launcher it had forked (PR_SET_PDEATHSIG)
            return

    def alive(self) -> bool:
        return self.proc.poll() is None

    def why(self, error: OSError | None) -> str:
        """One line: how the server ended, and the last line it wrote."""
        try:
            self.proc.wait(timeout=2.0)
            how = (
                f"killed by signal {-self.proc.returncode}"
                if self.proc.returncode < 0
                else f"exit code {self.proc.returncode}"
            )
        except subprocess.TimeoutExpired:
            how = f"its socket failed ({error})" if error else "its socket closed"
        try:
            tail = (self.proc.stderr.read() or b"").decode("utf-8", "replace").strip().splitlines()[-1:]
        except (OSError, ValueError):
            tail = []
        return f"the sandbox's fork server (pid {self.proc.pid}) ended: {how}" + (f" ({tail[0][:200]})" if tail else "")

    def kill(self) -> None:
        self.proc.kill()
        self.close()

    def close(self) -> None:
        """End the server (it exits when its socket closes) and reap it. In a forked child of the
        process that started it: only this copy of the socket is closed."""
        self.sock.close()
        if self.owner != os.getpid():
            return
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()


_LOCAL = threading.local()  # .server: this thread's
_SERVERS: list[_Server] = []  # every server this process started, for pruning and exit
_SERVERS_LOCK = threading.Lock()


def _thread_server() -> _Server:
    """This thread's fork server, started (or restarted) when needed. Servers of threads that have
    ended (killed with them) are reaped here, at every run."""
    _reap_ended()
    server = getattr(_LOCAL, "server", None)
    if server is not None and server.owner == os.getpid() and server.alive():
        return server
    if server is not None:
        _forget(server)
    server = _LOCAL.server = _Server()
    with _SERVERS_LOCK:
        _SERVERS.append(server)
    return server


def _reap_ended() -> None:
    with _SERVERS_LOCK:
        ended = [s for s in _SERVERS if not s.thread.is_alive() or s.owner != os.getpid()]
        for s in ended:
            _SERVERS.remove(s)
    for s in ended:
        s.close()


def _forget(server: _Server) -> None:
    with _SERVERS_LOCK:
        if server in _SERVERS:
            _SERVERS.remove(server)
    server.close()
    if getattr(_LOCAL, "server", None) is server:
        _LOCAL.server = None


@atexit.register
def close_servers() -> None:
    """End every fork server of this process (at interpreter exit; callable any time)."""
    with _SERVERS_LOCK:
        servers, _SERVERS[:] = list(_SERVERS), []
    for s in servers:
        s.close()


def _run_served(source: str, stdin: str, lim: Limits) -> SandboxResult:
    """A run through this thread's fork server. A server found dead is restarted; one that dies
    during the run is restarted and the run made again, once; a second failure is an `error`
    result whose stderr is the one-line reason."""
    start = time.monotonic()
    for attempt in range(2):
        server = _thread_server()
        try:
            got = server.run(source, stdin, lim)
        except _ServerDied as e:
            _forget(server)
            if attempt:
                return SandboxResult("error", "", f"sandbox: {e}", None, time.monotonic() - start)
            continue
        except BaseException:  # (KeyboardInterrupt) mid-run: closing the server ends that run, and
            _forget(server)  # the next request cannot meet the answer meant for this one
            raise
        return _result(*got, time.monotonic() - start)
    raise AssertionError("unreachable")


def _sealed(text: str) -> int:
    """A memfd holding `text`, sealed against writes (the program's stdin: it cannot change it)."""
    fd = os.memfd_create("scalerl-sandbox", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    data = text.encode()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:  # the group is already empty
        return


def _result(
    out: bytes, err: bytes, lines: list[dict], over: bool, backstop: bool, launcher_rc: int, seconds: float
) -> SandboxResult:
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    events = {k: v for line in lines for k, v in line.items()}
    cpu = events.get("cpu")
    if "refused" in events:
        return SandboxResult("refused", "", events["refused"], None, seconds, cpu)
    if over:
        return SandboxResult("output_limit", stdout, stderr, None, seconds, cpu)
    if events.get("timeout") or backstop:
        return SandboxResult("timeout", stdout, stderr, None, seconds, cpu)
    if "returncode" not in events:
        return SandboxResult(
            "error",
            stdout,
            f"{stderr}sandbox: the launcher ended without reporting the program's "
            f"exit (launcher exit code {launcher_rc})",
            None,
            seconds,
            cpu,
        )
    rc = events["returncode"]
    if rc == 0:
        status = "ok"
    elif rc in (-signal.SIGXCPU, -signal.SIGKILL):
        status = "timeout"
    elif "MemoryError" in stderr[-2000:] or rc == -signal.SIGSEGV and "memory" in stderr:
        status = "memory"
    else:
        status = "error"
    return SandboxResult(status, stdout, stderr, rc, seconds, cpu)
