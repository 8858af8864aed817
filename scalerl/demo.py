"""`make demo` / `python -m scalerl.demo`: forecast the example run shipped in `examples/`.

Fits the sigmoid of paper Eq. 1 to the first half of a synthetic 8B-ScaleRL-shaped run
(1,500 .. 8,000 GPU-hours), forecasts the end of the run (16,000) and beyond, says whether
doubling the compute at 8,000 was worth it (the verdict), compares the forecast with what the run
actually reached there, and plots it. Outputs go to `runs/demo/`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from scalerl.errors import ScaleRLError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "synthetic-8b"
X, Y = "compute/device_hours", "val/pass_rate"
FIT_MIN, HALF, FINAL = 1500.0, 8000.0, 16000.0


def main(out_dir: Path = Path("runs/demo")) -> int:
    from scalerl.scaling import fit_curve, plot_fits, read_metrics, summary
    from scalerl.scaling.outlook import outlook, verdict
    from scalerl.scaling.report import num, outlook_lines, verdict_lines

    x, y, _ = read_metrics(EXAMPLE, X, Y)
    predict = [FINAL, 2 * FINAL]
    half = fit_curve(x, y, fit_min=FIT_MIN, fit_max=HALF)
    full = fit_curve(x, y, fit_min=FIT_MIN)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_fits(
        [("fit to 8k", x, y, half), ("fit to 16k", x, y, full)],
        out_dir / "forecast.png",
        out_dir / "forecast_linearised.png",
        xlabel="GPU-hours",
        ylabel=Y,
        extend_to=2 * FINAL,
    )
    (out_dir / "fit.json").write_text(
        json.dumps({"fit_to_8k": half.to_dict(predict), "fit_to_16k": full.to_dict(predict)}, indent=2)
    )
    print(f"example: {EXAMPLE} (synthetic, see examples/README.md)\n")
    xh, yh = x[x <= HALF], y[x <= HALF]
    look = outlook(xh, yh, half)
    print(summary("fit on 1,500 .. 8,000 GPU-hours", half, (), "GPU-hours", "pass rate", ceiling=look.ceiling()))
    print(
        "\n".join(
            outlook_lines(
                {
                    "ceiling": look.ceiling(),
                    "identification": {"reason": look.ident["reason"]},
                    "predictions": look.predictions(predict),
                },
                "GPU-hours",
                "pass rate",
            )
        )
    )
    at_half = float(np.mean(y[(x > HALF - 250) & (x <= HALF)]))
    print("\n".join(verdict_lines(verdict(look, HALF, at_half), "GPU-hours")))
    observed = float(np.mean(y[x >= FINAL - 250]))  # the last three evaluations
    p = look.predictions([FINAL])[0]
    print(
        f"\n  the run then reached {observed:.3f} at {num(FINAL)} GPU-hours (mean of its last 3 evals); "
        f"forecast {p['y']:.3f} (calibrated 90% interval {p['lo']:.3f} .. {p['hi']:.3f}), "
        f"error {p['y'] - observed:+.3f}\n"
    )
    print(summary("fit on 1,500 .. 16,000 GPU-hours", full, predict, "GPU-hours", "pass rate"))
    print(f"\nwrote {out_dir}/forecast.png, {out_dir}/forecast_linearised.png, {out_dir}/fit.json")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ScaleRLError as exc:
        print(f"scalerl demo: error: {exc}", file=sys.stderr)
        sys.exit(2)
