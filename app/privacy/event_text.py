"""Events for people: what a job would charge, as ``dpsyn privacy quote`` shows it.

The primitives' constructor notation of docs/privacy.md (dp_accounting's DpEvent reprs read
alike), a named event as what it is made of (the accountants' view), numbers to 4
significant digits. After a semicolon, each mechanism's sensitivity under each relation and
the relations it was not analysed under (an accountant of one refuses it), and each
sampling's relation: what the price rests on, so that a reader can check it against what the
method does. The stored form is :func:`app.privacy.events.to_dict`'s.
"""

from __future__ import annotations

from app.privacy.events import (
    RELATIONS,
    ComposedEvent,
    Event,
    GaussianEvent,
    LaplaceEvent,
    NamedEvent,
    Noise,
    PartitionEvent,
    PoissonSampling,
    PureDpEvent,
    RandomizedResponseEvent,
    SampledEvent,
    SelfComposedEvent,
    Sensitivity,
)
from app.privacy.sampling import Sampling

_RELATION_NAMES = {"add_or_remove": "add/remove", "replace_one": "replace-one"}


def _sampling_text(sampling: Sampling) -> str:
    if isinstance(sampling, PoissonSampling):
        return f"PoissonSampling(rate={sampling.rate:.4g}, groups={sampling.groups})"
    return (
        f"FixedSizeSampling(population={sampling.population}, groups={sampling.groups}, "
        f"group_size={sampling.group_size})"
    )


def _unanalysed(stated: tuple[str, ...]) -> list[str]:
    return [f"{_RELATION_NAMES[r]} not analysed" for r in RELATIONS if r not in stated]


def _sensitivity_text(sensitivity: Sensitivity, norm: str = "") -> str:
    """``L2 sensitivity add/remove 1, replace-one 1.414``; a relation without a value is
    named as not analysed (``replace-one 1, add/remove not analysed``)."""
    values = {r: v for r in RELATIONS if (v := sensitivity.under(r)) is not None}
    stated = [f"{_RELATION_NAMES[r]} {v:.4g}" for r, v in values.items()]
    return f"{norm}sensitivity {', '.join(stated + _unanalysed(tuple(values)))}"


def _count_text(count: int) -> str:
    return f", count={count}" if count != 1 else ""


def _noise_text(event: Noise) -> str:
    norm = "L2 " if isinstance(event, GaussianEvent) else "L1 "
    return (
        f"{type(event).__name__}({event.noise_multiplier:.4g}{_count_text(event.count)}; "
        f"{_sensitivity_text(event.sensitivity, norm)})"
    )


def _randomized_response_text(event: RandomizedResponseEvent) -> str:
    stated = [_RELATION_NAMES[r] for r in RELATIONS if r in event.relations]
    relations = ", ".join(stated + _unanalysed(event.relations))
    return (
        f"RandomizedResponseEvent({event.noise_parameter:.4g}, num_buckets={event.num_buckets}"
        f"{_count_text(event.count)}; one bucket change under {relations})"
    )


def _sampled_text(event: SampledEvent) -> str:
    inner = ", ".join(describe_event(m) for m in event.mechanisms)
    comma = "," if len(event.mechanisms) == 1 else ""  # a tuple, as Python writes it
    relation = _RELATION_NAMES[event.sampling.relation]
    return (
        f"SampledEvent({_sampling_text(event.sampling)}, ({inner}{comma}), "
        f"steps={event.steps}; sampling analysed for {relation} only)"
    )


def describe_event(event: Event) -> str:
    """``event`` in one line of the primitives' notation (:func:`to_dict` is its stored
    form), each mechanism with its sensitivity under each relation and each sampling with
    the relation it is analysed for (a quote without them could not be checked against
    what the method does): e.g. ``PartitionEvent('a', SampledEvent(PoissonSampling(rate=0.1,
    groups=10), (GaussianEvent(1.05; L2 sensitivity add/remove 1, replace-one 1),),
    steps=30; sampling analysed for add/remove only))``."""
    match event:
        case NamedEvent():
            return describe_event(event.primitive())
        case GaussianEvent() | LaplaceEvent():
            return _noise_text(event)
        case PureDpEvent():
            return (
                f"PureDpEvent({event.epsilon:.4g}{_count_text(event.count)}; "
                f"{_sensitivity_text(event.sensitivity)})"
            )
        case RandomizedResponseEvent():
            return _randomized_response_text(event)
        case SampledEvent():
            return _sampled_text(event)
        case ComposedEvent():
            return f"ComposedEvent({', '.join(describe_event(e) for e in event.events)})"
        case SelfComposedEvent():
            return f"SelfComposedEvent({describe_event(event.event)}, count={event.count})"
        case PartitionEvent():
            return f"PartitionEvent({event.label!r}, {describe_event(event.event)})"
    raise TypeError(f"not an event: {event!r}")


__all__ = ["describe_event"]
