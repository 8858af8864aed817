"""What one run's forecast can and cannot tell: the point forecast, whether the data bound the
ceiling, and the calibrated interval, as every command prints them (docs/forecasting.md, "What a
forecast can and cannot tell").

    look = outlook(x, y, fit)          # fit: the one specification's fit of (x, y) (scaling.spec)
    look.identified, look.point(C), look.interval(C), look.gain(c_now, C), look.to_dict(predict)

The point forecast is the candidate chosen on the development half of
benchmarks/forecast_real.py (`calibration.json`'s `point`): `sigmoid` (the fitted curve) or
`blend` (its mean with the mean of the last three evaluations, beyond the data); the interval is
`scalerl.scaling.calibrate.band` around it; the identification `scalerl.scaling.identify`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalerl.scaling.calibrate import band, table
from scalerl.scaling.fit import TAIL_EVALS, FitResult
from scalerl.scaling.identify import identify, settle_text


@dataclass
class Outlook:
    fit: FitResult
    ident: dict
    c_last: float
    last3: float
    tab: dict

    @property
    def identified(self) -> bool:
        return bool(self.ident["identified"])

    def point(self, C) -> np.ndarray:
        """The point forecast at compute(s) `C`."""
        C = np.atleast_1d(np.asarray(C, dtype=float))
        curve = self.fit.predict(C)
        if self.tab["point"].startswith("blend"):
            beyond = C > self.c_last
            return np.where(beyond, (curve + self.last3) / 2, curve)
        return curve

    def interval(self, C) -> dict:
        """The calibrated 90% interval at compute(s) `C`: {lo, hi, beyond}."""
        C = np.atleast_1d(np.asarray(C, dtype=float))
        return band(self.point(C), self.fit, self.c_last, C, self.identified, self.tab)

    def gain(self, c_now: float, c_then: float) -> dict:
        """The gain from the level at `c_now` (the mean of the last three evaluations where
        `c_now` is the data's end, else the point forecast there) to `c_then`, with its calibrated
        interval: {compute, value, value_lo, value_hi, gain, lo, hi, beyond}."""
        at_end = abs(c_now - self.c_last) <= 1e-9 * max(1.0, abs(self.c_last))
        now = self.last3 if at_end else float(self.point([c_now])[0])
        then = float(self.point([c_then])[0])
        b = self.interval([c_then])
        lo, hi = float(b["lo"][0]), float(b["hi"][0])
        return {
            "compute": float(c_then),
            "value": then,
            "value_lo": lo,
            "value_hi": hi,
            "gain": then - now,
            "lo": lo - now,
            "hi": hi - now,
            "beyond": bool(b["beyond"][0]),
        }

    def ceiling(self) -> dict:
        """The ceiling as the data support it: the fitted A where identified, else a lower bound."""
        prof = self.ident["profile"]
        if self.identified:
            return {
                "identified": True,
                "A": self.fit.A,
                "profile": [prof["lo"], prof["hi"]],
                "text": f"ceiling A = {self.fit.A:.3f} (profile 90% interval {prof['lo']:.3f} .. {prof['hi']:.3f}):"
                " identified",
            }
        return {
            "identified": False,
            "A": None,
            "lower_bound": self.ident["lower_bound"],
            "fitted_A": self.fit.A,
            "text": "ceiling not identified: " + settle_text(self.ident, self.c_last),
        }

    def predictions(self, C) -> list[dict]:
        C = np.asarray(list(C), dtype=float)
        if C.size == 0:
            return []
        p, b, curve = self.point(C), self.interval(C), self.fit.predict(C)
        return [
            {
                "x": float(c),
                "y": float(p[i]),
                "lo": float(b["lo"][i]),
                "hi": float(b["hi"][i]),
                "curve": float(curve[i]),
                "beyond_calibration": bool(b["beyond"][i]),
            }
            for i, c in enumerate(C)
        ]

    def to_dict(self) -> dict:
        """The identification and the calibration used, for --json, fit.json and reports."""
        return {
            "identified": self.identified,
            "ceiling": self.ceiling(),
            "identification": {
                "rule": self.ident["rule"],
                "reason": self.ident["reason"],
                "profile_A": [self.ident["profile"]["lo"], self.ident["profile"]["hi"]],
                "tail_rise_per_doubling": self.ident["tail"]["upper"],
                "passed_midpoint": self.ident["passed_midpoint"],
            },
            "forecast_method": {
                "point": self.tab["point"],
                "interval": "calibrated (scalerl/scaling/calibration.json)",
                "level": self.tab.get("level", 0.9),
                "calibrated_up_to": float(np.exp(self.tab["h_max"])),
            },
        }


def outlook(x, y, fit: FitResult, tab: dict | None = None) -> Outlook:
    """The outlook of the run (`x`, `y`) whose one-specification fit is `fit`."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    seen = x <= fit.window[1]  # a held-out end (--fit-max) is not part of what the forecast knows
    x, y = x[seen], y[seen]
    tab = table() if tab is None else tab
    ident = identify(fit, x, y, fit_r0=bool(tab.get("fit_r0")), rule=tab["rule"])
    return Outlook(fit, ident, float(x[-1]), float(y[-TAIL_EVALS:].mean()), tab)


def half_fit(x, y, cut: float = 0.5, tab: dict | None = None) -> tuple[Outlook, np.ndarray, np.ndarray]:
    """The outlook from the evaluations with x <= cut * x[-1], fitted as benchmarks/forecast_real.py
    fits its candidates (the window of `scalerl fit`, the fast fit without the grid check)."""
    from scalerl.scaling.fit import fit_curve, window_start

    tab = table() if tab is None else tab
    keep = x <= cut * x[-1]
    xc, yc = x[keep], y[keep]
    fit = fit_curve(xc, yc, fit_min=window_start(xc, 0.1), fit_r0=bool(tab.get("fit_r0")), n_bootstrap=0, seed=0)
    return outlook(xc, yc, fit, tab), xc, yc


def first_half_check(x, y, tab: dict | None = None) -> dict | None:
    """The first-half check as every command prints it: the frozen method's figures
    (`scalerl.scaling.fit.first_half_check`: its fit's prediction and the naive baselines), with the
    default point forecast (`predicted`, `error`; the frozen fit's as `frozen_predicted`,
    `frozen_error`), its calibrated 90% interval (`interval`, `covered`), whether the first half
    identified the ceiling (`identified`), and the mean of the first half's last three evaluations
    (`baseline_last3`, `baseline_last3_error`). None where the first half holds too few
    evaluations; {"error_reason": ...} where a fit fails."""
    from scalerl.errors import ScaleRLError
    from scalerl.scaling.fit import first_half_check as frozen_check

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    h = frozen_check(x, y)
    if h is None or "error_reason" in h:
        return h
    try:
        look, xc, yc = half_fit(x, y, 0.5, tab)
    except ScaleRLError as exc:
        return {"error_reason": str(exc)}
    at = x[-TAIL_EVALS:]
    pred = float(np.mean(look.point(at)))
    b = band(pred, look.fit, look.c_last, [float(at.mean())], look.identified, look.tab)
    lo, hi = float(b["lo"][0]), float(b["hi"][0])
    last3 = float(yc[-TAIL_EVALS:].mean())
    measured, error = h["measured"], pred - h["measured"]
    naive = (h["baseline_last_error"], h["baseline_best_error"])
    return {
        **h,
        "frozen_predicted": h["predicted"],
        "frozen_error": h["error"],
        "predicted": pred,
        "error": error,
        "interval": [lo, hi],
        "covered": bool(lo <= measured <= hi),
        "identified": look.identified,
        "ceiling": look.ceiling(),
        "baseline_last3": last3,
        "baseline_last3_error": last3 - measured,
        "point_method": look.tab["point"],
        "beat_baselines": bool(abs(error) < min(abs(v) for v in naive)),
        "beat_ruler": bool(abs(error) < abs(h["baseline_ruler_error"])),
        "beat_last3": bool(abs(error) < abs(last3 - measured)),
    }


MULTIPLES = (2, 10)


def verdict(look: Outlook, c_now: float, y_now: float, margin: float = 0.02, fall: dict | None = None) -> dict:
    """Whether more compute pays, from the calibrated intervals of the gain at 2x and 10x the
    compute: it pays where the lower end at 2x is above `margin`; it does not where even the upper
    end at 10x is below it and the ceiling is identified; otherwise the data cannot tell yet. An
    unidentified ceiling never carries a "will not pay"; a curve that fell overrides the rest."""
    fitted = float(look.fit.predict([c_now])[0])
    ceil = look.ceiling()
    out = {
        "compute": c_now,
        "measured": y_now,
        "fitted": fitted,
        "identified": look.identified,
        "ceiling": ceil["A"] if look.identified else None,
        "ceiling_lower_bound": ceil.get("lower_bound"),
        "ceiling_interval": ceil.get("profile"),
        "margin": margin,
        "gains": {f"{m}x": look.gain(c_now, m * c_now) for m in MULTIPLES},
    }
    g2, g10 = out["gains"]["2x"], out["gains"]["10x"]
    if fall and fall["fell"]:
        text = (
            f"the run fell after its peak ({fall['peak']:.3f} -> {fall['end']:.3f}): the fit does not describe it "
            "and more compute on this recipe will not pay until the instability is found and fixed"
        )
    elif g2["lo"] > margin:
        text = f"more compute pays: 2x the compute is expected to gain {_signed(g2)}"
    elif g10["hi"] < margin and look.identified:
        text = (
            f"more compute will not pay: the ceiling is identified and even 10x the compute gains at most "
            f"{g10['hi']:+.3f} (below the seed margin {margin})"
        )
    elif not look.identified:
        text = (
            f"cannot tell yet whether more compute pays: {ceil['text']}; 2x gains {_signed(g2)}, "
            f"10x {_signed(g10)} (calibrated 90% intervals)"
        )
    else:
        text = (
            f"more compute may pay: 2x gains {_signed(g2)}, 10x {_signed(g10)} (calibrated 90% intervals): "
            "continue only if a gain that size is worth the cost"
        )
    out["recommendation"] = text
    return out


def _signed(g: dict) -> str:
    return f"{g['gain']:+.3f} ({g['lo']:+.3f} .. {g['hi']:+.3f})"


def stop_decision(look: Outlook, c_now: float, budget: float, threshold: float = 0.02) -> dict:
    """The stop rule on the calibrated interval: stop when the ceiling is identified and the upper
    end of the gain from now to `budget` is below `threshold`; an unidentified ceiling never
    stops a run (it says so)."""
    g = look.gain(c_now, max(budget, c_now))
    spent = budget <= c_now
    if spent:
        g = {**g, "gain": 0.0, "lo": 0.0, "hi": 0.0}
    stop = bool(spent or (look.identified and g["hi"] < threshold))
    band = f" (calibrated 90% interval {g['lo']:+.3f} .. {g['hi']:+.3f})"
    if spent:
        why = "stop: the budget is spent"
    elif stop:
        why = f"stop: the ceiling is identified and even the upper end {g['hi']:+.3f} is below {threshold}"
    elif not look.identified:
        why = "go on: the ceiling is not identified, so no forecast says the rest of the budget will not pay"
    else:
        why = f"go on: the upper end {g['hi']:+.3f} is not below {threshold}"
    text = f"from {c_now:.4g} to the budget {budget:.4g}: gain {g['gain']:+.3f}{band}, value {g['value']:.3f}; {why}"
    return {
        **g,
        "budget": budget,
        "threshold": threshold,
        "upper": g["hi"],
        "stop": stop,
        "identified": look.identified,
        "text": text,
    }


def compute_for(look: Outlook, target: float, reach: float = 1e4) -> dict:
    """The compute at which the run reaches `target`, on the point forecast and on the calibrated
    band (`lo`: where the band's upper end reaches it; `hi`: where its lower end does; None: not
    within `reach` x the compute so far). Past the calibrated horizons the band is extrapolated."""
    C = look.c_last * np.geomspace(1.0, reach, 600)
    p, b = look.point(C), look.interval(C)

    def first(v):
        hit = np.flatnonzero(v >= target)
        return float(C[hit[0]]) if hit.size else None

    out = {
        "target": target,
        "compute": first(p),
        "lo": first(b["hi"]),
        "hi": first(b["lo"]),
        "identified": look.identified,
    }
    if look.last3 >= target:
        out.update(compute=look.c_last, lo=look.c_last, hi=look.c_last)
    out["text"] = _reach_text(out, reach)
    return out


def _reach_text(r: dict, reach: float) -> str:
    def c(v):
        return f"{v:.4g}" if v is not None else f"not within {reach:g}x"

    t = r["target"]
    if r["compute"] is None and r["lo"] is None:
        return f"{t:.3f} is not reached within {reach:g}x the compute so far, even at the interval's upper end"
    if r["compute"] is None:
        return (
            f"{t:.3f} is not reached by the forecast within {reach:g}x the compute so far (the calibrated "
            f"interval's upper end reaches it at {c(r['lo'])})"
        )
    return f"{t:.3f} at compute {c(r['compute'])} (calibrated 90% interval {c(r['lo'])} .. {c(r['hi'])})"
