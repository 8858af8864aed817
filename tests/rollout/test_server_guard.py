"""The guard of a started vLLM server (scalerl/rollout/vllm_guard.py), on a stand-in server: a process
that starts a worker in a session of its own (as vLLM's EngineCore and workers outlive a killed API
server). Whatever way the starter ends, no process of the server remains; the real server under a
Ray actor is tests/vllm_server/test_vllm_ray.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from process_helpers import gone_within, running
from scalerl.rollout import vllm_server
from scalerl.rollout.vllm_server import start_guarded

# a "server" that starts a "worker" in a session of its own, then sleeps (or exits with CODE)
SERVER = textwrap.dedent("""
    import os, subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(300)"])
    time.sleep(float(sys.argv[1]))
    sys.exit(3)
""")

# a starter that starts the server from a thread that ends at once, says so, then sleeps until killed
# (vllm_server.py loaded by path: without scalerl.rollout's torch, it starts in a second)
STARTER = textwrap.dedent("""
    import importlib.util, sys, threading, time
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("vllm_server", sys.argv[3])
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)
    out = []
    t = threading.Thread(target=lambda: out.append(server.start_guarded([sys.executable, "-c", sys.argv[1], "300"],
                                                                         Path(sys.argv[2]), remove=Path(sys.argv[4]))))
    t.start(); t.join()
    print(out[0].pid, flush=True)
    time.sleep(300)
""")


def tree(pid: int, timeout: float = 60.0) -> list[psutil.Process]:
    """The guard `pid` (anchor and watcher), the server and its worker, once the worker is in a session of
    its own."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        if len(procs) == 4 and len({os.getsid(p.pid) for p in procs}) == 2:
            return procs
        time.sleep(0.05)
    raise AssertionError(f"guard {pid}: {len(procs)} processes, not a server and a worker, after {timeout} s")


def test_a_killed_starter_takes_every_process_of_the_server_with_it(tmp_path):
    """SIGKILL to the starter (no exit handler runs), whose starting thread had already ended, and to its
    direct children (as Ray does to an actor's at `ray.kill`): the guard, the server and the server's worker
    in its own session are all gone, and so is the starter's folder."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    folder = tmp_path / "starter"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "weights").write_bytes(b"x")
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, SERVER, str(tmp_path / "server.log"), vllm_server.__file__, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        guard = int(starter.stdout.readline())
        procs = tree(guard)
        assert os.getsid(starter.pid) not in {os.getsid(p.pid) for p in procs}
        time.sleep(0.5)
        assert not [p for p in procs if p not in running(procs)]  # the starting thread's end stopped nothing
    finally:
        for p in [psutil.Process(starter.pid), *psutil.Process(starter.pid).children()]:
            p.kill()
        starter.wait(timeout=10)
    assert gone_within(procs, timeout=10) < 10
    assert not folder.exists()


def test_a_server_that_exits_takes_its_workers_and_its_exit_code_is_the_guards(tmp_path):
    proc = start_guarded([sys.executable, "-c", SERVER, "2"], tmp_path / "server.log")
    procs = tree(proc.pid)
    assert proc.wait(timeout=30) == 3
    gone_within(procs, timeout=10)


def test_a_stopped_guard_stops_its_server(tmp_path):
    """SIGTERM to the guard (VllmServer.close): the server and its worker stop; a signal's death is reported
    as that signal, as the server's own would be."""
    proc = start_guarded([sys.executable, "-c", SERVER, "300"], tmp_path / "server.log", remove=tmp_path)
    procs = tree(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    gone_within(procs, timeout=10)
    assert tmp_path.exists()  # its starter lives on: the folder is the starter's to remove
