"""`ForecastCallback`: scalerl's forecast inside TRL (any transformers `Trainer`, GRPOTrainer first).

    from scalerl.integrations.trl import ForecastCallback

    trainer = GRPOTrainer(..., args=GRPOConfig(..., eval_strategy="steps", eval_steps=10))
    ForecastCallback.attach(trainer, metric="eval_reward", stop=True)
    trainer.evaluate()          # the evaluation before training: R0
    trainer.train()

At every evaluation the callback adds (compute, `metric`) to its curve, refits Eq. 1 by the one
forecast specification (`scalerl.scaling.spec`: the same fit as `scalerl fit`, `scalerl train` and
`scalerl watch`) once five evaluations past compute 0 exist, and logs through the trainer's own
`log` (so TensorBoard, W&B and every other logger the trainer reports to show them):

    forecast/A, forecast/A_lo, forecast/A_hi        the fitted ceiling and its bootstrap 90% interval
    forecast/identified (1 or 0)                    whether the data bound the ceiling (scaling.identify)
    forecast/A_lower_bound                          where not: the ceiling is at least this
    forecast/B, forecast/C_mid                      the efficiency exponent and the midpoint
    forecast/gain_2x, forecast/gain_2x_lo, _hi      the gain expected at 2x the current compute, with its
                                                    calibrated 90% interval (scaling.calibrate)
    forecast/gain_10x, forecast/gain_10x_lo, _hi    ... at 10x
    forecast/gain_to_budget, _lo, _hi, forecast/stop (1 or 0)   with a budget (default: max_steps)

`stop=True` ends training (`control.should_training_stop`) when the stop rule fires
(`scalerl.scaling.outlook.stop_decision`: the ceiling is identified and the upper end of the
calibrated 90% interval of the gain from now to the budget is below `stop_below`, 0.02; an
unidentified ceiling never stops a run). A change of identification is said once in the log.
Compute is the global step by default (a step's cost is about
constant within a run, so a fit against steps is a fit against compute up to a factor); pass
`compute=lambda state: ...` for another measure (e.g. tokens x parameters).

Only transformers is imported here (TRL's dependency, and the train extra's); TRL itself is not needed to import it.
"""

from __future__ import annotations

import logging
from typing import Callable

from transformers import TrainerCallback

from scalerl.errors import ScaleRLError
from scalerl.scaling.fit import MIN_POINTS
from scalerl.scaling.outlook import outlook
from scalerl.scaling.outlook import stop_decision as outlook_stop
from scalerl.scaling.report import SEED_MARGIN
from scalerl.scaling.spec import SPEC, spec_fit

log = logging.getLogger(__name__)


class ForecastCallback(TrainerCallback):
    """Refit the compute-performance curve at each evaluation and log the forecast; see the module."""

    def __init__(
        self,
        metric: str = "eval_reward",
        budget: float | None = None,
        stop: bool = False,
        stop_below: float = SEED_MARGIN,
        compute: Callable | None = None,
        fit_min_frac: float = SPEC.fit_min_frac,
        trainer=None,
    ):
        self.metric, self.budget, self.stop, self.stop_below = metric, budget, stop, stop_below
        self.compute = compute or (lambda state: float(state.global_step))
        self.fit_min_frac, self.trainer = fit_min_frac, trainer
        self.x: list[float] = []
        self.y: list[float] = []
        self.last: dict = {}  # the values logged at the last refit
        self.fit = None  # the last FitResult
        self.stopped_at: float | None = None
        self._said_identified: bool | None = None

    @classmethod
    def attach(cls, trainer, **kwargs) -> "ForecastCallback":
        """A callback bound to `trainer` (whose `log` it writes through), added to its callbacks."""
        cb = cls(trainer=trainer, **kwargs)
        trainer.add_callback(cb)
        return cb

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        metrics = metrics or {}
        if self.metric not in metrics:
            raise ScaleRLError(
                f"ForecastCallback: no {self.metric!r} among the evaluation metrics "
                f"({', '.join(sorted(metrics)) or 'none'}); pass metric=<one of them>"
            )
        self.x.append(float(self.compute(state)))
        self.y.append(float(metrics[self.metric]))
        values = self.refit(args, state)
        if values:
            self._log(state, values)
            if self.stop and values.get("forecast/stop") == 1.0:
                self.stopped_at = self.x[-1]
                control.should_training_stop = True
        return control

    def refit(self, args, state) -> dict:
        """The forecast values over the evaluations so far ({} while fewer than five past 0, or
        where the fit cannot be made: a flat curve, said once in the log)."""
        if sum(c > 0 for c in self.x) < MIN_POINTS:
            return {}
        try:
            self.fit = fit = spec_fit(self.x, self.y, self.fit_min_frac)
        except ScaleRLError as exc:
            log.warning("ForecastCallback: no forecast at step %s: %s", state.global_step, exc)
            return {}
        now = max(self.x)
        look = outlook(self.x, self.y, fit)
        lo, hi = fit.ci["A"]
        out = {
            "forecast/A": fit.A,
            "forecast/A_lo": lo,
            "forecast/A_hi": hi,
            "forecast/B": fit.B,
            "forecast/C_mid": fit.C_mid,
            "forecast/identified": float(look.identified),
        }
        if not look.identified and look.ident["lower_bound"] is not None:
            out["forecast/A_lower_bound"] = look.ident["lower_bound"]
        for m in (2, 10):
            g = look.gain(now, m * now)
            out.update(
                {f"forecast/gain_{m}x": g["gain"], f"forecast/gain_{m}x_lo": g["lo"], f"forecast/gain_{m}x_hi": g["hi"]}
            )
        budget = self.budget if self.budget is not None else (float(args.max_steps) if args.max_steps > 0 else None)
        if budget is not None:
            d = outlook_stop(look, now, budget, self.stop_below)
            out.update(
                {
                    "forecast/gain_to_budget": d["gain"],
                    "forecast/gain_to_budget_lo": d["lo"],
                    "forecast/gain_to_budget_hi": d["hi"],
                    "forecast/stop": float(d["stop"]),
                }
            )
        if look.identified != self._said_identified:
            log.info("ForecastCallback at step %s: %s", state.global_step, look.ident["reason"])
            self._said_identified = look.identified
        self.last = {k: float(v) for k, v in out.items() if v is not None}
        return self.last

    def _log(self, state, values: dict) -> None:
        if self.trainer is not None:
            self.trainer.log(dict(values))  # every logger the trainer reports to
        else:  # not attached: the trainer's history only
            state.log_history.append({**values, "step": state.global_step})
