"""The frozen first-half forecast pooled over several study reports, each distinct run counted once.

    python studies/pool_predictability.py studies/axes-report=studies/axes \\
        studies/controls-b2-report=studies/controls-b2 studies/recipes-report=studies/recipes

Each argument is REPORT=RESULTS: a report folder (its report.json, written by `scalerl ablate
--report-only`) and the results folder it was made from. A run shared by two studies (the recipes
study's `scalerl` runs are the axes study's `base`) has identical metrics in both: it is counted once
(SHA-256 of its metrics.jsonl). Runs that fell after their peak (`find_fall`) are left out, as the
issue's standard asks; the two baselines are the report's (the last and the best first-half evaluation).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def main(args: list[str]) -> None:
    if not args or any("=" not in a for a in args):
        sys.exit("usage: pool_predictability.py REPORT=RESULTS [REPORT=RESULTS ...]")
    seen: set[str] = set()
    rows = []
    for arg in args:
        report, results = (Path(x) for x in arg.split("=", 1))
        data = json.loads((report / "report.json").read_text())
        for c in data["configs"]:
            for r in c["runs"]:
                metrics = results / c["name"] / f"seed{r['seed']}" / "metrics.jsonl"
                if not r["finished"] or not metrics.is_file():
                    continue
                digest = hashlib.sha256(metrics.read_bytes()).hexdigest()
                if digest in seen:
                    continue
                seen.add(digest)
                fh = r["first_half"]
                if fh and "error" in fh:
                    rows.append((fh, bool(r["fall"] and r["fall"].get("fell"))))
    standing = [fh for fh, fell in rows if not fell]
    if not standing:
        sys.exit("pool_predictability.py: no finished run with a first-half forecast in the reports given")
    print(f"{len(rows)} distinct finished runs, {len(rows) - len(standing)} fell; over the {len(standing)} standing:")
    for key, label in (
        ("error", "frozen forecast"),
        ("baseline_last_error", "last first-half evaluation"),
        ("baseline_best_error", "best first-half evaluation"),
    ):
        err = [abs(fh[key]) for fh in standing]
        near = sum(e <= 0.02 for e in err)
        print(f"  {label}: within 0.02 on {near} ({near / len(err):.0%}), mean |error| {sum(err) / len(err):.3f}")
    print(f"  the forecast beat both baselines on {sum(bool(fh['beat_baselines']) for fh in standing)}")


if __name__ == "__main__":
    main(sys.argv[1:])
