"""Every time a ``dpsyn`` table or line prints carries its zone (issue 55, item 5: tables
printed ``2026-12-07T08:31:05``, the first 19 characters of the API's time, while the ledger
CSV said ``+00:00``). One form everywhere: ``2026-12-07T08:31:05Z``, one
word per table cell."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.cli import app as cli
from app.cli.timestamps import shown_time
from tests.cli.live_server import FAST, runner, upload

ZONED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
BARE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?![\dZ.+])")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("2026-12-07T08:31:05.123456Z", "2026-12-07T08:31:05Z"),
        ("2026-12-07T08:31:05+00:00", "2026-12-07T08:31:05Z"),
        ("2026-12-07T10:31:05+02:00", "2026-12-07T08:31:05Z"),  # converted, not relabelled
        ("2026-12-07T08:31:05", "2026-12-07T08:31:05Z"),  # SQLite's: the service writes UTC
        (
            datetime(2026, 12, 7, 3, 31, 5, tzinfo=timezone(timedelta(hours=-5))),
            "2026-12-07T08:31:05Z",
        ),
        (datetime(2026, 12, 7, 8, 31, 5, tzinfo=UTC), "2026-12-07T08:31:05Z"),
        (None, "-"),
        ("soon", "soon"),
    ],
)
def test_one_form_with_its_zone(value, shown) -> None:
    assert shown_time(value) == shown


def test_a_missing_time_says_what_the_table_says() -> None:
    assert shown_time(None, missing="never") == "never"


def _printed(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_client_table_prints_times_with_their_zone(dpsyn, trec_file) -> None:
    """The tables and lines with a time, against a live server: each shows the zone, none
    the bare ISO prefix."""
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    job = dpsyn("jobs", "submit", "--dataset", dataset, "--epsilon", "2", *FAST, "--wait", "-q")
    assert job.exit_code == 0, job.output
    outputs = {
        "datasets list": _printed(dpsyn("datasets", "list")),
        "datasets show": _printed(dpsyn("datasets", "show", dataset)),
        "datasets reads": _printed(dpsyn("datasets", "reads", dataset)),
        "budget ledger": _printed(dpsyn("budget", "ledger", dataset)),
        "jobs list": _printed(dpsyn("jobs", "list")),
        "prompts list": _printed(dpsyn("prompts", "list")),
        "keys list": _printed(dpsyn("keys", "list")),
    }
    for command, text in outputs.items():
        assert ZONED.search(text), (command, text)
        assert not BARE.search(text), (command, text)


def test_the_operator_tables_print_times_with_their_zone(sqlite_url, monkeypatch) -> None:
    """``dpsyn admin`` reads the database (SQLite keeps no zone): its tables and its JSON
    state UTC too."""
    monkeypatch.setenv("DPSYN_DATABASE_URL", sqlite_url)
    assert runner.invoke(cli, ["admin", "tenants", "create", "team"]).exit_code == 0
    assert runner.invoke(cli, ["admin", "keys", "create", "team"]).exit_code == 0
    for args in (["tenants", "list"], ["keys", "list", "team"]):
        text = _printed(runner.invoke(cli, ["admin", *args]))
        assert ZONED.search(text) and not BARE.search(text), (args, text)
        listed = _printed(runner.invoke(cli, ["admin", *args, "--json"]))
        assert re.search(r'"created_at": "[^"]+\+00:00"', listed), listed
