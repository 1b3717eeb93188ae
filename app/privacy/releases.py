"""Privacy noise drawn through one set of functions, each release recorded for whoever listens.

A method's event (what the ledger charges) is written by its author, and nothing else ties it
to the noise its run draws: an event that says one release where the run makes four is priced
at a quarter of what ran. So every release of the built-in methods, and of a plug-in, goes
through the functions below, each given the primitive event that describes that one release
(its noise and its sensitivity under each relation) and the job's generator
(:func:`app.privacy.rng.make_rng`, from the config's seed: none in production):

* :func:`gaussian_release`: ``value + N(0, sigma^2)`` per coordinate, a :class:`GaussianEvent`;
* :func:`laplace_release`: ``value + Laplace(b)`` per coordinate, a :class:`LaplaceEvent`;
* :func:`report_noisy_max`: the index of the largest of ``scores + Laplace(1/epsilon)``, a
  :class:`PureDpEvent` (the scores move by at most ``sensitivity`` in L1 between neighbours:
  a post-processing of that Laplace release, so ``epsilon * sensitivity``-DP);
* :func:`randomized_response`: k-ary randomized response, a :class:`RandomizedResponseEvent`.

Inside :func:`recording` each call appends a :class:`Release` (the event, and how many rows it
released at once) to the log it yields; outside, nothing is kept. The method contract
(``app.contract``) runs a method under it and asks :func:`uncovered` whether the plan's event
charges at least what the run released. That comparison ignores subsampling and partitions
(the releases do not say which records they read): per family it sums what each release
costs unamplified, Gaussians as GDP ``mu^2`` (``(sensitivity / sigma)^2``, exact under
composition) and the pure-DP releases as epsilons (basic composition, exact for pure DP's
worst case), and the event's primitives the same way with every sampled round counted in
full. A run that releases more than its event charges is under-priced whatever the
amplification; one that releases less (a token loop that stopped early) is not.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from app.privacy.events import (
    ComposedEvent,
    GaussianEvent,
    LaplaceEvent,
    NamedEvent,
    PartitionEvent,
    PureDpEvent,
    RandomizedResponseEvent,
    SampledEvent,
    SelfComposedEvent,
)

Single = GaussianEvent | LaplaceEvent | PureDpEvent | RandomizedResponseEvent


@dataclass(frozen=True)
class Release:
    """One call of a mechanism function: the event of one row's release, and its rows."""

    event: Single
    rows: int = 1


_log: ContextVar[list[Release] | None] = ContextVar("dpsyn_releases", default=None)


@contextmanager
def recording() -> Iterator[list[Release]]:
    """Collect every release made in this context (this thread or task) into a list."""
    log: list[Release] = []
    token = _log.set(log)
    try:
        yield log
    finally:
        _log.reset(token)


def recording_now() -> bool:
    """Whether a :func:`recording` context is open here (to skip building what it notes)."""
    return _log.get() is not None


def record(event: Single, rows: int = 1) -> None:
    """Note ``rows`` releases, each described by ``event`` (a no-op unless recording)."""
    log = _log.get()
    if log is not None:
        log.append(Release(event, rows))


def _one(event: Single) -> None:
    if event.count != 1:
        raise ValueError(f"a mechanism function makes one release per row, not {event.count}")


def gaussian_release(
    value: np.ndarray | float, event: GaussianEvent, rng: np.random.Generator, rows: int = 1
) -> np.ndarray:
    """``value`` plus Gaussian noise of standard deviation ``event.noise_multiplier`` per
    coordinate: one release of a query whose L2 sensitivity under each relation is
    ``event.sensitivity`` (in the noise's units); ``rows`` releases when ``value`` stacks
    that many queries along its first axis, each of that sensitivity."""
    _one(event)
    value = np.asarray(value, dtype=float)
    record(event, rows)
    if event.noise_multiplier == 0.0:
        return value.copy()
    return value + rng.normal(0.0, event.noise_multiplier, size=value.shape)


def laplace_release(
    value: np.ndarray | float, event: LaplaceEvent, rng: np.random.Generator
) -> np.ndarray:
    """``value`` plus Laplace noise of scale ``event.noise_multiplier`` per coordinate: one
    release of a query whose L1 sensitivity under each relation is ``event.sensitivity``."""
    _one(event)
    value = np.asarray(value, dtype=float)
    record(event)
    if event.noise_multiplier == 0.0:
        return value.copy()
    return value + rng.laplace(0.0, event.noise_multiplier, size=value.shape)


def report_noisy_max(scores: np.ndarray, event: PureDpEvent, rng: np.random.Generator) -> int:
    """The index of the largest of ``scores + Laplace(1 / event.epsilon)``.

    Sensitivity and relation: the scores move by at most ``event.sensitivity`` (under each
    relation) in L1 between neighbours, in units of one; the noisy vector is then an
    ``epsilon * sensitivity``-DP Laplace release and its argmax a post-processing of it.
    (Counts of records per label: 1 under add/remove, 2 under replace-one.)"""
    _one(event)
    if not event.epsilon > 0:
        raise ValueError("report-noisy-max needs epsilon > 0")
    scores = np.asarray(scores, dtype=float)
    record(event)
    return int(np.argmax(scores + rng.laplace(0.0, 1.0 / event.epsilon, size=scores.shape)))


def randomized_response(
    bucket: int, event: RandomizedResponseEvent, rng: np.random.Generator
) -> int:
    """``bucket`` with probability ``1 - p``, else one of the ``event.num_buckets`` buckets
    uniformly (``p`` = ``event.noise_parameter``); neighbours and relation as the event
    states (:class:`~app.privacy.events.RandomizedResponseEvent`)."""
    _one(event)
    if not 0 <= bucket < event.num_buckets:
        raise ValueError(f"bucket {bucket} is not one of {event.num_buckets}")
    record(event)
    if rng.random() < event.noise_parameter:
        return int(rng.integers(event.num_buckets))
    return int(bucket)


# --- what a run released against what its event charges --------------------------------------


@dataclass(frozen=True)
class Cost:
    """Unamplified cost per family: Gaussian ``mu^2`` and pure-DP epsilon (each summed)."""

    mu_squared: float = 0.0
    epsilon: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.mu_squared + other.mu_squared, self.epsilon + other.epsilon)

    def times(self, n: int) -> Cost:
        return Cost(self.mu_squared * n, self.epsilon * n)


def _relative(event: GaussianEvent | LaplaceEvent, relation: str) -> float:
    """Sensitivity over noise under ``relation``; infinite where none is stated."""
    sensitivity = event.sensitivity.under(relation)
    if sensitivity is None:
        return math.inf
    if event.noise_multiplier == 0:
        return math.inf
    return sensitivity / event.noise_multiplier


def single_cost(event: Single, relation: str) -> Cost:
    """What one release (times its count) costs, unamplified, under ``relation``."""
    if isinstance(event, GaussianEvent):
        return Cost(mu_squared=_relative(event, relation) ** 2 * event.count)
    if isinstance(event, LaplaceEvent):
        return Cost(epsilon=_relative(event, relation) * event.count)
    if isinstance(event, PureDpEvent):
        sensitivity = event.sensitivity.under(relation)
        factor = math.inf if sensitivity is None else sensitivity
        return Cost(epsilon=event.epsilon * factor * event.count)
    analysed = relation in event.relations
    return Cost(epsilon=(event.epsilon if analysed else math.inf) * event.count)


def event_cost(event: object, relation: str) -> Cost:
    """The unamplified cost of every release ``event`` charges: sampled rounds counted in
    full, every partition's releases added (a run's releases do not say which they read)."""
    if isinstance(event, NamedEvent):
        return event_cost(event.primitive(), relation)
    if isinstance(event, GaussianEvent | LaplaceEvent | PureDpEvent | RandomizedResponseEvent):
        return single_cost(event, relation)
    if isinstance(event, SampledEvent):
        one = sum((single_cost(m, relation) for m in event.mechanisms), Cost())
        return one.times(event.steps)
    if isinstance(event, ComposedEvent):
        return sum((event_cost(e, relation) for e in event.events), Cost())
    if isinstance(event, SelfComposedEvent):
        return event_cost(event.event, relation).times(event.count)
    if isinstance(event, PartitionEvent):
        return event_cost(event.event, relation)
    raise TypeError(f"no unamplified cost for {type(event).__name__}")


def released_cost(log: list[Release], relation: str) -> Cost:
    """What the recorded releases cost together, unamplified, under ``relation``."""
    return sum((single_cost(r.event, relation).times(r.rows) for r in log), Cost())


def uncovered(event: object, log: list[Release], relation: str) -> str | None:
    """Why ``event`` does not charge what the run released (None: it does), in words."""
    charged, released = event_cost(event, relation), released_cost(log, relation)
    said = []
    if released.mu_squared > charged.mu_squared * (1 + 1e-6) + 1e-12:
        said.append(
            f"its Gaussian releases add to mu^2 = {released.mu_squared:.6g} unamplified, "
            f"the event charges {charged.mu_squared:.6g}"
        )
    if released.epsilon > charged.epsilon * (1 + 1e-6) + 1e-12:
        said.append(
            f"its pure-DP releases add to epsilon {released.epsilon:.6g}, "
            f"the event charges {charged.epsilon:.6g}"
        )
    if not log and (charged.mu_squared > 0 or charged.epsilon > 0):
        said.append("the run drew no noise through app.privacy.releases, yet the event charges")
    return "; ".join(said) or None
