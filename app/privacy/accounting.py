"""Accountants: turn descriptions of what ran (events) into epsilon for a given delta.

Two accountants, each fixed to one neighbouring relation and one sampling scheme; an event
sampled any other way, or a mechanism not analysed under the accountant's relation, is
refused (fail closed), never priced approximately.

* :class:`PaperRdpAccountant` -- the analysis of the AdaDPSyn paper: replace-one
  neighbours, fixed-size sampling without replacement, the Wang-Balle-Kasiviswanathan
  amplification bound at integer orders, RDP composition, and the conversion of Balle et
  al. (2020). Use it to reproduce published numbers.
* :class:`TightPldAccountant` (default) -- add/remove neighbours, Poisson sampling, privacy
  loss distributions (dp-accounting), which are tight up to discretisation and never
  under-estimate (pessimistic connect-the-dots discretisation).

Both price any composition of primitive events (:mod:`app.privacy.events`), read as
:mod:`app.privacy.composition` reads it: no job kind or method is known here, so a new kind
of mechanism, built from primitives, needs no edit. A sampled round of Gaussians is one
Gaussian with the effective multiplier of
:func:`app.privacy.events.effective_noise_multiplier` (Gaussian DP composition, exact).

Which label partitions one record can touch depends on the relation: under add/remove a
record sits in one partition; under replace-one it can be swapped for a record of another
label, which changes two partitions. An event outside any
:class:`~app.privacy.events.PartitionEvent` (PromptPATE, PromptDPSGD) reads every record, so
it joins every group. :meth:`Accountant.dataset_epsilon` takes the worst case over what one
record can touch. ``docs/privacy.md`` states the guarantee in full.
"""

from __future__ import annotations

import functools
import itertools
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np

from app.privacy import rdp
from app.privacy.composition import (
    Priced,
    UnsupportedEventError,
    active,
    active_parts,
    noiseless,
    resolve,
    sampled_in,
    scoped,
)
from app.privacy.events import (
    ComposedEvent,
    DatasetEvent,
    Event,
    GaussianEvent,
    LaplaceEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SelfComposedEvent,
)
from app.privacy.mechanisms import Relation
from app.privacy.sampling import FixedSizeSampling, PoissonSampling, Sampling

if TYPE_CHECKING:
    # Imported where a PLD is built, not here: dp-accounting brings SciPy, about a second
    # of CPU that every process start (``dpsyn serve``, ``dpsyn worker``, each client
    # command) would pay although most of them never price an event.
    from dp_accounting.pld import privacy_loss_distribution as pld_lib


class Accounting(StrEnum):
    """Which accountant prices a job; it also fixes how the generator samples."""

    PAPER = "paper"
    TIGHT = "tight"


class Accountant(ABC):
    """Prices compositions of primitive events under one neighbouring relation."""

    relation: Relation
    sampling_type: type

    def resolve(self, event: Event) -> Priced:
        """``event`` with its multipliers relative to the sensitivities under this
        accountant's relation (:func:`app.privacy.composition.resolve`)."""
        return resolve(event, self.relation.value, type(self).__name__)

    def check(self, event: Event) -> None:
        """Raise :class:`UnsupportedEventError` unless this accountant can price ``event``."""
        for sampled in sampled_in(self.resolve(event)):
            if not isinstance(sampled.sampling, self.sampling_type):
                raise UnsupportedEventError(
                    f"{type(self).__name__} ({self.relation.value} neighbours) requires "
                    f"{self.sampling_type.__name__}, got {type(sampled.sampling).__name__}"
                )

    def priced(self, event: Event) -> list[tuple[str | None, Priced]]:
        """What ``event`` exposes a record to, in the order it ran, each primitive with the
        label partition it reads (None: every record), resolved for this relation."""
        return [(label, self.resolve(leaf)) for label, leaf in scoped(event)]

    def epsilon(self, events: Event | Sequence[Event], delta: float) -> float:
        """Epsilon at ``delta`` of the composition of ``events`` (all may touch one record)."""
        if not isinstance(events, Sequence):
            events = [events]
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta}")
        leaves = [leaf for event in events for _, leaf in self.priced(event)]
        for leaf in leaves:
            self.check(leaf)
        live = [leaf for leaf in leaves if active(leaf)]
        if not live:
            return 0.0
        if any(noiseless(leaf) for leaf in live):
            return float("inf")
        return self._epsilon(live, delta)

    @abstractmethod
    def _epsilon(self, events: Sequence[Priced], delta: float) -> float: ...

    def exposures(self, events: Sequence[DatasetEvent]) -> list[list[Priced]]:
        """The sets of events that one record can influence together.

        Jobs on one dataset are grouped by label partition: a record's label decides which
        partition events read it. Under add/remove a record sits in one label partition;
        under replace-one it can be swapped for a record of another label, touching two.
        Events outside any partition (PromptPATE, PromptDPSGD, a count of every record) read
        every record, so they join every set, after the partitions' events.
        """
        by_label: dict[str, list[Priced]] = {}
        everyone: list[Priced] = []
        for event in events:
            for label, leaf in self.priced(event):
                if label is None:
                    everyone.append(leaf)
                else:
                    by_label.setdefault(label, []).append(leaf)
        singles = list(by_label.values())
        groups = singles
        if self.relation is Relation.REPLACE_ONE:
            groups = singles + [a + b for a, b in itertools.combinations(singles, 2)]
        if not groups:
            return [everyone] if everyone else []
        return [group + everyone for group in groups]

    def dataset_epsilon(self, event: DatasetEvent | Sequence[DatasetEvent], delta: float) -> float:
        """Epsilon for any one record of a dataset over one job or several (composed)."""
        events = list(event) if isinstance(event, Sequence) else [event]
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

    def rdp(self, event: Event) -> np.ndarray:
        """RDP curve of ``event`` at :attr:`orders`."""
        self.check(event)
        return self._rdp(self.resolve(event))

    def _rdp(self, event: Priced) -> np.ndarray:
        """RDP of a resolved primitive (multipliers relative to sensitivity 1)."""
        if isinstance(event, GaussianEvent):  # count releases of a plain Gaussian
            return event.count * rdp.gaussian_rdp(event.noise_multiplier, self.orders)
        if isinstance(event, LaplaceEvent):
            return event.count * rdp.laplace_rdp(event.noise_multiplier, self.orders)
        if isinstance(event, PureDpEvent):
            return event.count * rdp.pure_dp_rdp(event.epsilon, self.orders)
        if isinstance(event, RandomizedResponseEvent):
            curve = rdp.randomized_response_rdp(
                event.noise_parameter, event.num_buckets, self.orders
            )
            return event.count * curve
        if isinstance(event, SelfComposedEvent):
            return event.count * self._rdp(self.resolve(event.event))
        if isinstance(event, ComposedEvent):
            parts = (self._rdp(part) for part in active_parts(event))
            return sum(parts, np.zeros(self.orders.shape))
        if any(isinstance(m, LaplaceEvent) for m in event.mechanisms):
            raise UnsupportedEventError(
                f"{type(self).__name__} has no amplification bound for a Laplace mechanism "
                "on a subsample drawn without replacement"
            )
        orders = tuple(self.orders.tolist())  # ints stay ints: the same array is rebuilt
        per_step = _subsampled_gaussian_rdp(event.sampling.rate, event.noise_multiplier, orders)
        return event.steps * per_step

    def _epsilon(self, events: Sequence[Priced], delta: float) -> float:
        # Start from an array (not sum's int 0) so the total is an RDP curve even when typed.
        total = sum((self._rdp(e) for e in events), np.zeros(self.orders.shape))
        return rdp.rdp_to_epsilon(total, delta, self.orders)


class TightPldAccountant(Accountant):
    """Privacy loss distributions of Poisson-subsampled Gaussians (add/remove neighbours)."""

    relation = Relation.ADD_OR_REMOVE
    sampling_type = PoissonSampling

    def __init__(
        self,
        discretization: float = 2e-3,
        cache: PldCompositionCache | None = None,
        *,
        cached: bool = True,
    ) -> None:
        """``cache`` memoises compositions (:class:`PldCompositionCache`; by default the
        process-wide :data:`COMPOSITIONS`); ``cached=False`` composes every time (the
        reference the cache is tested against)."""
        self.discretization = discretization
        self.cache = (cache if cache is not None else COMPOSITIONS) if cached else None

    def pld(self, event: Event) -> pld_lib.PrivacyLossDistribution:
        """Pessimistic PLD of ``event``: a plain or Poisson-subsampled Gaussian or Laplace
        (self-composed ``count`` or ``steps`` times), or a composition of such."""
        self.check(event)
        return self._pld(self.resolve(event))

    def _pld(self, event: Priced) -> pld_lib.PrivacyLossDistribution:
        """PLD of a resolved primitive (multipliers relative to sensitivity 1)."""
        disc = self.discretization
        if isinstance(event, GaussianEvent):
            return _sampled_gaussian_pld(event.noise_multiplier, 1.0, event.count, disc)
        if isinstance(event, LaplaceEvent):
            return _sampled_laplace_pld(event.noise_multiplier, 1.0, event.count, disc)
        if isinstance(event, PureDpEvent):
            return _pure_dp_pld(event.epsilon, event.count, disc)
        if isinstance(event, RandomizedResponseEvent):
            p, k = event.noise_parameter, event.num_buckets
            return _randomized_response_pld(p, k, event.count, disc)
        if isinstance(event, SelfComposedEvent):
            return self._pld(self.resolve(event.event)).self_compose(event.count)
        if isinstance(event, ComposedEvent):
            parts = [self._pld(part) for part in active_parts(event)]
            return functools.reduce(lambda a, b: a.compose(b), parts)
        laplace = [m for m in event.mechanisms if isinstance(m, LaplaceEvent)]
        if laplace:
            rate, b = event.sampling.rate, laplace[0].noise_multiplier
            return _sampled_laplace_pld(b, rate, event.steps, disc)
        return _sampled_gaussian_pld(event.noise_multiplier, event.sampling.rate, event.steps, disc)

    def _epsilon(self, events: Sequence[Priced], delta: float) -> float:
        """The left fold ``((pld(e1) . pld(e2)) . ...) . pld(en)``, in the order given, then
        epsilon at ``delta``; :attr:`cache` returns the same float without redoing it."""
        if self.cache is not None:
            return self.cache.epsilon(("pld", self.discretization), events, self._pld, delta)
        combined = self._pld(events[0])
        for event in events[1:]:
            combined = combined.compose(self._pld(event))
        return float(combined.get_epsilon_for_delta(delta))


@functools.lru_cache(maxsize=1024)
def _subsampled_gaussian_rdp(rate: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    """Memo of :func:`app.privacy.rdp.subsampled_gaussian_rdp`, a pure function of its
    arguments, so a remembered curve is the very array a new call would compute (read-only,
    since it is shared). Why: the ledger prices every live job's curve at every admission,
    and one curve costs milliseconds (a sum over every order up to the largest)."""
    curve = rdp.subsampled_gaussian_rdp(rate, sigma, np.asarray(orders))
    curve.setflags(write=False)
    return curve


def _sampled_gaussian_pld(
    sigma: float, rate: float, steps: int, discretization: float
) -> pld_lib.PrivacyLossDistribution:
    """The PLD of ``steps`` rounds of a Gaussian (std ``sigma``) on a ``rate`` subsample."""
    return _sampled_pld("gaussian", sigma, rate, steps, discretization)


def _sampled_laplace_pld(
    scale: float, rate: float, steps: int, discretization: float
) -> pld_lib.PrivacyLossDistribution:
    """The Laplace counterpart of :func:`_sampled_gaussian_pld` (``scale``: the Laplace
    parameter over the L1 sensitivity)."""
    return _sampled_pld("laplace", scale, rate, steps, discretization)


# Each noise's PLD builder (a function of dp-accounting's ``privacy_loss_distribution``)
# and the name it gives the noise parameter.
_PLD_BUILDERS = {
    "gaussian": ("from_gaussian_mechanism", "standard_deviation"),
    "laplace": ("from_laplace_mechanism", "parameter"),
}


@functools.lru_cache(maxsize=512)
def _sampled_pld(
    noise: str, parameter: float, rate: float, steps: int, discretization: float
) -> pld_lib.PrivacyLossDistribution:
    """Cached: the ledger recomposes the same events at every admission. PLD objects are
    never mutated (composition returns new ones), so sharing them is safe. One body for both
    noises, so that the two keep the same pessimistic, connect-the-dots settings."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    builder, name = _PLD_BUILDERS[noise]
    one_step = getattr(pld_lib, builder)(
        **{name: parameter},
        sensitivity=1.0,
        sampling_prob=rate,
        value_discretization_interval=discretization,
        pessimistic_estimate=True,
        use_connect_dots=True,
    )
    return one_step.self_compose(steps)


@functools.lru_cache(maxsize=256)
def _pure_dp_pld(
    epsilon: float, count: int, discretization: float
) -> pld_lib.PrivacyLossDistribution:
    """``count`` epsilon-DP releases at their worst case: the loss is +epsilon with
    probability e^eps / (1 + e^eps), else -epsilon (binary randomized response), rounded
    pessimistically (``from_privacy_parameters`` at delta 0)."""
    from dp_accounting.pld import common as dp_common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    parameters = dp_common.DifferentialPrivacyParameters(epsilon, 0.0)
    one = pld_lib.from_privacy_parameters(parameters, value_discretization_interval=discretization)
    return one.self_compose(count)


@functools.lru_cache(maxsize=256)
def _randomized_response_pld(
    noise_parameter: float, num_buckets: int, count: int, discretization: float
) -> pld_lib.PrivacyLossDistribution:
    """``count`` releases of k-ary randomized response between two distinct buckets."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    one = pld_lib.from_randomized_response(
        noise_parameter,
        num_buckets,
        pessimistic_estimate=True,
        value_discretization_interval=discretization,
    )
    return one.self_compose(count)


@dataclass
class _Composed:
    """A remembered composition, and its epsilon at each delta asked so far."""

    pld: pld_lib.PrivacyLossDistribution
    epsilons: dict[float, float] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Probabilities held (what bounds the cache's memory): dp-accounting keeps one pmf
        per direction, one shared when the PLD is symmetric. Unknown layouts count 1."""
        pmfs = {id(p): p for p in (getattr(self.pld, n, None) for n in ("_pmf_remove", "_pmf_add"))}
        total = 0
        for pmf in pmfs.values():
            probs = getattr(pmf, "_probs", None)
            losses = getattr(pmf, "_loss_probs", None)
            total += probs.size if probs is not None else len(losses) if losses else 0
        return max(1, total)


_ROOT = 0  # the node of the empty sequence, above every root key


class PldCompositionCache:
    """Memo of the tight accountant's compositions, exact by construction.

    Why: the ledger prices a dataset's spend by composing the privacy loss distributions
    of all its live jobs, label group by label group, at every admission (under the budget's
    lock), quote and budget view. Recomposing everything made a burst of ``n`` admissions
    cost O(n^2) compositions. The events of an admitted job never change and new jobs come
    last in ledger order, so the composition of a group's first ``k`` events is a prefix of
    the next one's, and ``pld(e1 .. ek+1) = pld(e1 .. ek) . pld(ek+1)``.

    Exactness: :meth:`epsilon` returns the very float that the uncached
    :meth:`TightPldAccountant._epsilon` computes for the same ``events`` in the same order,
    not an approximation of it. The uncached path is the left fold
    ``c1 = pld(e1), ci = c(i-1).compose(pld(ei))`` and then ``cn.get_epsilon_for_delta``.
    This cache remembers some ``ci`` (each a value that fold computed, keyed by exactly
    ``(e1, ..., ei)``), resumes the fold from the deepest remembered ``ci`` on the path,
    performing the same deterministic operations on the same operands, and remembers
    ``get_epsilon_for_delta`` of ``cn`` per ``delta`` (a pure function of ``cn``). Keys are
    the events themselves (frozen dataclasses compared by value), never row IDs, so a key
    cannot go stale: equal sequences of events have equal compositions. Sequences are
    interned as a trie: node ``(parent, event) -> child``, with child IDs drawn from a
    counter that is never reset, so one node ID stands for one sequence for the life of the
    process, even across a :meth:`clear` or a thread storing after one.

    Which prefixes are kept: the last of each fold, and every ``checkpoint``-th (so that
    a release or an insertion mid-sequence, e.g. a synthesis job before the all-record jobs
    that close every group, resumes at most ``checkpoint - 1`` events before the change).
    Single events' PLDs are not stored (``_sampled_pld`` already remembers them), so
    calibration's bisection over one job's cost never fills the cache; only their epsilons
    are (floats, the last 4,096). Least recently used
    compositions are dropped past ``max_entries`` or ``max_floats`` probabilities in all
    (8 M, 64 MB; one composition of 60 AG News jobs holds some 40,000); dropping only
    costs time.
    """

    def __init__(
        self,
        *,
        max_entries: int = 256,
        max_floats: int = 8_000_000,
        checkpoint: int = 8,
        max_nodes: int = 50_000,
    ) -> None:
        self.max_entries, self.max_floats = max_entries, max_floats
        self.checkpoint, self.max_nodes = checkpoint, max_nodes
        self._floats = 0
        self._lock = threading.Lock()
        self._edges: dict[tuple[int, Hashable], int] = {}
        self._entries: OrderedDict[int, _Composed] = OrderedDict()
        self._ids = itertools.count(1)
        self.max_singles = 4096
        self._singles: OrderedDict[tuple[Hashable, Priced, float], float] = OrderedDict()

    def clear(self) -> None:
        with self._lock:
            self._edges.clear()
            self._entries.clear()
            self._singles.clear()
            self._floats = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _single(
        self,
        root: Hashable,
        event: Priced,
        pld: Callable[[Priced], pld_lib.PrivacyLossDistribution],
        delta: float,
    ) -> float:
        """Epsilon of one event (a job's own cost, priced again at every submission of its
        shape): a pure function of the event, remembered as a float only."""
        key = (root, event, delta)
        with self._lock:
            value = self._singles.get(key)
        if value is None:
            value = float(pld(event).get_epsilon_for_delta(delta))
            with self._lock:
                self._singles[key] = value
                while len(self._singles) > self.max_singles:
                    self._singles.popitem(last=False)
        return value

    def _walk(
        self, root: Hashable, events: Sequence[Priced]
    ) -> tuple[list[int], int, _Composed | None]:
        """Under the lock: the node of each prefix, and the deepest remembered one (its
        length and entry; 0 and None when none is)."""
        if len(self._edges) > self.max_nodes:  # bounded memory: forget all, IDs stay unique
            self._edges.clear()
            self._entries.clear()
            self._floats = 0
        node = self._edges.setdefault((_ROOT, root), next(self._ids))
        path: list[int] = []
        for event in events:
            key = (node, event)
            node = self._edges.get(key) or self._edges.setdefault(key, next(self._ids))
            path.append(node)
        for depth in range(len(path), 1, -1):
            entry = self._entries.get(path[depth - 1])
            if entry is not None:
                self._entries.move_to_end(path[depth - 1])
                return path, depth, entry
        return path, 0, None

    def _store(self, node: int, entry: _Composed) -> None:
        """Under the lock."""
        old = self._entries.pop(node, None)
        self._floats += entry.size - (old.size if old is not None else 0)
        self._entries[node] = entry
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_entries or self._floats > self.max_floats
        ):
            self._floats -= self._entries.popitem(last=False)[1].size

    def epsilon(
        self,
        root: Hashable,
        events: Sequence[Priced],
        pld: Callable[[Priced], pld_lib.PrivacyLossDistribution],
        delta: float,
    ) -> float:
        """Epsilon at ``delta`` of the left fold of ``pld`` over ``events``, as
        :meth:`TightPldAccountant._epsilon` computes it. ``root`` names everything else the
        PLDs depend on (the accountant's discretisation)."""
        if len(events) == 1:  # nothing composed: only the float is kept
            return self._single(root, events[0], pld, delta)
        with self._lock:
            path, depth, entry = self._walk(root, events)
            if depth == len(events) and entry is not None and delta in entry.epsilons:
                return entry.epsilons[delta]
        combined = entry.pld if entry is not None else None
        kept: list[tuple[int, _Composed]] = []
        for index in range(depth, len(events)):  # the uncached fold, resumed
            step = pld(events[index])
            combined = step if combined is None else combined.compose(step)
            length = index + 1
            if length >= 2 and (length % self.checkpoint == 0 or length == len(events)):
                kept.append((path[index], _Composed(combined)))
        assert combined is not None  # events is never empty (Accountant.epsilon)
        final = kept[-1][1] if kept else entry
        assert final is not None  # either resumed to the end (kept) or remembered whole
        value = float(combined.get_epsilon_for_delta(delta))
        with self._lock:
            for node, composed in kept:
                self._store(node, composed)
            if len(final.epsilons) >= 16:
                final.epsilons.clear()
            final.epsilons[delta] = value
        return value


#: The compositions every :class:`TightPldAccountant` shares unless given another cache.
COMPOSITIONS = PldCompositionCache()


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
