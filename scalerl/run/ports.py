"""Ports that cannot collide: every rendezvous is bound where it is used, never chosen, released and
bound again later (another process, Ray's many among them, may take a port in between).

- **torch.distributed groups** (the trainer ranks, the weight-publishing group): the process that
  starts the group hosts its `TCPStore` on a port the OS picks and keeps (`host_store`: port 0, read
  back as `.port`); every rank joins it as a client (`join_group`), with the address passed on.
- **A server that binds its own port** (the vLLM server): `reserve_port` holds the port bound, not
  listening, with SO_REUSEADDR, until the server listens on it (Linux lets a second SO_REUSEADDR
  socket bind beside one that does not listen, and gives the port to no one else meanwhile); the
  caller retries on "address in use" a few times (`PORT_ATTEMPTS`) and then fails in one line
  (`port_in_use`).
"""

from __future__ import annotations

import datetime
import socket
from contextlib import contextmanager
from typing import Iterator

from scalerl.errors import ScaleRLError

PORT_ATTEMPTS = 3  # a server's start on another port after "address in use", at most


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now (the OS's choice). Only for what binds it at once in this process:
    another process may take it before it is used (`reserve_port`, `host_store` for the rest)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def reserve_port(host: str = "127.0.0.1", port: int = 0, component: str = "this process") -> Iterator[int]:
    """A port (the OS's choice for 0) held bound until the `with` block ends: a server started inside
    it binds the port with SO_REUSEADDR (vLLM's and uvicorn's sockets do), nobody else can take it. A
    port another process listens on is one line naming it and `component`."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ScaleRLError(port_in_use(host, port, component, str(exc))) from None
        yield s.getsockname()[1]


def port_in_use(host: str, port: int, component: str, detail: str = "address already in use") -> str:
    """The one line for a port a component could not listen on."""
    return (
        f"{component} could not listen on {host}:{port}: {detail} (another process holds it; free it or choose another)"
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def host_store(host: str, component: str, timeout_s: float = 300.0):
    """A torch.distributed `TCPStore` server on `host`, at the port the OS picks and this process keeps
    (`.port`); the ranks join it with `join_group(f"{host}:{store.port}", ...)`. Keep it referenced
    for the group's life."""
    import torch.distributed as dist

    try:
        return dist.TCPStore(host, 0, None, True, datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    except (RuntimeError, dist.DistError) as exc:
        raise ScaleRLError(
            f"{component}: could not host its rendezvous on {host} (any port): {_first_line(exc)}; "
            f"check that {host} is an address of this machine (`ip addr`)"
        ) from None


def join_store(address: str, component: str, timeout_s: float = 300.0):
    """A client of the `TCPStore` hosted at `address` (host:port, `host_store`); one line if unreachable."""
    import torch.distributed as dist

    host, _, port = address.rpartition(":")
    try:
        return dist.TCPStore(host, int(port), None, False, datetime.timedelta(seconds=timeout_s))
    except (RuntimeError, dist.DistError) as exc:
        raise ScaleRLError(
            f"{component}: could not reach its rendezvous at {address} within {timeout_s:g} s: "
            f"{_first_line(exc)}; is the process that hosts it still running, and is the address "
            "reachable from here (a firewall between nodes)?"
        ) from None


def join_group(
    backend: str, address: str, rank: int, world: int, component: str, timeout_s: float = 300.0, store=None
) -> None:
    """Join the default process group through the store at `address` (or `store`, the one this process
    hosts; `timeout_s` bounds the rendezvous); a rank that cannot join is one line naming the component,
    its rank and why."""
    import torch.distributed as dist

    store = store if store is not None else join_store(address, component, timeout_s)
    try:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world)  # collectives: torch's timeout
    except (RuntimeError, dist.DistError) as exc:
        raise ScaleRLError(
            f"{component}: rank {rank} of {world} could not join the {backend} group at {address}: "
            f"{_first_line(exc)}; did every rank start (`ray status`: placed actors; a rank's own "
            "error comes first)?"
        ) from None
