"""Add `activity.json` to runs a study kept in small form before the file existed.

`scalerl.study.runner.archive_run` writes it now; for runs archived earlier (or by an older
checkout, as the recipes study's frozen one), it is made from the full run directory the small
form was cut from, found under the given run roots and matched by its identical `done.json`.

    .venv/bin/python studies/backfill_activity.py studies/recipes runs/recipes/runs runs/axes/runs:scalerl=base

A run directory that is itself a small form (restored from the results) is passed over.
`--refresh` (first) rewrites the file where it exists too (after `ACTIVITY_TRAIN_KEYS` grew).

A root written `DIR:name=other` looks for configuration `name` under `DIR/other` (the recipes
study's `scalerl` runs are the axes study's `base` runs, copied).
"""

from __future__ import annotations

import sys
from pathlib import Path

from scalerl.run.metrics import read_rows
from scalerl.study.activity import summarise_activity
from scalerl.study.runner import ACTIVITY_FILE, DONE_FILE, write_activity


def candidates(cfg: str, seed: str, roots: list[str]) -> list[Path]:
    out = []
    for root in roots:
        path, _, alias = root.partition(":")
        name, _, other = alias.partition("=")
        if not alias:
            out.append(Path(path) / cfg / seed)
        elif name == cfg:
            out.append(Path(path) / other / seed)
    return out


def main(argv: list[str]) -> int:
    refresh = bool(argv) and argv[0] == "--refresh"
    argv = argv[refresh:]
    if len(argv) < 2:
        print(__doc__)
        return 2
    results, roots = Path(argv[0]), argv[1:]
    added = missing = 0
    for kept in sorted(results.glob(f"*/seed*/{DONE_FILE}")):
        kept = kept.parent
        if (kept / ACTIVITY_FILE).is_file() and not refresh:
            continue
        full = [
            c
            for c in candidates(kept.parent.name, kept.name, roots)
            if (c / DONE_FILE).is_file() and (c / DONE_FILE).read_bytes() == (kept / DONE_FILE).read_bytes()
        ]
        if not full:
            print(f"{kept}: no full run with the same {DONE_FILE} under {', '.join(roots)}")
            missing += 1
            continue
        whole = [
            (c, rows)
            for c in full
            for rows in [read_rows(c / "metrics.jsonl")]
            if (s := summarise_activity(rows)) is not None and s["steps"] >= s["last_step"]
        ]
        if not whole:  # e.g. a copy the study restored from this same small form
            print(f"{kept}: its runs under {', '.join(roots)} keep only the last training step")
            missing += 1
            continue
        write_activity(whole[0][1], kept)
        print(f"{kept}: {ACTIVITY_FILE} from {whole[0][0]}")
        added += 1
    print(f"{added} added, {missing} without their full run")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
