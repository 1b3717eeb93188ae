"""The one noise search (app.privacy.noise_search.smallest_noise), cross-checked against
dp-accounting's ``calibrate_dp_mechanism`` (an independent search and accountant), and the
calibration of every built-in method going through it."""

from __future__ import annotations

import dp_accounting
import pytest
from dp_accounting import mechanism_calibration
from dp_accounting.pld import pld_privacy_accountant

from app.methods import CalibrationError, GaussianEvent, PureDpEvent, accountant_for, smallest_noise
from app.privacy import calibration, dpsgd, noise_search, pate
from app.privacy.accounting import Accounting

DELTA = 1e-6


@pytest.mark.parametrize("target", [0.5, 1.0, 4.0])
def test_a_gaussian_is_calibrated_as_dp_accounting_calibrates_it(target: float) -> None:
    tight = accountant_for(Accounting.TIGHT)
    found = smallest_noise(lambda s: tight.epsilon(GaussianEvent(s), DELTA), target)
    assert target * (1 - 5e-3) <= found.epsilon <= target  # the safe side, within rel_tol
    theirs = mechanism_calibration.calibrate_dp_mechanism(
        lambda: pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3),
        dp_accounting.GaussianDpEvent,
        target_epsilon=target,
        target_delta=DELTA,
        bracket_interval=mechanism_calibration.ExplicitBracketInterval(0.3, 20.0),
        tol=1e-3,
    )
    assert found.noise == pytest.approx(theirs, rel=1e-2)


def test_a_plugins_pure_dp_mechanism_calibrates_to_its_scale() -> None:
    """A Laplace-like mechanism of scale b costs 1/b (pure DP): the least b for epsilon 2
    is 0.5, whatever the delta."""
    tight = accountant_for(Accounting.TIGHT)
    found = smallest_noise(lambda b: tight.epsilon(PureDpEvent(1.0 / b), DELTA), 2.0)
    assert found.noise == pytest.approx(0.5, rel=5e-3) and found.epsilon <= 2.0


def test_a_target_no_noise_meets_is_refused_in_the_callers_words() -> None:
    with pytest.raises(CalibrationError, match="too much for 3 tokens"):
        smallest_noise(lambda s: 10.0, 1.0, refusal=lambda s, e: "too much for 3 tokens")


def test_every_built_in_calibration_goes_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    real = noise_search.smallest_noise

    def counting(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    for module in (calibration, dpsgd, pate):
        monkeypatch.setattr(module, "smallest_noise", counting)
    pate.mu_for_epsilon(2.0, DELTA, Accounting.TIGHT)
    dpsgd.calibrate_dpsgd(target_epsilon=3.0, delta=DELTA, accounting=Accounting.TIGHT, n=500,
                          batch_size=16, steps=20)  # fmt: skip
    from app.privacy.params import TangParams
    from app.privacy.synthesis import SynthesisPrivacy

    privacy = SynthesisPrivacy(params=TangParams(sigma=1.0), M=4, N=2, tmax=8)
    calibration.search_noise(
        privacy, calibration.NoiseTarget({"a": 200, "b": 300}, {"a": 1, "b": 1}, 4.0, DELTA)
    )
    assert calls == [2.0, 3.0, 4.0]
