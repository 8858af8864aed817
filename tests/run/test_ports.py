"""scalerl.run.ports: every rendezvous bound where it is used. A store's port is held by the process
that hosts it for as long as the group needs it (a rank that tries to bind it fails; the group forms all
the same); a reserved port is given to no one else; a port another process holds is one line naming
the port and the component."""

import socket

import pytest
import torch.distributed as dist

from scalerl.errors import ScaleRLError
from scalerl.run.ports import host_store, join_group, join_store, reserve_port
from scalerl.trainer.sharded import spawn_ranks


def _bind(port: int, reuse: bool = False) -> str:
    """'bound' or the errno name of a bind of 127.0.0.1:`port`."""
    with socket.socket() as s:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return "bound"
        except OSError as exc:
            return f"errno {exc.errno}"


def _forming_ranks(rank: int, world: int, rendezvous: str) -> tuple[str, float]:
    """In a spawned rank: a bind of the rendezvous port (held by the parent), then a sum over the group."""
    import torch

    taken = _bind(int(rendezvous.rpartition(":")[2]))
    join_group("gloo", rendezvous, rank, world, "test ranks", timeout_s=120)
    try:
        total = torch.tensor([float(rank + 1)])
        dist.all_reduce(total)
        return taken, float(total)
    finally:
        dist.destroy_process_group()


def test_the_ranks_meet_at_a_port_their_starter_holds_from_before_they_start():
    import errno

    got = spawn_ranks(_forming_ranks, 2, timeout_s=300)
    assert got == [(f"errno {errno.EADDRINUSE}", 3.0)] * 2  # the port was never free; 1 + 2 summed


def test_a_hosted_store_keeps_its_port_and_a_client_reaches_it():
    store = host_store("127.0.0.1", "a test group", timeout_s=5)
    assert store.port > 0 and _bind(store.port) != "bound"
    client = join_store(f"127.0.0.1:{store.port}", "a test group", timeout_s=5)
    client.set("k", "v")
    assert store.get("k") == b"v"


def test_a_store_nobody_hosts_is_one_line_naming_the_component_and_the_address():
    with socket.socket() as s:  # a port bound and not listening: a connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(
            ScaleRLError,
            match=rf"^the test ranks: could not reach its rendezvous at 127.0.0.1:{port} "
            r"within 1 s: .*; is the process that hosts it still running",
        ) as err:
            join_store(f"127.0.0.1:{port}", "the test ranks", timeout_s=1)
    assert "\n" not in str(err.value)


def test_a_reserved_port_goes_to_no_other_binder_but_to_the_server_that_listens_on_it():
    with reserve_port() as port:
        assert port > 0 and _bind(port) != "bound"
        others = []
        for _ in range(200):  # the OS's own choices skip it while it is held
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            others.append(s)
        try:
            assert port not in {s.getsockname()[1] for s in others}
        finally:
            for s in others:
                s.close()
        with socket.socket() as server:  # how vLLM's (uvicorn's) socket binds: SO_REUSEADDR
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()
            assert server.getsockname()[1] == port


def test_a_port_another_process_listens_on_is_one_line_naming_it():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(
            ScaleRLError,
            match=rf"^this process could not listen on 127.0.0.1:{port}: .*Address "
            r"already in use \(another process holds it",
        ) as err:
            with reserve_port("127.0.0.1", port):
                pass
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ a server that binds its own port
FAKE_SERVER = r"""
import http.server, os, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
with open(os.environ["FAKE_STARTS"], "a") as f:
    f.write(f"{port}\n")


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.HTTPServer.allow_reuse_address = os.environ["FAKE_REUSE"] == "1"   # uvicorn's: SO_REUSEADDR
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def _fake_server(tmp_path, monkeypatch, reuse: bool, port: int = 0):
    """A `VllmServer` whose command is a small HTTP server (the guard, the port reservation and the start's
    checks are the real ones): it binds its port as uvicorn does (`reuse`) or without SO_REUSEADDR."""
    import sys

    import scalerl.rollout.vllm_server as vs
    from scalerl.config import VllmEngineConfig

    script, starts = tmp_path / "fake_server.py", tmp_path / "starts.txt"
    script.write_text(FAKE_SERVER)
    monkeypatch.setattr(vs, "require_vllm", lambda: None)
    monkeypatch.setattr(
        vs.VllmServer,
        "_args",
        lambda self, model_dir, dtype, length, p: [sys.executable, str(script), "--port", str(p)],
    )
    monkeypatch.setenv("FAKE_STARTS", str(starts))
    monkeypatch.setenv("FAKE_REUSE", "1" if reuse else "0")
    server = vs.VllmServer(VllmEngineConfig(port=port, start_timeout_s=120), log=tmp_path / "server.log")
    return server, starts


def test_a_server_that_binds_as_uvicorn_does_starts_on_the_port_held_for_it(tmp_path, monkeypatch):
    server, starts = _fake_server(tmp_path, monkeypatch, reuse=True)
    try:
        server.start(tmp_path / "model", "fp32", 64)
        port = int(starts.read_text().split()[0])
        assert server.url == f"http://127.0.0.1:{port}" and server.call("GET", "/health") == {}
        assert _bind(port) != "bound"  # the server listens on it now
    finally:
        server.close()


def test_a_server_that_finds_its_port_taken_is_started_again_then_told_in_one_line(tmp_path, monkeypatch):
    """A server that cannot bind beside the reservation (no SO_REUSEADDR) exits "Address already in use"
    each time: started again on another port, PORT_ATTEMPTS times, then one line names the last port."""
    from scalerl.errors import ScaleRLError
    from scalerl.run.ports import PORT_ATTEMPTS

    server, starts = _fake_server(tmp_path, monkeypatch, reuse=False)
    with pytest.raises(ScaleRLError) as err:
        server.start(tmp_path / "model", "fp32", 64)
    ports = [int(p) for p in starts.read_text().split()]
    assert len(ports) == PORT_ATTEMPTS == 3
    assert str(err.value).startswith(
        f"the vLLM server could not listen on 127.0.0.1:{ports[-1]}: address already "
        f"in use (another process holds it; free it or choose another) (the last of 3 "
        f"ports tried); see its log {tmp_path / 'server.log'}"
    )
    assert "\n" not in str(err.value)


def test_a_busy_rollout_engine_port_is_one_line_and_nothing_starts(tmp_path, monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server, starts = _fake_server(tmp_path, monkeypatch, reuse=True, port=port)
        with pytest.raises(
            ScaleRLError,
            match=rf"^the vLLM server \(rollout.engine.port\) could not listen on "
            rf"127.0.0.1:{port}: .*Address already in use",
        ) as err:
            server.start(tmp_path / "model", "fp32", 64)
    assert not starts.exists() and "\n" not in str(err.value)
