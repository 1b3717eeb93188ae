"""``dpsyn admin records``: the key-encryption key of the records' data keys
(:mod:`app.db.record_keys`; docs/service.md, "Records at rest").

``rotate-kek`` wraps every dataset's data key with a new key-encryption key; the records are
not touched (each stays sealed by its own data key). Where the KEK is the key folder's own
file (the embedded default), the file is replaced; where it comes from ``DPSYN_RECORD_KEK``,
the new one is printed once, to be set there before the next start of every process.

``expire`` drops the records past the retention period (:mod:`app.services.retention`), as
the workers' reapers do hourly.
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import typer

from app.cli.admin import DataDirOpt, _say, database_url

records_app = typer.Typer(
    help="The records' keys: rotate the key-encryption key; drop records past the retention "
    "period.",
    no_args_is_help=True,
)


@records_app.command("rotate-kek")
def rotate_kek(data_dir: DataDirOpt = Path(".dpsyn")) -> None:
    """Wrap every dataset's data key with a new key-encryption key (records untouched)."""
    from app.db import record_keys
    from app.settings import Settings

    settings = Settings()
    keys = record_keys.configure(
        settings.record_keys_dir, settings.record_kek, database_url(data_dir)
    )
    keys.kek  # noqa: B018 (read or made before the rotation)
    new_kek = secrets.token_bytes(record_keys.KEY_BYTES)
    from_settings = settings.record_kek is not None
    count = keys.rewrap(new_kek, keep_file=not from_settings)
    _say(f"ok: {count} data keys rewrapped in {keys.folder}")
    if from_settings:
        _say("set DPSYN_RECORD_KEK to this new key in every API and worker process (shown once):")
        typer.echo(base64.b64encode(new_kek).decode())


@records_app.command("expire")
def expire(
    days: float | None = typer.Option(
        None, "--days", min=0.0, help="The retention period (default: DPSYN_RECORD_RETENTION_DAYS)."
    ),
) -> None:
    """Drop the records of every private dataset whose last job ended more than the retention
    period ago (none queued or running), destroying their data keys; their budget, ledger and
    prompts stay. The workers' reapers do this hourly when DPSYN_RECORD_RETENTION_DAYS is set."""
    from app.db import record_keys
    from app.db.session import session_scope
    from app.services.retention import expire_records
    from app.settings import Settings

    settings = Settings()
    days = days if days is not None else settings.record_retention_days
    if days is None:
        _say("nothing to do: no retention period (set DPSYN_RECORD_RETENTION_DAYS or --days)")
        return
    record_keys.configure_from(settings)
    with session_scope(settings.database_url) as session:
        dropped = expire_records(session, days)
    _say(f"ok: records of {len(dropped)} dataset(s) dropped after {days:g} days without jobs")
    for dataset_id in dropped:
        typer.echo(dataset_id)
