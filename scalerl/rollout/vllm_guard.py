"""The guard of a started vLLM server (`scalerl.rollout.vllm_server`): run by path, never imported
(`python -I vllm_guard.py STARTER GRACE -- COMMAND...`), so that it starts in a fraction of a second
on the standard library and psutil alone.

A vLLM server is several processes: the API server, its `VLLM::EngineCore`, that one's workers and
a resource tracker. Killing the API server alone (SIGKILL, or the PR_SET_PDEATHSIG of a starter
that died) leaves the others running, orphaned, each holding its memory. The guard runs COMMAND as
its child, is the subreaper of everything below it (PR_SET_CHILD_SUBREAPER: orphans come back to
it, whatever session they put themselves in) and, when any of the following happens, takes every
process below it down (SIGTERM, then SIGKILL after GRACE seconds) and exits:

- the server exits on its own: the guard exits with its exit code (a signal's death as that signal);
- the guard is asked to stop (SIGTERM, SIGINT, SIGHUP): the server gets GRACE seconds to stop;
- its starter (process STARTER) dies: PR_SET_PDEATHSIG, set by the starter before exec, sends the
  guard SIGTERM; the guard also sees its parent change (a starter that died before the signal was
  armed). Nothing is left to be graceful for: everything below it is killed at once.

So a Ray generator actor that ends without running any exit handler (`ray.kill`, a crash,
`ray.shutdown`) leaves no process of its server behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

import psutil

PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def descendants(server: subprocess.Popen) -> list[psutil.Process]:
    """Every process below this one but the server (its own Popen reaps it, keeping its exit code)."""
    try:
        return [p for p in psutil.Process().children(recursive=True) if p.pid != server.pid]
    except psutil.Error:
        return []


def running(procs: list[psutil.Process]) -> bool:
    """Whether any of `procs` runs; a zombie that is this process's child (an orphan come back) is reaped."""
    out = False
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out = True
            elif p.ppid() == os.getpid():
                os.waitpid(p.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            continue
    return out


def end_all(server: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the server and every process below this one, then SIGKILL to those that run after
    `grace` s; waits until none runs (5 s more at most)."""
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        procs = descendants(server)
        if server.poll() is None:
            server.send_signal(sig)
        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                continue
        deadline = time.monotonic() + wait_s
        while (server.poll() is None or running(procs)) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if server.poll() is not None and not running(procs):
            return


def exit_like(code: int) -> None:
    """Exit as the server did: its exit code, or death by the signal that ended it."""
    if code < 0:
        if -code in STOP_SIGNALS:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1.0)
    sys.exit(code if code >= 0 else 128 - code)


def _die_with_guard() -> None:
    """In the server's process before exec: SIGKILL if the guard itself is killed (PR_SET_PDEATHSIG)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.exit("usage: vllm_guard.py STARTER_PID GRACE_S -- COMMAND...")
    starter, grace, command = int(argv[0]), float(argv[1]), argv[3:]
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    asked: list[int] = []
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: asked.append(signum))
    server = subprocess.Popen(command, preexec_fn=_die_with_guard)
    while server.poll() is None and not asked and os.getppid() == starter:
        time.sleep(POLL_S)
    orphaned = os.getppid() != starter
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    end_all(server, 0.0 if orphaned else grace)
    exit_like(server.wait())


if __name__ == "__main__":
    main(sys.argv[1:])
