import os
from pathlib import Path

import pytest

# Tests never reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


# The tiers, a folder each: a test is marked by the folder it lives in (tests/slow: slow, tests/gpu: gpu,
# tests/vllm_server: vllm; every other folder is the fast tier, `make test`), and a test marked for a tier
# outside that tier's folder stops the collection, named. A test of two tiers (a slow vLLM test) lives in the
# folder of the first of TIERS it is marked for. No folder is named as a package: tests/ is on sys.path, where
# a folder `vllm` would be imported as the vllm package where it is not installed.
TIERS = {"gpu": "gpu", "vllm": "vllm_server", "slow": "slow"}  # marker: its folder
HERE = Path(__file__).resolve().parent


def folder_tier(path) -> str | None:
    """The tier whose folder holds `path` (None: the fast tier, or a file outside tests/)."""
    try:
        parts = Path(path).resolve().relative_to(HERE).parts
    except ValueError:
        return None
    return next((tier for tier, folder in TIERS.items() if len(parts) > 1 and parts[0] == folder), None)


def mark_by_folder(items) -> None:
    """Mark each test with its folder's tier; a UsageError naming every test marked for another tier."""
    wrong = []
    for item in items:
        folder = folder_tier(item.path)
        marks = {m.name for m in item.iter_markers()} & set(TIERS)
        tier = next((t for t in TIERS if t in marks | {folder}), None)
        if tier != folder:
            wrong.append(f"{item.nodeid}: marked {tier}, so it lives in tests/{TIERS[tier]}/")
        elif folder is not None:
            item.add_marker(folder)
    if wrong:
        raise pytest.UsageError("a test outside its tier's folder:\n" + "\n".join(wrong))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks
def pytest_collection_modifyitems(config, items):
    mark_by_folder(items)
    if not any("gpu" in item.keywords for item in items):
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def one_torch_thread():
    """One intra-op thread: on a shared 2-core machine a second one makes small ops far slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def two_cores(monkeypatch):
    """The 2-core machine a test's `run.threads=2` describes, whatever this one's affinity (a CI runner pinned to
    one core included): the check of `run.threads` against the machine's cores reads 2. Its decisions (the
    generator's host, the thread split) follow `run.threads`; a process the run starts does not check again."""
    import scalerl.config.run

    monkeypatch.setattr(scalerl.config.run, "available_cores", lambda: 2)


# A failing test leaves no process behind: the processes it started (a `scalerl watch`, a training
# run, a generator process) that are still alive once it has failed are killed, and named.
_FAILED = pytest.StashKey[bool]()
_KEEP = ("resource_tracker", "semaphore_tracker")  # multiprocessing's, shared by every later test


def _children() -> dict:
    import psutil

    return {p.pid: p for p in psutil.Process().children(recursive=True)}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import psutil

    before = set(_children())
    try:
        return (yield)
    finally:
        if item.stash.get(_FAILED, False):
            left = []
            for pid, p in _children().items():
                try:
                    if pid not in before and not any(k in " ".join(p.cmdline()) for k in _KEEP):
                        left.append(p)
                except psutil.NoSuchProcess:
                    continue
            for p in left:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    continue
            psutil.wait_procs(left, timeout=10)
            if left:
                print(
                    f"\n{item.nodeid} failed with {len(left)} process(es) still running, killed: "
                    + ", ".join(f"{p.pid}" for p in left)
                )
