"""Budget bodies: setting one, the spend view with its ledger and label groups, fleets."""

from __future__ import annotations

from typing import Any

from pydantic import (
    Field,
)

from app.api.schemas.common import Delta, Timestamp, _Request
from app.db.models import (
    LedgerEntry,
    LedgerKind,
)
from app.documented import Documented
from app.ledger.ledger import REASON_KEY
from app.privacy.accounting import Accounting
from app.privacy.budget import Epsilon
from app.privacy.filter import Rule
from app.privacy.unit import DEFAULT_DELTA
from app.services.budgets import (
    BudgetView,
    CountReleaseView,
    DatasetSpend,
    DeltaSource,
    GroupSpend,
    SpendLevel,
    display_groups,
    over_note,
)

# --- budgets --------------------------------------------------------------------------------


class BudgetUpdate(_Request):
    epsilon: Epsilon
    delta: Delta | None = Field(
        None,
        description=f"Default: unchanged; a new budget {DEFAULT_DELTA:g}, public and the same "
        "for every dataset (never derived from its size: every prompt carries its job's "
        "delta). A delta above 1/|D| of the dataset is accepted with a warning (delta_note).",
    )
    accounting: Accounting = Accounting.TIGHT
    """tight: add/remove neighbours, Poisson sampling. paper: replace-one neighbours, fixed-size
    samples, which needs the dataset's counts declared public."""
    warn_threshold: float | None = Field(None, gt=0, le=1, allow_inf_nan=False, strict=True)
    """Share of the budget at which it is flagged (warn), in (0, 1]. Default: unchanged (0.8 for
    a new budget)."""


class LedgerEventPublic(Documented):
    kind: str
    """reserve, commit or release (a job's charge), or counts (the dataset's count release,
    charged once: see BudgetPublic.count_releases)."""
    job_id: str
    """The job the entry charges; for kind counts, the count release's ID (also in
    count_release_id), which names no job."""
    dataset_id: str | None = None
    """The dataset the job ran on (or whose counts were released): on a budget that several
    datasets share, any of them."""
    count_release_id: str | None = None
    """For kind counts, the count release it charges; null otherwise."""
    epsilon: float
    delta: float
    created_at: Timestamp
    event: dict[str, Any]
    reason: str | None = None
    """A commit's or release's reason in plain words (why the job was charged or its reservation
    given back); null for a reserve and a count release."""
    batch: str | None = None
    """For a reserve: the batch its job was declared in (POST /v1/jobs/batch), or the job's own
    ID when it was submitted alone; null for other kinds."""

    @classmethod
    def from_row(cls, row: LedgerEntry) -> LedgerEventPublic:
        event = dict(row.event)
        reason = event.pop(REASON_KEY, None)
        return cls(
            kind=row.kind,
            job_id=row.job_id,
            dataset_id=row.dataset_id,
            count_release_id=row.job_id if row.kind == LedgerKind.COUNTS else None,
            epsilon=row.epsilon,
            delta=row.delta,
            created_at=row.created_at,
            event=event,
            reason=str(reason) if reason is not None else None,
            batch=row.batch_of if row.kind == LedgerKind.RESERVE else None,
        )


class CountReleasePublic(Documented):
    """One release of the dataset's per-label record counts: drawn once for one version of
    its records, when a plan first needed them, and charged once to the budget as its own
    ledger entry (kind counts); every quote, refusal and job of those records reads it.
    Its released values are not shown: its noise and cost are."""

    id: str
    epsilon: float
    """What it costs under the budget's accounting."""
    delta: float
    """The share of the budget's delta it took."""
    sigma: float
    """Its noise multiplier (per label count, sensitivity 1)."""
    share: float
    """epsilon / the budget's epsilon."""
    labels: list[str]
    """The labels whose counts it released."""
    current: bool
    """It is the release of the dataset's records as they are now (false: of records since
    changed; a new release was, or will be, charged for them)."""
    created_at: Timestamp

    @classmethod
    def from_view(cls, release: CountReleaseView, budget_epsilon: float) -> CountReleasePublic:
        return cls(
            id=release.id,
            epsilon=release.epsilon,
            delta=release.delta,
            sigma=release.sigma,
            share=release.epsilon / budget_epsilon if budget_epsilon > 0 else 0.0,
            labels=list(release.labels),
            current=release.current,
            created_at=release.created_at,
        )


class LabelGroupPublic(Documented):
    """One label group's composed spend (see ``BudgetPublic.label_groups``)."""

    labels: list[str]
    """The label partition (two labels: a pair, under replace-one neighbours; none: every record,
    when the dataset lists no labels)."""
    spent: float
    """Composition of the live jobs that read this group."""
    remaining: float
    jobs: int
    """Live jobs that charged this group."""
    binding: bool
    """This group sets the dataset's spend (the largest)."""
    rule: Rule = Rule.ONE_BATCH
    """Which of the ledger's filter rules priced the group: one_batch (the count releases and
    one declared batch, composed tightly) or renyi_filter (jobs chosen one after another)."""

    @classmethod
    def from_group(cls, group: GroupSpend, budget_epsilon: float) -> LabelGroupPublic:
        return cls(
            labels=list(group.labels),
            spent=group.epsilon,
            remaining=max(0.0, budget_epsilon - group.epsilon),
            jobs=group.jobs,
            binding=group.binding,
            rule=group.rule,
        )


class BudgetPublic(Documented):
    dataset_id: str
    epsilon: float
    """Total budget."""
    delta: float
    """The delta every job of this budget is charged at (a job may ask for a smaller one);
    public: every prompt carries its job's delta."""
    delta_source: DeltaSource
    """Where the delta comes from: default (the public default, the same for every dataset),
    owner (set by the data owner), or former_default (1/|D| of this dataset, the default of
    budgets set before migration 0012; prompts at it tell their readers the dataset's size)."""
    delta_note: str | None = None
    """A warning for the owner about the delta, in plain words (above 1/|D| of this dataset, or
    equal to it); null when there is none."""
    accounting: Accounting
    accounting_note: str | None = None
    """A warning about the accounting (paper accounting on a dataset whose counts are not
    declared public: its jobs are refused); null when there is none."""
    spent: float
    """The dataset's spend under the ledger's filter, a rule valid when each job is chosen after
    reading the last one's output (docs/privacy.md, "The ledger's rule across jobs"): what
    admission compares with epsilon."""
    rule: Rule = Rule.ONE_BATCH
    """The filter's rule that priced spent: one_batch (the count releases and one declared batch
    of jobs, composed tightly) or renyi_filter (jobs submitted one after another)."""
    composed: float = 0.0
    """The tight composition of the same releases and jobs (the ledger's price before the
    filter; not valid across adaptively chosen jobs), for comparison."""
    over_note: str | None = None
    """Why the spend is over the budget, when it is (a ledger written before the filter, whose
    jobs now price above it): nothing served is withdrawn, and no job is admitted until the
    spend fits again. Null when the spend fits."""
    plain_sum: float
    """Sum of the live jobs' own epsilons and the count releases': at plain_sum_delta."""
    plain_sum_delta: float = 0.0
    """The delta at which plain_sum holds (basic composition): the live jobs' deltas and the
    count releases' summed, not the budget's delta (spent's)."""
    counts_epsilon: float = 0.0
    """The count releases' part of spent (and of plain_sum): charged once for the dataset, not by
    any job; 0 when none was drawn (counts declared public, or no job planned yet)."""
    count_releases: list[CountReleasePublic] = Field(default_factory=list)
    """The dataset's count releases, oldest first: one per version of its records that a plan
    needed (empty for counts declared public, and for ledgers written before releases were
    charged once)."""
    remaining: float
    live_jobs: int
    warn_threshold: float
    """Share of the budget at which it is flagged."""
    spent_fraction: float
    """spent / epsilon."""
    level: SpendLevel
    """ok (below the threshold), warn (at or past it), over (the budget is used up)."""
    label_groups: list[LabelGroupPublic]
    """Each label's records are priced apart: the spend of each label group (and, under
    replace-one, of the binding pair); the dataset's spend is the largest."""
    updated_at: Timestamp
    history: list[LedgerEventPublic]
    linked_datasets: list[str] = Field(default_factory=list)
    """The datasets that share this budget (linked at upload with budget_of, because their
    records had been uploaded before); dataset_id is the budget's owner."""

    @classmethod
    def from_view(cls, view: BudgetView) -> BudgetPublic:
        total = view.budget.epsilon
        return cls(
            dataset_id=view.budget.dataset_id,
            epsilon=total,
            delta=view.budget.delta,
            delta_source=view.delta_source,
            delta_note=view.delta_note,
            accounting=Accounting(view.budget.accounting),
            accounting_note=view.accounting_note,
            spent=view.spend.epsilon,
            rule=view.spend.rule,
            composed=view.spend.composed,
            over_note=over_note(view.spend, total),
            plain_sum=view.spend.plain_sum,
            plain_sum_delta=view.spend.plain_sum_delta,
            counts_epsilon=view.spend.counts_epsilon,
            count_releases=[CountReleasePublic.from_view(r, total) for r in view.releases],
            remaining=view.remaining,
            live_jobs=view.spend.jobs,
            warn_threshold=view.budget.warn_threshold,
            spent_fraction=view.fraction,
            level=view.level,
            label_groups=[
                LabelGroupPublic.from_group(g, total) for g in display_groups(view.groups)
            ],
            updated_at=view.budget.updated_at,
            history=[LedgerEventPublic.from_row(e) for e in view.history],
            linked_datasets=list(view.linked),
        )


class BudgetSummary(Documented):
    """A budgeted dataset's spend against its threshold (``GET /v1/budgets``)."""

    dataset_id: str
    name: str
    epsilon: float
    spent: float
    counts_epsilon: float = 0.0
    """The count releases' part of spent (charged once for the dataset)."""
    remaining: float
    spent_fraction: float
    warn_threshold: float
    level: SpendLevel
    live_jobs: int
    # Issue 34: whose dataset (every row has them; an org:read key's rows span tenants).
    tenant_id: str | None = None
    """The dataset's tenant."""
    tenant_name: str | None = None
    """The dataset's tenant's name."""
    budget_dataset_id: str | None = None
    """The dataset whose budget this row's is: the row's own, or its owner's when the dataset
    was linked at upload (budget_of); the spend is then the shared budget's."""
    linked_datasets: list[str] = Field(default_factory=list)
    """The datasets that share the budget (they hold records uploaded before)."""

    @classmethod
    def from_row(cls, row: DatasetSpend, tenant_name: str | None = None) -> BudgetSummary:
        assert row.budget is not None and row.spend is not None  # budgeted rows only
        return cls(
            dataset_id=row.dataset.id,
            name=row.dataset.name,
            epsilon=row.budget.epsilon,
            spent=row.spend.epsilon,
            counts_epsilon=row.spend.counts_epsilon,
            remaining=row.remaining or 0.0,
            spent_fraction=row.fraction or 0.0,
            warn_threshold=row.budget.warn_threshold,
            level=row.level or SpendLevel.OK,
            live_jobs=row.spend.jobs,
            tenant_id=row.dataset.tenant_id,
            tenant_name=tenant_name,
            budget_dataset_id=row.budget.dataset_id,
            linked_datasets=list(row.linked),
        )
