"""`rollout.engine: vllm`: a vLLM server as the generation engine, behind the `Generator` protocol.

`VllmClient` starts a server on the run's model (saved once into a temporary folder), or talks to
one at `rollout.engine.url`, and asks it for one sample per request on the tokens-in, tokens-out
`/inference/v1/generate` (`n` requests per prompt; with `rollout.engine.seeded`, each with its own
seed from the client's seed and the request's serial: `reseed` repeats them). It returns what the
local engine returns:

- the sampled token ids, and per token the log-probability of the distribution sampled from
  (`--logprobs-mode processed_logprobs`: after temperature and top-p), and the policy version
  (from the server's `weight_versions` spans, labelled by `update_weights`);
- forced interruption as the local engine does it (`rollout.length: interrupt`): a first request
  for up to the drawn trigger of thinking tokens; a completion that closed `</think>` itself gets
  `answer_budget` tokens after it (tokens the server sampled past that point are cut off, as the
  local engine would have stopped there); one that did not gets the interruption phrase appended
  here (forced, log-probability 0, masked out of the loss) and a second request for the answer;
- PipelineRL in-flight weight updates (`update_weights`): the weights are written to a safetensors
  folder, and the server is paused with `mode=keep` (sequences in flight keep their K/V), reloads
  them (`collective_rpc reload_weights`), labels them (`update_weight_version`) and resumes: the
  tokens of a sequence from then on carry the new version. Prefix caching is off, so no new
  request reuses K/V computed under older weights.

The started server runs its LM head in fp32 when `fp32_head` (`--hf-overrides '{"head_dtype": "float32"}'`)
and its CPU worker on the starting process's torch threads (`VllmServer._env`). The weights go through a
folder because every weight-transfer backend of vLLM 0.32 needs CUDA (docs/rollout.md).

Departures from the local engine: with top_p < 1 the log-probability is the renormalised nucleus
one (vLLM's processed log-probabilities; the local engine records the full tempered softmax); the
FP32 head casts the server's head weight to fp32 (the local engine keeps an fp32 copy of the
published one); the evaluation decodes with the local engine on the trainer's own model (docs/rollout.md).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import torch

from scalerl.config import InterruptConfig, RolloutConfig, VllmEngineConfig
from scalerl.errors import ScaleRLError
from scalerl.rollout.engine import GREEDY_BELOW, THINK_END, _stop_ids
from scalerl.rollout.length import check_budget, phrase_ids
from scalerl.rollout.registry import EngineNeeds, register
from scalerl.rollout.vllm_server import VllmServer
from scalerl.types import Completion, FinishReason, Prompt

MAX_MODEL_LEN = 2048  # the started server's context, at most (within the model's own)
POLL_S = 0.02  # how often `stream` asks its prompt source again when it may not start one
_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16"}


@dataclass
class _Sample:
    """One completion being assembled from the server's answers."""

    prompt: Prompt
    k: int
    serial: int
    prompt_tokens: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    forced: list[bool] = field(default_factory=list)

    def add(self, tokens: list[int], logprobs: list[float], versions: list[int], forced: bool = False) -> None:
        self.tokens += tokens
        self.logprobs += logprobs
        self.versions += versions
        self.forced += [forced] * len(tokens)

    def cut(self, n: int) -> None:
        del self.tokens[n:], self.logprobs[n:], self.versions[n:], self.forced[n:]


@register(VllmEngineConfig, EngineNeeds(copy=False, devices=frozenset({"cpu", "cuda"}), lora=False))
class VllmClient:
    """A vLLM server's client; implements `scalerl.rollout.Generator` (see the module docstring).
    `model` is read once, to start the server on its weights (unless `rollout.engine.url` or
    `.model` names what the server loads); `close()` stops a server it started."""

    def __init__(
        self,
        model,
        tokenizer,
        cfg: RolloutConfig,
        fp32_head: bool = True,
        seed: int = 0,
        greedy: bool = False,
        ignore_eos: bool = False,
    ):
        self.cfg, self.ecfg, self.tokenizer, self.seed, self._model = cfg, cfg.engine, tokenizer, seed, model
        self.greedy, self.ignore_eos = greedy or cfg.temperature < GREEDY_BELOW, ignore_eos
        self._stops = sorted(_stop_ids(model, tokenizer))
        self._think_end = tokenizer(THINK_END, add_special_tokens=False)["input_ids"]
        self._interrupt = cfg.length if isinstance(cfg.length, InterruptConfig) else None
        self._phrase = phrase_ids(tokenizer, self._interrupt.phrase) if self._interrupt else []
        if self._interrupt is not None:
            check_budget(cfg, len(self._phrase))
        self._dtype = _DTYPES.get(next(model.parameters()).dtype, "fp32")
        self._fp32_head = fp32_head
        self._dir = Path(tempfile.mkdtemp(prefix="scalerl-vllm-"))
        self._rng = random.Random(seed)
        self._serial, self._version = 0, 0
        self._seeded = self.ecfg.seeded if self.ecfg.seeded is not None else torch.cuda.is_available()
        self._lock = threading.Lock()  # one weight update at a time
        self.publish_seconds: dict[str, float] = {}  # the last update's parts (`update_weights`)
        self.server = VllmServer(self.ecfg, log=None if self.ecfg.url else server_log())
        self._pool = ThreadPoolExecutor(self.ecfg.max_inflight, thread_name_prefix="scalerl-vllm")
        try:
            self._start(model, tokenizer)
        except BaseException:
            self.close()
            raise

    def _start(self, model, tokenizer) -> None:
        if self.ecfg.url:
            self.server.call("GET", "/health")
        else:
            model_dir = Path(self.ecfg.model) if self.ecfg.model else self._dir / "model"
            if not self.ecfg.model:
                model.save_pretrained(model_dir, safe_serialization=True)
                tokenizer.save_pretrained(model_dir)
            length = min(
                getattr(model.config, "max_position_embeddings", MAX_MODEL_LEN) or MAX_MODEL_LEN, MAX_MODEL_LEN
            )
            self.server.start(
                model_dir,
                self._dtype,
                length,
                threads=torch.get_num_threads(),
                remove=self._dir,
                fp32_head=self._fp32_head,
            )
            print(f"vLLM server: {self.server.url}, log {self.server.log}", flush=True)
        self.server.call("POST", "/update_weight_version", {"new_version": str(self._version)})

    # ------------------------------------------------------------------ the Generator protocol
    @property
    def version(self) -> int:
        return self._version

    def reseed(self) -> None:
        """Restart the request seeds and the interruption draws from the client's seed."""
        self._serial = 0
        self._rng.seed(self.seed)

    def generate(self, prompts: Sequence[Prompt], n: int) -> list[Completion]:
        futures = [self._submit(p, k) for p in prompts for k in range(n)]
        return [f.result() for f in futures]

    def stream(
        self,
        prompts: Iterable[Prompt],
        n: int,
        stop: threading.Event | None = None,
        hold: threading.Event | None = None,
    ) -> Iterator[Completion]:
        """Continuous batching on the server: up to `max_inflight` samples submitted at a time; a held
        stream submits nothing until the hold is lifted (the samples in flight finish: pausing the
        server would leave their requests waiting out `request_timeout_s` through a long evaluation)."""
        stop, hold = stop or threading.Event(), hold or threading.Event()
        source, pending, more = iter(prompts), set(), True
        try:
            while not stop.is_set():
                while more and not hold.is_set() and len(pending) + n <= max(self.ecfg.max_inflight, n):
                    prompt = next(source, StopIteration)
                    if prompt is StopIteration:
                        more = False
                    elif prompt is None:  # the source has no prompt that may start now
                        break
                    else:
                        pending.update(self._submit(prompt, k) for k in range(n))
                if not more and not pending:
                    return
                if not pending:  # held, or no prompt may start: wait (`wait` on no future returns at once)
                    stop.wait(POLL_S)
                    continue
                done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
        finally:
            for future in pending:
                future.cancel()

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Publish `version`: write the weights to a safetensors folder, then pause the server keeping
        its sequences, reload, label and resume (each call bounded by `request_timeout_s`). The weights
        `state_dict` does not name are the client's model's: in a generator process (`pipeline.transport:
        process`) that model decodes the published buffer in place, and its `StepGate` passes no weights.
        Each part's seconds go to `publish_seconds` and, for a server this client started, one JSON line
        in `<its log>.publish.jsonl`."""
        from safetensors.torch import save_file

        parts, t0 = {}, time.monotonic()
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[self._dtype]
        folder = self._dir / f"weights-v{version}"
        folder.mkdir(parents=True, exist_ok=True)
        weights = {**self._model.state_dict(), **state_dict}
        tensors = {name: t.detach().to("cpu", dtype).contiguous().clone() for name, t in weights.items()}
        save_file(tensors, str(folder / "model.safetensors"))
        parts["save"], t0 = time.monotonic() - t0, time.monotonic()
        with self._lock:
            for part, path, body in (
                ("pause", "/pause?mode=keep", None),
                ("reload", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}}),
                ("label", "/update_weight_version", {"new_version": str(version)}),
                ("resume", "/resume", None),
            ):
                self.server.call("POST", path, body)
                parts[part], t0 = time.monotonic() - t0, time.monotonic()
            self._version = version
        shutil.rmtree(folder, ignore_errors=True)
        self.publish_seconds = parts
        if self.server.log is not None:
            with open(f"{self.server.log}.publish.jsonl", "a") as out:
                out.write(json.dumps({"version": version, **parts}) + "\n")

    def close(self) -> None:
        """Stop the requests, remove the client's folder (first: a process ended while the server stops
        leaves nothing behind) and stop a server this client started."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(self._dir, ignore_errors=True)
        self.server.close()

    # ------------------------------------------------------------------ one sample
    def _submit(self, prompt: Prompt, k: int) -> Future:
        tokens = self._encode(prompt)
        self._serial += 1
        trigger = self._rng.randint(self._interrupt.think_min, self._interrupt.think_max) if self._interrupt else None
        return self._pool.submit(self._sample, _Sample(prompt, k, self._serial, tokens), trigger)

    def _encode(self, prompt: Prompt) -> list[int]:
        bos = self.tokenizer.bos_token
        add = not (bos is not None and prompt.text.startswith(bos))
        tokens = self.tokenizer(prompt.text, add_special_tokens=add)["input_ids"]
        if not tokens:
            raise ScaleRLError(f"prompt {prompt.id!r}: the text tokenises to nothing")
        return tokens

    def _sample(self, s: _Sample, trigger: int | None) -> Completion:
        """The requests of one completion (module docstring) and its finish reason."""
        budget = self.cfg.max_new_tokens
        if self._interrupt is None:
            return self._done(s, "eos" if self._ask(s, budget, 0) else "length")
        eos = self._ask(s, min(trigger, budget), 0)
        close = _find(s.tokens, self._think_end)
        if close is None:
            if eos or len(s.tokens) >= budget:
                return self._done(s, "eos" if eos else "length")
            s.add(
                list(self._phrase),
                [0.0] * len(self._phrase),
                [s.versions[-1] if s.versions else self._version] * len(self._phrase),
                forced=True,
            )
            end = len(s.tokens) + self._interrupt.answer_budget
            eos = self._ask(s, min(end, budget) - len(s.tokens), 1)
            return self._done(
                s, "interrupted_eos" if eos else "interrupted_budget" if len(s.tokens) >= end else "interrupted_length"
            )
        limit = min(close + self._interrupt.answer_budget, budget)
        if len(s.tokens) > limit or (not eos and len(s.tokens) == limit):
            s.cut(limit)
            return self._done(s, "length")
        if not eos:
            eos = self._ask(s, limit - len(s.tokens), 1)
        return self._done(s, "eos" if eos else "length")

    def _ask(self, s: _Sample, max_tokens: int, phase: int) -> bool:
        """One request continuing `s` by at most `max_tokens`; adds what came back. True: it ended on a stop token."""
        if max_tokens <= 0:
            return False
        params = {
            "max_tokens": max_tokens,
            "temperature": 0.0 if self.greedy else self.cfg.temperature,
            "top_p": self.cfg.top_p,
            "logprobs": 0,
            "detokenize": False,
        }
        if self._seeded:
            params["seed"] = (self.seed * 1_000_003 + s.serial * 2 + phase) % 2**31
        params.update({"ignore_eos": True} if self.ignore_eos else {"stop_token_ids": self._stops})
        version = self._version
        out = self.server.call(
            "POST", "/inference/v1/generate", {"token_ids": s.prompt_tokens + s.tokens, "sampling_params": params}
        )
        choice = out["choices"][0]
        if choice.get("finish_reason") == "abort":  # `close` aborts what is in flight: not a completion
            raise ScaleRLError(f"vLLM request aborted: the server is stopping ({self.server.where()})")
        tokens = choice["token_ids"]
        logprobs = [c["logprob"] for c in choice["logprobs"]["content"]]
        s.add(tokens, logprobs, _versions(choice.get("weight_versions"), len(tokens), version))
        return choice.get("finish_reason") == "stop" and bool(tokens) and tokens[-1] in self._stops

    def _done(self, s: _Sample, reason: FinishReason) -> Completion:
        return Completion(
            id=f"{s.prompt.id}/{s.k}@{self.seed}.{s.serial}",
            prompt_id=s.prompt.id,
            prompt_tokens=s.prompt_tokens,
            tokens=s.tokens,
            logprobs=s.logprobs,
            versions=s.versions,
            text=self.tokenizer.decode(s.tokens, skip_special_tokens=True),
            finish_reason=reason,
            forced_mask=s.forced,
        )


def server_log() -> Path:
    """A new log file for a started server, kept after the run (an error names it)."""
    folder = Path(tempfile.gettempdir()) / "scalerl-vllm-logs"
    folder.mkdir(parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=time.strftime("server-%Y%m%d-%H%M%S-"), suffix=".log", dir=folder)
    os.close(fd)
    return Path(path)


def _versions(spans: list[dict] | None, n: int, default: int) -> list[int]:
    """Per-token policy versions from the server's `weight_versions` spans ([start, end) -> label)."""
    out = [default] * n
    for span in spans or ():
        try:
            version = int(span["version"])
        except (TypeError, ValueError):
            continue  # a label this client did not set (the server's "default" before the first one)
        out[span["start"] : span["end"]] = [version] * (span["end"] - span["start"])
    return out


def _find(tokens: list[int], suffix: list[int]) -> int | None:
    """The length of the shortest prefix of `tokens` that ends with `suffix`, None if none does."""
    k = len(suffix)
    for end in range(k, len(tokens) + 1):
        if tokens[end - k : end] == suffix:
            return end
    return None
