"""A failure of the user's own code, or of a Ray that cannot start, told in one line (scalerl.errors,
scalerl.cli.report): the line names the user's file, the function and the exception, then come the
user's own frames alone, never scalerl's; what a run already wrote stays. Each case is a `scalerl`
command, as a user types it (the first one in a process of its own)."""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import SETS
from scalerl.cli import main, report

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = str(ROOT / "scalerl") + os.sep
TASK = "class T:\n    def prompts(self, seed):\n{prompts}\n\n    def check(self, answer, reference):\n{check}\n"
GOOD_PROMPTS = "        return [(f'{i} + 1 =', str(i + 1)) for i in range(40)]"
GOOD_CHECK = "        return answer.strip() == reference"


def _task(tmp_path: Path, prompts: str = GOOD_PROMPTS, check: str = GOOD_CHECK, extra: str = "") -> Path:
    path = tmp_path / "mytask.py"
    path.write_text(TASK.format(prompts=prompts, check=check) + extra)
    return path


def _line(path: Path, text: str) -> int:
    """The number of the first line of `path` that holds `text`."""
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def _train(capsys, tmp_path: Path, *sets: str) -> tuple[int, str, str]:
    args = [
        "train",
        "--no-progress",
        "--run-dir",
        str(tmp_path / "run"),
        "--max-steps",
        "2",
        *SETS,
        "--set",
        "task.train_size=32",
        "--set",
        "task.val_size=4",
        "--set",
        "filter.zero_variance=false",
    ]
    code = main(args + [a for s in sets for a in ("--set", s)])
    out, err = capsys.readouterr()
    return code, out, err


def _told(err: str, path: Path) -> tuple[str, list[str]]:
    """(the error's line, the frames after it); every frame is in the user's file, none is scalerl's."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("scalerl: error: "), err
    frames = [ln for ln in lines[1:] if ln.startswith("  File ")]
    assert all(ln.startswith(f'  File "{path}"') for ln in frames), err
    assert PACKAGE not in err and "Traceback" not in err, err
    return lines[0], frames


def test_a_task_whose_prompts_raise_is_one_line_then_its_own_frames_in_a_real_process(tmp_path):
    """The issue's case, as a user runs it: `python -m scalerl train` on a task file whose prompts() raises."""
    path = _task(
        tmp_path,
        prompts="        return helper(seed)",
        extra="\n\ndef helper(seed):\n    raise ValueError(f'no prompts for seed {seed}')\n",
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalerl",
            "train",
            "--no-progress",
            "--run-dir",
            str(tmp_path / "run"),
            "--set",
            "model.name=tiny-random",
            "--set",
            "task.type=python",
            "--set",
            f"task.path={path}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    line, frames = _told(proc.stderr, path)
    raised = _line(path, "raise ValueError")
    assert proc.returncode == 2
    assert line == (
        f"scalerl: error: task.path '{path}': T.prompts(0) raised ValueError: no prompts for seed 0 "
        f"({path}:{raised} in helper)"
    )
    assert frames == [f'  File "{path}", line 3, in prompts', f'  File "{path}", line {raised}, in helper']


def test_a_ray_that_times_out_starting_for_fsdp_ranks_without_the_ray_backend_is_one_line(
    tmp_path, capsys, monkeypatch
):
    """The issue's other case: trainer.strategy=fsdp, ray.trainers=2, no --backend ray, on a machine too loaded
    for Ray's 30 s start (Ray's own exception, raised by a stand-in for `ray.init`)."""
    import ray

    def timed_out(**kwargs):
        raise Exception(
            "The current node timed out during startup. This could happen because some of the "
            "raylet failed to startup or the GCS has become overloaded."
        )

    monkeypatch.setattr(ray, "init", timed_out)
    code, _, err = _train(capsys, tmp_path, "trainer.strategy=fsdp", "ray.trainers=2", "ray.num_cpus=2")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.strip() == (
        "scalerl: error: a local Ray (2 CPUs) for 2 trainer rank actors (trainer.strategy fsdp with ray.trainers = 2 "
        "runs its ranks as Ray actors, with or without --backend ray) could not start: Exception: The current node "
        "timed out during startup. This could happen because some of the raylet failed to startup or the GCS has "
        "become overloaded.; rerun when the machine is less loaded, or start Ray first (`ray start --head`, which "
        "waits as long as it takes) and add --set ray.address=auto"
    )


def test_a_task_class_whose_constructor_raises(tmp_path, capsys):
    path = _task(tmp_path, extra="\n\nclass U(T):\n    def __init__(self, size):\n        self.size = int(size)\n")
    code, _, err = _train(capsys, tmp_path, "task.type=python", f"task.path={path}:U", "task.options={size: big}")
    line, frames = _told(err, path)
    at = _line(path, "int(size)")
    assert code == 2 and line == (
        f"scalerl: error: task.path '{path}:U': U(**{{'size': 'big'}}) raised ValueError: "
        f"invalid literal for int() with base 10: 'big' ({path}:{at} in __init__)"
    )
    assert frames == [f'  File "{path}", line {at}, in __init__']


def test_a_prompt_generator_that_fails_part_way_an_os_error_of_the_users(tmp_path, capsys):
    """An OSError raised by the user's code is theirs (not a full disk's one-line advice, not a traceback)."""
    path = _task(tmp_path, prompts="        yield ('1 + 1 =', '2')\n        open('/no/such/prompts.txt')")
    code, _, err = _train(capsys, tmp_path, "task.type=python", f"task.path={path}")
    line, frames = _told(err, path)
    assert code == 2 and line == (
        f"scalerl: error: task.path '{path}': T.prompts(0) raised FileNotFoundError: "
        f"[Errno 2] No such file or directory: '/no/such/prompts.txt' ({path}:4 in prompts)"
    )
    assert frames == [f'  File "{path}", line 4, in prompts']


def test_a_task_file_that_fails_on_import_through_a_module_of_the_users(tmp_path, capsys, monkeypatch):
    helper = tmp_path / "myhelpers.py"
    helper.write_text("TABLE = {}\nFIRST = TABLE['first']\n")
    path = tmp_path / "mytask.py"
    path.write_text("import myhelpers\n\n" + TASK.format(prompts=GOOD_PROMPTS, check=GOOD_CHECK))
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _, err = _train(capsys, tmp_path, "task.type=python", f"task.path={path}")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and lines[0] == (
        f"scalerl: error: task.path '{path}': importing {path} raised KeyError: 'first' ({helper}:2 in <module>)"
    ), err
    assert [ln for ln in lines if ln.startswith("  File ")] == [
        f'  File "{path}", line 1, in <module>',
        f'  File "{helper}", line 2, in <module>',
    ]
    assert PACKAGE not in err and "importlib" not in err


def test_a_check_that_raises_is_that_answers_error_naming_the_file_and_line(tmp_path):
    """A check is called in the scoring thread; what it raises is the completion's error (counted, and the
    step's one line when every answer of a batch failed: the next test), naming where it raised."""
    from scalerl.config import RewardConfig, task_config
    from scalerl.rewards import RewardFn
    from scalerl.tasks import get_task
    from scalerl.types import Completion

    path = _task(tmp_path, check="        return 1 / 0 > answer.count(reference)")
    task = get_task(task_config(type="python", path=str(path), train_size=32, val_size=4))
    prompt = task.val_prompts(1)[0]
    answer = Completion("c", prompt.id, [], [], [], [], text="<answer>2</answer>", finish_reason="eos")
    score = pickle.loads(pickle.dumps(RewardFn(task, RewardConfig())(prompt, answer)))  # as a process passes it
    at = _line(path, "1 / 0")
    assert score.error == (
        f"RuntimeError: task.path {path}: T.check raised ZeroDivisionError: division by zero ({path}:{at} in check)"
    )
    assert score.error.frames == ((str(path), at, "check", "return 1 / 0 > answer.count(reference)"),)


def _cli_train(tmp_path: Path, *sets: str) -> subprocess.CompletedProcess:
    """`python -m scalerl train` on tiny-random, as a user types it, in a process of its own."""
    args = [
        "train",
        "--no-progress",
        "--run-dir",
        str(tmp_path / "run"),
        "--max-steps",
        "2",
        *SETS,
        "--set",
        "task.train_size=32",
        "--set",
        "task.val_size=4",
        "--set",
        "filter.zero_variance=false",
    ]
    return subprocess.run(
        [sys.executable, "-m", "scalerl", *args, *(a for s in sets for a in ("--set", s))],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore::UserWarning"},
    )


def _kept(run: Path) -> list[dict]:
    """The metrics rows a failed run kept."""
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_reward_function_that_raises_on_every_answer_stops_the_step_naming_it_and_keeps_the_rows(tmp_path):
    """The function runs in the generator's scoring threads: its error reaches the trainer with the user's frames."""
    reward = tmp_path / "myreward.py"
    reward.write_text("def score(prompts, completions, answer, **kw):\n    return [float(completions[0]['text'])]\n")
    proc = _cli_train(tmp_path, f"reward.function={reward}:score")
    line, frames = _told(proc.stderr, reward)
    run = tmp_path / "run"
    assert proc.returncode == 2 and line.startswith(
        "scalerl: error: step 1: the reward failed on all 8 answers of the batch (first error: "
        f"reward.function {reward}:score raised on "
    ), proc.stderr
    assert f": TypeError: string indices must be integers, not 'str' ({reward}:2 in score));" in line
    assert frames == [f'  File "{reward}", line 2, in score']
    assert [r["kind"] for r in _kept(run)] == ["eval"]  # the step-0 evaluation, written before: still there
    assert line.endswith(f"; what the run wrote is kept in {run} (continue it: --resume --run-dir {run})")


def test_a_reward_function_that_raises_in_a_generator_process_crosses_to_the_trainer_with_its_frames(tmp_path):
    """The function raises in the scoring thread of a generator process (`pipeline.transport=process`): the
    step's line (in the trainer's process) names the file, the function and the exception, then its frames."""
    reward = tmp_path / "myreward.py"
    reward.write_text(
        "def score(prompts, completions, answer, **kw):\n    return [parse(completions[0])]\n\n\n"
        "def parse(text):\n    return {}[text[:0]]\n"
    )
    proc = _cli_train(tmp_path, f"reward.function={reward}:score", "pipeline.transport=process")
    line, frames = _told(proc.stderr, reward)
    assert proc.returncode == 2 and line.startswith(
        "scalerl: error: step 1: the reward failed on all 8 answers of the batch (first error: "
        f"reward.function {reward}:score raised on "
    ), proc.stderr
    assert f": KeyError: '' ({reward}:6 in parse));" in line
    assert frames == [f'  File "{reward}", line 2, in score', f'  File "{reward}", line 6, in parse']
    assert [r["kind"] for r in _kept(tmp_path / "run")] == ["eval"]


def test_a_loss_of_the_users_that_raises_is_one_line_then_its_frames_and_the_steps_before_stay(tmp_path):
    """loss.function (docs/losses.md) raising at the second step, in the trainer: step 1's row and checkpoint
    stay, and the line says so."""
    path = tmp_path / "myloss.py"
    run = tmp_path / "run"
    path.write_text(
        "import os\n\n\ndef reinforce(logprobs, gen_logprobs, advantages, mask):\n"
        "    return advantages[:, None] * logprobs / check()\n\n\n"
        f"def check(first={str(run / 'checkpoints' / 'step_000001')!r}):\n"
        "    if os.path.isdir(first):\n"
        "        raise ValueError('a checkpoint is written')\n    return 1.0\n"
    )
    proc = _cli_train(tmp_path, "loss.type=custom", f"loss.function={path}:reinforce", "run.checkpoint_every=1")
    line, frames = _told(proc.stderr, path)
    at = _line(path, "raise ValueError")
    assert proc.returncode == 2 and line == (
        f"scalerl: error: loss.function '{path}:reinforce': reinforce raised ValueError: a checkpoint is written "
        f"({path}:{at} in check); "
        f"what the run wrote is kept in {run} (continue it: --resume --run-dir {run})"
    ), proc.stderr
    assert frames == [f'  File "{path}", line 5, in reinforce', f'  File "{path}", line {at}, in check']
    assert [(r["kind"], r["step"]) for r in _kept(run) if r["kind"] == "train"] == [("train", 1)]
    assert (run / "checkpoints" / "step_000001").is_dir()


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("{path}:nope", "loss.function '{path}:nope': {path} has no function 'nope'"),
        ("{tmp}/missing.py:f", "loss.function '{tmp}/missing.py:f': no such file '{tmp}/missing.py'"),
        (
            "myloss.py:two",
            "loss.function '{path}:two': two(a, b) cannot be called as (logprobs, gen_logprobs, advantages, "
            "mask): missing a required argument: 'a'",
        ),
    ],
)
def test_a_loss_function_that_cannot_be_called_is_one_line_before_anything_is_built(tmp_path, spec, expected):
    path = tmp_path / "myloss.py"
    path.write_text("def two(a, b):\n    return a\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalerl",
            "train",
            "--run-dir",
            str(tmp_path / "run"),
            "--set",
            "loss.type=custom",
            "--set",
            "loss.function=" + spec.format(path=path, tmp=tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2 and proc.stderr.strip() == "scalerl: error: " + expected.format(path=path, tmp=tmp_path)


def _raise_from(path: Path, source: str) -> Exception:
    """The exception `source` raises, compiled as the file `path` (a frame of the user's)."""
    try:
        exec(compile(source, str(path), "exec"), {})
    except Exception as exc:  # the exception under test, returned from the frames of `path` on
        return exc.with_traceback(exc.__traceback__.tb_next)
    raise AssertionError("no exception")


def test_any_exception_of_the_users_code_is_told_so_and_scalerls_own_keep_their_traceback(tmp_path, capsys):
    path = tmp_path / "mine.py"
    exc = _raise_from(path, "def f():\n    return {}['k']\n\nf()\n")
    assert report(exc) == 2
    line, frames = _told(capsys.readouterr().err, path)
    assert line == f"scalerl: error: mine.py: f raised KeyError: 'k' ({path}:2 in f)"
    assert frames == [f'  File "{path}", line 4, in <module>', f'  File "{path}", line 2, in f']
    own = _raise_from(ROOT / "scalerl" / "loop.py", "raise KeyError('scalerl bug')\n")
    assert report(own) is None and capsys.readouterr().err == ""  # re-raised by main: the full traceback


@pytest.mark.parametrize(
    "fail, expected",
    [
        (
            ConnectionError("Could not find any running Ray instance."),
            "Ray at ray.address = 10.0.0.9:6379 could not start: "
            "ConnectionError: Could not find any running Ray instance.; "
            "check that `ray status` there shows the cluster, or leave ray.address unset for a local Ray",
        ),
    ],
)
def test_a_ray_cluster_that_cannot_be_reached_is_one_line(fail, expected, monkeypatch):
    import ray

    from scalerl.assembly.ray_session import RaySession
    from scalerl.configure import load_config
    from scalerl.errors import ScaleRLError

    def init(**kwargs):
        raise fail

    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(ScaleRLError) as err:
        RaySession(load_config("scalerl", overrides=["ray.address=10.0.0.9:6379"]))
    assert str(err.value) == expected


def test_a_user_code_error_crosses_a_process_whole(tmp_path):
    """What a generator process or a Ray actor sends the trainer (pickled): the line, the user's frames, the notes."""
    from scalerl.errors import UserCodeError, user_report

    path = tmp_path / "mine.py"
    err = UserCodeError("task.path 'mine.py': T.prompts(0)", _raise_from(path, "def f():\n    return 1 / 0\n\nf()\n"))
    err.add_note("what the run wrote is kept")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, UserCodeError) and user_report(back) == user_report(err) == (
        f"task.path 'mine.py': T.prompts(0) raised ZeroDivisionError: division by zero ({path}:2 in f); what the run "
        f'wrote is kept\n  File "{path}", line 4, in <module>\n  File "{path}", line 2, in f\n'
    )
