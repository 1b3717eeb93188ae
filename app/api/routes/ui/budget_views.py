"""What the dashboard's budget views show: the datasets table (sorted and filtered on the
server, :mod:`app.ui.tables`), a dataset's label groups, and a quote's per-group breakdown.

Everything here is public metadata and DP accounting: budgets, composed spends, label names
and per-label record counts (a dataset's ``label_counts``, which the API returns too), never
a record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from app.api.schemas import BudgetPublic, DatasetPublic
from app.privacy.display import delta_text, epsilon_text
from app.services import budgets as budget_service
from app.services.jobs import Quote
from app.services.jobs import quote_groups as job_quote_groups
from app.ui.tables import Choice, Column, TableSpec

#: The datasets table: its sortable columns and filters (query: sort, order, kind, level, q).
DATASETS_TABLE: TableSpec[dict[str, Any]] = TableSpec(
    columns=[
        Column("name", "Name", lambda r: r["dataset"].name.casefold()),
        Column("kind", "Kind", lambda r: r["dataset"].kind.value),
        Column("records", "Records", lambda r: r["dataset"].record_count, True),
        Column("budget", "Budget ε", lambda r: r["budget"] and r["budget"].epsilon, True),
        Column("spent", "Composed spend", lambda r: r["spend"] and r["spend"].epsilon, True),
        Column("remaining", "Remaining", lambda r: r["remaining"], True),
        Column("used", "Used", lambda r: r["fraction"], True),
        Column("sum", "Plain sum", lambda r: r["spend"] and r["spend"].plain_sum, True),
        Column("jobs", "Jobs", lambda r: r["spend"] and r["spend"].jobs, True),
        Column("created", "Created", lambda r: r["dataset"].created_at, True),
    ],
    filters=[
        Choice("kind", "Kind", ("private", "public"), lambda r: r["dataset"].kind.value),
        Choice(
            "level",
            "Level",
            ("ok", "warn", "over", "no budget"),
            lambda r: r["level"] or ("no budget" if r["dataset"].kind.value == "private" else None),
        ),
    ],
    search=lambda r: r["dataset"].name,
)


def datasets_table(session: Session, tenant_id: str, params: Mapping[str, str]) -> Any:
    """The datasets page's rows (newest first until sorted), filtered and sorted as the
    query asks (an unknown value: 422)."""
    rows = [
        {
            "dataset": DatasetPublic.from_row(row.dataset),
            "budget": row.budget,
            "spend": row.spend,
            "remaining": row.remaining,
            "fraction": row.fraction,
            "level": row.level.value if row.level is not None else None,
        }
        for row in budget_service.overview(session, tenant_id=tenant_id)
    ]
    return DATASETS_TABLE.apply(rows, params)


def group_name(labels: Sequence[str]) -> str:
    """A label group as the page names it."""
    return " + ".join(labels) if labels else "every record"


def label_rows(budget: BudgetPublic, label_counts: Mapping[str, int]) -> list[dict[str, Any]]:
    """The dataset page's per-label table: each group's spend, remaining, jobs, records."""
    return [
        {
            "name": group_name(g.labels),
            "labels": g.labels,
            "records": sum(label_counts.get(label, 0) for label in g.labels) or None,
            "spent": g.spent,
            "remaining": g.remaining,
            "jobs": g.jobs,
            "binding": g.binding,
            "pair": len(g.labels) > 1,
        }
        for g in budget.label_groups
    ]


def binding_name(budget: BudgetPublic) -> str | None:
    """The name of the group(s) that set the dataset's spend (None: nothing charged yet)."""
    binding = [group_name(g.labels) for g in budget.label_groups if g.binding]
    return " and ".join(binding) if binding else None


def quote_groups(session: Session, tenant_id: str, dataset_id: str, quote: Quote) -> list[dict]:
    """The quote box's rows: each group's spend before and after the quoted job."""
    return [
        {
            "group": group_name(change.labels),
            "before": change.before,
            "after": change.after,
            "charged": change.charged,
            "binding_before": change.binding_before,
            "binding_after": change.binding_after,
        }
        for change in job_quote_groups(session, tenant_id, quote, dataset_id)
    ]


def quote_texts(result: Quote, groups: list[dict]) -> dict[str, Any]:
    """The quote box's figures as the CLI's ``jobs quote`` prints them (app.privacy.display),
    so that the page's script prints text, never a number of its own rounding: each ε, and
    the δ each holds at (the job's; the budget's for the spends; the deltas summed for the
    plain sum)."""
    now, after = result.spend_now, result.spend_after
    return {
        "epsilon": epsilon_text(result.epsilon),
        "delta": delta_text(result.delta),
        "budget": epsilon_text(result.budget_epsilon),
        "spent": epsilon_text(now.epsilon),
        "spent_after": epsilon_text(after.epsilon),
        "spent_delta": delta_text(after.delta),
        "plain_sum_after": epsilon_text(after.plain_sum),
        "plain_sum_delta_after": delta_text(after.plain_sum_delta),
        "counts_epsilon": epsilon_text(now.counts_epsilon),
        "groups": [
            {"before": epsilon_text(g["before"]), "after": epsilon_text(g["after"])} for g in groups
        ],
    }
