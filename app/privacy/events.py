"""Descriptions of what ran, as plain data, for the accountants to price.

Following ``dp_accounting``, nothing here computes a privacy loss, and any mechanism is
described by composing a few **primitive events** (``docs/privacy.md``,
"Privacy events"). The accountants (:mod:`app.privacy.accounting`) price any composition of
primitives, so a new kind of mechanism needs no edit here or there: its method builds its
event from these.

* :class:`GaussianEvent` -- ``count`` releases of the Gaussian mechanism on the same data.
* :class:`LaplaceEvent` -- ``count`` releases of the Laplace mechanism on the same data.
* :class:`SampledEvent` -- ``steps`` rounds, each on a fresh subsample (Poisson, or a fixed
  size without replacement: :mod:`app.privacy.sampling`) running the composition of its
  ``mechanisms`` (Gaussians, or one Laplace) on that subsample.
* :class:`ComposedEvent` -- events run one after another (adaptively), all on the same data.
* :class:`SelfComposedEvent` -- one event run ``count`` times.
* :class:`PartitionEvent` -- an event that reads only the records of one label partition;
  anything outside one reads every record of the dataset.

Each Gaussian or Laplace event states its query's sensitivity under each neighbouring
relation (:class:`Sensitivity`); an accountant of a relation the mechanism was not analysed
for refuses it (fail closed).

The jobs of the three built-in methods are **named compositions** of these
(:class:`NamedEvent`): :class:`SynthesisEvent` (the token loop: one :class:`LabelEvent` per
label partition), :class:`PateEvent` (PromptPATE) and :class:`DpsgdEvent` (PromptDPSGD).
Each keeps the fields and the stored form it had, and :meth:`NamedEvent.primitive` says what
it is made of; the accountants see only that.

Events are frozen, hashable, and round-trip through JSON-compatible dicts (:func:`to_dict` /
:func:`from_dict`), so the ledger stores exactly what ran and can price it again later.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from app.privacy.sampling import FixedSizeSampling, PoissonSampling, Sampling, sampling_from_dict

RELATIONS = ("add_or_remove", "replace_one")  # values of app.privacy.mechanisms.Relation


def _check_relation(relation: str) -> None:
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")


@dataclass(frozen=True)
class Sensitivity:
    """How far a mechanism's query moves between neighbouring datasets, under each relation.

    In the units of the mechanism's noise parameter (L2 for a Gaussian, L1 for a Laplace), so
    that the noise multiplier relative to the sensitivity under a relation is the event's
    ``noise_multiplier`` divided by the value for that relation. None: the mechanism was not
    analysed under that relation, and an accountant of it refuses the event. The default, 1
    under both, is the usual convention of a multiplier already relative to the sensitivity.
    """

    add_or_remove: float | None = 1.0
    replace_one: float | None = 1.0

    def __post_init__(self) -> None:
        values = (self.add_or_remove, self.replace_one)
        if all(v is None for v in values):
            raise ValueError("a sensitivity must be stated under at least one relation")
        for value in values:
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"a sensitivity must be positive and finite, got {value}")

    @classmethod
    def only(cls, relation: str, value: float = 1.0) -> Sensitivity:
        """A sensitivity stated under ``relation`` alone."""
        _check_relation(relation)
        if relation == "add_or_remove":
            return cls(add_or_remove=value, replace_one=None)
        return cls(add_or_remove=None, replace_one=value)

    def under(self, relation: str) -> float | None:
        """The sensitivity under ``relation`` (None: not analysed under it)."""
        _check_relation(relation)
        return self.add_or_remove if relation == "add_or_remove" else self.replace_one


UNIT = Sensitivity()


@dataclass(frozen=True)
class _NoisyReleases:
    """What a Gaussian and a Laplace event share: ``count`` releases of one query with noise
    of ``noise_multiplier`` (relative to ``sensitivity``), checked once here for both."""

    noise_multiplier: float
    count: int = 1
    sensitivity: Sensitivity = UNIT

    def __post_init__(self) -> None:
        if not self.noise_multiplier >= 0:
            raise ValueError(f"noise_multiplier must be >= 0, got {self.noise_multiplier}")
        if self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")


@dataclass(frozen=True)
class GaussianEvent(_NoisyReleases):
    """``count`` releases of ``query + N(0, noise_multiplier^2 I)``, all on the same data.

    Sensitivity: the L2 sensitivity of the query under each neighbouring relation is
    ``sensitivity`` (in the noise's units); the default, 1 under both, makes
    ``noise_multiplier`` the usual noise std over the L2 sensitivity. A multiplier of 0 is
    no noise: every accountant charges infinity for it.
    """


@dataclass(frozen=True)
class LaplaceEvent(_NoisyReleases):
    """``count`` releases of ``query + Laplace(noise_multiplier)`` noise per coordinate.

    Sensitivity: the L1 sensitivity of the query under each neighbouring relation is
    ``sensitivity`` (in the noise's units); with the default, 1 under both,
    ``noise_multiplier`` is the Laplace scale over the L1 sensitivity (a pure
    1/noise_multiplier-DP release). A multiplier of 0 is no noise (infinite epsilon).
    """


Noise = GaussianEvent | LaplaceEvent


@dataclass(frozen=True)
class PureDpEvent:
    """``count`` releases of a mechanism that is ``epsilon``-DP (pure: delta 0) on the same
    data, whatever it is: the exponential mechanism, report-noisy-max, the sparse vector
    technique (dp_accounting's ``EpsilonDeltaDpEvent`` with delta 0).

    Neighbouring relation and sensitivity: ``epsilon`` holds between datasets one
    ``sensitivity`` unit apart, so under a relation the event is ``epsilon *
    sensitivity.under(relation)``-DP (group privacy where one record moves the query further);
    None under a relation: not analysed there, refused. Priced exactly at its worst case:
    every epsilon-DP mechanism is a post-processing of binary randomized response at epsilon
    (Kairouz, Oh and Viswanath 2015), which both accountants price exactly. (Priced as a
    Laplace release instead, 20 releases at epsilon 0.5 came to 9.671 at delta 1e-6 where
    the worst case is 9.987: under-priced.)
    """

    epsilon: float
    count: int = 1
    sensitivity: Sensitivity = UNIT

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"epsilon must be finite and >= 0, got {self.epsilon}")
        if self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")


@dataclass(frozen=True)
class RandomizedResponseEvent:
    """``count`` releases of k-ary randomized response applied to a categorical query of the
    data: with probability 1 - ``noise_parameter`` the query's bucket, else one of the
    ``num_buckets`` buckets uniformly (dp_accounting's ``RandomizedResponseDpEvent``).

    Sensitivity: one record changes the query's bucket to any other (one bucket change), so
    the privacy loss is that between two distinct buckets, epsilon = log(1 + k (1 - p) / p).
    Both accountants price it exactly: the PLD of the two bucket distributions, and their
    Renyi divergence (:func:`app.privacy.rdp.randomized_response_rdp`).

    Neighbouring relation: ``relations`` is required (keyword-only, no default): the caller
    names the relations it analysed, and an accountant of a relation left out refuses the
    event (fail closed). Which hold depends on what is randomized:

    * a query of the **whole dataset** (one bucket computed from all records, then
      randomized): adding, removing or replacing one record moves the bucket by at most one
      change, and the output is the same single response either way. Both relations:
      ``relations=RELATIONS``.
    * a **per-record randomizer** (each record's own bucket randomized and released): only
      ``("replace_one",)``. Replacing a record changes one response's bucket, which is the
      analysis above; adding one adds a response of its own, an output with no counterpart
      in the neighbour, which this analysis does not cover. dp_accounting (0.6.0) refuses
      ``RandomizedResponseDpEvent`` under ``ADD_OR_REMOVE_ONE`` in both its PLD and RDP
      accountants ("neighboring_relation must be REPLACE_ONE or REPLACE_SPECIAL"), prices
      it under ``REPLACE_ONE`` exactly as here, and under ``REPLACE_SPECIAL`` (a record
      swapped for a special one answered uniformly), which this project does not offer.

    Stored form (:func:`to_dict`) always carries ``relations``: it has since the event was
    introduced, so every stored event names the relations it was priced under and
    :func:`from_dict` reads them as stored (a dict without them is refused, not defaulted).
    """

    noise_parameter: float
    num_buckets: int
    count: int = 1
    relations: tuple[str, ...] = field(kw_only=True)

    def __post_init__(self) -> None:
        if not 0.0 <= self.noise_parameter <= 1.0:
            raise ValueError(f"noise_parameter must be in [0, 1], got {self.noise_parameter}")
        if self.num_buckets < 1:
            raise ValueError(f"num_buckets must be >= 1, got {self.num_buckets}")
        if self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")
        if not self.relations:
            raise ValueError("randomized response must be analysed under a relation")
        for relation in self.relations:
            _check_relation(relation)

    @property
    def epsilon(self) -> float:
        """Its pure-DP epsilon, log(1 + k (1 - p) / p) (infinite at p = 0)."""
        p, k = self.noise_parameter, self.num_buckets
        if k == 1 or p == 1:
            return 0.0
        return math.inf if p == 0 else math.log1p(k * (1 - p) / p)


Pure = PureDpEvent | RandomizedResponseEvent


def effective_noise_multiplier(
    mechanisms: tuple[GaussianEvent, ...], relation: str | None = None
) -> float:
    """The single Gaussian equivalent to the adaptive composition of ``mechanisms``.

    Gaussian mechanisms with multipliers sigma_i are 1/sigma_i-GDP, and an adaptive
    composition of mu_i-GDP mechanisms is sqrt(sum mu_i^2)-GDP, exactly (Dong, Roth and Su,
    2019). So the composition has the privacy curve of one Gaussian mechanism with multiplier
    (sum_i count_i / sigma_i^2)^(-1/2). A zero multiplier (no noise) gives 0. ``relation``:
    each sigma_i is first divided by its sensitivity under that relation (which must be
    stated); None takes the multipliers as they are (every sensitivity 1).
    """
    if not mechanisms:
        raise ValueError("a round must run at least one mechanism")
    sigmas = [_relative(m, relation) for m in mechanisms]
    if any(s == 0 for s in sigmas):
        return 0.0
    return math.fsum(m.count / s**2 for m, s in zip(mechanisms, sigmas, strict=True)) ** -0.5


def _relative(mechanism: Noise, relation: str | None) -> float:
    if relation is None:
        return mechanism.noise_multiplier
    sensitivity = mechanism.sensitivity.under(relation)
    if sensitivity is None:
        raise ValueError(f"the mechanism's sensitivity is not stated for {relation} neighbours")
    return mechanism.noise_multiplier / sensitivity


@dataclass(frozen=True)
class SampledEvent:
    """``steps`` rounds, each on a fresh ``sampling`` of the records it reads, running the
    adaptive composition of ``mechanisms`` on that subsample (dp_accounting's
    ``SelfComposed(PoissonSampled(Composed(...)))``, or its sampled-without-replacement
    counterpart).

    Sensitivity and relation: those of each mechanism, on the subsample. Poisson sampling is
    analysed for add/remove neighbours, fixed-size sampling without replacement for
    replace-one neighbours (:mod:`app.privacy.sampling`); an accountant refuses the other.
    ``mechanisms`` are Gaussians (one round is then one Gaussian of the
    :func:`effective_noise_multiplier`, exactly) or a single Laplace.
    """

    sampling: Sampling
    mechanisms: tuple[Noise, ...]
    steps: int

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if not self.mechanisms:
            raise ValueError("a round must run at least one mechanism")
        laplace = [m for m in self.mechanisms if isinstance(m, LaplaceEvent)]
        if laplace and (len(self.mechanisms) > 1 or laplace[0].count != 1):
            raise ValueError("a sampled round runs Gaussians, or one Laplace release")

    @property
    def noise_multiplier(self) -> float:
        """Multiplier of the single Gaussian equivalent to one round's mechanisms, each
        taken relative to a sensitivity of 1 (:func:`effective_noise_multiplier`)."""
        return effective_noise_multiplier(self._gaussians())

    def _gaussians(self) -> tuple[GaussianEvent, ...]:
        gaussians = tuple(m for m in self.mechanisms if isinstance(m, GaussianEvent))
        if len(gaussians) != len(self.mechanisms):
            raise ValueError("a Laplace round has no Gaussian equivalent")
        return gaussians


@dataclass(frozen=True)
class ComposedEvent:
    """``events`` run one after another (each may depend on the outputs before it), all on
    the same data: the adaptive composition. Sensitivity and relation: each event's own."""

    events: tuple[Event, ...]


@dataclass(frozen=True)
class SelfComposedEvent:
    """``event`` run ``count`` times on the same data (adaptively): dp_accounting's
    ``SelfComposedDpEvent``. Sensitivity and relation: those of ``event``."""

    event: Event
    count: int

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")


@dataclass(frozen=True)
class PartitionEvent:
    """``event``, reading only the records whose label is ``label``.

    Neighbouring relation: adding or removing one record changes one label partition, so it
    meets only that label's partition events (and every event that reads all records);
    replacing one record can change two partitions (the record swapped for one of another
    label). The accountants take the worst case over what one record can touch
    (:meth:`app.privacy.accounting.Accountant.exposures`). Sensitivity: ``event``'s own, on
    the partition's records.
    """

    label: str
    event: Event


class NamedEvent(ABC):
    """A composition of primitive events under a name, with the stored form it has always
    had: an accountant sees only :meth:`primitive`."""

    @abstractmethod
    def primitive(self) -> Event:
        """What this event is made of, as primitive events only."""


@dataclass(frozen=True)
class LabelEvent(NamedEvent):
    """The rounds that read one label partition, and the release of its record count.

    ``count_release``: the partition's record count was released once, before the rounds,
    with this Gaussian mechanism (L2 sensitivity 1: adding or removing one of its records
    moves the count by 1; ``app.privacy.unit.release_counts``). None: the count is public
    (declared so by the data owner) or the job predates the release.
    """

    label: str
    event: SampledEvent
    count_release: GaussianEvent | None = None

    def priced(self) -> tuple[SampledEvent | GaussianEvent, ...]:
        """What this entry exposes one of the partition's records to, in the order it ran."""
        if self.count_release is None:
            return (self.event,)
        return (self.count_release, self.event)

    def primitive(self) -> PartitionEvent:
        """The count release (if any) then the rounds, on this label's partition only."""
        return PartitionEvent(self.label, ComposedEvent(self.priced()))


@dataclass(frozen=True)
class SynthesisEvent(NamedEvent):
    """Everything a token-loop job (DP few-shot generation, AdaDPSyn) ran, one entry per
    label partition it read. Each token step of a label runs its aggregator's Gaussian
    mechanisms (``AggregatorParams.round_events``: Tang's noisy mean; AdaDPSyn's GoodRadius
    comparisons, coverage checks and projected means) on M disjoint teacher subsets of a
    fresh subsample of that label's records."""

    labels: tuple[LabelEvent, ...]

    def __post_init__(self) -> None:
        names = [entry.label for entry in self.labels]
        if len(set(names)) != len(names):
            raise ValueError(f"each label may appear once, got {names}")

    def primitive(self) -> ComposedEvent:
        return ComposedEvent(tuple(entry.primitive() for entry in self.labels))


@dataclass(frozen=True)
class PateEvent(NamedEvent):
    """A PromptPATE job, as its accountant must see it.

    The job's Confident-GNMax releases (threshold checks and GNMax votes) ran under a
    Gaussian DP filter with budget ``mu``, so together they are ``mu``-GDP
    (``app.privacy.pate``): the privacy curve of one Gaussian mechanism with multiplier
    ``1 / mu``, stored here as ``noise_multiplier``. ``relation`` names the neighbouring
    relation under which ``mu`` was derived (the vote sensitivities differ): the primitive is
    a Gaussian of sensitivity 1 under that relation only, which an accountant of the other
    refuses. Every record of the dataset may be read, whatever its label.
    """

    noise_multiplier: float
    relation: str

    def __post_init__(self) -> None:
        if not self.noise_multiplier > 0:
            raise ValueError(f"noise_multiplier must be > 0, got {self.noise_multiplier}")
        _check_relation(self.relation)

    def primitive(self) -> GaussianEvent:
        return GaussianEvent(self.noise_multiplier, 1, Sensitivity.only(self.relation))


#: The summed clipped gradients of DP-SGD, in units of the clipping norm ``C``.
CLIPPED_SUM = Sensitivity(add_or_remove=1.0, replace_one=2.0)


@dataclass(frozen=True)
class DpsgdEvent(NamedEvent):
    """A PromptDPSGD job: ``steps`` DP-SGD steps over the whole dataset.

    Each step samples a batch with ``sampling`` (one group: :class:`PoissonSampling` under
    the tight accountant, :class:`FixedSizeSampling` under the paper accountant) from all
    records, whatever their label, and releases the sum of the batch's per-example gradients,
    each clipped to L2 norm ``C``, plus ``N(0, (noise_multiplier * C)^2 I)``.
    ``noise_multiplier`` is therefore noise std / C, the clipping norm, which is *not* always
    the sensitivity (:data:`CLIPPED_SUM`):

    * add/remove neighbours: one record adds or removes one clipped gradient, so the sum
      moves by at most ``C`` and the multiplier relative to the sensitivity is
      ``noise_multiplier``;
    * replace-one neighbours: one clipped gradient is swapped for another, the sum moves by
      at most ``2C``, and the multiplier relative to the sensitivity is
      ``noise_multiplier / 2``.

    ``count_release``: the dataset's record count, from which the sampling rate was set
    (``batch_size / count``), was released once before the steps with this Gaussian
    mechanism (L2 sensitivity 1: adding or removing a record moves the count by 1;
    ``app.privacy.unit.release_counts``). It reads every record, so it joins every exposure
    group with the steps. None: the count is public (declared so by the data owner) or the
    job predates the release.
    """

    noise_multiplier: float
    sampling: Sampling
    steps: int
    count_release: GaussianEvent | None = None

    def __post_init__(self) -> None:
        if not self.noise_multiplier >= 0:
            raise ValueError(f"noise_multiplier must be >= 0, got {self.noise_multiplier}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.sampling.groups != 1:
            raise ValueError(f"a DP-SGD batch is one group, got {self.sampling.groups}")

    def sensitivity_over_clip(self, relation: str) -> float:
        """L2 sensitivity of the summed clipped gradients, in units of the clipping norm."""
        value = CLIPPED_SUM.under(relation)
        assert value is not None  # stated under both relations
        return value

    def primitive(self) -> ComposedEvent:
        """The count release (if any; sensitivity 1 under either relation, which over-prices
        replace-one, where the count does not move), then the steps, on every record."""
        step = GaussianEvent(self.noise_multiplier, 1, CLIPPED_SUM)
        steps = SampledEvent(self.sampling, (step,), self.steps)
        if self.count_release is None:
            return ComposedEvent((steps,))
        return ComposedEvent((self.count_release, steps))

    def priced(self, relation: str) -> SampledEvent:
        """The steps as one subsampled Gaussian whose multiplier is relative to the
        sensitivity under ``relation``."""
        multiplier = self.noise_multiplier / self.sensitivity_over_clip(relation)
        return SampledEvent(self.sampling, (GaussianEvent(multiplier),), self.steps)

    def exposure(self, relation: str) -> tuple[GaussianEvent | SampledEvent, ...]:
        """What the job exposes any one record to under ``relation``, in the order it ran."""
        steps = self.priced(relation)
        return (steps,) if self.count_release is None else (self.count_release, steps)


Primitive = (
    GaussianEvent
    | LaplaceEvent
    | PureDpEvent
    | RandomizedResponseEvent
    | SampledEvent
    | ComposedEvent
    | SelfComposedEvent
    | PartitionEvent
)
Event = Primitive | SynthesisEvent | PateEvent | DpsgdEvent | LabelEvent
# What one job charges to a dataset: any event (a named one, or a composition of primitives).
DatasetEvent = Event
PRIMITIVE_EVENTS = (
    GaussianEvent,
    LaplaceEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SampledEvent,
    ComposedEvent,
    SelfComposedEvent,
    PartitionEvent,
)
DATASET_EVENTS = (*PRIMITIVE_EVENTS, NamedEvent)  # the same, for isinstance


# --- stored form --------------------------------------------------------------------------
# Named events keep the form they have always been stored in (a ledger row written before
# the primitives reads, and prices, as it did); primitives are stored by their own types.


def _sensitivity_dict(sensitivity: Sensitivity) -> dict[str, float | None]:
    return {"add_or_remove": sensitivity.add_or_remove, "replace_one": sensitivity.replace_one}


def _noise_dict(kind: str, event: Noise) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": kind,
        "noise_multiplier": event.noise_multiplier,
        "count": event.count,
    }
    if event.sensitivity != UNIT:  # absent otherwise: rows stored before it read alike
        out["sensitivity"] = _sensitivity_dict(event.sensitivity)
    return out


def _label_entry(entry: LabelEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"label": entry.label, "event": to_dict(entry.event)}
    if entry.count_release is not None:  # absent otherwise: older stored events read alike
        out["count_release"] = to_dict(entry.count_release)
    return out


def _dpsgd_dict(event: DpsgdEvent) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "dpsgd",
        "noise_multiplier": event.noise_multiplier,
        "sampling": event.sampling.to_dict(),
        "steps": event.steps,
    }
    if event.count_release is not None:  # absent otherwise: older stored events read alike
        out["count_release"] = to_dict(event.count_release)
    return out


def to_dict(event: Event) -> dict[str, Any]:
    """A JSON-compatible description of ``event`` (inverse of :func:`from_dict`)."""
    match event:
        case GaussianEvent():
            return _noise_dict("gaussian", event)
        case LaplaceEvent():
            return _noise_dict("laplace", event)
        case PureDpEvent():
            out: dict[str, Any] = {"type": "pure_dp", "epsilon": event.epsilon}
            out["count"] = event.count
            if event.sensitivity != UNIT:
                out["sensitivity"] = _sensitivity_dict(event.sensitivity)
            return out
        case RandomizedResponseEvent():
            return {
                "type": "randomized_response",
                "noise_parameter": event.noise_parameter,
                "num_buckets": event.num_buckets,
                "count": event.count,
                "relations": list(event.relations),
            }
        case SampledEvent():
            return {
                "type": "sampled",
                "sampling": event.sampling.to_dict(),
                "mechanisms": [to_dict(m) for m in event.mechanisms],
                "steps": event.steps,
            }
        case ComposedEvent():
            return {"type": "composed", "events": [to_dict(e) for e in event.events]}
        case SelfComposedEvent():
            return {"type": "self_composed", "event": to_dict(event.event), "count": event.count}
        case PartitionEvent():
            return {"type": "partition", "label": event.label, "event": to_dict(event.event)}
        case SynthesisEvent():
            return {"type": "synthesis", "labels": [_label_entry(e) for e in event.labels]}
        case PateEvent():
            return {
                "type": "pate",
                "noise_multiplier": event.noise_multiplier,
                "relation": event.relation,
            }
        case DpsgdEvent():
            return _dpsgd_dict(event)
    raise TypeError(f"not an event: {event!r}")


def _sensitivity(data: dict[str, Any]) -> Sensitivity:
    stated = data.get("sensitivity")
    if stated is None:
        return UNIT
    values = [stated.get(r) for r in RELATIONS]
    return Sensitivity(*(None if v is None else float(v) for v in values))


def _gaussian(data: dict[str, Any]) -> GaussianEvent:
    return GaussianEvent(float(data["noise_multiplier"]), int(data["count"]), _sensitivity(data))


def _laplace(data: dict[str, Any]) -> LaplaceEvent:
    return LaplaceEvent(float(data["noise_multiplier"]), int(data["count"]), _sensitivity(data))


def _release(data: dict[str, Any], what: str) -> GaussianEvent | None:
    if "count_release" not in data:
        return None
    release = from_dict(data["count_release"])
    if not isinstance(release, GaussianEvent):
        raise ValueError(f"{what} count release must be a Gaussian event")
    return release


def _randomized_response(data: dict[str, Any]) -> RandomizedResponseEvent:
    """Its relations as stored: :func:`to_dict` has written them since the event existed,
    so none is assumed for a dict without them (the ledger prices what was reserved)."""
    if "relations" not in data:
        raise ValueError("a stored randomized-response event must name its relations")
    return RandomizedResponseEvent(
        float(data["noise_parameter"]),
        int(data["num_buckets"]),
        int(data["count"]),
        relations=tuple(str(r) for r in data["relations"]),
    )


def _sampled(data: dict[str, Any]) -> SampledEvent:
    rebuilt = [from_dict(m) for m in data["mechanisms"]]
    mechanisms = tuple(m for m in rebuilt if isinstance(m, GaussianEvent | LaplaceEvent))
    if len(mechanisms) != len(rebuilt):
        raise ValueError("a sampled round may only contain Gaussian or Laplace mechanisms")
    return SampledEvent(sampling_from_dict(data["sampling"]), mechanisms, int(data["steps"]))


def _label_from_dict(item: dict[str, Any]) -> LabelEvent:
    inner = from_dict(item["event"])
    if not isinstance(inner, SampledEvent):
        raise ValueError("a label entry must hold a sampled event")
    return LabelEvent(str(item["label"]), inner, _release(item, "a label's"))


def _dpsgd(data: dict[str, Any]) -> DpsgdEvent:
    return DpsgdEvent(
        float(data["noise_multiplier"]),
        sampling_from_dict(data["sampling"]),
        int(data["steps"]),
        _release(data, "a DP-SGD job's"),
    )


_READERS: dict[str, Any] = {
    "gaussian": _gaussian,
    "laplace": _laplace,
    "pure_dp": lambda d: PureDpEvent(float(d["epsilon"]), int(d["count"]), _sensitivity(d)),
    "randomized_response": _randomized_response,
    "sampled": _sampled,
    "composed": lambda d: ComposedEvent(tuple(from_dict(e) for e in d["events"])),
    "self_composed": lambda d: SelfComposedEvent(from_dict(d["event"]), int(d["count"])),
    "partition": lambda d: PartitionEvent(str(d["label"]), from_dict(d["event"])),
    "synthesis": lambda d: SynthesisEvent(tuple(_label_from_dict(i) for i in d["labels"])),
    "pate": lambda d: PateEvent(float(d["noise_multiplier"]), str(d["relation"])),
    "dpsgd": _dpsgd,
}


def from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from :func:`to_dict` output; unknown types are rejected."""
    reader = _READERS.get(data.get("type"))  # type: ignore[arg-type]
    if reader is None:
        raise ValueError(f"unknown event type {data.get('type')!r}")
    event: Event = reader(data)
    return event


def event_parts(event: Event) -> tuple[Event, ...]:
    """The parts a job's event runs one after another (a named event's primitive form; one
    part if it is no composition): one line each when shown, e.g. one per label."""
    primitive = event.primitive() if isinstance(event, NamedEvent) else event
    return primitive.events if isinstance(primitive, ComposedEvent) else (primitive,)


def noise_multipliers(event: Event) -> tuple[float, ...]:
    """The noise multipliers of ``event``'s Gaussian and Laplace mechanisms, each once, in
    the order they run (as the event states them, before any sensitivity): where a method
    calibrates its noise to a target epsilon, the calibrated multiplier is among them."""
    match event:
        case NamedEvent():
            return noise_multipliers(event.primitive())
        case GaussianEvent() | LaplaceEvent():
            return (event.noise_multiplier,)
        case PureDpEvent() | RandomizedResponseEvent():
            return ()  # no noise multiplier: its epsilon (or noise parameter) says it all
        case SampledEvent() | ComposedEvent():
            parts = event.mechanisms if isinstance(event, SampledEvent) else event.events
            found = [m for part in parts for m in noise_multipliers(part)]
            return tuple(dict.fromkeys(found))
        case SelfComposedEvent() | PartitionEvent():
            return noise_multipliers(event.event)
    raise TypeError(f"not an event: {event!r}")


def noise_by_partition(event: Event) -> dict[str, tuple[float, ...]]:
    """The noise multipliers of each label partition's part of ``event`` (its
    :func:`noise_multipliers`), for the parts that read one partition: the token loop's
    labels, each calibrated to its own size. Empty for an event that reads all records."""
    return {
        part.label: noise_multipliers(part.event)
        for part in event_parts(event)
        if isinstance(part, PartitionEvent)
    }


__all__ = [
    "CLIPPED_SUM",
    "DATASET_EVENTS",
    "PRIMITIVE_EVENTS",
    "RELATIONS",
    "UNIT",
    "ComposedEvent",
    "DatasetEvent",
    "DpsgdEvent",
    "Event",
    "FixedSizeSampling",
    "GaussianEvent",
    "LabelEvent",
    "LaplaceEvent",
    "NamedEvent",
    "PartitionEvent",
    "PateEvent",
    "PoissonSampling",
    "Primitive",
    "PureDpEvent",
    "RandomizedResponseEvent",
    "SampledEvent",
    "SelfComposedEvent",
    "Sensitivity",
    "SynthesisEvent",
    "effective_noise_multiplier",
    "event_parts",
    "from_dict",
    "noise_by_partition",
    "noise_multipliers",
    "to_dict",
]
