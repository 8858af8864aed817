"""A test's hold on a vLLM server's decoding, one step at a time (tests/vllm_server/test_vllm.py).

`StepGate` is a vLLM logits processor, loaded by the server (`--logits-processors vllm_gate:StepGate`,
this folder on the server's PYTHONPATH, `GATE_ENV` naming a socket path). It changes no logit. While
nothing listens at the path it does nothing; while a test's `Gate` listens there, every decoding step
waits in the server's worker for the test: the gate sends the step's batch (`Held`: the requests in
it and the tokens each has so far) and decodes the step only when the test grants it. The test thus
decides how many tokens a sequence holds when it does something else (pause the server, publish);
no step runs while it decides.
"""

from __future__ import annotations

import os
import select
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

GATE_ENV = "SCALERL_TEST_VLLM_GATE"
LIMIT_S = 300.0  # the longest either side waits for the other (an upper bound on a failure only)
GRANT, OPEN = b"g", b"o"


@dataclass(frozen=True)
class Held:
    """A step the gate holds: the tokens each request of its batch has decoded so far."""

    tokens: tuple[int, ...]

    @property
    def requests(self) -> int:
        return len(self.tokens)


def _logits_processor_base():
    from vllm.v1.sample.logits_processor import LogitsProcessor

    return LogitsProcessor


try:
    _Base = _logits_processor_base()
except ImportError:  # .venv without vLLM: the test's side (`Gate`) alone is used
    _Base = object


class StepGate(_Base):
    """The server's side (module docstring)."""

    def __init__(self, vllm_config=None, device=None, is_pin_memory: bool = False):
        self.path = os.environ.get(GATE_ENV, "")
        self.outputs: dict[int, list[int]] = {}  # batch index -> the request's output tokens (vLLM's list)
        self.conn: socket.socket | None = None

    def is_argmax_invariant(self) -> bool:
        return False  # applied at every step, greedy ones too

    def update_state(self, batch_update) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.outputs.pop(index, None)
        for index, _params, _prompt, output in batch_update.added:
            self.outputs[index] = output
        for a, b, direction in batch_update.moved:
            first, second = self.outputs.pop(a, None), self.outputs.pop(b, None)
            if first is not None:
                self.outputs[b] = first
            if second is not None and direction.name == "SWAP":
                self.outputs[a] = second

    def apply(self, logits):
        if self.conn is None:
            if not (self.path and os.path.exists(self.path)):
                return logits
            conn = socket.socket(socket.AF_UNIX)
            conn.settimeout(LIMIT_S)
            try:
                conn.connect(self.path)
            except (FileNotFoundError, ConnectionRefusedError):  # the test let go as the step began
                conn.close()
                return logits
            self.conn = conn
        batch = logits.shape[0]
        tokens = " ".join(str(len(out)) for i, out in sorted(self.outputs.items()) if i < batch)
        try:
            self.conn.sendall(f"{tokens}\n".encode())
            granted = self.conn.recv(1) == GRANT
        except (BrokenPipeError, ConnectionResetError):  # the test let go between two steps
            granted = False
        if not granted:  # the test let go (OPEN, or its end of the socket closed)
            self.conn.close()
            self.conn = None
        return logits


class Gate:
    """The test's side: listens at a socket path (`path`, for `GATE_ENV`), then `held()` waits for the
    step the server holds and `grant()` lets it decode; `open()` lets every later step run."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._listener = socket.socket(socket.AF_UNIX)
        self._conn: socket.socket | None = None
        self._buffer = b""

    def __enter__(self) -> Gate:
        self._listener.bind(str(self.path))
        self._listener.listen(1)
        return self

    def __exit__(self, *exc) -> None:
        self.open()

    def _connection(self) -> socket.socket:
        if self._conn is None:
            self._listener.settimeout(LIMIT_S)
            self._conn, _ = self._listener.accept()
            self._conn.settimeout(LIMIT_S)
        return self._conn

    def held(self) -> Held:
        """The next step the server holds (waits for it)."""
        conn = self._connection()
        while b"\n" not in self._buffer:
            chunk = conn.recv(4096)
            assert chunk, "the vLLM server closed the gate"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return Held(tuple(int(t) for t in line.split()))

    def holding(self, done: threading.Event) -> Held | None:
        """The next step the server holds, or None once `done` is set (what the test waits for ended
        the steps: a pause); waits on both."""
        conn = self._connection()
        while b"\n" not in self._buffer:
            if done.is_set():
                return None
            if select.select([conn], [], [], 0.05)[0]:
                chunk = conn.recv(4096)
                assert chunk, "the vLLM server closed the gate"
                self._buffer += chunk
        return self.held()

    def grant(self) -> None:
        """Decode the held step."""
        self._connection().sendall(GRANT)

    def open(self) -> None:
        """Stop holding: the held step (if any) and every later one decode freely."""
        if self.path.exists():
            self.path.unlink()
        if self._conn is not None:
            try:
                self._conn.sendall(OPEN)
            except OSError:  # the server's side already gone (it stopped): nothing is held
                pass
            self._conn.close()
            self._conn = None
        self._listener.close()


def gate_path() -> Path:
    """A fresh socket path (short: a Unix socket's path is limited to about 100 bytes)."""
    return Path(tempfile.mkdtemp(prefix="gate-")) / "s"
