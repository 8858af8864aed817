"""One-line errors (exit 2, no traceback) for bad values, bad places and a full disk; failed starts leave nothing."""

import errno
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import scalerl.assembly.run as build_mod
import scalerl.run.checkpoint as checkpoint_mod
from cli_helpers import SETS, SMALL, fake_model, one_line, train_cli  # noqa: F401 (fake_model: autouse fixture)
from doubles import tiny_random_components
from scalerl.cli import main
from scalerl.config import MAX_PROMPTS, available_cores
from scalerl.configure import load_config
from scalerl.errors import ScaleRLError
from scalerl.run.metrics import read_rows
from scalerl.run.rundir import CHECKPOINT_DIR, checkpoints

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ values refused at load
@pytest.mark.parametrize(
    "override,named",
    [
        ("optim.lr=inf", "optim.lr = inf"),
        ("optim.lr=.nan", "optim.lr = nan"),
        ("optim.lr=-.inf", "optim.lr"),
        ("batch.prompts=true", "batch.prompts = True"),
        ("batch.generations=false", "batch.generations = False"),
        ("run.checkpoint_every=true", "run.checkpoint_every = True"),
        (f"batch.prompts={MAX_PROMPTS + 1}", f"batch.prompts = {MAX_PROMPTS + 1}"),
        ("batch.prompts=1000000000000", "batch.prompts = 1000000000000"),
        ("batch.generations=100000", "batch.generations = 100000"),
        (f"run.threads={available_cores() + 1}", f"run.threads = {available_cores() + 1}"),
        ("reward.pass_value=-1", "reward.pass_value = -1.0"),
        ("reward.fail_value=2", "reward.fail_value = 2.0"),
    ],
)
def test_nonsense_value_is_one_line_and_creates_nothing(tmp_path, capsys, override, named):
    run = tmp_path / "run"
    code, _, err = train_cli(capsys, *SETS, "--set", override, "--run-dir", str(run))
    assert code == 2
    assert named in one_line(err)
    assert not run.exists()


def test_completions_per_step_are_bounded():
    with pytest.raises(ScaleRLError, match="1,048,576"):
        load_config("scalerl", None, ["batch.prompts=65536", "batch.generations=1024"])
    cfg = load_config("scalerl", None, ["batch.prompts=2048", "batch.generations=16"])  # the paper's largest batch
    assert cfg.batch.prompts * cfg.batch.generations == 32768


def test_booleans_stay_booleans_and_numbers_numbers():
    cfg = load_config("scalerl", None, ["filter.zero_variance=false", "batch.prompts=8", "optim.lr=1e-4"])
    assert cfg.filter.zero_variance is False and cfg.batch.prompts == 8 and cfg.optim.lr == 1e-4


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_device_without_a_gpu(tmp_path, capsys, device):
    run = tmp_path / "run"
    code, _, err = train_cli(capsys, *SETS, "--set", f"model.device={device}", "--run-dir", str(run))
    assert code == 2
    line = one_line(err)
    assert f"model.device = {device!r}" in line and "no CUDA GPU" in line
    assert not run.exists()


def test_unknown_device_string(tmp_path, capsys):
    code, _, err = train_cli(capsys, *SETS, "--set", "model.device=gpu0", "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "model.device = 'gpu0'" in one_line(err)


def test_non_utf8_config_file(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_bytes(b"batch:\n  prompts: 4 # \xe9t\xe9\n")
    code, _, err = train_cli(capsys, "--config", str(config), "--run-dir", str(tmp_path / "r"))
    assert code == 2
    line = one_line(err)
    assert str(config) in line and "not UTF-8" in line


# ------------------------------------------------------------------ places
def test_unwritable_run_dir(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = train_cli(capsys, *SETS, "--run-dir", str(blocker / "run"))
    assert code == 2
    line = one_line(err)
    assert str(blocker / "run") in line and "cannot create run directory" in line
    assert blocker.read_text() == "not a directory"


def test_read_only_parent(tmp_path, capsys, monkeypatch):
    """A parent folder the user may not write to (simulated: the tests run as root, who may)."""
    import errno
    import pathlib

    parent = tmp_path / "ro"
    parent.mkdir()
    real_mkdir = pathlib.Path.mkdir

    def refuse(self, *args, **kwargs):
        if str(self).startswith(str(parent)):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", refuse)
    code, _, err = train_cli(capsys, *SETS, "--run-dir", str(parent / "run"))
    assert code == 2 and str(parent / "run") in one_line(err)
    assert list(parent.iterdir()) == []


def test_run_dir_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "run"
    target.write_text("x")
    code, _, err = train_cli(capsys, *SETS, "--run-dir", str(target))
    assert code == 2 and "is a file" in one_line(err)
    assert target.read_text() == "x"


def test_failed_start_leaves_nothing_and_the_fixed_command_runs(tmp_path, capsys, monkeypatch):
    run = tmp_path / "runs" / "r"

    def broken(cfg, device):
        raise ScaleRLError("data.jsonl: not valid JSON on line 3")  # e.g. a dataset that fails to load

    monkeypatch.setattr(build_mod, "build_components", broken)
    code, _, err = train_cli(capsys, *SETS, "--max-steps", "2", "--run-dir", str(run))
    assert code == 2 and "data.jsonl" in one_line(err)
    assert not run.exists()  # no stray config.yaml to block the next try
    monkeypatch.setattr(build_mod, "build_components", lambda cfg, device: tiny_random_components(cfg, device))
    code, _, err = train_cli(capsys, *SETS, "--max-steps", "2", "--run-dir", str(run))
    assert code == 0, err
    assert [r["step"] for r in read_rows(run / "metrics.jsonl") if r["kind"] == "train"] == [1, 2]


def test_failed_start_in_an_existing_empty_dir_keeps_the_dir(tmp_path, capsys, monkeypatch):
    run = tmp_path / "r"
    run.mkdir()
    monkeypatch.setattr(build_mod, "build_components", lambda cfg, device: (_ for _ in ()).throw(ScaleRLError("x")))
    code, _, _ = train_cli(capsys, *SETS, "--run-dir", str(run))
    assert code == 2
    assert run.is_dir() and [p.name for p in run.iterdir() if p.name != ".lock"] == []


# ------------------------------------------------------------------ a full disk
def _disk_full_at(step: int, monkeypatch, exc: BaseException):
    real = checkpoint_mod.torch.save

    def save(obj, path, *args, **kwargs):
        if f"step_{step:06d}" in str(path):
            Path(path).write_bytes(b"\0" * 100)  # part of the file made it to disk
            raise exc
        return real(obj, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_mod.torch, "save", save)


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 1408 vs 1310"),
    ],
)
def test_full_disk_at_checkpoint_is_one_line_and_leaves_no_partial_folder(tmp_path, capsys, monkeypatch, exc):
    run = tmp_path / "r"
    _disk_full_at(4, monkeypatch, exc)
    code, _, err = train_cli(capsys, *SETS, "--max-steps", "6", "--run-dir", str(run))
    assert code == 2
    line = one_line(err)
    assert "step_000004" in line and "no space left" in line and "step_000002" in line and "--resume" in line
    assert sorted(p.name for p in (run / CHECKPOINT_DIR).iterdir()) == ["step_000000", "step_000002"]  # no partial
    monkeypatch.undo()
    monkeypatch.setattr(build_mod, "build_components", lambda cfg, device: tiny_random_components(cfg, device))
    code, out, err = train_cli(capsys, "--resume", "--run-dir", str(run))  # space freed: it carries on
    assert code == 0, err
    assert "continuing from checkpoint step_000002" in out
    assert [r["step"] for r in read_rows(run / "metrics.jsonl") if r["kind"] == "train"] == [1, 2, 3, 4, 5, 6]
    assert [p.name for p in checkpoints(run)] == ["step_000004", "step_000006"]


def test_full_disk_writing_metrics_is_one_line(tmp_path, capsys, monkeypatch):
    import scalerl.run.metrics as metrics_mod

    real = metrics_mod.os.fsync
    calls = {"n": 0}

    def fsync(fd):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(metrics_mod.os, "fsync", fsync)
    code, _, err = train_cli(capsys, *SETS, "--max-steps", "4", "--run-dir", str(tmp_path / "r"))
    assert code == 2
    line = one_line(err)
    assert "metrics.jsonl" in line and "No space left on device" in line


def test_os_errors_of_the_machine_are_one_line_others_keep_their_traceback(monkeypatch, capsys):
    import scalerl.commands.recipes as recipes_cmd
    import scalerl.config as config_mod

    real_run = recipes_cmd.run
    monkeypatch.setattr(
        recipes_cmd,
        "run",
        lambda args: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device", "/runs/x/tb/events")),
    )
    assert main(["recipes"]) == 2
    assert "No space left on device (/runs/x/tb/events)" in one_line(capsys.readouterr().err)
    # scalerl's own (raised where no frame is the user's: a test's lambda would be the user's code, told so)
    monkeypatch.setattr(recipes_cmd, "run", real_run)
    monkeypatch.setattr(config_mod, "list_recipes", functools.partial(os.close, -1))  # EBADF, in recipes.run
    with pytest.raises(OSError, match="Bad file descriptor"):
        main(["recipes"])


def test_cli_error_has_no_traceback_in_a_real_process(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "scalerl", "train", "--set", "optim.lr=inf", "--run-dir", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "optim.lr = inf" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()
