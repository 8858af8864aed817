import os

import pytest

# Tests never reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_collection_modifyitems(config, items):
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
_KEEP = ("resource_tracker", "semaphore_tracker")   # multiprocessing's, shared by every later test


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
                print(f"\n{item.nodeid} failed with {len(left)} process(es) still running, killed: "
                      + ", ".join(f"{p.pid}" for p in left))
