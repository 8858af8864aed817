"""`scalerl check RUN --against RESULTS`: a run against the band of a configuration's committed runs
(the default run's regression check in CI; scalerl/study/band.py has the method)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "is a run within the band of its configuration's committed runs (curve, end, staleness)? exit 1 if not"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", type=Path, metavar="RUN", help="the run directory to check")
    p.add_argument(
        "--against",
        type=Path,
        required=True,
        metavar="DIR",
        help="one configuration's reference runs (<DIR>/seed<N>/ with metrics.jsonl, done.json), "
        "e.g. studies/default/base",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of lines")


def run(args: argparse.Namespace) -> int:
    from scalerl.models import weights_id
    from scalerl.run.rundir import read_run_config
    from scalerl.study.band import check, lines, read_curve, read_references

    refs = read_references(args.against)
    curve = read_curve(args.run)
    build = curve.build or weights_id(str(read_run_config(args.run)["model"]["name"]))
    out = check(curve, refs, build)
    print(json.dumps(out, indent=1) if args.json else "\n".join(lines(out)))
    return 0 if out["ok"] else 1
