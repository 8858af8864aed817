"""The test suite's own hygiene: a failing test leaves no process behind (tests/conftest.py)."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

FAILING = """
import pathlib, subprocess, sys

def test_starts_a_process_and_fails(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    pathlib.Path(PID_FILE).write_text(str(child.pid))
    assert False, "this test fails with its child still running"
"""


def test_a_failing_test_leaves_no_process_behind(tmp_path):
    shutil.copy(Path(__file__).parents[1] / "conftest.py", tmp_path / "conftest.py")
    pid_file = tmp_path / "pid"
    (tmp_path / "test_fails.py").write_text(FAILING.replace("PID_FILE", repr(str(pid_file))))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 1, out.stdout + out.stderr  # the inner test failed, as written
    pid = int(pid_file.read_text())
    assert "killed: " + str(pid) in out.stdout
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"process {pid} is still running"
        time.sleep(0.1)
