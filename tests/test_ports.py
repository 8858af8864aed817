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
    assert got == [(f"errno {errno.EADDRINUSE}", 3.0)] * 2     # the port was never free; 1 + 2 summed


def test_a_hosted_store_keeps_its_port_and_a_client_reaches_it():
    store = host_store("127.0.0.1", "a test group", timeout_s=5)
    assert store.port > 0 and _bind(store.port) != "bound"
    client = join_store(f"127.0.0.1:{store.port}", "a test group", timeout_s=5)
    client.set("k", "v")
    assert store.get("k") == b"v"


def test_a_store_nobody_hosts_is_one_line_naming_the_component_and_the_address():
    with socket.socket() as s:       # a port bound and not listening: a connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(ScaleRLError, match=rf"^the test ranks: could not reach its rendezvous at 127.0.0.1:{port} "
                                               r"within 1 s: ") as err:
            join_store(f"127.0.0.1:{port}", "the test ranks", timeout_s=1)
    assert "\n" not in str(err.value)


def test_a_reserved_port_goes_to_no_other_binder_but_to_the_server_that_listens_on_it():
    with reserve_port() as port:
        assert port > 0 and _bind(port) != "bound"
        others = []
        for _ in range(200):         # the OS's own choices skip it while it is held
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            others.append(s)
        try:
            assert port not in {s.getsockname()[1] for s in others}
        finally:
            for s in others:
                s.close()
        with socket.socket() as server:              # how vLLM's (uvicorn's) socket binds: SO_REUSEADDR
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()
            assert server.getsockname()[1] == port


def test_a_port_another_process_listens_on_is_one_line_naming_it():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ScaleRLError, match=rf"^this process could not listen on 127.0.0.1:{port}: .*Address "
                                               r"already in use \(another process holds it") as err:
            with reserve_port("127.0.0.1", port):
                pass
    assert "\n" not in str(err.value)
