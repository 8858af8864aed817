"""A free TCP port, for a rendezvous another process then binds (torch.distributed, a vLLM server)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now (the OS's choice; another process may take it before it is used)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
