"""Curve fits, slow tier: the coverage of the prediction interval over 60 replicas (tests/scaling/test_scaling_fit.py
holds the rest)."""

import numpy as np
import pytest

from scalerl.scaling import fit_curve
from scaling_helpers import synthetic


@pytest.mark.slow
def test_prediction_interval_coverage():
    A, B, C_mid, R0, final = 0.61, 1.92, 2542, 0.40, 16000
    truth = R0 + (A - R0) / (1 + (C_mid / final) ** B)
    hits = []
    for rep in range(60):
        x, y = synthetic(A, B, C_mid, R0, final, 100, seed=1000 + rep)
        fit = fit_curve(x, y, fit_min=1500, fit_max=final / 2, n_bootstrap=200, seed=rep)
        lo, hi = fit.predict_interval([final], level=0.9)
        hits.append(bool(lo[0] <= truth <= hi[0]))
    coverage = float(np.mean(hits))
    print(f"90% interval coverage at C={final}: {coverage:.3f} over {len(hits)} replicas")
    assert coverage >= 0.8
