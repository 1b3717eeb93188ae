"""How an accountant reads any composition of primitive events.

Three steps, none of which knows a method or a job kind (``docs/privacy.md``, "Privacy
events"):

1. :func:`scoped` flattens an event into the primitives it runs, in order, each with the
   label partition it reads (None: every record). A named event
   (:class:`~app.privacy.events.NamedEvent`) is read as its :meth:`primitive`; a
   :class:`~app.privacy.events.ComposedEvent` as its parts; a
   :class:`~app.privacy.events.PartitionEvent` scopes what it holds to its label.
2. :func:`resolve` fixes the neighbouring relation: every Gaussian or Laplace multiplier is
   divided by its sensitivity under that relation, so the accountant prices mechanisms of
   sensitivity 1 only; a mechanism not analysed under the relation is refused.
3. :func:`active` and :func:`noiseless` say what costs nothing (zero steps) and what costs
   everything (no noise), before the accountant prices the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from app.privacy.events import (
    UNIT,
    ComposedEvent,
    Event,
    GaussianEvent,
    LaplaceEvent,
    NamedEvent,
    PartitionEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SampledEvent,
    SelfComposedEvent,
)

#: A primitive an accountant prices once relation is resolved: what one record is exposed to,
#: one entry at a time. Gaussian and Laplace multipliers are relative to a sensitivity of 1.
Priced = (
    GaussianEvent
    | LaplaceEvent
    | PureDpEvent
    | RandomizedResponseEvent
    | SampledEvent
    | SelfComposedEvent
    | ComposedEvent
)


class UnsupportedEventError(ValueError):
    """The accountant cannot price this event (wrong sampling or neighbouring relation)."""


def scoped(event: Event) -> list[tuple[str | None, Priced]]:
    """The primitives ``event`` runs, in order, each with the label partition it reads
    (None: every record of the dataset)."""
    out: list[tuple[str | None, Priced]] = []
    _flatten(event, None, out)
    return out


def _flatten(event: Event, label: str | None, out: list[tuple[str | None, Priced]]) -> None:
    if isinstance(event, NamedEvent):
        _flatten(event.primitive(), label, out)
    elif isinstance(event, ComposedEvent):
        for part in event.events:
            _flatten(part, label, out)
    elif isinstance(event, PartitionEvent):
        if label is not None and label != event.label:
            raise ValueError(f"a partition of label {event.label!r} inside one of {label!r}")
        _flatten(event.event, event.label, out)
    else:
        out.append((label, event))


def resolve(event: Event, relation: str, accountant: str) -> Priced:
    """``event`` with every multiplier relative to its sensitivity under ``relation``
    (an event already of sensitivity 1 is returned as it is); ``accountant`` names the
    refuser of a mechanism that was not analysed under ``relation``."""
    if isinstance(event, NamedEvent):
        return resolve(event.primitive(), relation, accountant)
    if isinstance(event, GaussianEvent | LaplaceEvent):
        return _resolve_noise(event, relation, accountant)
    if isinstance(event, PureDpEvent | RandomizedResponseEvent):
        return _resolve_pure(event, relation, accountant)
    if isinstance(event, SampledEvent):
        mechanisms = tuple(_resolve_noise(m, relation, accountant) for m in event.mechanisms)
        if mechanisms == event.mechanisms:
            return event
        return SampledEvent(event.sampling, mechanisms, event.steps)
    if isinstance(event, SelfComposedEvent):
        inner = resolve(event.event, relation, accountant)
        return event if inner is event.event else SelfComposedEvent(inner, event.count)
    if isinstance(event, ComposedEvent):
        parts = tuple(resolve(e, relation, accountant) for e in event.events)
        return ComposedEvent(parts)
    raise UnsupportedEventError(
        f"{accountant} cannot price a {type(event).__name__} inside a composition that is "
        "run on the same records (a partition event belongs at the top of a job's event)"
    )


def _resolve_noise(
    event: GaussianEvent | LaplaceEvent, relation: str, accountant: str
) -> GaussianEvent | LaplaceEvent:
    if event.sensitivity == UNIT:
        return event
    sensitivity = event.sensitivity.under(relation)
    if sensitivity is None:
        stated = "add_or_remove" if event.sensitivity.add_or_remove is not None else "replace_one"
        raise UnsupportedEventError(
            f"{accountant} ({relation} neighbours) cannot price a {type(event).__name__} "
            f"whose sensitivity is stated for {stated} neighbours only"
        )
    return type(event)(event.noise_multiplier / sensitivity, event.count)


def _resolve_pure(
    event: PureDpEvent | RandomizedResponseEvent, relation: str, accountant: str
) -> PureDpEvent | RandomizedResponseEvent:
    """A pure-DP event's epsilon under ``relation`` (its sensitivity there times its own);
    randomized response as it is, under a relation it was analysed for."""
    if isinstance(event, RandomizedResponseEvent):
        if relation not in event.relations:
            raise UnsupportedEventError(
                f"{accountant} ({relation} neighbours) cannot price randomized response "
                f"analysed for {', '.join(event.relations)} neighbours only"
            )
        return event
    if event.sensitivity == UNIT:
        return event
    sensitivity = event.sensitivity.under(relation)
    if sensitivity is None:
        raise UnsupportedEventError(
            f"{accountant} ({relation} neighbours) cannot price a PureDpEvent whose epsilon "
            f"is not stated for {relation} neighbours"
        )
    return PureDpEvent(event.epsilon * sensitivity, event.count)


def sampled_in(event: Priced) -> Iterator[SampledEvent]:
    """Every sampled event within ``event`` (whose sampling the accountant must assume)."""
    if isinstance(event, SampledEvent):
        yield event
    elif isinstance(event, SelfComposedEvent):
        yield from sampled_in(_priced(event.event))
    elif isinstance(event, ComposedEvent):
        for part in event.events:
            yield from sampled_in(_priced(part))


def _priced(event: Event) -> Priced:
    """An inner event of a resolved one (resolution leaves no named or partition event)."""
    assert not isinstance(event, NamedEvent | PartitionEvent)
    return event


def active(event: Priced) -> bool:
    """Whether ``event`` runs anything at all (a sampled event of zero steps does not)."""
    if isinstance(event, SampledEvent):
        return event.steps > 0
    if isinstance(event, SelfComposedEvent):
        return event.count > 0 and active(_priced(event.event))
    if isinstance(event, ComposedEvent):
        return any(active(_priced(part)) for part in event.events)
    return True


def noiseless(event: Priced) -> bool:
    """Whether ``event`` runs a mechanism without noise (its epsilon is infinite)."""
    if isinstance(event, GaussianEvent | LaplaceEvent):
        return event.noise_multiplier == 0
    if isinstance(event, RandomizedResponseEvent):
        return math.isinf(event.epsilon)
    if isinstance(event, PureDpEvent):
        return False  # a finite epsilon, by construction
    if isinstance(event, SampledEvent):
        return any(m.noise_multiplier == 0 for m in event.mechanisms)
    if isinstance(event, SelfComposedEvent):
        return noiseless(_priced(event.event))
    return any(noiseless(_priced(p)) for p in event.events if active(_priced(p)))


def active_parts(event: ComposedEvent) -> list[Priced]:
    """The parts of a resolved composition that run anything, in order."""
    return [part for part in map(_priced, event.events) if active(part)]
