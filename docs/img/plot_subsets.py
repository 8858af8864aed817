"""Per-subset validation curves of runs (`val/pass_rate/<subset>` against `compute/flops`), one
panel per run: `python docs/img/plot_subsets.py OUT.png RUN_DIR [RUN_DIR ...]` (a run directory or
a study results folder's `<config>/seed<N>`). Draws docs/img/ladder-subsets.png from the committed
controls study (docs/study.md)."""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def curves(run: Path) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("kind") != "eval":
            continue
        for key, value in row.items():
            if key == "val/pass_rate" or key.startswith("val/pass_rate/"):
                out.setdefault(key.removeprefix("val/pass_rate").lstrip("/") or "all", []).append(
                    (row["compute/flops"], value)
                )
    return out


def main(out: str, runs: list[str]) -> None:
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.4), squeeze=False, sharey=True)
    for ax, run in zip(axes[0], runs):
        for name, points in sorted(curves(Path(run)).items()):
            x, y = zip(*points)
            ax.plot(x, y, "o-" if name == "all" else ".-", lw=2 if name == "all" else 1, ms=3, label=name)
        ax.set_title("/".join(Path(run).parts[-3:]), fontsize=9)
        ax.set_xlabel("compute/flops")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation pass rate")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
