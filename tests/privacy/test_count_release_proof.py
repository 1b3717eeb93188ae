"""The count release's proof, checked on the exact privacy curve of a small adaptive job.

docs/privacy.md ("The count release") argues that a job whose sampling rate and noise are
chosen from the released count is covered by adding the release's epsilon and delta to the
job's: for every released value the job is calibrated to the same (epsilon_J, delta_J), so
adaptive composition applies. Here the whole adaptive mechanism -- release y = c + N(0,
sigma_c^2), then ``steps`` Poisson-subsampled Gaussian rounds at the rate and multiplier that
the planner derives from y -- is computed exactly enough to test that claim, for the record
present (partition of c + 1) against absent (c), in both orders:

    delta_joint(eps) = integral p_R(y) delta_{J(y)}(eps - L_R(y)) dy,

with L_R the release's privacy loss at y and delta_{J(y)} the rounds' hockey-stick
divergence at the planned (rate, multiplier), computed by dp-accounting from the event's
primitives (not by this project's accountant). The job itself is planned by the production
code (:func:`app.synthesis.generator.plan_synthesis`, one label, Tang's mean).

Power: the same computation finds the joint curve above the charge at a smaller epsilon
(the bound is not vacuous), and finds a job whose noise is half the calibrated noise in
breach of it (a negative control the test would miss if it could not fail).
"""

from __future__ import annotations

import functools

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld

from app.privacy.events import SampledEvent
from app.privacy.params import Aggregator
from app.privacy.sampling import PoissonSampling
from app.privacy.unit import CountRelease, count_noise_multiplier, posterior_mean
from app.synthesis.config import SynthesisConfig
from app.synthesis.generator import plan_synthesis
from app.synthesis.tasks import TaskSpec

TASK = TaskSpec(
    name="one",
    kind="classification",
    instruction="Write a text of label a.",
    icl_instruction="Label each text.",
    text_field="Text",
    label_field="Label",
    labels=("a", "b"),
)
RELEASE_EPSILON, RELEASE_DELTA = 1.0, 1e-6
JOB_EPSILON, JOB_DELTA = 1.0, 1e-5
M, N, TMAX = 5, 2, 2  # M * N = 10 records per step at full rate


@functools.cache
def _rounds(estimate: int) -> tuple[float, float, int]:
    """(rate, multiplier, steps) of the job planned from ``estimate`` records: the
    production planner's calibration to (JOB_EPSILON, JOB_DELTA)."""
    config = SynthesisConfig.for_task(
        "custom",
        method=Aggregator.TANG,
        epsilon=JOB_EPSILON,
        delta=JOB_DELTA,
        shots=1,
        M=M,
        N=N,
        tmax=TMAX,
        K=10,
    )
    # one shot: one label's rounds, whichever the schedule draws (both planned at the estimate)
    plan = plan_synthesis(TASK, {"a": estimate, "b": estimate}, config, release_id="r")
    (label,) = plan.event().labels
    rounds: SampledEvent = label.event
    assert isinstance(rounds.sampling, PoissonSampling) and label.count_release is None
    return rounds.sampling.rate, rounds.noise_multiplier, rounds.steps


@functools.cache
def _inner(rate: float, sigma: float, steps: int) -> pld.PrivacyLossDistribution:
    """The rounds' PLD by dp-accounting (pessimistic: an upper bound in both orders)."""
    one = pld.from_gaussian_mechanism(
        standard_deviation=sigma, sampling_prob=rate, value_discretization_interval=1e-3
    )
    return one.self_compose(steps)


def _joint_delta(epsilon: float, c: int, sigma_c: float, noise_scale: float = 1.0) -> float:
    """The adaptive job's delta(epsilon) between the record present (count c + 1) and
    absent (count c), the larger of the two orders. ``noise_scale`` scales every planned
    multiplier (1: as planned; below 1: a miscalibrated job, the negative control)."""
    worst = 0.0
    for present_first in (True, False):
        mean_p, mean_q = (c + 1, c) if present_first else (c, c + 1)
        ys = np.linspace(mean_p - 6 * sigma_c, mean_p + 6 * sigma_c, 1201)
        weights = np.exp(-0.5 * ((ys - mean_p) / sigma_c) ** 2)
        weights /= weights.sum()
        loss = ((ys - mean_q) ** 2 - (ys - mean_p) ** 2) / (2 * sigma_c**2)
        estimates = np.array([round(posterior_mean(y, sigma_c)) for y in ys])
        total = 0.0
        for estimate in np.unique(estimates):
            rate, sigma, steps = _rounds(int(estimate))
            at = estimates == estimate
            curve = _inner(rate, sigma * noise_scale, steps)
            points = epsilon - loss[at]
            order = np.argsort(points)  # dp-accounting wants them ascending
            deltas = np.empty_like(points)
            deltas[order] = curve.get_delta_for_epsilon(points[order])
            total += float((weights[at] * deltas).sum())
        worst = max(worst, total)
    return worst


def _charge() -> tuple[float, float, float]:
    """The release's noise and the charge: the release's (epsilon, delta) plus the job's."""
    sigma_c = count_noise_multiplier(RELEASE_EPSILON, RELEASE_DELTA)
    release = CountRelease(sigma_c, {"a": 0.0}, RELEASE_EPSILON, RELEASE_DELTA)
    epsilon = release.epsilon_at(RELEASE_DELTA) + JOB_EPSILON
    return sigma_c, epsilon, RELEASE_DELTA + JOB_DELTA


C = 8  # records of the partition without the record: the release straddles M * N = 10


def test_the_adaptive_job_is_within_the_release_plus_the_job() -> None:
    """Around C the released count falls below and above M*N, so the planned rate moves
    with it (from 1 down to about 0.3). The exact joint curve stays within the charge
    (the grid spans 6 sigma_c either side: the mass left out, 2e-9, is far below delta)."""
    c = C
    sigma_c, epsilon, delta = _charge()
    joint = _joint_delta(epsilon, c, sigma_c)
    assert joint <= delta * 1.01, (joint, delta)
    # power: not vacuous, the joint curve exceeds the charged delta at a smaller epsilon
    assert _joint_delta(0.6 * epsilon, c, sigma_c) > delta


def test_a_job_with_half_the_calibrated_noise_breaches_the_charge() -> None:
    """The negative control: the same computation catches a job that is not calibrated to
    its target for the released value."""
    sigma_c, epsilon, delta = _charge()
    assert _joint_delta(epsilon, C, sigma_c, noise_scale=0.5) > delta * 2


def test_the_rate_really_depends_on_the_release() -> None:
    """The case the proof is for: across released values the planned rate spans (0.3, 1],
    so a fixed-rate analysis would not apply."""
    sigma_c = count_noise_multiplier(RELEASE_EPSILON, RELEASE_DELTA)
    ys = np.linspace(C - 3 * sigma_c, C + 3 * sigma_c, 13)
    rates = {_rounds(round(posterior_mean(y, sigma_c)))[0] for y in ys}
    assert max(rates) == 1.0 and min(rates) < 0.5
