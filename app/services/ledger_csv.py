"""The ledger as CSV, safe to open in a spreadsheet of any locale.

A spreadsheet runs a cell that starts with ``=``, ``+``, ``-``, ``@`` or ``|`` (DDE), or with a
tab or carriage return before one, as a formula (CSV injection), and label names are typed by
users. Which character splits cells depends on the locale and the import: ``,`` in most,
``;`` where the decimal mark is a comma, a tab on paste, and a careless reader splits a quoted
cell too. So the rule covers every substring a reader could take for a cell:

* A *fragment* is a cell's text from its start, or from just after any ``,``, ``;``, tab,
  carriage return or line feed inside it.
* A fragment that starts with a formula character, after any spaces and double quotes (which
  a reader may strip), gets an apostrophe put before it: ``a;=1+4`` is written ``a;'=1+4``,
  ``|cmd`` as ``'|cmd``, a tab and ``=1`` as ``'`` tab ``'=1``. The spreadsheet shows the text
  (the apostrophe makes it text), and no split of the line in any of those delimiters yields a
  cell that starts a formula.
* The rule applies to every text cell of the file, after the cell is assembled (the ``;``
  joining a job's labels included), so it holds whatever the labels hold. Numeric cells (the
  entry number and the epsilons and deltas, written as Python's shortest float) are numbers a
  spreadsheet reads as such and are never negative; they are written as they are.

A label's own ``;`` is kept, so a label ``a;b`` reads as two labels in the ``labels`` cell:
the file is for people; the API's JSON (``GET /v1/datasets/{id}/budget``) has the labels.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.db.models import LedgerEntry, LedgerKind, as_utc
from app.ledger import ledger

# Where a fragment that starts a formula begins: at the start of the cell or just after a
# separator, then any spaces and quotes, then a formula character (a lookahead: the
# apostrophe goes before the spaces).
_FORMULA_FRAGMENT = re.compile(r"(?:^|(?<=[,;\t\r\n]))(?=[\s\"]*[=+\-@|\t\r])")

LEDGER_CSV_COLUMNS = (
    "entry",
    "created_at",
    "kind",
    "job_id",
    "job_epsilon",
    "job_delta",
    "labels",
    "composed_after",
    "plain_sum_after",
    "rule_after",
    "batch",
)


def safe_cell(value: object) -> str:
    """One cell's text under the module's rule: a number as it is (an int, or a float's
    shortest repr), None as empty, any other value's text with an apostrophe before each
    fragment that would start a formula."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(float(value))  # a numpy float's repr names its type
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(value))
    return _FORMULA_FRAGMENT.sub("'", str(value))


def entry_labels(entry: LedgerEntry) -> tuple[str, ...]:
    """The label partitions a ledger entry charged, by name (a job's labels; a count
    release's, every label it released); () for a job that reads every record alike."""
    event = entry.event if isinstance(entry.event, dict) else {}
    if entry.kind == LedgerKind.COUNTS:
        parts = event.get("events") or []
        return tuple(str(p["label"]) for p in parts if isinstance(p, dict) and "label" in p)
    return tuple(str(item["label"]) for item in event.get("labels", []))


def _entry_cells(index: int, point: ledger.SpendPoint) -> tuple[object, ...]:
    """One ledger entry's cells, in the order of :data:`LEDGER_CSV_COLUMNS`. A count
    release's row (kind ``counts``) has the release's ID in ``job_id`` (the ledger's
    column: it names no job) and the labels whose counts it released."""
    entry = point.entry
    labels = list(entry_labels(entry)) or ["*"]
    return (
        index,
        as_utc(entry.created_at).isoformat(),  # with its zone (SQLite stores none)
        entry.kind,
        entry.job_id,
        entry.epsilon,
        entry.delta,
        ";".join(labels),
        point.epsilon,
        point.plain_sum,
        point.rule.value if point.rule is not None else None,
        entry.batch_of if entry.kind == LedgerKind.RESERVE else None,
    )


def ledger_csv(points: Sequence[ledger.SpendPoint]) -> str:
    """The ledger as CSV, one row per entry with the spend after it (as the dataset page's
    table: ``composed_after`` is the spend as the ledger's filter prices it, empty where a
    long ledger's chart left it out; ``rule_after`` the filter's rule that priced it;
    ``batch`` the batch a reserve entry's job was declared in, its own ID when alone). ``labels``
    are the label partitions the job read, joined by ``;`` ("*" for a job that reads every
    record). The dataset's count release is a row of its own, of kind ``counts`` (charged
    once; never a job's). Holds metadata and epsilons only, never a record or a released
    count."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(LEDGER_CSV_COLUMNS)
    for index, point in enumerate(points, start=1):
        writer.writerow([safe_cell(cell) for cell in _entry_cells(index, point)])
    return out.getvalue()


FLEET_CSV_COLUMNS = ("tenant_id", "tenant_name", "dataset_id", "dataset_name", *LEDGER_CSV_COLUMNS)


@dataclass(frozen=True)
class LedgerSection:
    """One dataset's ledger in the all-tenants export, with whose dataset it is."""

    tenant_id: str
    tenant_name: str
    dataset_id: str
    dataset_name: str
    points: Sequence[ledger.SpendPoint]


def ledgers_csv(sections: Sequence[LedgerSection]) -> str:
    """Several datasets' ledgers as one CSV (the organisation's export): the columns
    of :func:`ledger_csv` after the tenant's and the dataset's ID and name, each row's
    ``entry`` numbered within its dataset. The names are typed by users, so they pass the same
    formula rule as every other text cell; a dataset with an empty ledger has no row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(FLEET_CSV_COLUMNS)
    for section in sections:
        head = (section.tenant_id, section.tenant_name, section.dataset_id, section.dataset_name)
        for index, point in enumerate(section.points, start=1):
            writer.writerow([safe_cell(cell) for cell in (*head, *_entry_cells(index, point))])
    return out.getvalue()
