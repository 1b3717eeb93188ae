"""PromptDPSGD's privacy side: the clip-and-noise mechanism, the event and its pricing,
cross-checked against independent implementations (Opacus, dp-accounting's RDP accountant,
a direct PLD computation)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event, privacy_accountant
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

from app.privacy.accounting import (
    Accounting,
    PaperRdpAccountant,
    TightPldAccountant,
    UnsupportedEventError,
)
from app.privacy.calibration import CalibrationError
from app.privacy.dpsgd import (
    calibrate_dpsgd,
    check_any_count_meets,
    clip_rows,
    dpsgd_epsilon,
    dpsgd_event,
    noisy_clipped_sum,
)
from app.privacy.events import (
    DpsgdEvent,
    GaussianEvent,
    LabelEvent,
    PateEvent,
    SampledEvent,
    SynthesisEvent,
    from_dict,
    to_dict,
)
from app.privacy.rng import make_rng
from app.privacy.sampling import FixedSizeSampling, PoissonSampling
from tests.privacy import pld_reference

TOLERANCE = 0.02
ORDERS = np.arange(2, 65)
# (sigma = noise std / C, expected batch, records, steps, delta): DP-SGD-like settings.
SETTINGS = [
    (0.9, 16, 6920, 60, 1e-5),
    (0.6, 32, 1000, 80, 1e-5),
    (1.5, 32, 2000, 100, 1e-5),
    (0.7, 20, 500, 40, 1 / 500),
    (3.0, 64, 5000, 10, 1e-6),
]


# --- the mechanism -----------------------------------------------------------------------


def large_gradients(rng: np.random.Generator, rows: int, dim: int, clip: float) -> np.ndarray:
    """Rows whose norms exceed the clipping norm by 3-10x (so clipping matters)."""
    grads = rng.normal(size=(rows, dim))
    norms = np.linalg.norm(grads, axis=1, keepdims=True)
    return grads / norms * rng.uniform(3 * clip, 10 * clip, size=(rows, 1))


@pytest.mark.parametrize("clip", [0.1, 1.0, 7.5])
def test_one_record_moves_the_clipped_sum_by_at_most_c_or_2c(clip):
    rng = np.random.default_rng(0)
    batch = large_gradients(rng, 12, 50, clip)
    base = noisy_clipped_sum(batch, clip_norm=clip, noise_multiplier=0.0, rng=rng)
    assert np.all(np.linalg.norm(clip_rows(batch, clip), axis=1) <= clip * (1 + 1e-12))
    worst_remove = worst_replace = 0.0
    for i in range(len(batch)):
        removed = noisy_clipped_sum(
            np.delete(batch, i, axis=0), clip_norm=clip, noise_multiplier=0.0, rng=rng
        )
        worst_remove = max(worst_remove, float(np.linalg.norm(base - removed)))
        other = batch.copy()
        other[i] = -batch[i]  # the opposite direction: the worst replacement
        replaced = noisy_clipped_sum(other, clip_norm=clip, noise_multiplier=0.0, rng=rng)
        worst_replace = max(worst_replace, float(np.linalg.norm(base - replaced)))
    added = noisy_clipped_sum(
        np.vstack([batch, large_gradients(rng, 1, 50, clip)]),
        clip_norm=clip,
        noise_multiplier=0.0,
        rng=rng,
    )
    assert np.linalg.norm(added - base) <= clip * (1 + 1e-9)
    assert worst_remove <= clip * (1 + 1e-9)
    assert worst_replace <= 2 * clip * (1 + 1e-9)
    # ... and the bounds are attained: without clipping they would be 3-10x larger.
    assert worst_remove == pytest.approx(clip, rel=1e-9)
    assert worst_replace == pytest.approx(2 * clip, rel=1e-9)


def test_small_gradients_pass_unclipped():
    grads = np.array([[0.3, 0.4], [0.0, 0.0]])
    assert np.allclose(clip_rows(grads, 1.0), grads)


def test_noise_has_std_sigma_times_c_and_an_empty_batch_still_gets_it():
    rng = make_rng(5)
    draws = np.stack(
        [
            noisy_clipped_sum(np.zeros((0, 400)), clip_norm=2.0, noise_multiplier=1.5, rng=rng)
            for _ in range(50)
        ]
    )
    assert draws.shape == (50, 400)
    assert draws.std() == pytest.approx(3.0, rel=0.03)
    assert abs(draws.mean()) < 0.05


# --- the event ---------------------------------------------------------------------------


@pytest.mark.parametrize("accounting", list(Accounting))
def test_event_round_trips_and_validates(accounting):
    event = dpsgd_event(1.1, accounting, n=1000, batch_size=16, steps=50)
    assert from_dict(to_dict(event)) == event
    assert event.sampling.rate == pytest.approx(16 / 1000)
    with pytest.raises(ValueError, match="steps"):
        DpsgdEvent(1.0, PoissonSampling(0.1, 1), 0)
    with pytest.raises(ValueError, match="one group"):
        DpsgdEvent(1.0, PoissonSampling(0.1, 2), 5)


def test_the_multiplier_is_halved_under_replace_one():
    event = DpsgdEvent(1.2, PoissonSampling(0.01, 1), 30)
    assert event.priced("add_or_remove").noise_multiplier == pytest.approx(1.2)
    assert event.priced("replace_one").noise_multiplier == pytest.approx(0.6)


def test_accountants_refuse_the_other_sampling():
    poisson = dpsgd_event(1.0, Accounting.TIGHT, n=1000, batch_size=10, steps=5)
    fixed = dpsgd_event(1.0, Accounting.PAPER, n=1000, batch_size=10, steps=5)
    with pytest.raises(UnsupportedEventError):
        PaperRdpAccountant().dataset_epsilon(poisson, 1e-5)
    with pytest.raises(UnsupportedEventError):
        TightPldAccountant().dataset_epsilon(fixed, 1e-5)


# --- cross-checks against independent libraries -----------------------------------------


@pytest.mark.parametrize("setting", SETTINGS)
def test_tight_epsilon_agrees_with_a_direct_pld_and_stays_under_rdp_bounds(setting):
    sigma, batch, n, steps, delta = setting
    event = dpsgd_event(sigma, Accounting.TIGHT, n=n, batch_size=batch, steps=steps)
    ours = dpsgd_epsilon(event, Accounting.TIGHT, delta)
    q = batch / n

    direct = pld_reference.epsilon(q, sigma, steps, delta)
    assert ours == pytest.approx(direct, rel=TOLERANCE, abs=1e-3)

    # Opacus' RDP accountant (add/remove, Poisson, multiplier = std / C) and dp-accounting's
    # RDP accountant on a PoissonSampledDpEvent, both on one order grid: two independent RDP
    # upper bounds of the same mechanism. They agree with each other (so the multiplier
    # convention is the one both libraries use), and the PLD accountant is never above them.
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 256))
    curve = compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)
    opacus_eps, _ = get_privacy_spent(orders=orders, rdp=curve, delta=delta)
    reference = rdp_privacy_accountant.RdpAccountant(
        orders=orders,
        neighboring_relation=privacy_accountant.NeighboringRelation.ADD_OR_REMOVE_ONE,
    )
    reference.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    rdp_eps = reference.get_epsilon(delta)
    assert opacus_eps == pytest.approx(rdp_eps, rel=TOLERANCE)
    assert ours <= min(opacus_eps, rdp_eps) * (1 + 1e-3)


@pytest.mark.parametrize("setting", SETTINGS[:3])
def test_paper_epsilon_matches_dp_accounting_without_replacement(setting):
    sigma, batch, n, steps, delta = setting
    event = dpsgd_event(sigma, Accounting.PAPER, n=n, batch_size=batch, steps=steps)
    ours = PaperRdpAccountant(orders=ORDERS).dataset_epsilon(event, delta)
    # Replace-one: the clipped sum's sensitivity is 2C, so the Gaussian dp-accounting sees
    # has multiplier (sigma C) / (2C) = sigma / 2.
    reference = rdp_privacy_accountant.RdpAccountant(
        orders=[float(a) for a in ORDERS],
        neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE,
    )
    sampled = dp_event.SampledWithoutReplacementDpEvent(
        n, batch, dp_event.GaussianDpEvent(sigma / 2)
    )
    reference.compose(dp_event.SelfComposedDpEvent(sampled, steps))
    assert ours == pytest.approx(reference.get_epsilon(delta), rel=TOLERANCE)


# --- composition with other methods' events ----------------------------------------------


def test_dpsgd_composes_with_every_label_group_of_a_synthesis_job_and_with_pate():
    tight = TightPldAccountant()
    dpsgd = dpsgd_event(1.0, Accounting.TIGHT, n=1000, batch_size=20, steps=40)
    label_a = SampledEvent(PoissonSampling(0.05, 4), (GaussianEvent(2.0),), 30)
    label_b = SampledEvent(PoissonSampling(0.02, 4), (GaussianEvent(3.0),), 30)
    synthesis = SynthesisEvent((LabelEvent("a", label_a), LabelEvent("b", label_b)))
    pate = PateEvent(4.0, "add_or_remove")
    delta = 1e-5

    alone = tight.dataset_epsilon(dpsgd, delta)
    priced = dpsgd.priced("add_or_remove")
    assert alone == pytest.approx(tight.epsilon(priced, delta))
    both = tight.dataset_epsilon([synthesis, dpsgd], delta)
    worst_label = max(tight.epsilon([e, priced], delta) for e in (label_a, label_b))
    assert both == pytest.approx(worst_label)
    assert both > max(alone, tight.dataset_epsilon(synthesis, delta))
    three = tight.dataset_epsilon([synthesis, dpsgd, pate], delta)
    assert three == pytest.approx(tight.epsilon([label_a, priced, pate], delta))
    assert three > both


def test_paper_composition_uses_the_halved_multiplier_in_every_pair():
    paper = PaperRdpAccountant()
    dpsgd = dpsgd_event(2.0, Accounting.PAPER, n=1000, batch_size=20, steps=40)
    label_a = SampledEvent(FixedSizeSampling(500, 4, 2), (GaussianEvent(2.0),), 30)
    label_b = SampledEvent(FixedSizeSampling(500, 4, 2), (GaussianEvent(3.0),), 30)
    synthesis = SynthesisEvent((LabelEvent("a", label_a), LabelEvent("b", label_b)))
    got = paper.dataset_epsilon([synthesis, dpsgd], 1e-5)
    halved = SampledEvent(FixedSizeSampling(1000, 1, 20), (GaussianEvent(1.0),), 40)
    assert got == pytest.approx(paper.epsilon([label_a, label_b, halved], 1e-5))


# --- calibration -------------------------------------------------------------------------


@pytest.mark.parametrize("accounting", list(Accounting))
@pytest.mark.parametrize("target", [1.0, 8.0])
def test_calibration_meets_the_target_from_below(accounting, target):
    sigma, eps = calibrate_dpsgd(
        target_epsilon=target,
        delta=1e-5,
        accounting=accounting,
        n=6920,
        batch_size=16,
        steps=60,
    )
    event = dpsgd_event(sigma, accounting, n=6920, batch_size=16, steps=60)
    assert dpsgd_epsilon(event, accounting, 1e-5) == pytest.approx(eps)
    assert target * (1 - 5e-3) <= eps <= target
    # a little less noise would overspend
    smaller = dpsgd_event(sigma * 0.97, accounting, n=6920, batch_size=16, steps=60)
    assert dpsgd_epsilon(smaller, accounting, 1e-5) > target


def test_no_noise_costs_everything():
    event = dpsgd_event(0.0, Accounting.TIGHT, n=100, batch_size=10, steps=3)
    assert TightPldAccountant().dataset_epsilon(event, 1e-5) == math.inf


# --- a job's own count release (issue 32) ----------------------------------------------------
# Jobs planned under issue 32 divided batch_size by a count they released themselves with the
# Gaussian mechanism (sensitivity 1 under add/remove), priced inside their event: the release
# reads every record, so it joins every exposure group with the steps, and calibration priced
# it with them. Jobs planned since issue 41 read the dataset's one release (its own ledger
# line) and carry none; these events are stored, so they must still read and price as before.

RELEASED = [  # (count sigma, step sigma, expected batch, released count, steps, delta)
    (25.0, 0.9, 16, 6920, 60, 1e-6),
    (8.0, 1.5, 32, 2000, 100, 1e-5),
    (60.0, 0.7, 20, 500, 40, 1e-6),
]


def test_a_count_release_round_trips_and_older_events_read_without_one():
    event = dpsgd_event(1.1, Accounting.TIGHT, n=1000, batch_size=16, steps=50, count_sigma=25.0)
    assert event.count_release == GaussianEvent(25.0)
    assert from_dict(to_dict(event)) == event
    stored = to_dict(dpsgd_event(1.1, Accounting.TIGHT, n=1000, batch_size=16, steps=50))
    assert "count_release" not in stored  # what jobs before the release stored
    assert from_dict(stored) == DpsgdEvent(1.1, PoissonSampling(16 / 1000, 1), 50)
    with pytest.raises(ValueError, match="Gaussian"):
        from_dict({**to_dict(event), "count_release": {"type": "pate", "noise_multiplier": 2.0,
                                                       "relation": "add_or_remove"}})  # fmt: skip


@pytest.mark.parametrize("setting", RELEASED)
def test_tight_epsilon_with_the_count_release_matches_dp_accounting(setting):
    count_sigma, sigma, batch, n, steps, delta = setting
    event = dpsgd_event(
        sigma, Accounting.TIGHT, n=n, batch_size=batch, steps=steps, count_sigma=count_sigma
    )
    ours = TightPldAccountant(cached=False).dataset_epsilon(event, delta)
    reference = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    reference.compose(dp_event.GaussianDpEvent(count_sigma))
    reference.compose(
        dp_event.PoissonSampledDpEvent(batch / n, dp_event.GaussianDpEvent(sigma)), steps
    )
    assert ours == pytest.approx(reference.get_epsilon(delta), rel=TOLERANCE)
    steps_only = dpsgd_event(sigma, Accounting.TIGHT, n=n, batch_size=batch, steps=steps)
    assert ours > TightPldAccountant(cached=False).dataset_epsilon(steps_only, delta)


@pytest.mark.parametrize("setting", RELEASED)
def test_paper_epsilon_with_the_count_release_matches_dp_accounting(setting):
    """The paper accountant prices the release as a Gaussian of sensitivity 1 (safe: under
    replace-one the count does not move), composed in RDP with the halved-multiplier steps."""
    count_sigma, sigma, batch, n, steps, delta = setting
    event = dpsgd_event(
        sigma, Accounting.PAPER, n=n, batch_size=batch, steps=steps, count_sigma=count_sigma
    )
    ours = PaperRdpAccountant(orders=ORDERS).dataset_epsilon(event, delta)
    reference = rdp_privacy_accountant.RdpAccountant(
        orders=[float(a) for a in ORDERS],
        neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE,
    )
    reference.compose(dp_event.GaussianDpEvent(count_sigma))
    sampled = dp_event.SampledWithoutReplacementDpEvent(
        n, batch, dp_event.GaussianDpEvent(sigma / 2)
    )
    reference.compose(dp_event.SelfComposedDpEvent(sampled, steps))
    assert ours == pytest.approx(reference.get_epsilon(delta), rel=TOLERANCE)


def test_the_count_release_joins_every_exposure_group():
    tight = TightPldAccountant()
    dpsgd = dpsgd_event(1.0, Accounting.TIGHT, n=1000, batch_size=20, steps=40, count_sigma=30.0)
    label_a = SampledEvent(PoissonSampling(0.05, 4), (GaussianEvent(2.0),), 30)
    label_b = SampledEvent(PoissonSampling(0.02, 4), (GaussianEvent(3.0),), 30)
    synthesis = SynthesisEvent((LabelEvent("a", label_a), LabelEvent("b", label_b)))
    groups = tight.exposures([synthesis, dpsgd])
    release, steps = GaussianEvent(30.0), dpsgd.priced("add_or_remove")
    assert groups == [[label_a, release, steps], [label_b, release, steps]]
    assert dpsgd.exposure("add_or_remove") == (release, steps)
    delta = 1e-5
    both = tight.dataset_epsilon([synthesis, dpsgd], delta)
    assert both == pytest.approx(tight.epsilon([label_a, release, steps], delta))
    assert tight.dataset_epsilon(dpsgd, delta) == pytest.approx(
        tight.epsilon([release, steps], delta)
    )


@pytest.mark.parametrize("target", [1.0, 8.0])
def test_calibration_prices_the_count_release_with_the_steps(target):
    kwargs = {"accounting": Accounting.TIGHT, "n": 6920, "batch_size": 16, "steps": 60}
    count_sigma = 8.0 / target  # a release that costs a visible share of the target
    sigma, eps = calibrate_dpsgd(
        target_epsilon=target,
        delta=1e-6,
        count_sigma=count_sigma,
        **kwargs,
    )
    event = dpsgd_event(sigma, count_sigma=count_sigma, **kwargs)
    assert dpsgd_epsilon(event, Accounting.TIGHT, 1e-6) == pytest.approx(eps)
    assert target * (1 - 5e-3) <= eps <= target
    # the release costs something: the steps alone could take less noise
    alone, _ = calibrate_dpsgd(target_epsilon=target, delta=1e-6, **kwargs)
    assert alone < sigma


def test_a_target_no_released_count_could_meet_is_refused_from_public_inputs():
    with pytest.raises(CalibrationError, match="whatever the number of records"):
        check_any_count_meets(
            target_epsilon=0.02, delta=1e-6, batch_size=16, steps=10_000, count_sigma=5000.0
        )
    # a job that meets its target at rate 1 meets it at any released count
    check_any_count_meets(target_epsilon=1.0, delta=1e-6, batch_size=16, steps=60, count_sigma=40.0)
    for n in (1, 16, 17, 10_000):
        calibrate_dpsgd(
            target_epsilon=1.0,
            delta=1e-6,
            accounting=Accounting.TIGHT,
            n=n,
            batch_size=16,
            steps=60,
            count_sigma=40.0,
        )
