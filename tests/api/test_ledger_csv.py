"""The ledger CSV is safe in a spreadsheet of any locale (issue 31, item 4).

A spreadsheet runs a cell that starts with ``= + - @ |`` (or a tab or carriage return before
one) as a formula. Which characters split cells depends on the locale: ``,`` in most, ``;``
where the decimal mark is a comma, a tab on paste. So every cell of the file, read with any
of those delimiters (by Python's csv module, or split naively, ignoring quotes), must not
start with a formula character, even after spaces or quotes. Label names are typed by users:
the adversarial ones below are labels of a job's event, and one is also a job ID and kind,
to show that every cell is escaped, not only the labels.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime

import pytest

from app.db.models import LedgerEntry
from app.ledger import ledger
from app.services.ledger_csv import ledger_csv
from tests.api.conftest import Api, auth

FORMULA = ("=", "+", "-", "@", "|", "\t", "\r")
ADVERSARIAL = [
    "a;=1+4",
    "x,@SUM(A1)",
    "|cmd",
    "\t=1",
    "-2+3",
    "+1",
    "=HYPERLINK(1)",
    "a; =1",
    'a;"=1',
    'b,""@x',
    "c\r=1",
    "d\n-1",
    "e;;+1",
    "ok",
]
DELIMITERS = (",", ";", "\t")


def _entry(index: int, labels: list[str], *, job_id: str = "j", kind: str = "reserve"):
    return LedgerEntry(
        id=index,
        dataset_id="d",
        job_id=job_id,
        kind=kind,
        epsilon=0.25 * index,
        delta=1e-5,
        event={"labels": [{"label": label} for label in labels]},
        created_at=datetime(2026, 1, 1, 12, index, tzinfo=UTC),
    )


def _export() -> str:
    entries = [_entry(i, [label, "ok"]) for i, label in enumerate(ADVERSARIAL, start=1)]
    entries.append(_entry(len(entries) + 1, ADVERSARIAL))  # every label in one cell
    entries.append(_entry(len(entries) + 1, ["w5"], job_id="=cmd|' /C calc'!A0", kind="@kind"))
    points = [
        ledger.SpendPoint(entry=e, epsilon=0.5 * e.id, plain_sum=0.75 * e.id) for e in entries
    ]
    return ledger_csv(points)


def _unsafe(cell: str) -> bool:
    return cell.lstrip(' "').startswith(FORMULA)


@pytest.mark.parametrize("delimiter", DELIMITERS)
def test_no_cell_starts_a_formula_in_any_locale(delimiter: str) -> None:
    text = _export()
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    unsafe = [cell for row in rows for cell in row if _unsafe(cell)]
    assert not unsafe, (delimiter, unsafe)


def test_no_fragment_starts_a_formula_when_split_ignoring_quotes() -> None:
    """A reader that ignores quoting (or a locale's delimiter inside a quoted cell): every
    substring after a separator, line breaks included."""
    fragments = re.split(r"[,;\t\r\n]", _export())
    unsafe = [fragment for fragment in fragments if _unsafe(fragment)]
    assert not unsafe


def test_cells_are_prefixed_where_a_fragment_would_start_a_formula() -> None:
    rows = list(csv.DictReader(io.StringIO(_export(), newline="")))
    labels = [row["labels"] for row in rows]
    assert labels[0] == "a;'=1+4;ok"
    assert labels[1] == "x,'@SUM(A1);ok"
    assert labels[2] == "'|cmd;ok"
    assert labels[3] == "'\t'=1;ok"
    assert labels[4] == "'-2+3;ok" and labels[5] == "'+1;ok"
    assert labels[7] == "a;' =1;ok"
    assert labels[13] == "ok;ok"  # nothing to escape: unchanged
    assert rows[-1]["job_id"] == "'=cmd|' /C calc'!A0" and rows[-1]["kind"] == "'@kind"


def test_numeric_columns_stay_numbers() -> None:
    rows = list(csv.DictReader(io.StringIO(_export(), newline="")))
    for index, row in enumerate(rows, start=1):
        assert int(row["entry"]) == index
        assert float(row["job_epsilon"]) == 0.25 * index and float(row["job_delta"]) == 1e-5
        assert float(row["composed_after"]) == 0.5 * index
        assert float(row["plain_sum_after"]) == 0.75 * index
        assert datetime.fromisoformat(row["created_at"]).minute == index
    semicolon = list(csv.reader(io.StringIO(_export(), newline=""), delimiter=";"))
    assert semicolon[0] == [",".join(next(csv.reader(io.StringIO(_export()))))]


def test_the_exported_file_of_a_real_job(api: Api) -> None:
    """Through the API: the label names of a dataset with formula-like labels."""
    task = {
        "name": "t",
        "kind": "classification",
        "instruction": "Write a question.",
        "icl_instruction": "Classify.",
        "text_field": "Q",
        "label_field": "T",
        "labels": ["a;=1+4", "|cmd"],
    }
    records = [{"text": f"question {i}", "label": task["labels"][i % 2]} for i in range(24)]
    dataset = api.upload(records, task=task)
    assert api.budget(dataset["id"], 5.0).status_code == 200
    assert api.submit(dataset["id"], 1.0).status_code == 201
    url = f"/v1/datasets/{dataset['id']}/budget/ledger.csv"
    text = api.client.get(url, headers=auth(api.admin)).text
    for delimiter in DELIMITERS:
        rows = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
        assert not [cell for row in rows for cell in row if _unsafe(cell)], delimiter
    # the dataset's count release (its own row, first) and the job: the same label names
    counts, row = list(csv.DictReader(io.StringIO(text, newline="")))
    assert (counts["kind"], row["kind"]) == ("counts", "reserve")
    assert sorted(row["labels"].split(";")) == ["'=1+4", "'|cmd", "a"]
    assert sorted(counts["labels"].split(";")) == ["'=1+4", "'|cmd", "a"]
