"""The run directory under stress: one writer, damaged files, --restart, --max-steps on resume, fit.json.

Every test drives `scalerl train` (in process, `scalerl.cli.main`, on tiny-random with the
parity reward) or a real second process, and checks the exit code, that an error is one line
naming the file or value, and that what was already written is unchanged.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import scalerl.assembly.run as build_mod
from cli_helpers import SETS, SMALL, fake_model, one_line, train_cli  # noqa: F401 (fake_model: autouse fixture)
from doubles import tiny_random_components
from scalerl.cli import main
from scalerl.run.lock import LOCK_FILE, RunDirInUse, RunLock
from scalerl.run.metrics import read_rows
from scalerl.run.rundir import CHECKPOINT_DIR, checkpoints

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[2]


def start(capsys, run, steps=4):
    sets = [a for s in SMALL for a in ("--set", s)]
    code, out, err = train_cli(capsys, *sets, "--max-steps", str(steps), "--run-dir", str(run))
    assert code == 0, err
    return out


def snapshot(run: Path) -> dict[str, bytes]:
    """Every file of a run directory (but the lock) and its bytes."""
    return {
        str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != LOCK_FILE
    }


def steps_of(run: Path, kind="train") -> list[int]:
    return [r["step"] for r in read_rows(run / "metrics.jsonl") if r["kind"] == kind]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """A finished 4-step run (checkpoints at steps 2 and 4), copied by each test that changes it."""
    run = tmp_path_factory.mktemp("base") / "run"
    mp = pytest.MonkeyPatch()
    mp.setattr(build_mod, "build_components", lambda cfg, device: tiny_random_components(cfg, device))
    sets = [a for s in SMALL for a in ("--set", s)]
    try:
        assert main(["train", "--no-progress", *sets, "--max-steps", "4", "--run-dir", str(run)]) == 0
    finally:
        mp.undo()
    return run


@pytest.fixture
def run(base_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(base_run, copy)
    return copy


# ------------------------------------------------------------------ one writer
_HOLDER = textwrap.dedent("""
    import sys, time
    from scalerl.run.lock import RunLock
    lock = RunLock(sys.argv[1]).acquire()
    print("locked", flush=True)
    time.sleep(120)
""")


def _hold_lock(run: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(run)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_writer_is_refused_naming_the_holder_then_a_dead_holders_lock_is_taken_over(run, capsys):
    before = snapshot(run)
    holder = _hold_lock(run)
    try:
        code, _, err = train_cli(capsys, "--resume", "--max-steps", "6", "--run-dir", str(run))
        assert code == 2
        line = one_line(err)
        assert f"PID {holder.pid}" in line and str(run) in line
        assert snapshot(run) == before  # nothing written, config not rewritten
    finally:
        holder.kill()  # kill -9: it never releases the lock
        holder.wait()
    assert (run / LOCK_FILE).read_text().strip() == str(holder.pid)  # the dead holder's PID is still there
    code, out, err = train_cli(capsys, "--resume", "--max-steps", "6", "--run-dir", str(run))
    assert code == 0, err
    assert f"took over the lock of PID {holder.pid}" in out
    assert steps_of(run) == [1, 2, 3, 4, 5, 6]
    assert (run / LOCK_FILE).read_text() == ""  # released cleanly this time


def test_a_new_run_in_a_directory_being_started_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    holder = _hold_lock(run)
    try:
        sets = [a for s in SMALL for a in ("--set", s)]
        code, _, err = train_cli(capsys, *sets, "--run-dir", str(run))
    finally:
        holder.kill()
        holder.wait()
    assert code == 2 and f"PID {holder.pid}" in one_line(err)
    assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]


def test_ablate_refuses_a_run_another_process_trains(tmp_path):
    from scalerl.configure import load_config
    from scalerl.study.runner import RunSpec, run_study
    from scalerl.study.variants import Variant

    spec = RunSpec(
        Variant("base", "scalerl"), 0, tmp_path / "runs" / "base" / "seed0", load_config("scalerl", None, SMALL), []
    )
    spec.run_dir.mkdir(parents=True)
    holder = _hold_lock(spec.run_dir)
    trained = []
    try:
        with pytest.raises(RunDirInUse, match=f"PID {holder.pid}"):
            run_study([spec], train_fn=lambda *a, **k: trained.append(a), log=lambda s: None)
    finally:
        holder.kill()
        holder.wait()
    assert trained == [] and not (spec.run_dir / "failed.json").exists()  # not recorded as the run's failure


def test_lock_in_one_process_twice_is_refused_too(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(RunDirInUse, match=f"PID {os.getpid()}"):
            RunLock(tmp_path).acquire()
    with RunLock(tmp_path) as again:  # released: free again
        assert again.held


# ------------------------------------------------------------------ damaged checkpoints
def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 8] = bytes(b ^ 0xFF for b in data[mid : mid + 8])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "name,damage",
    [
        ("model.safetensors", _truncate),
        ("model.safetensors", _garble),
        ("optimizer.pt", _truncate),
        ("optimizer.pt", _garble),
        ("rng.pt", _truncate),
        ("state.json", _truncate),
        ("state.json", _garble),
    ],
)
def test_damaged_newest_checkpoint_is_named_and_the_older_one_resumed(run, capsys, name, damage):
    newest = run / CHECKPOINT_DIR / "step_000004"
    damage(newest / name)
    damaged_bytes = (newest / name).read_bytes()
    kept = [r for r in read_rows(run / "metrics.jsonl") if r["step"] <= 2]
    code, out, err = train_cli(capsys, "--resume", "--max-steps", "6", "--run-dir", str(run))
    assert code == 0, err
    assert f"step_000004 is damaged ({name}" in out
    assert "continuing from checkpoint step_000002" in out
    assert steps_of(run) == [1, 2, 3, 4, 5, 6]  # steps 3-4 redone once, no row twice
    assert read_rows(run / "metrics.jsonl")[: len(kept)] == kept  # rows the older checkpoint covers: as written
    assert (run / CHECKPOINT_DIR / "damaged-step_000004" / name).read_bytes() == damaged_bytes  # kept aside


def test_every_checkpoint_damaged_is_refused_then_restart_keeps_everything(run, capsys):
    for ckpt in checkpoints(run):
        _truncate(ckpt / "model.safetensors")
    metrics = (run / "metrics.jsonl").read_bytes()
    code, _, err = train_cli(capsys, "--resume", "--max-steps", "6", "--run-dir", str(run))
    assert code == 2
    line = one_line(err)
    assert "no intact checkpoint" in line and "model.safetensors" in line and "--restart" in line
    assert (run / "metrics.jsonl").read_bytes() == metrics
    code, out, err = train_cli(capsys, "--restart", "--max-steps", "2", "--run-dir", str(run))
    assert code == 0, err
    assert "starting over from step 0" in out
    assert (run / "previous-1" / "metrics.jsonl").read_bytes() == metrics
    assert steps_of(run) == [1, 2]


def test_partial_checkpoint_folder_is_never_picked(run, capsys):
    partial = run / CHECKPOINT_DIR / ".tmp-step_000006"  # a save torn by kill -9 or a full disk
    shutil.copytree(run / CHECKPOINT_DIR / "step_000004", partial)
    _truncate(partial / "model.safetensors")
    code, out, err = train_cli(capsys, "--resume", "--max-steps", "5", "--run-dir", str(run))
    assert code == 0, err
    assert "continuing from checkpoint step_000004" in out and not partial.exists()
    assert steps_of(run) == [1, 2, 3, 4, 5]


# ------------------------------------------------------------------ config.yaml, checkpoints/
@pytest.mark.parametrize(
    "content,problem",
    [
        (b"", "is empty"),
        (b"batch: [1, 2\n", "not valid YAML"),
        (b"recipe: scalerl\n", "incomplete"),
        (b"\xff\xfe\n", "not UTF-8"),
    ],
)
def test_damaged_config_yaml_is_refused_never_replaced(run, capsys, content, problem):
    (run / "config.yaml").write_bytes(content)
    before = snapshot(run)
    code, _, err = train_cli(capsys, "--resume", "--max-steps", "6", "--run-dir", str(run))
    assert code == 2
    line = one_line(err)
    assert "config.yaml" in line and problem in line
    assert snapshot(run) == before


@pytest.mark.parametrize("flag", ["--resume", "--restart"])
def test_resume_or_restart_of_a_directory_without_a_run_names_the_flag(tmp_path, capsys, flag):
    code, _, err = train_cli(capsys, flag, "--run-dir", str(tmp_path / "new"))
    assert code == 2
    line = one_line(err)
    assert f"{flag} {tmp_path / 'new'}: no config.yaml there" in line and f"drop {flag}" in line
    assert not (tmp_path / "new").exists()


def test_missing_checkpoints_folder_is_refused_unless_restart(run, capsys):
    shutil.rmtree(run / CHECKPOINT_DIR)
    before = snapshot(run)
    code, _, err = train_cli(capsys, "--resume", "--max-steps", "6", "--run-dir", str(run))
    assert code == 2
    line = one_line(err)
    assert "checkpoints/" in line and "--restart" in line
    assert snapshot(run) == before
    code, out, err = train_cli(capsys, "--restart", "--run-dir", str(run))
    assert code == 0, err
    assert (run / "previous-1" / "metrics.jsonl").read_bytes() == before["metrics.jsonl"]
    assert steps_of(run) == [1, 2, 3, 4]


# ------------------------------------------------------------------ metrics.jsonl
def _metrics_lines(run):
    return (run / "metrics.jsonl").read_bytes().split(b"\n")


def _shorter(run):
    (run / "metrics.jsonl").write_bytes(b"\n".join(_metrics_lines(run)[:2]) + b"\n")
    return "shorter"


def _deleted(run):
    (run / "metrics.jsonl").unlink()
    return "missing"


def _not_utf8(run):
    lines = _metrics_lines(run)
    lines[2] = lines[2][:-3] + b"\xff" + lines[2][-2:]
    (run / "metrics.jsonl").write_bytes(b"\n".join(lines))
    return "line 3: not UTF-8"


def _invalid_line(run):
    lines = _metrics_lines(run)
    lines[1] = b"{" + b"x" * (len(lines[1]) - 1)  # same length: the byte offsets still agree
    (run / "metrics.jsonl").write_bytes(b"\n".join(lines))
    return "line 2: not valid JSON"


@pytest.mark.parametrize("damage", [_shorter, _deleted, _not_utf8, _invalid_line])
def test_damaged_metrics_is_reported_with_the_line_before_any_training(run, capsys, damage, monkeypatch):
    from scalerl.loop import Stages

    def generate(self):
        raise AssertionError("a step began: the damage was not found at start")

    monkeypatch.setattr(Stages, "generate", generate)  # found at start, not after 36 steps: by construction
    expected = damage(run)
    before = snapshot(run)
    code, _, err = train_cli(capsys, "--resume", "--max-steps", "40", "--run-dir", str(run))
    assert code == 2
    line = one_line(err)
    assert "metrics.jsonl" in line and expected in line and "--restart" in line
    assert snapshot(run) == before  # no step trained, nothing rolled back


# ------------------------------------------------------------------ --max-steps on resume, fit.json
def test_finished_run_continues_under_its_config_changing_only_max_steps(run, capsys):
    old = (run / "config.yaml").read_text()
    code, out, err = train_cli(capsys, "--resume", "--max-steps", "6", "--run-dir", str(run))
    assert code == 0, err
    assert "config changed (run.max_steps: 4 -> 6)" in out
    new = (run / "config.yaml").read_text()
    changed = [(a, b) for a, b in zip(old.splitlines(), new.splitlines()) if a != b]
    assert changed == [("  max_steps: 4", "  max_steps: 6")]
    assert steps_of(run) == [1, 2, 3, 4, 5, 6]


def test_lower_max_steps_on_a_finished_run_is_refused_config_untouched(run, capsys):
    before = snapshot(run)
    code, _, err = train_cli(capsys, "--resume", "--max-steps", "3", "--run-dir", str(run))
    assert code == 2
    line = one_line(err)
    assert "--max-steps" in line and "already done 4 steps" in line
    assert snapshot(run) == before


def test_run_that_cannot_be_fitted_writes_the_reason_and_exits_0(run, capsys, monkeypatch):
    fit = json.loads((run / "fit.json").read_text())  # 4 steps, 3 evaluations: too few
    assert fit["fitted"] is False and "3 evaluations" in fit["reason"]
    import scalerl.scaling.spec
    from scalerl.errors import ScaleRLError

    def impossible(*args, **kwargs):
        raise ScaleRLError("every pass rate is equal: no curve to fit")

    monkeypatch.setattr(scalerl.scaling.spec, "fit_curve", impossible)  # the fit of the one forecast specification
    code, out, err = train_cli(capsys, "--resume", "--max-steps", "10", "--set", "eval.every=1", "--run-dir", str(run))
    assert code == 0, err
    assert steps_of(run) == list(range(1, 11))  # the training finished
    fit = json.loads((run / "fit.json").read_text())
    assert fit == {"fitted": False, "reason": "every pass rate is equal: no curve to fit"}
    assert "no fit: every pass rate is equal" in out
