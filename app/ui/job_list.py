"""The jobs table: its sortable columns and its status and dataset filters, declared with the
dashboard's table helper (:mod:`app.ui.tables`), and how its times read.

The page asks the database for the filtered jobs first (at most :data:`MAX_ROWS`, newest
first), so a filter finds old jobs too; the table spec then checks the query string (an
unknown column, order, status or dataset is a 422 naming the parameter) and sorts. Sorting
happens on those rows because two columns, the charged epsilon (from the ledger) and the
duration, are not columns of the jobs table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from app.db.models import JobStatus
from app.ui.tables import Choice, Column, TableSpec

#: Most jobs the jobs page lists.
MAX_ROWS = 200


class JobRow(Protocol):
    """What the table reads of a job: the API's ``JobPublic`` (this package never imports
    ``app.api``)."""

    @property
    def dataset_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def charged_epsilon(self) -> float: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def duration_s(self) -> float | None: ...


def jobs_table(dataset_ids: Sequence[str]) -> TableSpec[JobRow]:
    """The jobs table of a tenant whose private datasets are ``dataset_ids`` (the dataset
    filter's options; the page shows their names)."""
    return TableSpec(
        columns=(
            Column("status", "Status", lambda job: job.status),
            Column("method", "Method", lambda job: job.method),
            Column("epsilon", "ε planned", lambda job: job.epsilon, descending_first=True),
            Column("charged", "charged ε", lambda job: job.charged_epsilon, descending_first=True),
            Column("duration", "Duration", lambda job: job.duration_s, descending_first=True),
            Column("created", "Created (UTC)", lambda job: job.created_at, descending_first=True),
        ),
        filters=(
            Choice("status", "Status", [s.value for s in JobStatus], lambda job: job.status),
            Choice("dataset", "Dataset", list(dataset_ids), lambda job: job.dataset_id),
        ),
        default_sort="created",
        default_order="desc",
    )


def query_filters(
    spec: TableSpec[JobRow], params: Mapping[str, str]
) -> tuple[JobStatus | None, str | None]:
    """The status and dataset the database query can filter by: only values the table
    accepts (anything else is left to :meth:`TableSpec.apply`, which refuses it)."""
    found: dict[str, str | None] = {}
    for choice in spec.filters:
        value = params.get(choice.key) or None
        found[choice.key] = value if value in choice.options else None
    status = found.get("status")
    return (JobStatus(status) if status else None), found.get("dataset")


def duration_text(seconds: float | None) -> str:
    """A duration as people read it: 0.4 s, 42 s, 3 min 5 s, 2 h 10 min."""
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def when_text(value: datetime | None) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S} UTC" if value else "—"
