"""The tight accountant's composition cache and the paper accountant's curve memo (issue 23).

The cache must return exactly the float that composing everything again returns (not an
approximation), on a ledger that mixes synthesis jobs on several labels, PromptPATE and
PromptDPSGD jobs, releases in the middle and jobs inserted before the all-record ones; and it
must actually save the compositions it exists for. The composed values are also checked
against an independent direct computation (``pld_reference``, extended here to mixed
compositions).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from app.privacy import rdp
from app.privacy.accounting import (
    PaperRdpAccountant,
    PldCompositionCache,
    TightPldAccountant,
)
from app.privacy.events import (
    DatasetEvent,
    DpsgdEvent,
    GaussianEvent,
    LabelEvent,
    PateEvent,
    SampledEvent,
    SynthesisEvent,
)
from app.privacy.sampling import FixedSizeSampling, PoissonSampling
from tests.privacy import pld_reference

DELTA = 1e-5
ADD = "add_or_remove"


def synthesis(rates: dict[str, float], sigma: float, steps: int) -> SynthesisEvent:
    return SynthesisEvent(
        tuple(
            LabelEvent(
                label, SampledEvent(PoissonSampling(rate, 4), (GaussianEvent(sigma),), steps)
            )
            for label, rate in rates.items()
        )
    )


def mixed_ledger() -> list[DatasetEvent]:
    """Jobs in ledger order: synthesis on two or three labels, PromptPATE, PromptDPSGD."""
    return [
        synthesis({"a": 0.05, "b": 0.08}, 2.0, 12),
        synthesis({"a": 0.05, "b": 0.08, "c": 0.1}, 2.5, 8),
        PateEvent(6.0, ADD),
        synthesis({"b": 0.08, "c": 0.1}, 2.0, 12),
        DpsgdEvent(3.0, PoissonSampling(0.02, 1), 20),
        synthesis({"a": 0.05, "b": 0.08}, 2.0, 12),
        synthesis({"a": 0.05, "b": 0.08}, 2.0, 12),
        PateEvent(8.0, ADD),
        synthesis({"a": 0.05, "c": 0.1}, 3.0, 10),
    ]


def ledgers() -> list[list[DatasetEvent]]:
    """What a dataset's live jobs go through: admissions one by one, then a release in the
    middle, a new synthesis job (its label groups' events land before the all-record jobs),
    and the released job's twin admitted again at the end."""
    jobs = mixed_ledger()
    states = [jobs[:k] for k in range(1, len(jobs) + 1)]
    released = jobs[:3] + jobs[4:]
    states += [released, [*released, jobs[1]], [*released, jobs[1], jobs[3]]]
    return states


class Counting:
    """Counts PLD compositions (the work the cache saves)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = pld_lib.PrivacyLossDistribution.compose

        def compose(pld, other, *args, **kwargs):
            self.count += 1
            return real(pld, other, *args, **kwargs)

        monkeypatch.setattr(pld_lib.PrivacyLossDistribution, "compose", compose)


def test_cached_epsilon_equals_recomposing_everything_on_a_mixed_ledger():
    cached = TightPldAccountant(cache=PldCompositionCache())
    uncached = TightPldAccountant(cached=False)
    for live in ledgers():
        want = uncached.dataset_epsilon(live, DELTA)
        assert cached.dataset_epsilon(live, DELTA) == want  # the same float, not approx
        assert cached.dataset_epsilon(live, DELTA) == want  # from the cache itself
        assert cached.dataset_epsilon(live, DELTA * 10) == uncached.dataset_epsilon(
            live, DELTA * 10
        )


def test_each_admission_composes_only_the_new_job(monkeypatch):
    cache = PldCompositionCache(checkpoint=4)
    cached = TightPldAccountant(cache=cache)
    counting = Counting(monkeypatch)
    job = synthesis({"a": 0.05, "b": 0.08, "c": 0.1}, 2.0, 12)
    cached.dataset_epsilon([job] * 10, DELTA)  # a process meeting a ledger of ten jobs
    assert counting.count == 3 * 9  # three label groups, composed once
    for n in range(11, 16):
        before = counting.count
        cached.dataset_epsilon([job] * n, DELTA)
        assert counting.count - before == 3  # one composition per label group
    before = counting.count
    cached.dataset_epsilon([job] * 15, DELTA)
    assert counting.count == before  # a repeated spend composes nothing
    # A release mid-ledger resumes from the last checkpoint at or before it (every 4th).
    first, other = [job] * 6, synthesis({"a": 0.05, "b": 0.08, "c": 0.1}, 2.5, 12)
    before = counting.count
    cached.dataset_epsilon([*first, other, *([job] * 3)], DELTA)
    assert counting.count - before == 3 * (10 - 4)  # resumed at 4 events, not from 1
    assert len(cache) > 0


def test_bisections_over_one_job_never_fill_the_cache():
    cache = PldCompositionCache()
    accountant = TightPldAccountant(cache=cache)
    for sigma in np.linspace(1.0, 3.0, 7):
        accountant.dataset_epsilon(synthesis({"a": 0.05, "b": 0.08}, float(sigma), 12), DELTA)
    assert len(cache) == 0


def test_the_cache_stays_within_its_bounds_and_stays_exact():
    cache = PldCompositionCache(max_entries=3, checkpoint=100)
    cached = TightPldAccountant(cache=cache)
    uncached = TightPldAccountant(cached=False)
    for live in ledgers():
        assert cached.dataset_epsilon(live, DELTA) == uncached.dataset_epsilon(live, DELTA)
        assert len(cache) <= 3
    tiny = PldCompositionCache(max_floats=1)  # keeps only the newest composition
    small = TightPldAccountant(cache=tiny)
    for live in ledgers()[1:4]:
        assert small.dataset_epsilon(live, DELTA) == uncached.dataset_epsilon(live, DELTA)
        assert len(tiny) == 1
    cache.clear()
    assert len(cache) == 0
    last = ledgers()[-1]
    assert cached.dataset_epsilon(last, DELTA) == uncached.dataset_epsilon(last, DELTA)


_loss_pmf = functools.cache(pld_reference._loss_pmf)  # each (rate, sigma) is met in every group


def _composed_pmf(
    priced: list[tuple[float, float, int]], add: bool, h: float
) -> tuple[np.ndarray, float, float]:
    """pld_reference's discretised loss pmf of each (rate, sigma, steps), composed by FFT:
    (pmf, origin, probability mass dropped in the tails)."""
    pmf, origin, kept = np.ones(1), 0.0, 1.0
    for q, sigma, steps in priced:
        one, one_origin, dropped = _loss_pmf(q, sigma, add, h)
        size = len(pmf) + steps * (len(one) - 1)
        fft_size = 1 << int(np.ceil(np.log2(size)))
        spectrum = np.fft.rfft(pmf, fft_size) * np.fft.rfft(one, fft_size) ** steps
        pmf = np.clip(np.fft.irfft(spectrum, fft_size)[:size], 0, None)
        origin += steps * one_origin
        kept *= (1 - dropped) ** steps
    return pmf, origin, 1 - kept


def reference_epsilon(priced: list[tuple[float, float, int]], delta: float) -> float:
    """Epsilon of the composition of Poisson-subsampled Gaussians (rate 1 for a plain one),
    computed directly: both directions, the worse one (as ``pld_reference.epsilon``)."""
    h, worst = 5e-4, 0.0
    for add in (False, True):
        pmf, origin, dropped = _composed_pmf(priced, add, h)
        worst = max(worst, pld_reference.DeltaCurve(pmf, origin, h, dropped).epsilon(delta))
    return worst


def _by_label(live: list[DatasetEvent]) -> dict[str, list[tuple[float, float, int]]]:
    """Each label's exposure, written out by hand from the jobs (not via the accountant):
    the synthesis rounds on that label, then every all-record job."""
    labels: dict[str, list[tuple[float, float, int]]] = {}
    everyone: list[tuple[float, float, int]] = []
    for job in live:
        if isinstance(job, PateEvent):
            everyone.append((1.0, job.noise_multiplier, 1))
        elif isinstance(job, DpsgdEvent):
            everyone.append((job.sampling.rate, job.noise_multiplier, job.steps))
        else:
            for entry in job.labels:
                sampled = entry.event
                assert isinstance(sampled.sampling, PoissonSampling)
                labels.setdefault(entry.label, []).append(
                    (sampled.sampling.rate, sampled.noise_multiplier, sampled.steps)
                )
    return {label: events + everyone for label, events in labels.items()}


@pytest.mark.parametrize("state", [9, 11])
def test_cached_spend_matches_an_independent_computation(state):
    live = ledgers()[state]
    ours = TightPldAccountant(cache=PldCompositionCache()).dataset_epsilon(live, DELTA)
    reference = max(reference_epsilon(group, DELTA) for group in _by_label(live).values())
    assert ours == pytest.approx(reference, rel=0.02, abs=1e-3)


def test_the_paper_accountants_curve_memo_is_the_curve_itself():
    sampling = FixedSizeSampling(population=300, groups=5, group_size=2)
    event = SampledEvent(sampling, (GaussianEvent(1.7), GaussianEvent(4.0)), 9)
    accountant = PaperRdpAccountant()
    direct = event.steps * rdp.subsampled_gaussian_rdp(
        sampling.rate, event.noise_multiplier, rdp.ORDERS
    )
    for _ in range(2):  # computed, then remembered
        assert np.array_equal(accountant.rdp(event), direct)
    jobs = [
        SynthesisEvent((LabelEvent("a", event), LabelEvent("b", event))),
        PateEvent(5.0, "replace_one"),
        SynthesisEvent((LabelEvent("b", event),)),
    ]
    # Replace-one: the binding group is the pair (a, b), three rounds of the event, then
    # the PromptPATE job; summed in that order, as the accountant sums a group.
    total = np.zeros(rdp.ORDERS.shape)
    for curve in (direct, direct, direct, rdp.gaussian_rdp(5.0, rdp.ORDERS)):
        total = total + curve
    want = rdp.rdp_to_epsilon(total, DELTA, rdp.ORDERS)
    assert PaperRdpAccountant().dataset_epsilon(jobs, DELTA) == want
