"""Sampling of teacher subsets and the label schedule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from app.privacy.rng import make_rng
from app.privacy.sampling import FixedSizeSampling, PoissonSampling, sampling_from_dict
from app.privacy.synthesis import label_schedule, shots_per_label


def test_fixed_size_sampling_draws_disjoint_groups_of_n():
    sampling = FixedSizeSampling(population=50, groups=5, group_size=3)
    groups = sampling.draw(50, make_rng(0))
    assert [len(g) for g in groups] == [3] * 5
    flat = np.concatenate(groups)
    assert len(set(flat.tolist())) == 15 and flat.max() < 50


def test_fixed_size_sampling_refuses_a_partition_of_another_size():
    sampling = FixedSizeSampling(population=50, groups=5, group_size=3)
    with pytest.raises(ValueError, match="planned for 50"):
        sampling.draw(49, make_rng(0))


def test_fixed_size_sampling_needs_enough_records():
    with pytest.raises(ValueError, match="cannot draw 40"):
        FixedSizeSampling(population=39, groups=20, group_size=2)


def test_poisson_sampling_is_disjoint_and_has_the_planned_rate():
    """Each record is included with probability rate (binomial test, false-failure 1e-6)."""
    sampling = PoissonSampling(rate=0.08, groups=10)
    rng = make_rng(1)
    n, draws, included = 500, 400, 0
    for _ in range(draws):
        groups = sampling.draw(n, rng)
        flat = np.concatenate(groups)
        assert len(set(flat.tolist())) == flat.size  # disjoint
        included += flat.size
    result = stats.binomtest(included, n * draws, 0.08)
    assert result.pvalue > 1e-6


def test_poisson_groups_are_chosen_uniformly():
    sampling = PoissonSampling(rate=0.5, groups=4)
    counts = np.zeros(4)
    rng = make_rng(2)
    for _ in range(200):
        counts += [len(g) for g in sampling.draw(400, rng)]
    assert stats.chisquare(counts).pvalue > 1e-6


@pytest.mark.parametrize(
    "sampling", [PoissonSampling(rate=0.3, groups=2), FixedSizeSampling(10, 2, 3)]
)
def test_sampling_round_trips(sampling):
    assert sampling_from_dict(sampling.to_dict()) == sampling


@given(n_labels=st.integers(1, 8), n_shots=st.integers(0, 30), seed=st.integers(0, 2**32 - 1))
def test_label_schedule_repeats_only_when_shots_exceed_labels(n_labels, n_shots, seed):
    labels = [f"l{i}" for i in range(n_labels)]
    schedule = label_schedule(labels, n_shots, make_rng(seed))
    assert len(schedule) == n_shots
    counts = shots_per_label(schedule)
    assert max(counts.values(), default=0) == -(-n_shots // n_labels)
    assert max(counts.values(), default=0) - min([counts.get(label, 0) for label in labels]) <= 1
