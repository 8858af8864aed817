"""The on-disk model cache: `$SCALERL_CACHE` or `~/.cache/scalerl`, one folder per build key.

A build writes into a temporary folder beside its target and renames it into place, so a
killed build never leaves a half-written entry; an exclusive `flock` on `<key>.lock` makes a
second process wait for the first build and then reuse it instead of building again; the
temporary folder of a killed build is removed by the next build of that key.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable


def cache_root() -> Path:
    root = os.environ.get("SCALERL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "scalerl")
    return Path(root)


def build_key(prefix: str, spec: dict) -> str:
    """`<prefix>-<12 hex>` from a canonical JSON of everything that determines the build."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
    return f"{prefix}-{digest[:12]}"


def cached_build(key: str, build: Callable[[Path], None], build_missing: bool = True) -> Path | None:
    """The folder for `key`, calling `build(tmp_dir)` first if it is not there yet (`build_missing`
    False: None instead of building)."""
    root = cache_root()
    final = root / key
    if final.is_dir():
        return final
    if not build_missing:
        return None
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():  # another process built it while we waited
            return final
        for stale in root.glob(f".{key}.*"):  # left by a build that was killed (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
        started = time.monotonic()
        print(
            f"building model {key} once (later runs load it from {final}); progress follows",
            file=sys.stderr,
            flush=True,
        )
        try:
            build(tmp)
            if not final.is_dir():  # a copy put in place by hand wins
                os.rename(tmp, final)
            print(f"built model {key} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return final


def weights_fingerprint(folder: Path) -> str:
    """12 hex digits of the SHA-256 of a model folder's weights (its `*.safetensors` files in name
    order): two builds of one model name with other weights (another machine's warm start, see
    docs/models-and-tasks.md) have other fingerprints."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors file to fingerprint")
    digest = hashlib.sha256()
    for path in files:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]
