"""Calibration: the solved multiplier meets the target, and impossible targets fail clearly."""

from __future__ import annotations

import pytest

from app.privacy.accounting import Accounting
from app.privacy.calibration import CalibrationError, calibrate_noise
from app.privacy.params import AdaDPSynParams, TangParams
from app.privacy.synthesis import SynthesisPrivacy

CASES = [
    (TangParams(sigma=1.0), Accounting.TIGHT, 1.0, 15),
    (TangParams(sigma=1.0), Accounting.PAPER, 4.0, 20),
    (AdaDPSynParams(sigma0=15, sigma1=1.0, sigma2=5, T=2), Accounting.TIGHT, 2.0, 15),
    (AdaDPSynParams(sigma0=15, sigma1=1.0, sigma2=5, T=2), Accounting.PAPER, 8.0, 15),
    (AdaDPSynParams(sigma0=10, sigma1=1.0, sigma2=3, T=1), Accounting.TIGHT, 8.0, 100),
]


@pytest.mark.parametrize(("params", "accounting", "target", "tmax"), CASES)
def test_solved_multiplier_gives_the_target_within_one_percent(params, accounting, target, tmax):
    plan = SynthesisPrivacy(params=params, accounting=accounting, M=20, N=2, tmax=tmax)
    sizes, shots, delta = {"a": 835, "b": 1200}, {"a": 1, "b": 1}, 1 / 5452
    result = calibrate_noise(
        plan, label_sizes=sizes, shots=shots, target_epsilon=target, delta=delta
    )
    recomputed = result.privacy.epsilon(sizes, shots, delta)
    assert recomputed == pytest.approx(result.epsilon)
    assert target * 0.99 <= recomputed <= target  # never above the budget
    assert result.privacy.params.free_multiplier == result.multiplier
    # the other multipliers are untouched
    assert result.privacy.params.model_dump(exclude={"sigma", "sigma1"}) == params.model_dump(
        exclude={"sigma", "sigma1"}
    )


def test_unreachable_target_names_the_problem():
    params = AdaDPSynParams(sigma0=1, sigma1=1.0, sigma2=1, T=2)
    plan = SynthesisPrivacy(params=params, M=20, N=2, tmax=15)
    with pytest.raises(CalibrationError, match="cannot be met"):
        calibrate_noise(
            plan, label_sizes={"a": 835}, shots={"a": 1}, target_epsilon=0.5, delta=1e-4
        )


@pytest.mark.parametrize("target", [0.0, -1.0, float("inf"), float("nan")])
def test_target_must_be_positive_and_finite(target):
    plan = SynthesisPrivacy(params=TangParams(sigma=1.0), M=20, N=2, tmax=15)
    with pytest.raises(CalibrationError, match="positive"):
        calibrate_noise(
            plan, label_sizes={"a": 835}, shots={"a": 1}, target_epsilon=target, delta=1e-4
        )
