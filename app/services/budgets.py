"""A dataset's privacy budget: setting it, and what has been spent against it.

The spend is the composition of the live events (reserved or committed, not released) by the
budget's accountant, at the budget's delta (``ledger.spend``); the plain sum of the jobs'
epsilons is reported beside it. The accounting mode cannot change once a job is charged
(its events were sampled for one accountant), and a budget cannot be lowered below what is
already spent (the refusal names the epsilon, and the delta, that would fit). Public datasets
(PromptPATE's unlabelled inputs) are never charged and take no budget.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import (
    DEFAULT_WARN_THRESHOLD,
    Budget,
    Dataset,
    DatasetKind,
    LedgerEntry,
    now,
)
from app.ledger import ledger
from app.ledger.owners import budget_of, linked_datasets
from app.methods.base import counts_refusal
from app.privacy.accounting import Accounting, accountant_for
from app.privacy.budget import (
    EPSILON_RULE,
    FIT_TOLERANCE,
    fits_budget,
    is_epsilon,
    round_up,
    smallest_fitting_delta,
    spend_text,
)
from app.privacy.display import delta_text
from app.privacy.events import DatasetEvent
from app.privacy.filter import FilterParams, Item, Release, Rule, price_groups
from app.privacy.unit import DEFAULT_DELTA

from .count_releases import current_release
from .datasets import get_dataset, get_private_dataset, list_datasets
from .errors import ConflictError, InvalidError, NotFoundError
from .ledger_csv import entry_labels, ledger_csv


def default_delta() -> float:
    """A new budget's delta when the owner sets none: :data:`DEFAULT_DELTA`, public and the
    same for every dataset. Never 1/|D| (the papers' convention, and this service's default
    before migration 0012): every prompt carries its job's delta, and 1/|D| is the dataset's
    size."""
    return DEFAULT_DELTA


def former_default_delta(record_count: int) -> float:
    """The default of budgets set before migration 0012, 1/|D| (kept below 1); such budgets keep
    it (and their ledger), and are told so (:func:`delta_source`, :func:`delta_note`)."""
    return 1.0 / max(2, record_count)


class DeltaSource(StrEnum):
    """Where a budget's delta comes from, as the owner is told (by value: the budget row keeps
    no more)."""

    DEFAULT = "default"  # DEFAULT_DELTA: public, independent of the dataset
    OWNER = "owner"  # set by the data owner
    FORMER_DEFAULT = "former_default"  # 1/|D| of this dataset: a budget set before migration 0012


def delta_source(delta: float, record_count: int) -> DeltaSource:
    """Where ``delta`` comes from, for a dataset of ``record_count`` records."""
    if math.isclose(delta, DEFAULT_DELTA, rel_tol=1e-12):
        return DeltaSource.DEFAULT
    if math.isclose(delta, former_default_delta(record_count), rel_tol=1e-12):
        return DeltaSource.FORMER_DEFAULT
    return DeltaSource.OWNER


def delta_note(delta: float, record_count: int) -> str | None:
    """A warning for the dataset's owner about a budget's ``delta``, in plain words; None when
    there is none. The owner sees their own record count; the note goes to admin keys only
    (a prompt carries its job's delta, never this note).

    Above 1/|D|: a mechanism may then fail to protect a whole record outright with that
    probability, about one record of the dataset. Equal to 1/|D|, as budgets set before
    migration 0012 by default: every prompt of a job at it tells its readers the dataset's size."""
    inverse = former_default_delta(record_count)
    if delta_source(delta, record_count) is DeltaSource.FORMER_DEFAULT:
        return (
            f"delta {delta_text(delta)} is 1/|D| of this dataset's {record_count} records (the "
            "default "
            "before counts became private): every prompt of a job at this delta carries it, so "
            "its readers learn the dataset's size; set a public delta (default "
            f"{delta_text(DEFAULT_DELTA)}) "
            "or submit jobs with a smaller delta"
        )
    if delta > inverse:
        return (
            f"delta {delta_text(delta)} is above 1/|D| = {delta_text(inverse)} for this "
            f"dataset's {record_count} "
            "records: with that probability a job may expose one record outright (you may see "
            "your own counts; its prompts' readers may not); the usual choice is well below "
            f"1/|D|, e.g. the default {delta_text(DEFAULT_DELTA)}"
        )
    return None


def accounting_note(accounting: Accounting, counts_public: bool, dataset_id: str) -> str | None:
    """A warning about a budget's accounting on a dataset whose counts are (not) declared
    public: every job of a paper budget is refused until the owner declares them."""
    refusal = counts_refusal(accounting, counts_public)
    if refusal is None:
        return None
    return (
        f"{refusal}: jobs on this budget are refused until the owner declares the counts "
        f"public (PUT /v1/datasets/{dataset_id}/counts-public); a budget without charged jobs can "
        "switch to tight accounting"
    )


THRESHOLD_RULE = "must be a fraction of the budget in (0, 1], e.g. 0.8 for 80%"


class SpendLevel(StrEnum):
    """How full a budget is: below its warn threshold, at or past it, or used up (100 %)."""

    OK = "ok"
    WARN = "warn"
    OVER = "over"


def spend_level(spent: float, total: float, threshold: float) -> SpendLevel:
    """The level of a spend of ``spent`` against ``total`` epsilon warned at ``threshold``.
    "over" is the budget used up: the ledger's own fit tolerance counts a spend of exactly
    the budget (recomputed in the last bits) as 100 %, not 99.99...%."""
    if total > 0 and spent >= total * (1 - FIT_TOLERANCE):
        return SpendLevel.OVER
    if total > 0 and spent >= threshold * total * (1 - FIT_TOLERANCE):
        return SpendLevel.WARN
    return SpendLevel.OK


def spend_fraction(spent: float, total: float) -> float:
    """The share of the budget spent (1.0 = all of it)."""
    return spent / total if total > 0 else 0.0


@dataclass(frozen=True)
class GroupSpend:
    """The spend of one label group under the ledger's filter: the live jobs' mechanisms
    that read records of ``labels`` (one label; under replace-one neighbours also a pair, as
    a record swapped for one of another label touches both), plus every job that reads all
    records (PromptPATE, PromptDPSGD) and the count releases. ``labels`` is empty for a
    dataset whose jobs all read every record and which lists no labels. The dataset's spend
    is the largest group's (``binding``; groups that tie are all binding). ``rule`` is the
    filter's rule that priced the group, ``composed`` the tight composition beside it."""

    labels: tuple[str, ...]
    epsilon: float
    jobs: int
    binding: bool = False
    rule: Rule = Rule.ONE_BATCH
    composed: float = 0.0


def label_groups(
    accounting: Accounting,
    params: FilterParams,
    items: Sequence[Item],
    labels: Sequence[str] = (),
    releases: Sequence[Release] = (),
) -> list[GroupSpend]:
    """Every exposure group's spend under the budget's filter (``params``), the binding one
    marked.

    The groups are the accountant's own (:func:`app.privacy.filter.exposure_groups`): each
    label's partition, pairs of them under replace-one neighbours, every group joined by the
    jobs that read all records and by the count releases. ``labels`` adds the dataset's
    labels that no job has read yet. The largest is the dataset's spend, ``ledger.spend``;
    the tests check that it is. Each group of the largest epsilon is ``binding`` (several
    when they tie, e.g. the labels of one job). Label names are the dataset's public
    metadata (its ``label_counts``), never record text.
    """
    priced = price_groups(params, accountant_for(accounting), items, releases, labels)
    groups = [
        GroupSpend(g.labels, g.epsilon, len(g.jobs), rule=g.rule, composed=g.composed)
        for g in priced
        if g.labels or g.jobs or releases
    ]
    top = max((g.epsilon for g in groups), default=0.0)
    if top > 0:  # every group at the maximum sets the spend (equal groups tie)
        groups = [dataclasses.replace(g, binding=g.epsilon >= top) for g in groups]
    return groups


def over_note(spend: ledger.Spend, total: float) -> str | None:
    """Why a spend is over its budget, in plain words, or None when it fits. A ledger
    written before the filter admitted its jobs by the tight composition of all
    of them, which is not valid when each was chosen after reading the last; priced again by
    the filter, its live jobs may cost more than the budget."""
    if fits_budget(spend.epsilon, total):
        return None
    return (
        f"over budget: the ledger's filter ({spend.rule.value.replace('_', ' ')}) prices the "
        f"live jobs and count releases at {spend_text(spend.epsilon)}, more than the budget's "
        f"epsilon {spend_text(total)}; they were admitted by the composition the ledger used "
        "before "
        f"({spend_text(spend.composed)}), which is not valid when each job is chosen after "
        "reading the last. Nothing served is withdrawn; no new job is admitted while the "
        "spend is over the budget"
    )


def display_groups(groups: Sequence[GroupSpend]) -> list[GroupSpend]:
    """The groups a page lists: each single label, and a pair only when it is the binding
    group (under replace-one there are n(n-1)/2 pairs)."""
    return [g for g in groups if len(g.labels) <= 1 or g.binding]


@dataclass(frozen=True)
class CountReleaseView:
    """One of the dataset's count releases as its budget shows it: a line of its own beside
    the jobs, since it is charged once for the dataset, not by any job. ``epsilon`` is what
    it costs under the budget's accounting now (``ledger.release_epsilon``), ``delta`` the
    share of the budget's delta it took, ``sigma`` its noise multiplier; ``current``: it is
    the release of the dataset's records as they are now (an older one was of records since
    changed). Its released values are not here: sigma and cost say what a reader needs."""

    id: str
    epsilon: float
    delta: float
    sigma: float
    created_at: datetime
    labels: tuple[str, ...]
    current: bool


def count_release_views(
    session: Session, budget: Budget, current_id: str | None
) -> list[CountReleaseView]:
    """The dataset's count releases from its ledger (entries of kind ``counts``), oldest
    first; [] for a ledger written before releases were charged."""
    accounting = Accounting(budget.accounting)
    return [
        CountReleaseView(
            id=entry.job_id,
            epsilon=ledger.release_epsilon(entry, accounting),
            delta=entry.delta,
            sigma=float(entry.event["sigma"]),
            created_at=entry.created_at,
            labels=entry_labels(entry),
            current=entry.job_id == current_id,
        )
        for entry in ledger.count_entries(session, budget.dataset_id)
    ]


@dataclass(frozen=True)
class BudgetView:
    dataset: Dataset
    budget: Budget
    spend: ledger.Spend
    history: list[LedgerEntry]
    groups: list[GroupSpend]
    releases: list[CountReleaseView] = field(default_factory=list)
    linked: tuple[str, ...] = ()  # the datasets sharing the budget (its owner's is budget's)

    @property
    def remaining(self) -> float:
        return max(0.0, self.budget.epsilon - self.spend.epsilon)

    @property
    def fraction(self) -> float:
        return spend_fraction(self.spend.epsilon, self.budget.epsilon)

    @property
    def level(self) -> SpendLevel:
        return spend_level(self.spend.epsilon, self.budget.epsilon, self.budget.warn_threshold)

    @property
    def delta_source(self) -> DeltaSource:
        return delta_source(self.budget.delta, self.dataset.record_count)

    @property
    def delta_note(self) -> str | None:
        return delta_note(self.budget.delta, self.dataset.record_count)

    @property
    def accounting_note(self) -> str | None:
        return accounting_note(
            Accounting(self.budget.accounting), bool(self.dataset.counts_public), self.dataset.id
        )


def set_budget(
    session: Session,
    *,
    tenant_id: str,
    dataset_id: str,
    epsilon: float,
    delta: float | None,
    accounting: Accounting,
    warn_threshold: float | None = None,
) -> Budget:
    """Create or change the dataset's budget; commits. ``delta`` and ``warn_threshold`` None
    keep the budget's (a new budget: :func:`default_delta`, :data:`DEFAULT_WARN_THRESHOLD`):
    a budget set before migration 0012 keeps its delta, and its ledger's epsilons, until the owner
    sets another."""
    if not is_epsilon(epsilon):
        raise InvalidError(f"epsilon: {EPSILON_RULE}, got {epsilon}")
    if warn_threshold is not None and not (
        math.isfinite(warn_threshold) and 0 < warn_threshold <= 1
    ):
        raise InvalidError(f"warn_threshold: {THRESHOLD_RULE}, got {warn_threshold}")
    dataset = get_private_dataset(
        session,
        tenant_id,
        dataset_id,
        "its texts are never charged, so it takes no budget (set the budget on the private "
        "dataset a job synthesises from)",
    )
    if delta is not None and not 0 < delta < 1:
        raise InvalidError(f"delta: must be in (0, 1), got {delta}")
    _check_own_budget(dataset)
    accounting = Accounting(accounting)
    budget = session.scalars(
        select(Budget).where(Budget.dataset_id == dataset.id).with_for_update()
    ).one_or_none()
    if delta is None:
        delta = default_delta() if budget is None else budget.delta
    if budget is None:
        budget = Budget(
            dataset_id=dataset.id,
            epsilon=epsilon,
            delta=delta,
            accounting=accounting.value,
            warn_threshold=warn_threshold or DEFAULT_WARN_THRESHOLD,
        )
        session.add(budget)
        session.commit()
        return budget
    released_delta = budget.delta - ledger.jobs_delta(session, budget)
    if delta <= released_delta:
        raise InvalidError(
            f"delta: {delta:g} must exceed {released_delta:g}, what the dataset's count "
            "release already took of the budget's delta (docs/privacy.md, 'The count release')"
        )
    current = ledger.spend(session, budget)
    if current.jobs and Accounting(budget.accounting) is not accounting:
        raise ConflictError(
            f"the budget's accounting is {budget.accounting} and {current.jobs} job(s) are "
            "charged under it; it cannot change",
            code="accounting_locked",
        )
    candidate = Budget(
        dataset_id=dataset.id, epsilon=epsilon, delta=delta, accounting=accounting.value
    )
    spent = ledger.spend(session, candidate) if current.jobs else current
    if not fits_budget(spent.epsilon, epsilon):
        raise _below_spent_error(session, candidate, spent)
    budget.epsilon, budget.delta, budget.accounting = epsilon, delta, accounting.value
    if warn_threshold is not None:
        budget.warn_threshold = warn_threshold
    budget.updated_at = now()
    session.commit()
    return budget


def _check_own_budget(dataset: Dataset) -> None:
    """409 ``budget_shared`` for a dataset that charges another's budget: only its owner's
    budget can be set (docs/privacy.md, "Budgets follow the records")."""
    owner = dataset.budget_dataset_id
    if owner:
        raise ConflictError(
            f"dataset {dataset.id!r} shares the budget of dataset {owner!r} (linked at upload "
            f"with budget_of): set the budget on {owner!r}",
            code="budget_shared",
            budget_dataset_id=owner,
        )


def _below_spent_error(session: Session, asked: Budget, spent: ledger.Spend) -> ConflictError:
    """The refusal of a budget ``asked`` (epsilon, delta, accounting) below what the live jobs
    spend at its delta, in plain words with what would fit: the epsilon they need at that
    delta (``spent``; null when no finite epsilon covers them, as at a delta of 1e-300), and
    the smallest delta at which they fit the epsilon asked (``min_delta``; null if none below
    1). Both are rounded up (``spent`` in the message only), so that either, typed back, is
    accepted."""
    min_delta = smallest_fitting_delta(
        lambda delta: ledger.spend(session, _at_delta(asked, delta)).epsilon,
        asked.epsilon,
        above=asked.delta,
    )
    head = (
        f"epsilon {asked.epsilon:g} is below what is already spent or reserved at delta "
        f"{delta_text(asked.delta)}"
    )
    options = []
    if math.isfinite(spent.epsilon):
        needed = round_up(spent.epsilon, 4)
        head += f": the {spent.jobs} live job(s) need epsilon {needed:g} there"
        options.append(f"set epsilon to at least {needed:g}")
    else:
        head += f": no finite epsilon covers the {spent.jobs} live job(s) at so small a delta"
    if min_delta is not None:
        options.append(
            f"keep epsilon {asked.epsilon:g} with delta at least {delta_text(min_delta)} (the "
            "smallest "
            "delta at which the spend fits)"
        )
    message = f"{head}; {' or '.join(options)}" if options else head
    if min_delta is None:
        message += f"; no delta below 1 makes the spend fit epsilon {asked.epsilon:g}"
    return ConflictError(
        message,
        code="budget_below_spent",
        spent=spent.epsilon if math.isfinite(spent.epsilon) else None,
        min_delta=min_delta,
    )


def _at_delta(budget: Budget, delta: float) -> Budget:
    """A copy of ``budget`` (not in the session) at another delta, to price the spend at."""
    return Budget(
        dataset_id=budget.dataset_id,
        epsilon=budget.epsilon,
        delta=delta,
        accounting=budget.accounting,
    )


def budget_view(session: Session, *, tenant_id: str, dataset_id: str) -> BudgetView:
    """The budget, its spend and the ledger history (deleted datasets included: the ledger
    outlives the records)."""
    dataset = get_dataset(session, tenant_id, dataset_id)
    budget = budget_of(session, dataset.id)
    if budget is None and dataset.kind == DatasetKind.PUBLIC:
        raise NotFoundError(
            f"dataset {dataset_id!r} is public: it is never charged and has no budget",
            code="no_budget",
        )
    if budget is None:
        raise NotFoundError(
            f"dataset {dataset_id!r} has no budget: set one with PUT "
            f"/v1/datasets/{dataset_id}/budget",
            code="no_budget",
        )
    current = current_release(session, dataset)
    return BudgetView(
        dataset=dataset,
        budget=budget,
        spend=ledger.spend(session, budget),
        history=ledger.history(session, dataset.id),
        groups=dataset_groups(session, budget, dataset),
        releases=count_release_views(session, budget, current.id if current else None),
        linked=tuple(linked_datasets(session, budget.dataset_id)),
    )


def dataset_groups(
    session: Session,
    budget: Budget,
    dataset: Dataset,
    extra: DatasetEvent | None = None,
) -> list[GroupSpend]:
    """The dataset's label groups over its live jobs (and ``extra``, a planned job's event,
    for a quote), at the budget's accounting and delta."""
    items = ledger.live_items(session, dataset.id)
    if extra is not None:
        items.append(Item(extra, ledger.QUOTED_BATCH, dataset.id))
    labels = [str(label) for label in (dataset.label_counts or {})]
    accounting = Accounting(budget.accounting)
    return label_groups(
        accounting,
        ledger.filter_params(budget),
        items,
        labels,
        ledger.releases(session, budget),
    )


@dataclass(frozen=True)
class DatasetSpend:
    """A dataset with its budget and spend (None for a public dataset, or before a budget is
    set): one row of the dashboard's overview."""

    dataset: Dataset
    budget: Budget | None
    spend: ledger.Spend | None
    linked: tuple[str, ...] = ()  # the datasets sharing the budget (the owner's: budget's)

    @property
    def remaining(self) -> float | None:
        if self.budget is None or self.spend is None:
            return None
        return max(0.0, self.budget.epsilon - self.spend.epsilon)

    @property
    def fraction(self) -> float | None:
        if self.budget is None or self.spend is None:
            return None
        return spend_fraction(self.spend.epsilon, self.budget.epsilon)

    @property
    def level(self) -> SpendLevel | None:
        if self.budget is None or self.spend is None:
            return None
        return spend_level(self.spend.epsilon, self.budget.epsilon, self.budget.warn_threshold)


def overview(session: Session, *, tenant_id: str, limit: int = 500) -> list[DatasetSpend]:
    """The tenant's live datasets, newest first, each with its budget and composed spend."""
    rows = []
    for dataset in list_datasets(session, tenant_id, include_deleted=False, limit=limit, offset=0):
        budget = budget_of(session, dataset.id)
        spent = ledger.spend(session, budget) if budget is not None else None
        linked = tuple(linked_datasets(session, budget.dataset_id)) if budget else ()
        rows.append(DatasetSpend(dataset=dataset, budget=budget, spend=spent, linked=linked))
    return rows


def over_threshold(session: Session, *, tenant_id: str) -> list[DatasetSpend]:
    """The tenant's live budgeted datasets whose spend reached their warn threshold (the
    alert route's answer), fullest first."""
    rows = [r for r in overview(session, tenant_id=tenant_id) if r.level in _ALERTING]
    return sorted(rows, key=lambda r: -(r.fraction or 0.0))


_ALERTING = (SpendLevel.WARN, SpendLevel.OVER)


def spend_timeline(
    session: Session, *, tenant_id: str, dataset_id: str
) -> tuple[BudgetView, list[ledger.SpendPoint]]:
    """:func:`budget_view` and the spend after each ledger entry (for a chart)."""
    view = budget_view(session, tenant_id=tenant_id, dataset_id=dataset_id)
    return view, ledger.timeline(session, view.budget)


def ledger_export(session: Session, *, tenant_id: str, dataset_id: str) -> tuple[str, str]:
    """The ledger CSV of a dataset (:func:`app.services.ledger_csv.ledger_csv`: safe in a
    spreadsheet of any locale) and its file name, for the API's and the dashboard's download."""
    view, points = spend_timeline(session, tenant_id=tenant_id, dataset_id=dataset_id)
    return f"ledger-{view.dataset.id}.csv", ledger_csv(points)
