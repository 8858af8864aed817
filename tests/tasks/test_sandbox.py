"""The sandbox against hostile programs (fast tier).

Every case runs a program that tries one way out and asserts, besides its own expectation:
nothing outside changed (a folder of secrets and the tests' expected outputs, byte for byte), the
listener the test opened on 127.0.0.1 got no connection, a victim process the test started is
alive, no process is left in any namespace the run made, no process carrying the case's marker
is left anywhere, and the run ended within its wall limit plus a margin.

Where the machine cannot make the namespaces (a CI container whose seccomp profile forbids
`unshare`), the same cases run and assert the refusal instead: status `refused`, a one-line
reason, and nothing the program would have done (the program never starts). Nothing is skipped.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

import scalerl.sandbox as sandbox
from scalerl.errors import ScaleRLError
from scalerl.sandbox import Limits, run_program

ISOLATED = sandbox.isolation_unavailable() is None


def _has_libseccomp() -> bool:
    try:
        ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return False
    return True


HAS_SECCOMP = _has_libseccomp()  # without it a program may unshare (harmlessly: its own namespaces)
WALL = 1.0  # the hostile cases' wall limit
MARGIN = 2.5  # setup, teardown and a loaded machine


@dataclass
class Outside:
    """What the program must neither reach nor change."""

    dir: Path
    secret: Path
    expected: Path
    sock_path: Path
    listener: socket.socket
    port: int
    victim: subprocess.Popen
    marker: str

    def fmt(self, source: str) -> str:
        return (
            source.replace("SECRET", str(self.secret))
            .replace("EXPECTED", str(self.expected))
            .replace("OUTSIDE", str(self.dir))
            .replace("PORT", str(self.port))
            .replace("UNIXSOCK", str(self.sock_path))
            .replace("VICTIM", str(self.victim.pid))
            .replace("HOSTPID", str(os.getpid()))
            .replace("MARKER", self.marker)
        )


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file() and not p.is_socket()
        else "dir"
        if p.is_dir()
        else "other"
        for p in sorted(root.rglob("*"))
    }


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, PermissionError, ProcessLookupError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def left_by_us(pid: int) -> bool:
    """Could `pid` be left over from a run of this test process: a descendant of it, or an orphan
    (reparented to init)? A sandbox of another job on the machine (a training run scoring code
    beside the tests) is neither: its parent chain runs through that job."""
    me, chain = os.getpid(), pid
    parent = _parent(chain)
    if parent in (0, 1):
        return True
    while parent not in (None, 0, 1):
        if parent == me:
            return True
        chain, parent = parent, _parent(parent)
    return False


def namespaces(ours: bool = False) -> set[str]:
    """The user and pid namespaces of every process we may look at (`ours`: of the processes that
    could be left over from this test process's runs only, see `left_by_us`)."""
    seen = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or (ours and not left_by_us(int(pid))):
            continue
        for ns in ("user", "pid"):
            try:
                seen.add(os.readlink(f"/proc/{pid}/ns/{ns}"))
            except (FileNotFoundError, PermissionError, ProcessLookupError):  # gone, or another user's
                continue
    return seen


def processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        if marker.encode() in cmd:
            found.append(int(pid))
    return found


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    secret = d / "secret.txt"
    secret.write_text("TOPSECRET-" + uuid.uuid4().hex)
    expected = d / "expected_output.txt"
    expected.write_text("42\n")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    sock_path = d / "s.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(sock_path))
    unix.listen(8)
    unix.setblocking(False)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    o = Outside(d, secret, expected, sock_path, listener, listener.getsockname()[1], victim, "m" + uuid.uuid4().hex)
    yield o
    victim.kill()
    victim.wait()
    listener.close()
    unix.close()


def contained(outside: Outside, source: str, **kw) -> sandbox.SandboxResult | None:
    """Run `source` and assert the common guarantees; None where isolation is unavailable (after
    asserting the refusal)."""
    before_tree = tree_digest(outside.dir)
    before_ns = namespaces()
    kw.setdefault("timeout_s", WALL)
    kw.setdefault("memory_mb", 256)
    r = run_program(outside.fmt(source), **kw)
    assert r.status in sandbox.STATUSES
    assert r.seconds < kw["timeout_s"] + MARGIN, r
    assert tree_digest(outside.dir) == before_tree
    with pytest.raises(BlockingIOError):
        outside.listener.accept()
    assert outside.victim.poll() is None, "the test's victim process was killed"
    assert "TOPSECRET" not in r.stdout + r.stderr
    assert namespaces(ours=True) <= before_ns, "a process is left in a namespace the run made"
    assert processes_with(outside.marker) == []
    if not ISOLATED:
        assert r.status == "refused" and r.stderr.startswith("sandbox isolation unavailable") and "\n" not in r.stderr
        assert r.stdout == "" and r.returncode is None
        return None
    return r


# (name, source, statuses allowed, what stdout must contain or None, extra run_program arguments)
CASES = [
    ("fork_bomb", "import os\nwhile True:\n    os.fork()\n", {"error", "timeout"}, None, {}),
    (
        "fork_count",
        "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
        "            time.sleep(60)\n        n += 1\nexcept OSError:\n    print('forks', n)\n",
        {"ok"},
        "forks ",
        {},
    ),
    ("memory_bomb", "x = []\nwhile True:\n    x.append(bytearray(10**7))\n", {"memory"}, None, {"timeout_s": 5.0}),
    (
        "mmap_bomb",
        "import mmap\nm = mmap.mmap(-1, 1 << 34)\nm[-1] = 1\nprint('mapped')\n",
        {"error", "memory"},
        None,
        {},
    ),
    ("infinite_loop", "while True:\n    pass\n", {"timeout"}, None, {}),
    (
        "spinning_threads",
        "import threading\ndef spin():\n    while True:\n        pass\n"
        "for _ in range(4):\n    threading.Thread(target=spin).start()\n",
        {"timeout"},
        None,
        {},
    ),
    (
        "thread_bomb",
        "import threading, time\nn = 0\ntry:\n    while True:\n"
        "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n        n += 1\n"
        "except RuntimeError:\n    print('threads', n)\n",
        {"ok"},
        "threads ",
        {},
    ),
    ("sleep_past_wall", "import time\ntime.sleep(60)\n", {"timeout"}, None, {}),
    (
        "ignore_sigterm",
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n",
        {"timeout"},
        None,
        {},
    ),
    ("write_outside", "open('OUTSIDE/pwned', 'w').write('x')\n", {"error"}, None, {}),
    ("overwrite_expected", "open('EXPECTED', 'w').write('anything')\n", {"error"}, None, {}),
    (
        "write_everywhere",
        "import os\nhits = []\nfor d, subs, _ in os.walk('/'):\n"
        "    if d.startswith(('/work', '/tmp')):\n        continue\n    try:\n"
        "        open(os.path.join(d, 'pwnedMARKER'), 'w').close()\n        hits.append(d)\n"
        "    except OSError:\n        pass\nprint('hits', hits)\n",
        {"ok"},
        "hits []",
        {"timeout_s": 20.0},
    ),
    ("read_secret", "print(open('SECRET').read())\n", {"error"}, None, {}),
    ("read_expected_output", "print(open('EXPECTED').read())\n", {"error"}, None, {}),
    (
        "read_through_proc",
        "import os\nfor p in ('/proc/1/root/SECRET', '/proc/self/root/SECRET', '/proc/self/environ'):\n"
        "    try:\n        print(open(p).read())\n    except OSError as e:\n        print('no', type(e).__name__)\n",
        {"ok"},
        "no FileNotFoundError",
        {},
    ),
    (
        "find_secret_by_walk",
        "import os\nfound = [os.path.join(d, f) for d, _, fs in os.walk('/') for f in fs\n"
        "         if f in ('secret.txt', 'expected_output.txt')]\nprint('found', found)\n",
        {"ok"},
        "found []",
        {"timeout_s": 20.0},
    ),
    (
        "host_files_absent",
        "import os\nprint(sorted(p for p in ('/etc', '/home', '/proc', '/sys', '/var', '/run', '/root/.ssh')"
        " if os.path.exists(p)))\n",
        {"ok"},
        "[]",
        {},
    ),
    (
        "connect_loopback",
        "import socket\ns = socket.socket()\ns.settimeout(0.5)\ns.connect(('127.0.0.1', PORT))\n",
        {"error"},
        None,
        {},
    ),
    (
        "connect_unix_socket",
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('UNIXSOCK')\n",
        {"error"},
        None,
        {},
    ),
    (
        "connect_internet",
        "import socket\ns = socket.socket()\ns.settimeout(0.5)\ns.connect(('1.1.1.1', 53))\n",
        {"error"},
        None,
        {},
    ),
    (
        "raise_loopback",
        "import subprocess\nprint(subprocess.run(['ip', 'link', 'set', 'lo', 'up']).returncode)\n"
        "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', PORT))\n",
        {"error"},
        None,
        {},
    ),
    (
        "subprocess_outlives",
        "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(60)  # MARKER'], start_new_session=True)\nprint('left it')\n",
        {"ok"},
        "left it",
        {},
    ),
    (
        "setsid_double_fork",
        "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)  # MARKER'])\n"
        "    os._exit(0)\nprint('daemonised')\n",
        {"ok"},
        "daemonised",
        {},
    ),
    (
        "kill_parent",
        "import os, signal\nfor pid in (os.getppid(), 1):\n    os.kill(pid, signal.SIGKILL)\n"
        "    os.kill(pid, signal.SIGTERM)\nprint('still here', os.getppid())\n",
        {"ok"},
        "still here",
        {},
    ),
    (
        "kill_outside_pids",
        "import os, signal\nfor pid in (VICTIM, HOSTPID):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
        "        print('killed', pid)\n    except ProcessLookupError:\n        print('invisible', pid)\n",
        {"ok"},
        "invisible VICTIM",
        {},
    ),
    (
        "kill_everything",
        "import os, signal, time\nif os.fork() == 0:\n    time.sleep(60)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "os.kill(-1, signal.SIGTERM)\nos.kill(-1, signal.SIGKILL)\nprint('after')\n",
        {"ok"},
        "after",
        {},
    ),
    (
        "raise_limits",
        "import resource\nraised = []\nfor r in (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_NPROC,\n"
        "          resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE):\n    try:\n"
        "        resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n        raised.append(r)\n"
        "    except (ValueError, OSError):\n        pass\nprint('raised', raised)\n",
        {"ok"},
        "raised []",
        {},
    ),
    ("huge_stdout", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", {"output_limit"}, None, {}),
    ("huge_stderr", "import sys\nwhile True:\n    sys.stderr.write('y' * 65536)\n", {"output_limit"}, None, {}),
    (
        "close_descriptors",
        "import os\nfor fd in range(0, 64):\n    try:\n        os.close(fd)\n    except OSError:\n"
        "        pass\nwhile True:\n    pass\n",
        {"timeout"},
        None,
        {},
    ),
    (
        "redirect_descriptors",
        "import os\nfd = os.open('/dev/null', os.O_WRONLY)\nos.dup2(fd, 1)\nos.dup2(fd, 2)\n"
        "import time\ntime.sleep(60)\n",
        {"timeout"},
        None,
        {},
    ),
    (
        "ctypes_syscalls",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nout = [\n"
        "    libc.unshare(0x10000000), libc.unshare(0x00020000), libc.mount(b'none', b'/work', b'tmpfs', 0, None),\n"
        "    libc.ptrace(16, 1, 0, 0), libc.setns(0, 0), libc.chroot(b'/work'), libc.setuid(0),\n"
        "    libc.syscall(321, 0, 0, 0),\n]\nprint('results', out)\n",
        {"ok"},
        "results [-1, -1, -1, -1, -1, -1, -1, -1]" if HAS_SECCOMP else "-1, -1, -1, -1, -1, -1]",
        {},
    ),
    (
        "chroot_escape",
        "import os\nos.makedirs('a', exist_ok=True)\nos.chroot('a')\nfor _ in range(20):\n"
        "    os.chdir('..')\nos.chroot('.')\nprint(open('SECRET').read())\n",
        {"error"},
        None,
        {},
    ),
    ("become_root", "import os\nos.setuid(0)\n", {"error"}, None, {}),
    (
        "nested_namespace_tool",
        "import subprocess\nr = subprocess.run(['unshare', '-Urm', 'cat', 'SECRET'],"
        " capture_output=True, text=True)\nprint('rc', r.returncode)\n",
        {"ok", "error"},
        None,
        {},
    ),
    (
        "shell_cat_secret",
        "import os\nos.execv('/bin/sh', ['sh', '-c', 'cat SECRET; cat /etc/passwd'])\n",
        {"error"},
        None,
        {},
    ),
    ("big_file", "open('big', 'wb').write(b'0' * (64 << 20))\n", {"error", "memory"}, None, {}),
    (
        "fill_disk",
        "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'0' * (4 << 20))\n    i += 1\n",
        {"error"},
        None,
        {},
    ),
    (
        "many_files",
        "fs = []\ntry:\n    while True:\n        fs.append(open('/dev/null'))\nexcept OSError:\n"
        "    print('open', len(fs))\n",
        {"ok"},
        "open ",
        {},
    ),
    (
        "environment_scrubbed",
        "import os\nprint(sorted(os.environ))\n",
        {"ok"},
        "['HOME', 'LANG', 'PATH', 'PYTHONHASHSEED', 'TMPDIR']",
        {},
    ),
    ("make_device", "import os, stat\nos.mknod('mem', stat.S_IFCHR | 0o600, os.makedev(1, 1))\n", {"error"}, None, {}),
    (
        "inherited_descriptors",
        "import os\nopen_fds = []\nfor fd in range(3, 1024):\n    try:\n        os.fstat(fd)\n"
        "        open_fds.append(fd)\n    except OSError:\n        pass\nprint('open', open_fds)\n",
        {"ok"},
        "open []",
        {},
    ),
    (
        "change_stdin",
        "import os, sys\nchanged = []\nfor name, f in (('write', lambda: os.write(0, b'x')),\n"
        "                ('truncate', lambda: os.ftruncate(0, 0))):\n    try:\n        f()\n"
        "        changed.append(name)\n"
        "    except OSError:\n        pass\nos.lseek(0, 0, 0)\nprint('changed', changed, sys.stdin.read())\n",
        {"ok"},
        "changed [] kept",
        {"stdin": "kept"},
    ),
]


@pytest.mark.parametrize("name,source,statuses,needle,kw", CASES, ids=[c[0] for c in CASES])
def test_hostile_program_is_contained(outside, name, source, statuses, needle, kw):
    r = contained(outside, source, **kw)
    if r is None:
        return
    assert r.status in statuses, (name, r)
    if needle is not None:
        assert outside.fmt(needle) in r.stdout, (name, r)


def test_fork_count_is_capped_by_nproc(outside):
    r = contained(outside, CASES[1][1], limits=Limits(timeout_s=3.0, nproc=16))
    if r is None:
        return
    assert r.status == "ok", r
    forks = int(r.stdout.split()[1])
    assert 0 < forks < 16, r.stdout  # the program itself counts as one of the 16


def test_file_limits(outside):
    """`many_files` stops at the descriptor limit; `big_file` at the file-size limit (Python ignores
    SIGXFSZ: the write fails with EFBIG)."""
    r = contained(outside, CASES[[c[0] for c in CASES].index("many_files")][1], limits=Limits(nofile=20))
    if r is None:
        return
    assert 10 <= int(r.stdout.split()[1]) < 20, r.stdout
    r = contained(outside, "open('big', 'wb').write(b'0' * (8 << 20))\n", limits=Limits(fsize_mb=4))
    assert r.status == "error" and "[Errno 27] File too large" in r.stderr, r


def test_output_is_capped(outside):
    r = contained(
        outside,
        "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
        limits=Limits(timeout_s=WALL, output_limit=1000),
    )
    if r is None:
        return
    assert r.status == "output_limit" and r.stdout == "x" * 1000 and r.returncode is None


def test_a_normal_program_runs(outside):
    """Standard input in, standard output back, exit code kept; the working directory is writable."""
    src = (
        "import sys\nopen('scratch', 'w').write(sys.stdin.read())\nn = int(open('scratch').read())\n"
        "print(n * 2)\nsys.exit(3 if n == 0 else 0)\n"
    )
    r = contained(outside, src, stdin="21\n")
    if r is None:
        return
    assert (r.status, r.stdout, r.returncode) == ("ok", "42\n", 0)
    r = run_program(src, stdin="0\n")
    assert (r.status, r.stdout, r.returncode) == ("error", "0\n", 3)
    r = run_program("raise ValueError('bad answer')\n")
    assert r.status == "error" and r.returncode == 1 and "ValueError: bad answer" in r.stderr


def test_runs_are_independent():
    """A file one program leaves is not there for the next."""
    first = run_program("open('/work/left', 'w').write('x')\nprint('wrote')\n")
    second = run_program("import os\nprint(os.path.exists('/work/left'), os.listdir('/work'))\n")
    if not ISOLATED:
        assert first.status == second.status == "refused"
        return
    assert first.stdout == "wrote\n"
    assert second.stdout == "False ['prog.py']\n"


def test_no_temporary_directory_left():
    before = set(Path("/tmp").glob("scalerl-sandbox-*"))
    run_program("print(1)\n")
    run_program("while True:\n    pass\n", timeout_s=0.5)
    left = set(Path("/tmp").glob("scalerl-sandbox-*")) - before
    deadline = time.monotonic() + 30  # another job's sandboxes (a run scoring code beside the tests) come and go;
    while left and time.monotonic() < deadline:  # a directory of ours would stay
        time.sleep(0.5)
        left &= set(Path("/tmp").glob("scalerl-sandbox-*"))
    assert not left


def test_refusal_is_one_line_and_opt_out_is_by_name(monkeypatch, tmp_path):
    """Where isolation is unavailable: every call is refused in one line and runs nothing; the task
    side raises a ScaleRLError naming the opt-out; `allow_unisolated=True` runs with limits only,
    and never as root."""
    reason = (
        "sandbox isolation unavailable: unshare(user, mount, net, pid, ipc, uts namespaces): Operation not permitted"
    )
    monkeypatch.setattr(sandbox, "isolation_unavailable", lambda: reason)
    flag = tmp_path / "ran"
    r = run_program(f"open({str(flag)!r}, 'w').write('x')\n")
    assert (r.status, r.stderr, r.stdout, r.returncode) == ("refused", reason, "", None)
    assert not flag.exists()
    with pytest.raises(ScaleRLError, match="sandbox.allow_unisolated=true"):
        sandbox.require_isolation()
    if os.getuid() == 0:  # opted out as root: still refused (a root program could signal anything)
        with pytest.raises(ScaleRLError, match="not run programs as root"):
            sandbox.require_isolation(allow_unisolated=True)
        r = run_program(f"open({str(flag)!r}, 'w').write('x')\n", allow_unisolated=True)
        assert r.status == "refused" and "as root" in r.stderr and "\n" not in r.stderr and not flag.exists()
        return
    sandbox.require_isolation(allow_unisolated=True)
    r = run_program("print(6 * 7)\n", allow_unisolated=True)
    assert (r.status, r.stdout) == ("ok", "42\n")
    t0 = time.monotonic()
    r = run_program("while True:\n    pass\n", timeout_s=0.5, allow_unisolated=True)
    # a program that never ends was stopped: the bound only catches a kill that never came, not a slow machine
    assert r.status == "timeout" and time.monotonic() - t0 < 60


def test_limits_are_checked():
    with pytest.raises(ScaleRLError, match="timeout_s=0"):
        Limits(timeout_s=0)
    with pytest.raises(ScaleRLError, match="memory_mb=-1"):
        run_program("print(1)", memory_mb=-1)


DENY_UNSHARE = """
import ctypes, json, sys
lib = ctypes.CDLL("libseccomp.so.2")
lib.seccomp_init.restype = ctypes.c_void_p
ctx = ctypes.c_void_p(lib.seccomp_init(ctypes.c_uint32(0x7FFF0000)))
nr = lib.seccomp_syscall_resolve_name(b"unshare")
assert lib.seccomp_rule_add_array(ctx, ctypes.c_uint32(0x00050000 | 1), nr, 0, None) == 0
assert lib.seccomp_load(ctx) == 0
import scalerl.sandbox as sb
r = sb.run_program("open('FLAG', 'w').write('x')")
print(json.dumps([r.status, r.stderr, r.returncode]))
"""


@pytest.mark.skipif(not HAS_SECCOMP, reason="needs libseccomp to forbid unshare the way a container's profile does")
def test_refused_in_a_container_that_forbids_unshare(tmp_path):
    """A real refusal, not a stubbed one: under a seccomp filter denying `unshare` (Docker's default
    profile does), run_program answers `refused` in one line and the program never runs."""
    flag = tmp_path / "ran"
    out = subprocess.run(
        [sys.executable, "-c", DENY_UNSHARE.replace("FLAG", str(flag))],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert out.returncode == 0, out.stderr
    status, reason, rc = json.loads(out.stdout)
    assert status == "refused" and rc is None and "\n" not in reason
    assert reason == (
        "sandbox isolation unavailable: unshare(user, mount, net, pid, ipc, uts namespaces): Operation not permitted"
    )
    assert not flag.exists()


def test_threads_count_as_processes(outside):
    """The default process limit (8) caps threads too: a thread bomb stops below it."""
    r = contained(outside, CASES[[c[0] for c in CASES].index("thread_bomb")][1])
    if r is None:
        return
    assert r.status == "ok" and 0 < int(r.stdout.split()[1]) < Limits().nproc, r


# The fork server: each thread's isolated runs go through one long-lived helper (jail.py --serve)
# that forks a launcher per run. These check its life cycle; the cases above already run through it.

LAUNCHER_CASES = (
    "infinite_loop",
    "setsid_double_fork",
    "huge_stdout",
    "read_secret",
    "kill_outside_pids",
    "inherited_descriptors",
)


@pytest.mark.parametrize("name", LAUNCHER_CASES)
def test_hostile_program_is_contained_without_the_server(outside, monkeypatch, name):
    """A launcher process per run (`FORK_SERVER = False`, what benchmarks/sandbox.py compares) holds too."""
    monkeypatch.setattr(sandbox, "FORK_SERVER", False)
    _, source, statuses, needle, kw = CASES[[c[0] for c in CASES].index(name)]
    r = contained(outside, source, **kw)
    if r is None:
        return
    assert r.status in statuses and (needle is None or outside.fmt(needle) in r.stdout), (name, r)


def _state(pid: int) -> str | None:
    """A process's state letter ('Z': a zombie), None when there is none with that pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _wait_until(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _children(pid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == pid]


def _server_pid() -> int:
    return sandbox._LOCAL.server.proc.pid


def test_server_is_reused_and_dies_with_its_thread():
    """One server per thread, kept between runs, with no launcher left after a run; a thread's
    server is killed when the thread ends and reaped at the next run of any thread."""
    first = run_program("print(1)\n")
    if not ISOLATED:
        assert first.status == "refused"
        return
    pid = _server_pid()
    assert (first.status, first.stdout, run_program("print(2)\n").stdout) == ("ok", "1\n", "2\n")
    assert _server_pid() == pid and _state(pid) not in (None, "Z") and _children(pid) == []
    seen = {}

    def in_thread():
        seen["r"] = run_program("print(3)\n")
        seen["pid"] = _server_pid()

    t = threading.Thread(target=in_thread)
    t.start()
    t.join()
    assert seen["r"].stdout == "3\n" and seen["pid"] != pid
    assert _wait_until(lambda: _state(seen["pid"]) in (None, "Z")), "the ended thread's server is still running"
    assert run_program("print(4)\n").stdout == "4\n"  # the next run reaps it
    assert _state(seen["pid"]) is None and _server_pid() == pid


def test_killed_server_is_restarted():
    """A server killed between runs is replaced at the next run, which runs normally."""
    if run_program("print(1)\n").status == "refused":
        return
    pid = _server_pid()
    os.kill(pid, signal.SIGKILL)
    assert _wait_until(lambda: _state(pid) in (None, "Z"))
    r = run_program("print(int(input()) + 1)\n", stdin="41\n")
    assert (r.status, r.stdout) == ("ok", "42\n") and _server_pid() != pid and _state(pid) is None


def _live_left_by_us(before: set[str]) -> list[int]:
    """Processes not dead (zombies of a killed chain wait for the host's init to reap them) in a
    user or pid namespace not in `before`, that could be left from this test process's runs."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or not left_by_us(int(pid)) or _state(int(pid)) in (None, "Z"):
            continue
        try:
            if {os.readlink(f"/proc/{pid}/ns/{ns}") for ns in ("user", "pid")} - before:
                found.append(int(pid))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return found


def test_server_killed_during_a_run_leaves_nothing_and_the_run_is_made_again(outside):
    """The run in flight dies with its server (its jail, init, the program and the program's own
    child) and is made again, once, on a fresh server: the result is the program's, and it took two
    runs' time. (The killed chain's jail and init are reparented to the host's init as zombies,
    dead; `contained` counts them, so this case asserts on live processes.)"""
    if run_program("print(1)\n").status == "refused":
        return
    pid = _server_pid()
    before_tree, before_ns = tree_digest(outside.dir), namespaces()
    SLEEP = 8  # the program's own time: a rerun takes it once, a jail held after the kill twice
    killer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
    killer.start()
    src = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # MARKER'])\n"
        f"time.sleep({SLEEP})\nprint('done')\n"
    )
    r = run_program(outside.fmt(src), timeout_s=3 * SLEEP)
    killer.join()
    # the first run dies at once (0.5 + SLEEP s and the restart in all); a jail left running (the id change clears
    # its PR_SET_PDEATHSIG) would hold the first run's pipes until its program ended (0.5 + 2 SLEEP s at least):
    # the bound is that, not a guess at this machine's speed
    assert (r.status, r.stdout) == ("ok", "done\n") and 0.5 + SLEEP < r.seconds < 0.5 + 2 * SLEEP, r
    assert _server_pid() != pid
    assert processes_with(outside.marker) == [] and _live_left_by_us(before_ns) == []
    assert tree_digest(outside.dir) == before_tree and outside.victim.poll() is None


def test_a_server_that_keeps_dying_is_one_line(monkeypatch):
    """Dead at the run and dead again on the retry: an `error` whose stderr is one line saying so
    (no hang, no exception into the scorer)."""
    if run_program("print(1)\n").status == "refused":
        return
    run = sandbox._Server.run

    def dead_on_arrival(self, *a):
        self.proc.kill()
        self.proc.wait()
        return run(self, *a)

    monkeypatch.setattr(sandbox._Server, "run", dead_on_arrival)
    t0 = time.monotonic()
    r = run_program("print(1)\n")
    assert time.monotonic() - t0 < 10
    assert (r.status, r.stdout, r.returncode) == ("error", "", None) and "\n" not in r.stderr, r
    assert re.fullmatch(r"sandbox: the sandbox's fork server \(pid \d+\) ended: killed by signal 9", r.stderr), r


CALLER = """
import os, sys, threading, scalerl.sandbox as sb
pids = []
def run():
    r = sb.run_program(os.environ["SOURCE"], timeout_s=float(sys.argv[1]))
    pids.append(sb._LOCAL.server.proc.pid if sb._LOCAL.server else None)
    print(r.status, r.stdout.strip(), flush=True)
t = threading.Thread(target=run)
t.start()
t.join()
run()
if os.fork() == 0:      # a forked child gets a server of its own
    run()
    print("child", pids[-1], flush=True)
    os._exit(0)
os.wait()
print("servers", *pids, flush=True)
"""


def _caller(source: str, timeout_s: float) -> subprocess.Popen:
    """A process that runs `source` (passed in its environment: its command line must not carry the
    cases' marker) in a thread, then in its main thread, then in a forked child."""
    return subprocess.Popen(
        [sys.executable, "-c", CALLER, str(timeout_s)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "SOURCE": source},
    )


def test_servers_end_with_the_interpreter_and_a_forked_child_has_its_own():
    """A thread's server, the main thread's and a forked child's: three servers, all gone (reaped,
    not zombies) once the caller has exited normally."""
    caller = _caller("print(6 * 7)\n", 5.0)
    out, _ = caller.communicate(timeout=60)
    lines = out.splitlines()
    if not ISOLATED:
        assert lines[0].startswith("refused")
        return
    assert lines[:3] == ["ok 42", "ok 42", "ok 42"], out
    child = int(lines[3].split()[1])
    servers = [int(p) for p in lines[-1].split()[1:]]
    assert len(set(servers + [child])) == 3, out
    for pid in servers + [child]:
        assert _wait_until(
            lambda pid=pid: _state(pid) is None or "--serve" not in Path(f"/proc/{pid}/cmdline").read_text(), 5.0
        ), f"server {pid} outlived its caller"


def test_a_killed_caller_leaves_nothing(outside):
    """SIGKILL the caller in the middle of a run: its server, the run and the program's own child
    all go (PR_SET_PDEATHSIG down the chain, then the pid namespace)."""
    src = outside.fmt(
        "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(60)  # MARKER'], start_new_session=True)\ntime.sleep(60)\n"
    )
    caller = _caller(src, 30.0)
    try:
        if not ISOLATED:
            assert caller.stdout.readline().startswith("refused")
            return
        assert _wait_until(lambda: processes_with(outside.marker) != [], 30.0), "the program never started"
        server = [p for p in _children(caller.pid) if b"--serve" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(server) == 1, server
    finally:
        caller.kill()
        caller.wait()
    assert _wait_until(lambda: processes_with(outside.marker) == [], 5.0), "the program's child outlived its caller"
    assert _wait_until(lambda: _state(server[0]) in (None, "Z"), 5.0), "the server outlived its caller"


UNSHARE_ALONE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    os._exit(0 if libc.unshare(0x10000000 | 0x00020000 | 0x40000000 | 0x20000000 | 0x08000000 | 0x04000000) == 0 else 1)
print("unshare", "works" if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 else "denied")
"""


def test_isolation_is_not_refused_where_the_kernel_allows_it():
    """The cases above assert a refusal where namespaces cannot be made; this keeps that branch
    from hiding a broken sandbox: where a plain process can make the namespaces, the sandbox's
    probe must succeed."""
    out = subprocess.run([sys.executable, "-I", "-c", UNSHARE_ALONE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() == "unshare works":
        assert sandbox.isolation_unavailable() is None and ISOLATED


OPTED_OUT = """
import ctypes, json, os, sys
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:      # a user namespace with no id map:
    print(json.dumps("no user namespace"))                           # getuid() is 65534, not root
    sys.exit(0)
import scalerl.sandbox as sb
sb.isolation_unavailable = lambda: "sandbox isolation unavailable: stubbed"
out = [os.getuid(), sb.run_program("print(1)").status]
for served in (True, False):
    sb.FORK_SERVER = served
    r = sb.run_program("print(int(input()) * 2)", stdin="21\\n", allow_unisolated=True)
    t = sb.run_program("while True:\\n    pass\\n", timeout_s=0.5, allow_unisolated=True)
    o = sb.run_program("import sys\\nwhile True:\\n    sys.stdout.write('x' * 65536)\\n",
                       timeout_s=2.0, output_limit=1000, allow_unisolated=True)
    out.append([r.status, r.stdout, t.status, t.seconds < 0.5 + 2.5, o.status, len(o.stdout),
                getattr(sb._LOCAL, "server", None) is None])
print(json.dumps(out))
"""


def test_opted_out_runs_for_a_caller_that_is_not_root():
    """`allow_unisolated=True` as a non-root caller (here: a user namespace without an id map, where
    the caller's uid is 65534) runs the program with limits only, through a launcher per run
    whatever `FORK_SERVER` says (no server is started), and refuses without the opt-out."""
    out = subprocess.run(
        [sys.executable, "-c", OPTED_OUT],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    if got == "no user namespace":
        assert not ISOLATED
        return
    each = ["ok", "42\n", "timeout", True, "output_limit", 1000, True]
    assert got == [65534, "refused", each, each], got


def test_an_interrupted_run_does_not_confuse_the_next(monkeypatch):
    """An exception out of a run in flight (a KeyboardInterrupt in the caller) ends that run with
    its server; the thread's next run gets its own answer from a new server."""
    if run_program("print(1)\n").status == "refused":
        return
    pid = _server_pid()
    collect = sandbox._collect

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(sandbox, "_collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_program("import time\ntime.sleep(30)\n", timeout_s=40.0)
    monkeypatch.setattr(sandbox, "_collect", collect)
    assert _state(pid) is None
    r = run_program("print(int(input()) * 3)\n", stdin="14\n")
    assert (r.status, r.stdout) == ("ok", "42\n") and _server_pid() != pid


# A child burns at least CHILD_CPU seconds of its own CPU, tells its parent how much, and then
# sleeps without using any more; the parent burns its own share, prints both figures and (at the
# end of the source) exits without waiting for the child, or sleeps into the wall limit. The run's
# `cpu_seconds` must hold both: the child is reaped by init (never by the program), so without
# init's kill-and-reap the kernel's teardown would reap it uncounted.
CPU_BURNER = """import os, time
def burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass
r, w = os.pipe()
if os.fork() == 0:
    burn({child})
    os.write(w, repr(time.process_time()).encode())
    time.sleep(60)
child = float(os.read(r, 64))
burn({parent})
print(child, time.process_time(), flush=True)
"""


@pytest.mark.parametrize("server", [True, False], ids=["fork-server", "launcher-per-run"])
@pytest.mark.parametrize("ending", ["exits", "timeout"])
def test_cpu_seconds_count_every_process_of_the_run(monkeypatch, server, ending):
    """`SandboxResult.cpu_seconds` is the CPU time of all the run's processes, measured by the kernel:
    at least what the program and its (never waited for) child measured of themselves, and not much
    more (the launcher, jail and init, and the program's interpreter start-up before it measured)."""
    monkeypatch.setattr(sandbox, "FORK_SERVER", server)
    src = CPU_BURNER.format(child=0.2, parent=0.1) + ("time.sleep(60)\n" if ending == "timeout" else "")
    before = sandbox.cpu_seconds_used()
    r = run_program(src, limits=Limits(timeout_s=4.0 if ending == "timeout" else 30.0))
    if not ISOLATED:
        assert r.status == "refused" and r.cpu_seconds is None
        return
    assert r.status == ("timeout" if ending == "timeout" else "ok"), r
    child, parent = map(float, r.stdout.split())
    assert child >= 0.2 and parent >= 0.1
    assert child + parent <= r.cpu_seconds <= child + parent + 0.5, (child, parent, r.cpu_seconds)
    assert sandbox.cpu_seconds_used() - before == pytest.approx(r.cpu_seconds)


def test_cpu_seconds_used_is_per_thread():
    """Each thread's `cpu_seconds_used` grows by its own runs only; `credit_cpu` adds to the caller's."""
    totals = {}

    def work(name: str, runs: int) -> None:
        before = sandbox.cpu_seconds_used()
        got = [run_program(CPU_BURNER.format(child=0.05, parent=0.05)).cpu_seconds for _ in range(runs)]
        totals[name] = (sandbox.cpu_seconds_used() - before, sum(c or 0.0 for c in got))

    threads = [threading.Thread(target=work, args=(n, k)) for n, k in (("a", 1), ("b", 3))]
    before = sandbox.cpu_seconds_used()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sandbox.cpu_seconds_used() == before  # none of those runs was this thread's
    for used, summed in totals.values():
        assert used == pytest.approx(summed)
    if ISOLATED:
        assert totals["b"][0] >= 3 * 0.1 and totals["a"][0] >= 0.1
    sandbox.credit_cpu(0.25)
    assert sandbox.cpu_seconds_used() == pytest.approx(before + 0.25)
