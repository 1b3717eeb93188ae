"""Budget admission and the append-only ledger of privacy events.

Every job's cost is described by its event: a composition of primitive events
(:mod:`app.privacy.events`), stored as ``to_dict`` writes it. The built-in kinds keep their
named forms (a :class:`~app.privacy.events.SynthesisEvent`, a
:class:`~app.privacy.events.PateEvent` for PromptPATE, a
:class:`~app.privacy.events.DpsgdEvent` for PromptDPSGD), so rows written before the
primitives read and price as they did; any other kind is stored as its
primitives. A dataset's spend is priced by the ledger's **filter** over the events of its
count releases and live jobs (reserved or committed, not released): a rule that stays valid
when each job is chosen after reading the last one's output (:mod:`app.privacy.filter`);
the tight composition of the same events and the plain sum are reported beside it.

Admission is atomic across processes: the budget row is locked (``SELECT ... FOR UPDATE`` on
PostgreSQL; SQLite serialises writers with ``BEGIN IMMEDIATE``) while the new total is
computed and the reservation inserted, in one transaction.

Lifecycle of a job's charge: ``reserve`` at admission; ``commit`` when its result is stored,
or when it fails after touching the data (it stays charged); ``release`` only if it never
touched the data. A commit or release entry records *why*, in plain words, under the key
``reason`` of its ``event`` (beside the job's event, which it repeats): that sentence is what
the API shows as the job's ``charge_note`` (:func:`job_charges`), so the ledger, not the job
row, is the one account of what a job cost. See docs/privacy.md, "When a cancelled job is
charged".
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Budget, Dataset, Job, LedgerEntry, LedgerHold, LedgerKind
from app.ledger.chain import append
from app.ledger.owners import budget_owner_id, members_clause
from app.privacy.accounting import Accounting, accountant_for
from app.privacy.budget import fits_budget, spend_text
from app.privacy.display import distinct_epsilons
from app.privacy.events import DATASET_EVENTS, DatasetEvent, from_dict, to_dict
from app.privacy.filter import FilterParams, Item, Price, Release, Rule, price
from app.privacy.unit import gaussian_epsilon


class LedgerError(ValueError):
    """A ledger operation that cannot be done (the message says why)."""


class NoBudgetError(LedgerError):
    pass


class LedgerHeldError(LedgerError):
    """A charge on a budget whose ledger is held: the database is behind the ledger's
    exported heads (restored from an older backup?) and an operator has not acknowledged it
    yet (:mod:`app.ledger.heads`)."""

    def __init__(self, dataset_id: str) -> None:
        self.dataset_id = dataset_id
        super().__init__(
            f"the ledger of dataset {dataset_id} is behind the heads it exported (the "
            "database was restored from an older backup?): nothing more is charged to its "
            "budget until an operator re-applies the missing spend with "
            f"'dpsyn admin ledger acknowledge {dataset_id}'"
        )


def refuse_held(session: Session, owner_id: str) -> None:
    """Raise :class:`LedgerHeldError` if the ledger of any dataset charging ``owner_id``'s
    budget is held."""
    held = session.scalar(
        select(LedgerHold.dataset_id)
        .where(
            members_clause(LedgerHold.dataset_id, owner_id), LedgerHold.acknowledged_at.is_(None)
        )
        .limit(1)
    )
    if held is not None:
        raise LedgerHeldError(held)


class BudgetExceededError(LedgerError):
    """A charge that does not fit. Every number in the message is in the budget's own
    currency, the filter's spend (``app.privacy.filter``): ``remaining`` is the budget less
    what is spent, and ``adds`` what this charge would add to the spend, so the two compare
    directly; ``requested`` (the job's own epsilon at its delta) is said apart."""

    def __init__(
        self, *, requested: float, spent: float, total: float, adds: float | None = None
    ) -> None:
        self.requested, self.spent, self.total = requested, spent, total
        self.adds = requested if adds is None else adds
        self.remaining = max(0.0, total - spent)
        adds_text, remaining_text = distinct_epsilons(self.adds, self.remaining)
        super().__init__(
            f"the job's cost does not fit the dataset's budget: epsilon {spend_text(total)} in "
            f"total, {spend_text(spent)} spent or reserved, {remaining_text} remaining; "
            f"this job would add {_cost(adds_text, self.adds)} to the spend (its own epsilon is "
            f"{_cost(spend_text(requested), requested)}; across jobs the ledger prices by its "
            "filter, which charges a job more than its own epsilon once it is not the dataset's "
            'only one: docs/privacy.md, "The ledger\'s rule across jobs")'
        )


def _cost(text: str, value: float) -> str:
    """A cost as printed (app.privacy.display), or what an unbounded one is."""
    return text if math.isfinite(value) else "an unbounded epsilon"


@dataclass(frozen=True)
class Spend:
    """What a dataset has spent: under the ledger's filter (``epsilon``, what admission
    compares with the budget; ``rule`` says which of the filter's two rules priced it), the
    tight composition of the same events (``composed``: what the ledger charged before the
    filter, not valid across adaptively chosen jobs, shown for comparison) and the plain
    sum, each with its count releases' part (``counts_epsilon``, included in all).

    ``epsilon`` and ``composed`` hold at the budget's delta (``delta``). The plain sum holds at
    another: each job's epsilon is at its own delta, so their sum (basic composition) is at the
    sum of the jobs' and the count releases' deltas (``plain_sum_delta``), which may well exceed
    the budget's; a plain sum can therefore read below the spend without contradicting it."""

    epsilon: float
    plain_sum: float
    jobs: int
    counts_epsilon: float = 0.0
    rule: Rule = Rule.ONE_BATCH
    composed: float = 0.0
    delta: float = 0.0
    plain_sum_delta: float = 0.0


def _entries(session: Session, dataset_id: str) -> list[LedgerEntry]:
    """The ledger of the budget ``dataset_id`` charges: the entries of its owner and of every
    dataset linked to it (:mod:`app.ledger.owners`), in order."""
    owner = budget_owner_id(session, dataset_id)
    return list(
        session.scalars(
            select(LedgerEntry)
            .where(members_clause(LedgerEntry.dataset_id, owner))
            .order_by(LedgerEntry.id)
        ).all()
    )


def _live_entries(session: Session, dataset_id: str) -> list[LedgerEntry]:
    """The reserve entries of jobs that were not released."""
    return _live_of(_entries(session, dataset_id))


def _live_of(entries: Sequence[LedgerEntry]) -> list[LedgerEntry]:
    released = {e.job_id for e in entries if e.kind == LedgerKind.RELEASE}
    return [e for e in entries if e.kind == LedgerKind.RESERVE and e.job_id not in released]


def count_entries(session: Session, dataset_id: str) -> list[LedgerEntry]:
    """The count releases' charges (kind ``counts``) on the budget the dataset charges (of
    every dataset sharing it), oldest first: never given back, so every one of them is
    live."""
    return [e for e in _entries(session, dataset_id) if e.kind == LedgerKind.COUNTS]


# A count release's noise multiplier relative to its sensitivity under each relation: adding
# or removing a record moves one label's count by 1; replacing one moves two counts by 1
# each (L2 sqrt 2). The paper accounting's budgets price replace-one neighbours.
_RELEASE_SENSITIVITY = {Accounting.TIGHT: 1.0, Accounting.PAPER: math.sqrt(2.0)}


def release_epsilon(entry: LedgerEntry, accounting: Accounting) -> float:
    """What a count release's ledger entry costs under the budget's ``accounting``, at the
    entry's delta (its share of the budget's delta when it was drawn): the epsilon of one
    Gaussian mechanism, recomputed from the multiplier the entry stores."""
    sigma = float(entry.event["sigma"])
    return gaussian_epsilon(sigma / _RELEASE_SENSITIVITY[accounting], entry.delta)


def _release(entry: LedgerEntry, accounting: Accounting) -> Release:
    """A count release's ledger entry as the filter prices it."""
    sigma = float(entry.event["sigma"]) / _RELEASE_SENSITIVITY[accounting]
    return Release(sigma=sigma, epsilon=release_epsilon(entry, accounting), delta=entry.delta)


def filter_params(budget: Budget) -> FilterParams:
    """The budget's filter (a function of its epsilon and delta)."""
    return FilterParams.for_budget(budget.epsilon, budget.delta)


def _compose(
    budget: Budget,
    items: Sequence[Item],
    releases: Sequence[LedgerEntry] = (),
) -> Price:
    """The dataset's spend under the ledger's filter (:mod:`app.privacy.filter`): its count
    releases and live jobs, each job with the batch it was declared in."""
    accounting = Accounting(budget.accounting)
    return price(
        filter_params(budget),
        accountant_for(accounting),
        items,
        [_release(e, accounting) for e in releases],
    )


def _items(live: Sequence[LedgerEntry], extra: Item | None = None) -> list[Item]:
    items = [Item(_stored_event(e), e.batch_of, e.dataset_id) for e in live]
    return items if extra is None else [*items, extra]


def jobs_delta(session: Session, budget: Budget) -> float:
    """The delta the dataset's jobs compose at: the budget's, less its count releases'."""
    return budget.delta - math.fsum(e.delta for e in count_entries(session, budget.dataset_id))


_EVENT_MEMO_SIZE = 8192  # a few kB each
# entry ID -> (the stored dict it was parsed from, the event). Every admission reads every
# live job's event: parsing them again cost more than the composition of the new job.
_event_memo: OrderedDict[int, tuple[dict, DatasetEvent]] = OrderedDict()
_event_memo_lock = threading.Lock()


def _stored_event(entry: LedgerEntry) -> DatasetEvent:
    """The event a ledger entry charged (:func:`admit`): a row that is not an event
    (:func:`~app.privacy.events.from_dict` refuses it) is corrupt, and is never priced as
    something it is not.

    Remembered per entry ID: a ledger row is never changed or deleted, so its ID names one
    event. The remembered event is returned only when the row's stored dict also equals the
    one it was parsed from (a guard should an ID ever name another row, e.g. SQLite reusing
    the ID of an insert that was rolled back); otherwise the row is parsed again."""
    with _event_memo_lock:
        known = _event_memo.get(entry.id)
    if known is not None and known[0] == entry.event:
        return known[1]
    event = from_dict(entry.event)
    if not isinstance(event, DATASET_EVENTS):
        raise LedgerError(f"ledger entry {entry.id} holds a {type(event).__name__}, not a job")
    if entry.id is not None:
        with _event_memo_lock:
            _event_memo[entry.id] = (entry.event, event)
            while len(_event_memo) > _EVENT_MEMO_SIZE:
                _event_memo.popitem(last=False)
    return event


def spend(session: Session, budget: Budget) -> Spend:
    entries = _entries(session, budget.dataset_id)
    live = _live_of(entries)
    releases = [e for e in entries if e.kind == LedgerKind.COUNTS]
    return _spend(budget, _items(live), releases, _sums(live))


def _sums(live: Sequence[LedgerEntry], epsilon: float = 0.0, delta: float = 0.0) -> Sums:
    """The plain sums of ``live`` jobs' epsilons and deltas, with ``epsilon`` and ``delta``
    (another job's, or a batch's summed) added."""
    return Sums(sum(e.epsilon for e in live) + epsilon, sum(e.delta for e in live) + delta)


@dataclass(frozen=True)
class Sums:
    """The jobs' own epsilons summed, and their deltas: the plain sum and the delta it is at."""

    epsilon: float
    delta: float


def _spend(
    budget: Budget,
    items: Sequence[Item],
    releases: Sequence[LedgerEntry],
    jobs: Sums,
) -> Spend:
    accounting = Accounting(budget.accounting)
    counts = math.fsum(release_epsilon(e, accounting) for e in releases)
    priced = _compose(budget, items, releases)
    return Spend(
        epsilon=priced.epsilon,
        plain_sum=jobs.epsilon + counts,
        jobs=len(items),
        counts_epsilon=counts,
        rule=priced.rule,
        composed=priced.composed,
        delta=budget.delta,
        plain_sum_delta=jobs.delta + math.fsum(e.delta for e in releases),
    )


def live_items(session: Session, dataset_id: str) -> list[Item]:
    """The dataset's live jobs as the filter prices them (each with its declared batch)."""
    return _items(_live_entries(session, dataset_id))


def releases(session: Session, budget: Budget) -> list[Release]:
    """The dataset's count releases as the filter prices them."""
    accounting = Accounting(budget.accounting)
    return [_release(e, accounting) for e in count_entries(session, budget.dataset_id)]


def live_events(session: Session, dataset_id: str) -> list[DatasetEvent]:
    """The events of the dataset's live jobs: exactly what :func:`spend` composes (the
    dashboard's per-label breakdown prices them group by group)."""
    return [_stored_event(e) for e in _live_entries(session, dataset_id)]


def lock_budget(session: Session, dataset_id: str) -> Budget:
    """Lock the dataset's row, then the row of the budget it charges (its own, or its budget
    owner's: :mod:`app.ledger.owners`), for the rest of the transaction.

    The one lock order of the service (on PostgreSQL; SQLite locks the whole database):
    **job rows, then private datasets, then public datasets, then budgets**. Admission and a
    budget change lock the dataset and then the budget; a job that settles holds its own row
    and comes here. A dataset linked to another's budget locks its own row and then the
    owner's *budget* row, never the owner's dataset row: budgets still come after every
    dataset, and datasets sharing a budget serialise on that one budget row.

    Before, settlement locked the budget and then, inserting its ledger entry, took a
    key-share lock on the dataset through the foreign key: the reverse of admission's order,
    and a deadlock when the two met (``tests/ledger/test_lock_order.py``).
    Re-locking a row the transaction already holds is free."""
    session.execute(select(Dataset.id).where(Dataset.id == dataset_id).with_for_update())
    owner = budget_owner_id(session, dataset_id)
    budget = session.scalars(
        select(Budget).where(Budget.dataset_id == owner).with_for_update()
    ).one_or_none()
    if budget is None:
        where = "" if owner == dataset_id else f" (it shares dataset {owner}'s budget)"
        raise NoBudgetError(
            f"the dataset has no budget{where}: set one with PUT /v1/datasets/{{id}}/budget"
        )
    return budget


def admit(
    session: Session,
    *,
    dataset_id: str,
    job_id: str,
    event: DatasetEvent,
    epsilon: float,
    delta: float,
    accounting: Accounting,
    batch_id: str | None = None,
) -> Spend:
    """Reserve ``event`` against the budget, or raise :class:`BudgetExceededError`.

    ``batch_id`` names the batch the job was declared in, with the others of one request
    (None: submitted alone, its own batch). Must run inside the transaction that creates
    the job: the reservation and the job row are committed together, and the budget row
    stays locked until then.
    """
    budget = lock_budget(session, dataset_id)
    if Accounting(budget.accounting) is not accounting:
        raise LedgerError(
            f"the dataset's budget uses {budget.accounting} accounting; submit the job with "
            f"accounting={budget.accounting}"
        )
    if delta > budget.delta:
        raise LedgerError(f"the job's delta {delta:g} exceeds the budget's delta {budget.delta:g}")
    refuse_held(session, budget.dataset_id)
    entries = _entries(session, dataset_id)
    live = _live_of(entries)
    releases = [e for e in entries if e.kind == LedgerKind.COUNTS]
    items = _items(live, Item(event, batch_id or job_id, dataset_id))
    after = _compose(budget, items, releases).epsilon
    if not fits_budget(after, budget.epsilon):
        before = _compose(budget, items[:-1], releases).epsilon
        raise BudgetExceededError(
            requested=epsilon, spent=before, total=budget.epsilon, adds=after - before
        )
    append(
        session,
        LedgerEntry(
            dataset_id=dataset_id,
            job_id=job_id,
            kind=LedgerKind.RESERVE.value,
            epsilon=epsilon,
            delta=delta,
            event=to_dict(event),
            batch_id=batch_id,
        ),
    )
    return _spend(budget, items, releases, _sums(live, epsilon, delta))


def charge_count_release(
    session: Session,
    *,
    budget: Budget,
    release_id: str,
    event: dict[str, Any],
    epsilon: float,
    delta: float,
    dataset_id: str | None = None,
) -> LedgerEntry:
    """Charge a dataset's count release (its ``event``: the stored release, with its noise
    multiplier under ``sigma``) once, as a ledger entry of its own, or raise
    :class:`BudgetExceededError` if it does not fit beside what is live. The caller holds
    the budget row locked (:func:`lock_budget`) and commits the release with the entry.
    ``dataset_id``: the dataset released (default the budget's own), which may be one that
    shares the budget; the entry keeps its ID."""
    refuse_held(session, budget.dataset_id)
    entries = _entries(session, budget.dataset_id)
    releases = [e for e in entries if e.kind == LedgerKind.COUNTS]
    entry = LedgerEntry(
        dataset_id=dataset_id or budget.dataset_id,
        job_id=release_id,
        kind=LedgerKind.COUNTS.value,
        epsilon=epsilon,
        delta=delta,
        event=event,
    )
    items = _items(_live_of(entries))
    after = _compose(budget, items, [*releases, entry]).epsilon
    if not fits_budget(after, budget.epsilon):
        before = _compose(budget, items, releases).epsilon
        raise BudgetExceededError(
            requested=epsilon, spent=before, total=budget.epsilon, adds=after - before
        )
    return append(session, entry)


def _close(
    session: Session, job_id: str, kind: LedgerKind, reason: str | None = None
) -> LedgerEntry:
    entries = session.scalars(
        select(LedgerEntry).where(LedgerEntry.job_id == job_id).order_by(LedgerEntry.id)
    ).all()
    reserve = next((e for e in entries if e.kind == LedgerKind.RESERVE), None)
    if reserve is None:
        raise LedgerError(f"job {job_id} has no reservation")
    closed = next((e for e in entries if e.kind != LedgerKind.RESERVE), None)
    if closed is not None:
        if closed.kind != kind:
            past = {LedgerKind.COMMIT: "committed", LedgerKind.RELEASE: "released"}
            raise LedgerError(f"job {job_id} was already {past[LedgerKind(closed.kind)]}")
        return closed  # idempotent: a redelivered task closes once
    lock_budget(session, reserve.dataset_id)
    entry = LedgerEntry(
        dataset_id=reserve.dataset_id,
        job_id=job_id,
        kind=kind.value,
        epsilon=reserve.epsilon,
        delta=reserve.delta,
        event=reserve.event if reason is None else {**reserve.event, REASON_KEY: reason},
    )
    return append(session, entry)


#: Where a commit or release entry keeps its plain-words reason, inside its ``event`` JSON
#: (the event itself is read from reserve entries only, and :func:`from_dict` reads its own
#: keys, so the extra key changes no price).
REASON_KEY = "reason"


def commit(session: Session, job_id: str, *, reason: str | None = None) -> LedgerEntry:
    """The job's charge is final (its result is stored, or it touched the data and then
    failed or was cancelled). ``reason`` says which, in words a client is shown: never record
    text."""
    return _close(session, job_id, LedgerKind.COMMIT, reason)


def release(session: Session, job_id: str, *, reason: str | None = None) -> LedgerEntry:
    """Give the reservation back: only for a job that never read a private record.

    Privacy-critical. Releasing removes the job's event from the composition that admits
    every later job, so it is sound only if nothing the job released depends on the private
    records: then its output distribution is the same on every pair of neighbouring datasets
    (privacy loss 0, whatever the neighbouring relation), and leaving it out of the
    composition is exact, not an approximation. The worker commits the job's
    ``touched_data`` mark *before* its first read of a record (``workers.runner``), so a job
    without the mark provably read none. A job with the mark is refused here (a
    :class:`LedgerError`), whatever its caller thinks: defence in depth for the one rule of
    :func:`app.services.job_end.close_job`.
    """
    job = session.get(Job, job_id)
    if job is not None and job.touched_data:
        raise LedgerError(f"job {job_id} read the private data: its charge cannot be released")
    return _close(session, job_id, LedgerKind.RELEASE, reason)


class ChargeState(StrEnum):
    """Where a job's charge stands: held against the budget while it runs (``reserved``),
    final (``charged``), or given back (``released``)."""

    RESERVED = "reserved"
    CHARGED = "charged"
    RELEASED = "released"


@dataclass(frozen=True)
class JobCharge:
    """A job's charge as its ledger entries state it: the state, the epsilon it counts
    against the budget now (the job's own epsilon unless released, then 0) and the reason
    its closing entry recorded (None while reserved, or for entries written before reasons
    were kept)."""

    state: ChargeState
    epsilon: float
    reason: str | None


def job_charges(session: Session, job_ids: Sequence[str]) -> dict[str, JobCharge]:
    """The charge of each of ``job_ids`` that has a reservation (one query for all).

    A job's entries are its reserve, then at most one commit or release (:func:`_close`
    refuses a second of another kind), so the last entry decides the state."""
    if not job_ids:
        return {}
    entries = session.scalars(
        select(LedgerEntry)
        .where(LedgerEntry.job_id.in_(list(dict.fromkeys(job_ids))))
        .order_by(LedgerEntry.id)
    ).all()
    charges: dict[str, JobCharge] = {}
    for entry in entries:
        kind = LedgerKind(entry.kind)
        if kind is LedgerKind.RESERVE:
            charges[entry.job_id] = JobCharge(ChargeState.RESERVED, entry.epsilon, None)
            continue
        reason = entry.event.get(REASON_KEY) if isinstance(entry.event, dict) else None
        released = kind is LedgerKind.RELEASE
        charges[entry.job_id] = JobCharge(
            ChargeState.RELEASED if released else ChargeState.CHARGED,
            0.0 if released else entry.epsilon,
            str(reason) if reason is not None else None,
        )
    return charges


def history(session: Session, dataset_id: str) -> list[LedgerEntry]:
    """Every entry of the budget ``dataset_id`` charges, in order (:func:`_entries`): a
    shared budget's history holds the entries of each dataset sharing it."""
    return _entries(session, dataset_id)


def spend_with(
    session: Session,
    budget: Budget,
    events: DatasetEvent | Sequence[DatasetEvent],
    epsilon: float,
    dataset_id: str | None = None,
    delta: float = 0.0,
) -> Spend:
    """What the dataset's spend would be with one more job charged, or with several declared
    in one batch (a quote: nothing is reserved, and another admission may change the answer
    before a submission). ``epsilon`` is the jobs' own epsilons summed, for the plain sum, and
    ``delta`` their deltas summed, for the delta it is at; ``dataset_id`` the dataset they
    would read (default: the budget's own)."""
    entries = _entries(session, budget.dataset_id)
    live = _live_of(entries)
    releases = [e for e in entries if e.kind == LedgerKind.COUNTS]
    new = [events] if not isinstance(events, Sequence) else list(events)
    dataset = dataset_id or budget.dataset_id
    items = _items(live) + [Item(e, QUOTED_BATCH, dataset) for e in new]
    return _spend(budget, items, releases, _sums(live, epsilon, delta))


#: The batch a quoted job (or a quoted batch's jobs) is priced in: a name no job ID takes.
QUOTED_BATCH = "quoted"


#: Most composed values one :func:`timeline` computes. Each is a composition of all the jobs
#: live at that moment (milliseconds per job with the PLD accountant), so a long ledger's
#: chart would cost quadratic time; past this many changes an evenly spread subset (always
#: including the last) is composed, and the others are left out (None).
TIMELINE_COMPOSITIONS = 24
_TIMELINE_CACHE_SIZE = 4096
# (dataset, accounting, epsilon, delta, live reserve entry IDs) -> the spend. Ledger entries are
# never changed, so a value stays right for as long as the budget does.
_composed_cache: OrderedDict[tuple[str, str, float, float, tuple[int, ...]], Price] = OrderedDict()
_cache_lock = threading.Lock()


def _cached_compose(budget: Budget, live: Sequence[LedgerEntry]) -> Price:
    """The spend of ``live``: reserve entries of jobs and count releases' entries."""
    key = (
        budget.dataset_id,
        budget.accounting,
        budget.epsilon,  # the filter's orders and shares follow the budget's epsilon too
        budget.delta,
        tuple(e.id for e in live),
    )
    with _cache_lock:
        if key in _composed_cache:
            _composed_cache.move_to_end(key)
            return _composed_cache[key]
    jobs = _items([e for e in live if e.kind == LedgerKind.RESERVE])
    value = _compose(budget, jobs, [e for e in live if e.kind == LedgerKind.COUNTS])
    with _cache_lock:
        _composed_cache[key] = value
        while len(_composed_cache) > _TIMELINE_CACHE_SIZE:
            _composed_cache.popitem(last=False)
    return value


@dataclass(frozen=True)
class SpendPoint:
    """The spend right after one ledger entry: priced by the budget's filter as it is now
    (None when a long ledger's chart left it out; ``rule`` the filter's rule that priced it)
    and the plain sum, over the jobs live at that moment."""

    entry: LedgerEntry
    epsilon: float | None
    plain_sum: float
    rule: Rule | None = None


def _plain(entry: LedgerEntry, accounting: Accounting) -> float:
    """An entry's epsilon in the plain sum: a job's own, a count release's as :func:`spend`
    prices it (under the budget's accounting)."""
    if entry.kind == LedgerKind.COUNTS:
        return release_epsilon(entry, accounting)
    return entry.epsilon


def timeline(
    session: Session, budget: Budget, *, max_compositions: int = TIMELINE_COMPOSITIONS
) -> list[SpendPoint]:
    """The spend after each of the dataset's ledger entries, in order (for a chart).

    A reserve adds its job, a release removes it, a commit changes nothing (the job was
    already counted from its reservation, so the point repeats the previous value). Every
    point is priced with the budget's current accountant and delta, so the last point equals
    :func:`spend`. At most ``max_compositions`` distinct sets of live jobs are composed
    (:data:`TIMELINE_COMPOSITIONS`); the plain sum is exact at every point.
    """
    accounting = Accounting(budget.accounting)
    states: list[tuple[LedgerEntry, tuple[LedgerEntry, ...], int]] = []
    live: dict[str, LedgerEntry] = {}
    changes = 0
    for entry in history(session, budget.dataset_id):
        if entry.kind in (LedgerKind.RESERVE, LedgerKind.COUNTS):
            live[entry.job_id] = entry
            changes += 1
        elif entry.kind == LedgerKind.RELEASE and live.pop(entry.job_id, None) is not None:
            changes += 1
        states.append((entry, tuple(live.values()), changes))
    if changes <= max_compositions:
        chosen = set(range(changes + 1))
    else:  # evenly spread over the changes, the first and the last included
        steps = max(1, max_compositions - 1)
        chosen = {1 + round(i * (changes - 1) / steps) for i in range(steps + 1)}
    points: list[SpendPoint] = []
    for entry, members, change in states:
        priced = _cached_compose(budget, members) if change in chosen else None
        plain = math.fsum(_plain(e, accounting) for e in members)
        epsilon, rule = (priced.epsilon, priced.rule) if priced is not None else (None, None)
        points.append(SpendPoint(entry=entry, epsilon=epsilon, plain_sum=plain, rule=rule))
    return points
