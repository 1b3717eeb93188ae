"""How the ``dpsyn`` commands print a time: one form everywhere, with its zone.

Tables printed the first 19 characters of a timestamp (``2026-12-07T08:31:05``), which
left out the zone the API and the ledger CSV state; a reader in another zone could not tell
when something happened. Every time a command prints goes through :func:`shown_time`:
``2026-12-07T08:31:05Z``, ISO 8601 in UTC (``Z``), to the second. UTC is the zone the service
writes, so a table, the CSV, ``--json`` and the dashboard agree whoever reads them; one word
with no space, so a script that splits a table's columns on blanks still finds each column.
"""

from __future__ import annotations

from datetime import UTC, datetime

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def shown_time(value: str | datetime | None, missing: str = "-") -> str:
    """``value`` (an ISO 8601 string from the API, or a datetime from the database) as
    ``YYYY-MM-DDTHH:MM:SSZ``; ``missing`` for none. A time without a zone is UTC (SQLite
    keeps none, and every time the service writes is UTC); one in another zone is converted.
    A string that is not ISO 8601 is printed as it came."""
    if value is None or value == "":
        return missing
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    except ValueError:
        return str(value)
    zoned = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return zoned.strftime(FORMAT)
