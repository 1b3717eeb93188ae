"""Descriptions of what ran, as plain data, for the accountants to price.

Following ``dp_accounting``'s separation of events from accountants, nothing here computes a
privacy loss. Events are frozen, hashable, and round-trip through JSON-compatible dicts
(:func:`to_dict` / :func:`from_dict`) so that the ledger can store exactly what ran and
recompute its cost later with any accountant.

The structure mirrors the generation loop:

* :class:`GaussianEvent` -- ``count`` releases of a Gaussian mechanism with one noise
  multiplier, all on the same data.
* :class:`SampledEvent` -- ``steps`` rounds (generated tokens); each round draws a fresh
  subsample of one label's records with ``sampling`` and runs the adaptive composition of
  ``mechanisms`` on that subsample.
* :class:`SynthesisEvent` -- one :class:`SampledEvent` per label partition of a dataset, each
  after the Gaussian release of that partition's record count unless the count is public.
* :class:`PateEvent` -- a PromptPATE job: a Gaussian DP filter over releases that may read
  every record of the dataset (no subsampling, no label partition).
* :class:`DpsgdEvent` -- a PromptDPSGD job: ``steps`` DP-SGD steps, each a subsampled
  Gaussian mechanism on the sum of clipped per-example gradients over the whole dataset,
  after the Gaussian release of the dataset's record count unless the count is public.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from app.privacy.sampling import FixedSizeSampling, PoissonSampling, Sampling, sampling_from_dict


@dataclass(frozen=True)
class GaussianEvent:
    """``count`` releases of a Gaussian mechanism with this noise multiplier."""

    noise_multiplier: float
    count: int = 1

    def __post_init__(self) -> None:
        if not self.noise_multiplier >= 0:
            raise ValueError(f"noise_multiplier must be >= 0, got {self.noise_multiplier}")
        if self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")


def effective_noise_multiplier(mechanisms: tuple[GaussianEvent, ...]) -> float:
    """The single Gaussian equivalent to the adaptive composition of ``mechanisms``.

    Gaussian mechanisms with multipliers sigma_i are 1/sigma_i-GDP, and an adaptive
    composition of mu_i-GDP mechanisms is sqrt(sum mu_i^2)-GDP, exactly (Dong, Roth and Su,
    2019). So the composition has the privacy curve of one Gaussian mechanism with multiplier
    (sum_i count_i / sigma_i^2)^(-1/2). A zero multiplier (no noise) gives 0.
    """
    if not mechanisms:
        raise ValueError("a round must run at least one mechanism")
    if any(m.noise_multiplier == 0 for m in mechanisms):
        return 0.0
    return math.fsum(m.count / m.noise_multiplier**2 for m in mechanisms) ** -0.5


@dataclass(frozen=True)
class SampledEvent:
    """``steps`` rounds, each on a fresh ``sampling`` of one label partition."""

    sampling: Sampling
    mechanisms: tuple[GaussianEvent, ...]
    steps: int

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if not self.mechanisms:
            raise ValueError("a round must run at least one mechanism")

    @property
    def noise_multiplier(self) -> float:
        """Multiplier of the single Gaussian equivalent to one round's mechanisms."""
        return effective_noise_multiplier(self.mechanisms)


@dataclass(frozen=True)
class LabelEvent:
    """The rounds that read one label partition, and the release of its record count.

    ``count_release``: the partition's record count was released once, before the rounds,
    with this Gaussian mechanism (L2 sensitivity 1: adding or removing one of its records
    moves the count by 1; ``app.privacy.unit.release_counts``). None: the count is public
    (declared so by the data owner) or the job predates the release (issue 32).
    """

    label: str
    event: SampledEvent
    count_release: GaussianEvent | None = None

    def priced(self) -> tuple[SampledEvent | GaussianEvent, ...]:
        """What this entry exposes one of the partition's records to, in the order it ran."""
        if self.count_release is None:
            return (self.event,)
        return (self.count_release, self.event)


@dataclass(frozen=True)
class SynthesisEvent:
    """Everything a synthesis job ran, one entry per label partition it read."""

    labels: tuple[LabelEvent, ...]

    def __post_init__(self) -> None:
        names = [entry.label for entry in self.labels]
        if len(set(names)) != len(names):
            raise ValueError(f"each label may appear once, got {names}")


RELATIONS = ("add_or_remove", "replace_one")  # values of app.privacy.mechanisms.Relation


@dataclass(frozen=True)
class PateEvent:
    """A PromptPATE job, as its accountant must see it.

    The job's Confident-GNMax releases ran under a Gaussian DP filter with budget ``mu``, so
    together they are ``mu``-GDP (``app.privacy.pate``): the privacy curve of one Gaussian
    mechanism with multiplier ``1 / mu``, stored here as ``noise_multiplier``. ``relation``
    names the neighbouring relation under which ``mu`` was derived (the vote sensitivities
    differ); an accountant of another relation refuses the event. Every record of the dataset
    may be read, whatever its label.
    """

    noise_multiplier: float
    relation: str

    def __post_init__(self) -> None:
        if not self.noise_multiplier > 0:
            raise ValueError(f"noise_multiplier must be > 0, got {self.noise_multiplier}")
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")


@dataclass(frozen=True)
class DpsgdEvent:
    """A PromptDPSGD job: ``steps`` DP-SGD steps over the whole dataset.

    Each step samples a batch with ``sampling`` (one group: :class:`PoissonSampling` under
    the tight accountant, :class:`FixedSizeSampling` under the paper accountant) from all
    records, whatever their label, and releases the sum of the batch's per-example gradients,
    each clipped to L2 norm ``C``, plus ``N(0, (noise_multiplier * C)^2 I)``.
    ``noise_multiplier`` is therefore noise std / C, the clipping norm, which is *not* always
    the sensitivity:

    * add/remove neighbours: one record adds or removes one clipped gradient, so the sum
      moves by at most ``C`` and the multiplier relative to the sensitivity is
      ``noise_multiplier``;
    * replace-one neighbours: one clipped gradient is swapped for another, the sum moves by
      at most ``2C``, and the multiplier relative to the sensitivity is
      ``noise_multiplier / 2``.

    :meth:`priced` applies this conversion for the relation in force; nothing else does.

    ``count_release``: the dataset's record count, from which the sampling rate was set
    (``batch_size / count``), was released once before the steps with this Gaussian
    mechanism (L2 sensitivity 1: adding or removing a record moves the count by 1;
    ``app.privacy.unit.release_counts``). It reads every record, so it joins every exposure
    group with the steps (:meth:`exposure`). None: the count is public (declared so by the
    data owner) or the job predates the release (issue 32).
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
        if relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
        return 2.0 if relation == "replace_one" else 1.0

    def priced(self, relation: str) -> SampledEvent:
        """The job as ``steps`` rounds of one subsampled Gaussian, its multiplier relative to
        the sensitivity under ``relation`` (see the class docstring)."""
        multiplier = self.noise_multiplier / self.sensitivity_over_clip(relation)
        return SampledEvent(self.sampling, (GaussianEvent(multiplier),), self.steps)

    def exposure(self, relation: str) -> tuple[GaussianEvent | SampledEvent, ...]:
        """What the job exposes any one record to under ``relation``, in the order it ran:
        the count release (if any; sensitivity 1 under either relation, which over-prices
        replace-one, where the count does not move) and the steps (:meth:`priced`)."""
        steps = self.priced(relation)
        return (steps,) if self.count_release is None else (self.count_release, steps)


Event = GaussianEvent | SampledEvent | SynthesisEvent | PateEvent | DpsgdEvent
DatasetEvent = SynthesisEvent | PateEvent | DpsgdEvent  # what one job charges to a dataset
DATASET_EVENTS = (SynthesisEvent, PateEvent, DpsgdEvent)  # the same, for isinstance


def to_dict(event: Event) -> dict[str, Any]:
    """A JSON-compatible description of ``event`` (inverse of :func:`from_dict`)."""
    if isinstance(event, GaussianEvent):
        return {
            "type": "gaussian",
            "noise_multiplier": event.noise_multiplier,
            "count": event.count,
        }
    if isinstance(event, SampledEvent):
        return {
            "type": "sampled",
            "sampling": event.sampling.to_dict(),
            "mechanisms": [to_dict(m) for m in event.mechanisms],
            "steps": event.steps,
        }
    if isinstance(event, SynthesisEvent):
        return {
            "type": "synthesis",
            "labels": [_label_entry(e) for e in event.labels],
        }
    if isinstance(event, PateEvent):
        return {
            "type": "pate",
            "noise_multiplier": event.noise_multiplier,
            "relation": event.relation,
        }
    if isinstance(event, DpsgdEvent):
        out: dict[str, Any] = {
            "type": "dpsgd",
            "noise_multiplier": event.noise_multiplier,
            "sampling": event.sampling.to_dict(),
            "steps": event.steps,
        }
        if event.count_release is not None:  # absent otherwise: older stored events read alike
            out["count_release"] = to_dict(event.count_release)
        return out
    raise TypeError(f"not an event: {event!r}")


def _label_entry(entry: LabelEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"label": entry.label, "event": to_dict(entry.event)}
    if entry.count_release is not None:  # absent otherwise: older stored events read alike
        out["count_release"] = to_dict(entry.count_release)
    return out


def _label_from_dict(item: dict[str, Any]) -> LabelEvent:
    inner = from_dict(item["event"])
    if not isinstance(inner, SampledEvent):
        raise ValueError("a label entry must hold a sampled event")
    release = from_dict(item["count_release"]) if "count_release" in item else None
    if release is not None and not isinstance(release, GaussianEvent):
        raise ValueError("a label's count release must be a Gaussian event")
    return LabelEvent(str(item["label"]), inner, release)


def from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from :func:`to_dict` output; unknown types are rejected."""
    kind = data.get("type")
    if kind == "gaussian":
        return GaussianEvent(float(data["noise_multiplier"]), int(data["count"]))
    if kind == "sampled":
        rebuilt = [from_dict(m) for m in data["mechanisms"]]
        mechanisms = tuple(m for m in rebuilt if isinstance(m, GaussianEvent))
        if len(mechanisms) != len(rebuilt):
            raise ValueError("a sampled round may only contain Gaussian mechanisms")
        return SampledEvent(sampling_from_dict(data["sampling"]), mechanisms, int(data["steps"]))
    if kind == "synthesis":
        return SynthesisEvent(tuple(_label_from_dict(item) for item in data["labels"]))
    if kind == "pate":
        return PateEvent(float(data["noise_multiplier"]), str(data["relation"]))
    if kind == "dpsgd":
        release = from_dict(data["count_release"]) if "count_release" in data else None
        if release is not None and not isinstance(release, GaussianEvent):
            raise ValueError("a DP-SGD job's count release must be a Gaussian event")
        return DpsgdEvent(
            float(data["noise_multiplier"]),
            sampling_from_dict(data["sampling"]),
            int(data["steps"]),
            release,
        )
    raise ValueError(f"unknown event type {kind!r}")


__all__ = [
    "DATASET_EVENTS",
    "DatasetEvent",
    "DpsgdEvent",
    "Event",
    "FixedSizeSampling",
    "GaussianEvent",
    "LabelEvent",
    "PateEvent",
    "PoissonSampling",
    "SampledEvent",
    "SynthesisEvent",
    "effective_noise_multiplier",
    "from_dict",
    "to_dict",
]
