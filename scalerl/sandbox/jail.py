"""The sandbox's launcher: run as a script, never imported by scalerl, in one of two ways:
`python -I -S -B jail.py --serve PARENT FD`, a thread's fork server (`serve`: it forks a launcher
per run, so this interpreter's start-up is paid once per thread), or `python -I -S -B jail.py SPEC`,
one launcher per run (the opted-out mode, and `scalerl.sandbox.FORK_SERVER = False`).

It imports the standard library only (it runs before any isolation exists). Four processes per
run, each the parent of the next:

1. the launcher (the server's child, or the caller's; own session): reads the program and holds
   its stdin with the caller's rights, forks the jail and, from the caller's namespaces, writes the jail's id
   maps (`SANDBOX_UID` inside; the caller's uid outside, or `ROOT_CALLER_UID` when the caller is
   root). It forwards the caller's SIGTERM to the jail and waits for it.
2. the jail: `unshare`s new user, mount, network, pid, IPC and UTS namespaces, opens the
   read-only sources, takes the mapped ids, builds the root (a tmpfs over /tmp holding
   read-only, nosuid, nodev bind mounts of the interpreter and the system libraries, five
   device nodes, and `/work`, a size-limited tmpfs with the program in it), pivots into it and
   detaches the old root: the caller's files are not in the mount namespace at all (no chroot to
   climb out of). It forks init, kills it at the wall limit (SIGALRM) or on SIGTERM, and exits
   only after init is reaped.
3. init, pid 1 of the new pid namespace: forks the program, reaps every orphan until the
   program exits, reports its exit status and exits; the kernel then kills whatever is left in
   the namespace (a double-forked or `setsid` child included).
4. the program: rlimits, an empty capability bounding set, no-new-privileges, the seccomp
   filter where libseccomp is present, descriptors 0-2 only, a scrubbed environment, then
   `exec` of the interpreter as an unprivileged uid (no capabilities).

Status lines on the status descriptor (JSON, one per line): {"returncode": n} (negative: the
signal that ended the program), {"timeout": true}, {"stopped": true}, {"refused": "why"}.
"""

import ctypes
import json
import os
import resource
import signal
import stat
import sys

SANDBOX_UID = 1000  # the program's uid inside
ROOT_CALLER_UID = 1 << 30  # the host uid it maps to when the caller is root (no user has it)
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP = 0x10000000, 0x20000000, 0x40000000, 0x02000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 38, 24
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
# statvfs flag -> mount flag, for the flags a bind remount must keep (the kernel locks them)
LOCKED_FLAGS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)
DEVICES = ("null", "zero", "full", "random", "urandom")
# syscalls the program never needs: tracing, namespaces, mounts, kernel keyrings, bpf, modules
DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "io_uring_setup",
    "open_by_handle_at",
    "name_to_handle_at",
    "fsopen",
    "fsmount",
    "open_tree",
    "move_mount",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "lookup_dcookie",
    "syslog",
    "setdomainname",
    "sethostname",
    "settimeofday",
    "clock_settime",
    "adjtimex",
    "clock_adjtime",
    "mknod",
    "mknodat",
)
END_SIGNAL = signal.SIGUSR1  # the jail asks init to end the namespace (`end_namespace`)
END_GRACE_S = 1.0  # then SIGKILLs init if it has not ended within this
NS_FLAGS = (CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP)

libc = ctypes.CDLL(None, use_errno=True)


def fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def mount(src, dst, fstype, flags, data=None) -> None:
    def enc(s):
        return s.encode() if s is not None else None

    if libc.mount(enc(src), enc(dst), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        raise fail(f"mount {src or fstype} on {dst}")


def refuse(status_fd: int, e: OSError) -> None:
    os.write(status_fd, (json.dumps({"refused": f"sandbox isolation unavailable: {e.strerror or e}"}) + "\n").encode())
    os._exit(0)


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def bind_ro(fd: int, dst: str, device: bool) -> None:
    """Bind the object behind `fd` at `dst`, read-only, nosuid, nodev unless a `device` node, keeping
    the flags the kernel locks on the source mount."""
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "w").close()
    src = f"/proc/self/fd/{fd}"
    mount(src, dst, None, MS_BIND)
    locked = os.fstatvfs(fd).f_flag
    keep = 0
    for st, ms in LOCKED_FLAGS:
        if locked & st:
            keep |= ms
    if not device:
        keep |= MS_NODEV
    mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | keep)


def build_root(spec: dict, sources: dict[str, int]) -> None:
    """The new root on a tmpfs mounted over /tmp (this mount namespace's own), then pivot into it;
    the caller's root is detached. `sources`: path -> O_PATH descriptor opened before the user
    namespace's ids took over (bind mounts go through /proc/self/fd, so a source under a directory
    the sandbox's uid cannot search, a pyenv in /root, still mounts)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = "/tmp"
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path, fd in sources.items():
        if fd < 0:  # a top-level symlink (/bin -> usr/bin) stays one
            os.symlink(os.readlink(path), root + path)
        else:
            bind_ro(fd, root + path, device=path.startswith("/dev/"))
    os.makedirs(root + "/work")
    mount("tmpfs", root + "/work", "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec['disk_mb']}m,mode=0755")
    os.symlink("work", root + "/tmp")
    with open(root + "/work/prog.py", "wb") as dst:
        dst.write(spec["source"])
    os.makedirs(root + "/.old")
    nr = SYS_PIVOT_ROOT.get(os.uname().machine)
    if nr is None:
        raise OSError(0, f"pivot_root: unknown syscall number on {os.uname().machine}")
    if libc.syscall(ctypes.c_long(nr), root.encode(), (root + "/.old").encode()) != 0:
        raise fail("pivot_root")
    os.chdir("/")
    if libc.umount2(b"/.old", MNT_DETACH) != 0:
        raise fail("umount2 /.old")
    os.rmdir("/.old")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def open_sources(spec: dict) -> dict[str, int]:
    """O_PATH descriptors of the read-only paths and devices (-1: a top-level symlink)."""
    out = {}
    for path in list(spec["ro"]) + ["/dev/" + d for d in DEVICES]:
        if os.path.islink(path) and os.path.dirname(path) == "/":
            out[path] = -1
        elif os.path.exists(path):
            out[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
    return out


def seccomp_filter():
    """A loaded-later filter denying `DENIED` and namespace-making `clone`s; None without libseccomp."""
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    ctx = ctypes.c_void_p(lib.seccomp_init(ctypes.c_uint32(0x7FFF0000)))  # SCMP_ACT_ALLOW
    eperm = ctypes.c_uint32(0x00050000 | 1)  # SCMP_ACT_ERRNO(EPERM)

    class Arg(ctypes.Structure):
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]

    for name in DENIED:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr >= 0 and lib.seccomp_rule_add_array(ctx, eperm, nr, 0, None) != 0:
            raise OSError(0, f"seccomp rule for {name}")
    clone = lib.seccomp_syscall_resolve_name(b"clone")
    for flag in NS_FLAGS:  # SCMP_CMP_MASKED_EQ = 7
        if lib.seccomp_rule_add_array(ctx, eperm, clone, 1, ctypes.byref(Arg(0, 7, flag, flag))) != 0:
            raise OSError(0, "seccomp rule for clone")
    clone3 = lib.seccomp_syscall_resolve_name(b"clone3")  # ENOSYS: libc falls back to clone
    if clone3 >= 0 and lib.seccomp_rule_add_array(ctx, ctypes.c_uint32(0x00050000 | 38), clone3, 0, None) != 0:
        raise OSError(0, "seccomp rule for clone3")
    return lib, ctx


def exec_program(spec: dict, stdin_fd: int, filt, status_fd: int) -> None:
    """In the program's process: limits, no privileges, descriptors 0-2 only, then the interpreter
    (the status descriptor stays open until `exec` to report a failure to get there)."""
    os.dup2(stdin_fd, 0)
    os.closerange(3, status_fd)
    os.closerange(status_fd + 1, 1 << 16)
    os.set_inheritable(status_fd, False)
    os.chdir("/work")
    cpu = spec["cpu_s"]
    mem = spec["memory_mb"] << 20
    for res, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (mem, mem)),
        (resource.RLIMIT_DATA, (mem, mem)),
        (resource.RLIMIT_NPROC, (spec["nproc"],) * 2),
        (resource.RLIMIT_NOFILE, (spec["nofile"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_FSIZE, (spec["fsize_mb"] << 20,) * 2),
        (resource.RLIMIT_MEMLOCK, (0, 0)),
        (resource.RLIMIT_MSGQUEUE, (0, 0)),
        (resource.RLIMIT_STACK, (8 << 20, 8 << 20)),
    ):
        resource.setrlimit(res, value)
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
            raise fail(f"drop capability {cap}")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise fail("no_new_privs")
    if filt is not None:
        lib, ctx = filt
        if lib.seccomp_load(ctx) != 0:
            raise OSError(0, "seccomp_load failed")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/work", "TMPDIR": "/work", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
    os.execve(spec["python"], [spec["python"], "-I", "-S", "-B", "-u", "prog.py"], env)


def run_init(spec: dict, status_fd: int, filt, jail_alive: int) -> None:
    """pid 1 of the namespace: run the program, reap every orphan, report the program's exit.
    `jail_alive`: the read end of a pipe only the jail writes to: at EOF the jail died before this
    process's PR_SET_PDEATHSIG was set (pid 1 cannot ask `getppid`: its parent is outside)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # pid 1 gets no signal from inside without a handler
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.set_blocking(jail_alive, False)
    try:
        if os.read(jail_alive, 1) == b"":
            os._exit(0)
    except BlockingIOError:  # the jail holds the write end: alive
        pass
    os.close(jail_alive)
    signal.signal(END_SIGNAL, lambda _s, _f: end_namespace())  # the jail's stop (wall limit, output limit)
    prog = os.fork()
    if prog == 0:
        try:
            exec_program(spec, spec["stdin_fd"], filt, status_fd)
        except OSError as e:
            os.write(status_fd, (json.dumps({"refused": f"sandbox could not start the program: {e}"}) + "\n").encode())
        os._exit(127)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == prog:
            os.write(status_fd, (json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n").encode())
            end_namespace()


def end_namespace() -> None:
    """init's end: kill every other process of the pid namespace (`kill(-1)` from pid 1 reaches only
    those) and reap each before exiting. Reaped by init, their CPU time counts in the run's
    (`write_cpu`); left to the kernel's teardown at init's exit, they would be reaped uncounted."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:  # nothing else is left
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)


def enter_namespaces(spec: dict, status_fd: int) -> int:
    """Fork the jail process into new namespaces and write its id maps from here, in the caller's
    namespace (a root caller maps the sandbox to `ROOT_CALLER_UID`, not to root, so RLIMIT_NPROC
    holds: the kernel does not apply it to root). Returns the jail's pid; the jail never returns."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    launcher = os.getpid()
    jail = os.fork()
    if jail == 0:
        os.close(ready_r)
        os.close(go_w)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
        ok = libc.unshare(flags) == 0
        os.write(ready_w, b"1" if ok else ctypes.get_errno().to_bytes(2, "little"))
        if not ok or os.read(go_r, 1) != b"1":
            os._exit(0)
        try:
            sources = open_sources(spec)  # this mount namespace's copies, with the caller's rights
            os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)  # the mapped ids (a root caller's are not)
            os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        except OSError as e:
            refuse(status_fd, e)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the id change cleared it (prctl(2))
        if os.getppid() != launcher:
            os._exit(0)
        run_jail(spec, sources, status_fd)
    os.close(ready_w)
    os.close(go_r)
    answer = os.read(ready_r, 2)
    if answer != b"1":
        err = int.from_bytes(answer, "little") if answer else 0
        raise OSError(err, f"unshare(user, mount, net, pid, ipc, uts namespaces): {os.strerror(err)}")
    uid, gid = (ROOT_CALLER_UID, ROOT_CALLER_UID) if os.getuid() == 0 else (os.getuid(), os.getgid())
    write(f"/proc/{jail}/uid_map", f"{SANDBOX_UID} {uid} 1")
    write(f"/proc/{jail}/setgroups", "deny")
    write(f"/proc/{jail}/gid_map", f"{SANDBOX_UID} {gid} 1")
    os.write(go_w, b"1")
    return jail


def run_jail(spec: dict, sources: dict[str, int], status_fd: int) -> None:
    """In the new namespaces: the root, then init; end init at the wall limit or on SIGTERM."""
    try:
        build_root(spec, sources)
        filt = spec["filter"] if "filter" in spec else seccomp_filter()
        if isinstance(filt, OSError):
            raise filt
    except OSError as e:
        refuse(status_fd, e)
    for fd in sources.values():
        if fd >= 0:
            os.close(fd)
    alive_r, alive_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(alive_w)
        run_init(spec, status_fd, filt, alive_r)
    os.close(alive_r)
    ended, _ = wait_killing_at(init, spec["timeout_s"], END_SIGNAL)  # init ends the whole pid namespace
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # init is reaped: its pid is no longer ours to signal
    if ended:
        write_ended(status_fd, ended)
    os._exit(0)


def wait_killing_at(pid: int, timeout_s: float, ask: int | None = None) -> tuple[list[int], int]:
    """Wait for `pid`, killing it at the wall limit (SIGALRM) or when asked to stop (SIGTERM):
    (the signals that ended it, empty if it exited by itself; its wait status). With `ask` (init's
    END_SIGNAL) the first stop asks `pid` to end (init then kills and reaps the namespace, so the
    CPU time is counted) and SIGKILLs it END_GRACE_S later if it has not; without, it is SIGKILLed."""
    ended: list[int] = []

    def stop(signum, _frame) -> None:
        ended.append(signum)
        if ask is not None and len(ended) == 1:
            os.kill(pid, ask)
            signal.setitimer(signal.ITIMER_REAL, END_GRACE_S)
            return
        os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGALRM, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    _, status = os.waitpid(pid, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    return ended, status


def write_ended(status_fd: int, ended: list[int]) -> None:
    os.write(
        status_fd, (json.dumps({"timeout": True} if ended[0] == signal.SIGALRM else {"stopped": True}) + "\n").encode()
    )


def main() -> None:
    if sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), int(sys.argv[3]))
    spec = json.loads(sys.argv[1])
    status_fd = spec["status_fd"]
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != spec["parent"]:
        os._exit(1)
    spec["stdin_fd"] = os.open(spec["dir"] + "/stdin", os.O_RDONLY)  # read with the caller's rights
    with open(spec["dir"] + "/prog.py", "rb") as f:
        spec["source"] = f.read()
    if not spec["isolate"]:  # opted out: limits and a process group only (docs/sandbox.md)
        os.chdir(spec["dir"] + "/work")
        run_unisolated(spec, status_fd)
    launch(spec, status_fd)


def launch(spec: dict, status_fd: int) -> None:
    """The launcher's part once the program and its stdin are in hand: the jail in new namespaces;
    SIGTERM is forwarded to it (it kills init); exits when the jail has."""
    try:
        jail = enter_namespaces(spec, status_fd)
    except OSError as e:
        refuse(status_fd, e)
    signal.signal(signal.SIGTERM, lambda _s, _f: os.kill(jail, signal.SIGTERM))
    os.waitpid(jail, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    write_cpu(status_fd)
    os._exit(0)


def write_cpu(status_fd: int) -> None:
    """Report the run's CPU time (user + system, seconds) on the status pipe: this launcher's own and
    that of every process below it that has been waited for, the jail, init, the program and what
    the program started (each reaps its children, init every orphan of the pid namespace). A
    launcher forked by the fork server counts from that fork, not the server's."""
    me, below = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + below.ru_utime + below.ru_stime
    os.write(status_fd, (json.dumps({"cpu": round(cpu, 6)}) + "\n").encode())


def serve(parent: int, ctl_fd: int) -> None:
    """The fork server (`python -I -S -B jail.py --serve PARENT FD`): started by one thread of the
    caller, which holds the other end of `ctl_fd`, a SOCK_SEQPACKET socket pair (nothing else can
    reach it: it has no name). It never runs a program: per request it forks a launcher that does
    exactly what a launcher started on its own does (`launch`), so the interpreter start-up and the
    imports are paid once, then waits for that launcher and answers its exit code. It dies with the
    caller's thread (PR_SET_PDEATHSIG) and ends when the caller closes the socket; each launcher
    dies with the server the same way, and the jail and init below it as before.

    A request: the spec (JSON) with five descriptors, the program, its stdin, its stdout, its stderr
    and the status pipe. While it runs, `stop` (the output limit: SIGTERM, as a caller's SIGTERM to
    a launcher) and `kill` (the backstop: SIGKILL to the launcher's process group); the server
    alone reaps the launcher, so neither can reach a recycled pid."""
    import select
    import socket

    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
    ctl = socket.socket(fileno=ctl_fd)
    try:
        filt = seccomp_filter()  # built once; each program loads its own copy
    except OSError as e:
        filt = e
    while True:
        msg, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 8)
        if not msg:  # the caller closed its end, or died
            os._exit(0)
        if len(fds) != 5:  # a stop or kill that arrived after its run ended
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            try:
                become_launcher(json.loads(msg), fds, ctl_fd, filt)
            finally:
                os._exit(1)
        for fd in fds:
            os.close(fd)
        code = wait_serving(ctl, pid, select)
        try:
            ctl.send(json.dumps({"exit": code}).encode())
        except OSError:  # the caller is gone
            os._exit(0)


def wait_serving(ctl, pid: int, select) -> int:
    """Wait for the launcher `pid`, carrying out the caller's stop and kill; its exit code."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([ctl, pidfd], [], [])
            if pidfd in ready:
                return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            msg = ctl.recv(1 << 16)
            if msg == b"stop":
                os.kill(pid, signal.SIGTERM)
                continue
            os.kill(pid, signal.SIGKILL)  # `kill`, or the caller is gone (empty message)
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:  # it had not made its process group yet
                pass
            if not msg:
                os.waitpid(pid, 0)
                os._exit(0)
    finally:
        os.close(pidfd)


def become_launcher(spec: dict, fds: list[int], ctl_fd: int, filt) -> None:
    """In a child of the server: the launcher a request asked for (see `main`), never returns."""
    server = os.getppid()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server:
        os._exit(1)
    os.setsid()  # its own session and process group, as a started launcher
    source_fd, stdin_fd, out_fd, err_fd, status_fd = fds
    os.close(ctl_fd)
    null = os.open("/dev/null", os.O_RDONLY)
    for src, dst in ((null, 0), (out_fd, 1), (err_fd, 2)):
        os.dup2(src, dst)
        os.close(src)
    with open(source_fd, "rb") as f:
        spec["source"] = f.read()
    spec["stdin_fd"] = stdin_fd
    spec["filter"] = filt
    launch(spec, status_fd)


def run_unisolated(spec: dict, status_fd: int) -> None:
    """Opted out of isolation: the same limits in a process group; no filesystem or network boundary."""
    prog = os.fork()
    if prog == 0:
        os.dup2(spec["stdin_fd"], 0)
        os.closerange(3, 1 << 16)
        cpu, mem = spec["cpu_s"], spec["memory_mb"] << 20
        if os.getuid() == 0:  # the caller refuses this; never a root program without a pid namespace
            os._exit(126)
        for res, value in (
            (resource.RLIMIT_CPU, (cpu, cpu + 1)),
            (resource.RLIMIT_AS, (mem, mem)),
            (resource.RLIMIT_NPROC, (spec["nproc"],) * 2),
            (resource.RLIMIT_NOFILE, (spec["nofile"],) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
            (resource.RLIMIT_FSIZE, (spec["fsize_mb"] << 20,) * 2),
        ):
            resource.setrlimit(res, value)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        env = {"PATH": "/usr/bin:/bin", "HOME": os.getcwd(), "TMPDIR": os.getcwd(), "LANG": "C.UTF-8"}
        os.execve(spec["python"], [spec["python"], "-I", "-S", "-B", "-u", "../prog.py"], env)
    ended, status = wait_killing_at(prog, spec["timeout_s"])
    if ended:
        write_ended(status_fd, ended)
    else:
        os.write(status_fd, (json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n").encode())
    write_cpu(status_fd)
    os._exit(0)


if __name__ == "__main__":
    main()
