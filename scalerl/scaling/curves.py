"""Compute-performance curve models: the sigmoid of paper Eq. 1 and the power law.

    sigmoid:   R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)
    power law: R(C) = A - D / C ** B

Departures from the paper:
1. The sigmoid is evaluated as `R0 + (A - R0) * expit(B * (log C - log C_mid))`, which is Eq. 1
   rewritten so that it neither overflows for tiny C nor divides by zero at C = 0 (where it
   equals R0, the start of training).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit


def sigmoid(C: np.ndarray, A: float, B: float, C_mid: float, R0: float) -> np.ndarray:
    """Paper Eq. 1. `C` >= 0 (any shape); returns the same shape."""
    C = np.asarray(C, dtype=float)
    with np.errstate(divide="ignore"):
        log_c = np.log(C)  # log 0 = -inf -> expit(-inf) = 0 -> R0
    return R0 + (A - R0) * expit(B * (log_c - np.log(C_mid)))


def power_law(C: np.ndarray, A: float, B: float, D: float) -> np.ndarray:
    """`A - D / C**B`: the large-C limit of the sigmoid, with D = (A - R0) * C_mid**B."""
    C = np.asarray(C, dtype=float)
    with np.errstate(divide="ignore"):
        return A - D * np.power(C, -B)


@dataclass(frozen=True)
class Sigmoid:
    A: float
    B: float
    C_mid: float
    R0: float

    def predict(self, C: np.ndarray) -> np.ndarray:
        return sigmoid(C, self.A, self.B, self.C_mid, self.R0)


@dataclass(frozen=True)
class PowerLaw:
    A: float
    B: float
    D: float

    def predict(self, C: np.ndarray) -> np.ndarray:
        return power_law(C, self.A, self.B, self.D)


def linearise(R: np.ndarray, A: float, R0: float) -> np.ndarray:
    """Paper Fig. 7 (right): `log((A - R0) / (R - R0) - 1)`, which equals `B * (log C_mid - log C)`
    on the sigmoid, a line of slope -B against log C. NaN where R is not strictly between R0 and A.
    """
    R = np.asarray(R, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (A - R0) / (R - R0) - 1.0
        return np.where(ratio > 0, np.log(np.where(ratio > 0, ratio, 1.0)), np.nan)
