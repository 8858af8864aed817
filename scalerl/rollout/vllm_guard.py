"""The guard of a started vLLM server (`scalerl.rollout.vllm_server`): run by path, never imported
(`python -I vllm_guard.py STARTER GRACE [--remove DIR] -- COMMAND...`), so that it starts in a fraction of a second
on the standard library and psutil alone.

A vLLM server is several processes: the API server, its `VLLM::EngineCore`, that one's workers and
a resource tracker. Killing the API server alone (SIGKILL, or the PR_SET_PDEATHSIG of a starter
that died) leaves the others running, orphaned, each holding its memory. So the server runs two
levels below its starter:

    starter -> anchor (this file) -> watcher (this file, --watch) -> COMMAND (the API server) -> ...

- The anchor dies with its starter (PR_SET_PDEATHSIG SIGKILL, set by the starter before exec), and
  it may be killed outright with it: Ray SIGKILLs the direct children of a worker that exits
  (`RAY_kill_child_processes_on_worker_exit`). It only waits for the watcher, forwards a request to
  stop (SIGTERM, SIGINT, SIGHUP) and exits as the watcher did.
- The watcher is the subreaper of everything below it (PR_SET_CHILD_SUBREAPER: orphans come back to
  it, whatever session they put themselves in) and takes every process below it down (`end_all`)
  when the server exits on its own (then it exits with the
  server's exit code, a signal's death as that signal), when it is asked to stop (the server gets
  GRACE seconds), or at once when the anchor dies (PR_SET_PDEATHSIG SIGTERM; it also sees its
  parent change): then it also removes DIR, the starter's folder (the model it saved, the weights
  it published), which the starter had no chance to remove.

So a Ray generator actor that ends without running any exit handler (`ray.kill`, a crash,
`ray.shutdown`) leaves no process of its server behind.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
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
    """SIGTERM to the server alone, which stops its own engine processes, and `grace` s for it (a SIGTERM to
    all at once kills the engine under the server's requests in flight, and the server then waits for
    them until killed); then SIGTERM to whatever still runs below this one, SIGKILL after 5 s."""
    if grace > 0 and server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass  # it did not stop in time: killed below
    for sig in (signal.SIGTERM, signal.SIGKILL):
        procs = descendants(server)
        if server.poll() is None:
            server.send_signal(sig)
        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                continue
        deadline = time.monotonic() + 5.0
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


def _die_with(sig: int, parent: int):
    """A preexec_fn: `sig` to the new process when the thread that starts it ends (PR_SET_PDEATHSIG);
    gone at once if `parent` had died before that was armed."""

    def arm() -> None:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def anchor(args: argparse.Namespace) -> None:
    here = os.getpid()
    extra = ["--remove", args.remove] if args.remove else []
    watcher = subprocess.Popen(
        [sys.executable, "-I", __file__, "--watch", str(here), str(args.grace), *extra, "--", *args.command],
        preexec_fn=_die_with(signal.SIGTERM, here),
    )
    for sig in STOP_SIGNALS:  # the watcher stops the server (a process group's signal reaches it too)
        signal.signal(sig, lambda signum, frame: watcher.send_signal(signal.SIGTERM))
    while watcher.poll() is None and os.getppid() == args.parent:
        time.sleep(POLL_S)
    if watcher.poll() is None:  # the starter died: so does the anchor, and the watcher acts on it
        os._exit(1)
    exit_like(watcher.returncode)


def watch(args: argparse.Namespace) -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    asked: list[int] = []
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: asked.append(signum))
    server = subprocess.Popen(args.command, preexec_fn=_die_with(signal.SIGKILL, os.getpid()))
    while server.poll() is None and not asked and os.getppid() == args.parent:
        time.sleep(POLL_S)
    orphaned = os.getppid() != args.parent
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    end_all(server, 0.0 if orphaned else args.grace)
    if args.remove and os.getppid() != args.parent:  # the starter died (maybe during the grace): its folder
        shutil.rmtree(args.remove, ignore_errors=True)  # (model, weights), which it could not remove itself
    exit_like(server.wait())


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="vllm_guard.py", usage="%(prog)s [--watch] PARENT_PID GRACE_S [--remove DIR] -- COMMAND..."
    )
    parser.add_argument("--watch", action="store_true", help="the watcher (started by the anchor)")
    parser.add_argument("parent", type=int, help="the process whose end ends the server")
    parser.add_argument("grace", type=float, help="seconds the server gets to stop when asked")
    parser.add_argument("--remove", help="a folder to remove if the parent ends first")
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.error("no command after --")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    args.command = argv[split + 1 :]
    return args


if __name__ == "__main__":
    options = parse(sys.argv[1:])
    (watch if options.watch else anchor)(options)
