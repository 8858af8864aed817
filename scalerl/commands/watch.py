"""`scalerl watch`: follow a run's log while another process writes it, and refit as evaluations arrive.

Every `--every` seconds the log is looked at (size and time of its files); when it changed, it
is read again (a torn last JSONL line is the normal state of a file being written: skipped, and
read whole on the next look; TensorBoard event files are read to their last complete record), and
when it holds more evaluations than at the last fit, the curve is refitted with the options of
`scalerl fit`: A, B, C_mid with their intervals and the value forecast at 2x and 10x the current
compute are printed (one JSON object per line with `--json`) and the plot is rewritten (in place,
atomically). Ctrl-C stops it cleanly (exit 0). With `--budget C` each refit also gives the gain
left to C and the stop rule (`scalerl.scaling.stop`): when the upper end of the gain's 90%
interval is below `--stop-when` (0.02), the watch runs `--on-stop CMD` once and ends (exit 0).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from scalerl.commands.fit import (
    add_decision_arguments,
    add_fitting_arguments,
    add_reading_arguments,
    check_plot_path,
    decision_lines,
    options,
)

HELP = "follow a run's log while it is written and refit the forecast as evaluations arrive"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="run directory, .jsonl / .csv log, or TensorBoard log folder")
    p.add_argument(
        "--every", type=float, default=30.0, metavar="SECONDS", help="look at the log this often (default: %(default)s)"
    )
    add_reading_arguments(p)
    add_fitting_arguments(p)
    p.add_argument("--plot", default=None, metavar="FILE.png", help="rewrite this plot at every refit")
    p.add_argument("--json", action="store_true", help="print one JSON object per refit (JSON lines)")
    add_decision_arguments(p)
    p.add_argument(
        "--on-stop",
        default=None,
        metavar="CMD",
        help="with --budget: when the stop rule fires, run this shell command once (e.g. 'kill -INT "
        "<trainer pid>' or 'touch STOP') and end the watch",
    )


def _signature(path: Path) -> tuple:
    """What changes when the log grows: (name, size, mtime) of its files."""
    if not path.exists():
        return ()
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
    out = []
    for f in files:
        try:
            st = f.stat()
        except FileNotFoundError:  # removed between listing and stat: seen on the next look
            continue
        out.append((str(f), st.st_size, st.st_mtime_ns))
    return tuple(out)


def _say(args: argparse.Namespace, text: str, state: dict) -> None:
    """A waiting / skipped message, printed once until it changes (to stderr with --json)."""
    if state.get("said") != text:
        state["said"] = text
        print(f"watch: {text}", file=sys.stderr if args.json else sys.stdout, flush=True)


def _rewrite_plot(plot: str, series, fit) -> None:
    from scalerl.scaling import plot_fits

    path = Path(plot)
    tmp = path.with_name(f".{path.stem}.partial{path.suffix}")
    plot_fits([(series.y_name, series.x, series.y, fit)], tmp, xlabel=series.x_name, ylabel=series.y_name)
    os.replace(tmp, path)


def _show(args: argparse.Namespace, out: dict, n: int) -> None:
    if args.json:
        print(json.dumps({**out, "n_evaluations": n}, allow_nan=False), flush=True)
        return
    from scalerl.scaling.report import num, verdict_lines

    ci = out["ci"]

    def band(name: str, fmt=lambda v: f"{v:.3f}") -> str:
        return f" ({fmt(ci[name][0])} .. {fmt(ci[name][1])})" if ci.get(name) else ""

    ceiling = out.get("ceiling") or {}
    a = (
        f"A >= {ceiling['lower_bound']:.3f} (not identified)"
        if ceiling.get("lower_bound") is not None and not ceiling.get("identified")
        else f"A {out['A']:.3f}{band('A')}"
    )
    line = f"[{time.strftime('%H:%M:%S')}] {n} evaluations: {a}, B {out['B']:.2f}{band('B', lambda v: f'{v:.2f}')}"
    if out.get("C_mid") is not None:
        line += f", C_mid {num(out['C_mid'])}{band('C_mid', num)}"
    lines = [line] + ([f"  {out['ceiling']['text']}"] if out.get("ceiling") else [])
    lines += verdict_lines(out["verdict"], out["x"]) if "verdict" in out else []
    lines += decision_lines(out)
    lines += [f"  warning: {w}" for w in out["warnings"]]
    print("\n".join(lines), flush=True)


def _update(args: argparse.Namespace, o, state: dict) -> None:
    """Read the log again; refit when it holds more evaluations than at the last fit."""
    from scalerl.errors import ScaleRLError
    from scalerl.scaling.forecast import fit_series, forecast_dict, read

    try:
        series = read(args.path, o)
    except ScaleRLError as exc:
        _say(args, f"waiting: {exc}", state)
        return
    n = int(series.x.size)
    if n == state.get("n"):
        return
    state["n"] = n
    try:
        fit = fit_series(series, o)
    except ScaleRLError as exc:
        _say(args, f"waiting for more evaluations ({n} so far): {exc}", state)
        return
    state["said"] = None
    out = forecast_dict(series, fit, o)
    _show(args, out, n)
    if args.plot:
        _rewrite_plot(args.plot, series, fit)
    if out.get("budget", {}).get("stop"):
        _act(args, out["budget"], state)


ON_STOP_TIMEOUT_S = 60.0


def _act(args: argparse.Namespace, decision: dict, state: dict) -> None:
    """The stop rule fired: say so, run --on-stop (if given) and end the watch."""
    import subprocess

    from scalerl.errors import ScaleRLError

    print(f"watch: the stop rule fired ({decision['text']})", file=sys.stderr if args.json else sys.stdout, flush=True)
    state["stopped"] = True
    if not args.on_stop:
        return
    try:
        done = subprocess.run(args.on_stop, shell=True, timeout=ON_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise ScaleRLError(f"--on-stop {args.on_stop!r} did not finish within {ON_STOP_TIMEOUT_S:g} s") from exc
    if done.returncode != 0:
        raise ScaleRLError(f"--on-stop {args.on_stop!r} exited with status {done.returncode}")
    print(f"watch: ran --on-stop {args.on_stop!r}", file=sys.stderr if args.json else sys.stdout, flush=True)


def run(args: argparse.Namespace) -> int:
    from scalerl.errors import ScaleRLError

    if not (args.every > 0):
        raise ScaleRLError(f"--every {args.every:g}: expected a positive number of seconds")
    o = options(args)
    if args.on_stop and args.budget is None:
        raise ScaleRLError("--on-stop needs --budget C: the stop rule compares the gain left to the budget")
    check_plot_path(args.plot)
    path, state, seen = Path(args.path), {}, None
    # Ctrl-C and a plain `kill` stop it cleanly, even when started where SIGINT is ignored
    # (a background job of a non-interactive shell, nohup): Python then installs no handler; and a
    # parent that blocked the signals (its children inherit the mask) must not make it unstoppable.
    # The first signal sets a flag that the loop reads between refits; raising KeyboardInterrupt
    # from the handler instead lost the signal whenever it landed in a garbage-collection callback
    # (matplotlib's weak references), where Python prints "Exception ignored" and carries on:
    # the watch then ran on. A second signal interrupts whatever is running.
    stop: list[int] = []  # a plain flag: a lock taken in a signal handler can deadlock the thread it interrupts

    def _stop(signum, frame):
        if stop:
            raise KeyboardInterrupt
        stop.append(signum)

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        while not stop and not state.get("stopped"):
            sig = _signature(path)
            if not sig:
                _say(args, f"waiting for {path} to appear", state)
            elif sig != seen:
                seen = sig
                _update(args, o, state)
            until = time.monotonic() + args.every
            while not stop and not state.get("stopped") and time.monotonic() < until:
                time.sleep(min(0.2, max(0.0, until - time.monotonic())))
    except KeyboardInterrupt:
        pass
    print("watch: stopped", file=sys.stderr, flush=True)
    return 0
