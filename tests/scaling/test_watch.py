"""`scalerl watch` against a real writer process: points appended one by one (each line written in
two pieces, so the watch sees torn last lines), refits as they arrive, stops cleanly on Ctrl-C, and
its last forecast is the fit of the whole curve."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from scalerl.cli import main

WRITER = r"""
import json, sys, time
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    for i in range(n):
        c = 250.0 * i
        y = 0.4 + 0.2 / (1 + (2500 / c) ** 2) if c else 0.4
        row = {"step": i, "compute/device_hours": c, "val/pass_rate": round(y + 0.004 * (-1) ** i, 5)}
        line = json.dumps(row) + "\n"
        pause = 0.15 if i < 6 else 0.03  # slowly at first: the watch sees too few points to fit
        f.write(line[:12]); f.flush(); time.sleep(pause)   # a torn last line, for a moment
        f.write(line[12:]); f.flush(); time.sleep(pause)
"""
OPTS = ["--bootstrap", "20", "--seed", "3", "--no-grid-check"]


def _kill_if_running(proc) -> None:
    """A failing test leaves no `scalerl watch` behind."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


class _Output:
    """A process's output lines as they come (a reader thread), and a wait for a line that says something."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in iter(stream.readline, ""):
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    def wait_for(self, said, what: str, timeout_s: float = 240) -> None:
        """Until a line satisfies `said`; fails naming `what` after `timeout_s` (an upper bound only)."""
        with self.cond:
            assert self.cond.wait_for(lambda: any(said(ln) for ln in self.lines), timeout_s), (
                f"the watch said no {what} within {timeout_s:g} s: {self.lines[-3:]}"
            )


def _row(i: int) -> str:
    c = 250.0 * i
    y = 0.4 + 0.2 / (1 + (2500 / c) ** 2) if c else 0.4
    return json.dumps({"step": i, "compute/device_hours": c, "val/pass_rate": round(y + 0.004 * (-1) ** i, 5)}) + "\n"


def _evaluations(n: int):
    return lambda line: json.loads(line)["n_evaluations"] == n


def test_watch_follows_a_writer_and_ends_on_the_whole_curve_fit(tmp_path, capsys):
    """The test writes the log in the watch's lockstep: each part once the watch has said it read the last
    (too few points, with a torn last line; then a fit on 15; then on all 30): refits as points arrive."""
    log, plot, n = tmp_path / "metrics.jsonl", tmp_path / "watch.png", 30
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # this checkout's scalerl
    watch = subprocess.Popen(
        [sys.executable, "-m", "scalerl", "watch", str(log), "--every", "0.1", "--json", "--plot", str(plot), *OPTS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    out, err_out = _Output(watch.stdout), _Output(watch.stderr)
    try:  # whatever fails below, no watch is left running
        err_out.wait_for(lambda line: "to appear" in line, "waiting for the log to appear")
        with open(log, "w") as f:
            f.write("".join(_row(i) for i in range(3)) + _row(3)[:12])  # 3 points and a torn last line
            f.flush()
            err_out.wait_for(lambda line: "waiting for more evaluations (3 so far)" in line, "wait on 3 points")
            f.write(_row(3)[12:] + "".join(_row(i) for i in range(4, 15)))
            f.flush()
            out.wait_for(_evaluations(15), "fit on 15 evaluations")
            f.write("".join(_row(i) for i in range(15, n)))
            f.flush()
        out.wait_for(_evaluations(n), f"fit on {n} evaluations")
        watch.send_signal(signal.SIGINT)
        watch.wait(timeout=120)
    finally:
        _kill_if_running(watch)
    for r in (out, err_out):
        r.thread.join(timeout=30)
    lines, errs = out.lines, err_out.lines
    err = "".join(errs)
    assert watch.returncode == 0 and "Traceback" not in err and "watch: stopped" in err, err
    updates = [json.loads(line) for line in lines]
    counts = [u["n_evaluations"] for u in updates]
    assert len(updates) >= 2 and counts == sorted(set(counts)) and counts[-1] == n  # refits as points arrive
    assert "waiting for more evaluations" in err  # the first points were too few to fit
    code = main(["fit", str(log), "--json", *OPTS])
    whole = json.loads(capsys.readouterr().out)
    assert code == 0
    last = updates[-1]
    for key in ("A", "B", "C_mid", "R0", "ci", "n_points", "window", "verdict"):
        assert last[key] == whole[key], key
    assert plot.stat().st_size > 10_000 and not list(tmp_path.glob(".*partial*"))


def test_watch_refuses_nonsense(tmp_path, capsys):
    code = main(["watch", str(tmp_path / "m.jsonl"), "--every", "0"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--every 0" in err
    code = main(["watch", str(tmp_path / "m.jsonl"), "--compute", "tokens"])
    assert code == 2 and "--compute tokens needs --params" in capsys.readouterr().err


def test_watch_block_shows_parameters_intervals_and_2x_10x(tmp_path, capsys):
    from scalerl.cli import build_parser
    from scalerl.commands.fit import options
    from scalerl.commands.watch import _update

    log = tmp_path / "m.jsonl"
    subprocess.run([sys.executable, "-c", WRITER.replace("time.sleep(pause)", "pass"), str(log), "30"], check=True)
    args = build_parser().parse_args(["watch", str(log), *OPTS])
    state: dict = {}
    _update(args, options(args), state)
    out = capsys.readouterr().out
    number = r"\d[\d,.]*"
    assert re.search(
        rf"30 evaluations: A {number} \({number} \.\. {number}\), B {number} \({number} \.\. {number}\), "
        rf"C_mid {number} \({number} \.\. {number}\)",
        out,
    ), out
    assert "2x the compute (14,500)" in out and "10x the compute (72,500)" in out and "=> " in out
    _update(args, options(args), state)  # nothing new: nothing printed
    assert capsys.readouterr().out == ""


def test_watch_follows_a_tensorboard_file_being_appended(tmp_path, capsys):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from scalerl.cli import build_parser
    from scalerl.commands.fit import options
    from scalerl.commands.watch import _update

    writer = EventFileWriter(str(tmp_path))
    args = build_parser().parse_args(
        ["watch", str(tmp_path), "--from", "trl", "--compute", "wall", "--devices", "2", "--json", *OPTS]
    )
    o, state, counts = options(args), {}, []
    for step in range(0, 40, 2):
        c = 60.0 * step  # seconds since the start: 2 devices -> step / 30 device-hours
        y = 0.4 + 0.2 / (1 + (1500 / c) ** 2) if c else 0.4
        for tag, value in (("train/loss", 0.1), ("eval/reward", y + 0.003 * (-1) ** (step // 2))):
            summ = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(event_pb2.Event(step=step, wall_time=1e9 + c, summary=summ))
        writer.flush()
        _update(args, o, state)
        counts += [json.loads(line)["n_evaluations"] for line in capsys.readouterr().out.splitlines()]
    writer.close()
    assert counts == list(range(6, 21))  # a refit at every new evaluation once 5 are past step 0
    code = main(["fit", str(tmp_path), "--from", "trl", "--compute", "wall", "--devices", "2", "--json", *OPTS])
    assert code == 0 and state["n"] == 20
    assert json.loads(capsys.readouterr().out)["compute"]["source"] == "TensorBoard event wall times"


def test_watch_stops_on_sigint_even_when_started_with_the_signals_blocked(tmp_path):
    """A parent that blocked SIGINT/SIGTERM (a test runner's worker, a supervisor) passes its mask
    to its children through exec: the watch unblocks them, so Ctrl-C still ends it."""
    log = tmp_path / "metrics.jsonl"
    log.write_text(
        "".join(
            json.dumps(
                {
                    "step": i,
                    "compute/device_hours": 250.0 * i,
                    "val/pass_rate": 0.4 + 0.2 / (1 + (2500 / (250.0 * i)) ** 2) if i else 0.4,
                }
            )
            + "\n"
            for i in range(12)
        )
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PYTHONUNBUFFERED": "1"}
    blocked = {signal.SIGINT, signal.SIGTERM}
    watch = subprocess.Popen(
        [sys.executable, "-m", "scalerl", "watch", str(log), "--every", "0.1", *OPTS],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, blocked),
    )
    errs: list[str] = []
    reader = threading.Thread(target=lambda: errs.extend(iter(watch.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        mask = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (mask and not mask & blocked):
            status = Path(f"/proc/{watch.pid}/status").read_text()
            bits = int(re.search(r"SigBlk:\s*([0-9a-f]+)", status).group(1), 16)
            mask = {signal.Signals(n) for n in range(1, 64) if bits >> (n - 1) & 1} or {"none"}
            time.sleep(0.1)
        assert not mask & blocked, f"the watch kept {mask & blocked} blocked"
        watch.send_signal(signal.SIGINT)
        watch.wait(timeout=60)
    finally:
        _kill_if_running(watch)
    reader.join(timeout=5)
    assert watch.returncode == 0 and "watch: stopped" in "".join(errs), "".join(errs)
