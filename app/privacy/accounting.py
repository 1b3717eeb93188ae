"""Accountants: turn descriptions of what ran (events) into epsilon for a given delta.

Two accountants, each fixed to one neighbouring relation and one sampling scheme; an event
sampled any other way is refused (fail closed), never priced approximately.

* :class:`PaperRdpAccountant` -- the analysis of the AdaDPSyn paper: replace-one
  neighbours, fixed-size sampling without replacement, the Wang-Balle-Kasiviswanathan
  amplification bound at integer orders, RDP composition, and the conversion of Balle et
  al. (2020). Use it to reproduce published numbers.
* :class:`TightPldAccountant` (default) -- add/remove neighbours, Poisson sampling, privacy
  loss distributions (dp-accounting), which are tight up to discretisation and never
  under-estimate (pessimistic connect-the-dots discretisation).

Both reduce each token step to one Gaussian mechanism with the effective multiplier of
:func:`app.privacy.events.effective_noise_multiplier` (Gaussian DP composition).

Which label partitions one record can touch depends on the relation: under add/remove a
record sits in one partition; under replace-one it can be swapped for a record of another
label, which changes two partitions. A :class:`~app.privacy.events.PateEvent` (PromptPATE)
reads every record, so it joins every group. :meth:`Accountant.dataset_epsilon` takes the
worst case over what one record can touch. ``docs/privacy.md`` states the guarantee in full.
"""

from __future__ import annotations

import functools
import itertools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from enum import StrEnum

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from app.privacy import rdp
from app.privacy.events import (
    DATASET_EVENTS,
    DatasetEvent,
    DpsgdEvent,
    PateEvent,
    SampledEvent,
)
from app.privacy.mechanisms import Relation
from app.privacy.sampling import FixedSizeSampling, PoissonSampling, Sampling


class UnsupportedEventError(ValueError):
    """The accountant cannot price this event (wrong sampling for its relation)."""


class Accounting(StrEnum):
    """Which accountant prices a job; it also fixes how the generator samples."""

    PAPER = "paper"
    TIGHT = "tight"


Priced = SampledEvent | PateEvent  # what one record is exposed to, one entry at a time


class Accountant(ABC):
    """Prices compositions of :class:`SampledEvent` and :class:`PateEvent` under one
    neighbouring relation."""

    relation: Relation
    sampling_type: type

    def check(self, event: Priced) -> None:
        """Raise :class:`UnsupportedEventError` unless this accountant can price ``event``."""
        if isinstance(event, PateEvent):
            if event.relation != self.relation.value:
                raise UnsupportedEventError(
                    f"{type(self).__name__} ({self.relation.value} neighbours) cannot price a "
                    f"PromptPATE event derived for {event.relation} neighbours"
                )
            return
        if not isinstance(event.sampling, self.sampling_type):
            raise UnsupportedEventError(
                f"{type(self).__name__} ({self.relation.value} neighbours) requires "
                f"{self.sampling_type.__name__}, got {type(event.sampling).__name__}"
            )

    def epsilon(self, events: Priced | Sequence[Priced], delta: float) -> float:
        """Epsilon at ``delta`` of the composition of ``events`` (all may touch one record)."""
        if isinstance(events, SampledEvent | PateEvent):
            events = [events]
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta}")
        for event in events:
            self.check(event)
        active = [e for e in events if isinstance(e, PateEvent) or e.steps > 0]
        if not active:
            return 0.0
        if any(e.noise_multiplier == 0 for e in active):
            return float("inf")
        return self._epsilon(active, delta)

    @abstractmethod
    def _epsilon(self, events: Sequence[Priced], delta: float) -> float: ...

    def exposures(self, events: Sequence[DatasetEvent]) -> list[list[Priced]]:
        """The sets of events that one record can influence together.

        Synthesis events of several jobs on one dataset are grouped by label: a record's
        label decides which of them read it. Under add/remove a record sits in one label
        partition; under replace-one it can be swapped for a record of another label,
        touching two. PromptPATE and PromptDPSGD events read every record, so they join
        every set (a DP-SGD job as its subsampled Gaussian under this relation).
        """
        by_label: dict[str, list[Priced]] = {}
        everyone: list[Priced] = []
        for event in events:
            if isinstance(event, PateEvent):
                everyone.append(event)
                continue
            if isinstance(event, DpsgdEvent):
                everyone.append(event.priced(self.relation.value))
                continue
            for entry in event.labels:
                by_label.setdefault(entry.label, []).append(entry.event)
        singles = list(by_label.values())
        groups = singles
        if self.relation is Relation.REPLACE_ONE:
            groups = singles + [a + b for a, b in itertools.combinations(singles, 2)]
        if not groups:
            return [everyone] if everyone else []
        return [group + everyone for group in groups]

    def dataset_epsilon(self, event: DatasetEvent | Sequence[DatasetEvent], delta: float) -> float:
        """Epsilon for any one record of a dataset over one job or several (composed)."""
        events = [event] if isinstance(event, DATASET_EVENTS) else list(event)
        exposures = self.exposures(events)
        if not exposures:
            return 0.0
        return max(self.epsilon(group, delta) for group in exposures)


class PaperRdpAccountant(Accountant):
    """RDP with fixed-size sampling, as in the AdaDPSyn paper (replace-one neighbours)."""

    relation = Relation.REPLACE_ONE
    sampling_type = FixedSizeSampling

    def __init__(self, orders: np.ndarray = rdp.ORDERS) -> None:
        self.orders = orders

    def rdp(self, event: Priced) -> np.ndarray:
        """RDP curve of ``event`` at :attr:`orders`."""
        self.check(event)
        if isinstance(event, PateEvent):  # mu-GDP: the curve of one plain Gaussian
            return rdp.gaussian_rdp(event.noise_multiplier, self.orders)
        per_step = rdp.subsampled_gaussian_rdp(
            event.sampling.rate, event.noise_multiplier, self.orders
        )
        return event.steps * per_step

    def _epsilon(self, events: Sequence[Priced], delta: float) -> float:
        # Start from an array (not sum's int 0) so the total is an RDP curve even when typed.
        total = sum((self.rdp(e) for e in events), np.zeros(self.orders.shape))
        return rdp.rdp_to_epsilon(total, delta, self.orders)


class TightPldAccountant(Accountant):
    """Privacy loss distributions of Poisson-subsampled Gaussians (add/remove neighbours)."""

    relation = Relation.ADD_OR_REMOVE
    sampling_type = PoissonSampling

    def __init__(self, discretization: float = 2e-3) -> None:
        self.discretization = discretization

    def pld(self, event: Priced) -> pld_lib.PrivacyLossDistribution:
        """Pessimistic PLD of ``event``: ``steps`` compositions of one subsampled Gaussian, or
        for a PromptPATE event (mu-GDP) one plain Gaussian."""
        self.check(event)
        if isinstance(event, PateEvent):
            return _sampled_gaussian_pld(event.noise_multiplier, 1.0, 1, self.discretization)
        return _sampled_gaussian_pld(
            event.noise_multiplier, event.sampling.rate, event.steps, self.discretization
        )

    def _epsilon(self, events: Sequence[Priced], delta: float) -> float:
        combined = self.pld(events[0])
        for event in events[1:]:
            combined = combined.compose(self.pld(event))
        return float(combined.get_epsilon_for_delta(delta))


@functools.lru_cache(maxsize=256)
def _sampled_gaussian_pld(
    sigma: float, rate: float, steps: int, discretization: float
) -> pld_lib.PrivacyLossDistribution:
    """Cached: the ledger recomposes the same events at every admission. PLD objects are
    never mutated (composition returns new ones), so sharing them is safe."""
    one_step = pld_lib.from_gaussian_mechanism(
        standard_deviation=sigma,
        sensitivity=1.0,
        sampling_prob=rate,
        value_discretization_interval=discretization,
        pessimistic_estimate=True,
        use_connect_dots=True,
    )
    return one_step.self_compose(steps)


def accountant_for(accounting: Accounting) -> Accountant:
    """The accountant of an accounting mode."""
    if accounting is Accounting.PAPER:
        return PaperRdpAccountant()
    return TightPldAccountant()


def sampling_for(accounting: Accounting, *, n_label: int, M: int, N: int) -> Sampling:
    """The sampling a token step performs under ``accounting``, for one label partition.

    This is the only place that decides how records are sampled, and it decides from the
    accounting mode: the sampling in an event is therefore always the one its accountant
    assumes.
    """
    if n_label < 1:
        raise ValueError("a label partition must hold at least one record")
    if accounting is Accounting.PAPER:
        return FixedSizeSampling(population=n_label, groups=M, group_size=N)
    return PoissonSampling(rate=min(1.0, M * N / n_label), groups=M)
