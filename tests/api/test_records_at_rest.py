"""Private records at rest (app.db.record_keys): no record text in a database dump or the
embedded data folder, records that still open for the code that runs jobs, a deleted
dataset's records unreadable from a backup taken before, and migration 0022 sealing the
records of an existing deployment, on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, make_url, select, text

from app.db import record_keys
from app.db.migrate import alembic_config, upgrade
from app.db.models import Base, DatasetRecord
from app.db.record_keys import RecordKeyError
from app.db.session import session_scope
from app.services.datasets import load_records
from tests.api.conftest import TEST_READER, auth, make_api, toy_rows
from tests.api.test_migration_0002 import empty_url, seed_datasets  # noqa: F401 (the fixture)

MARK = "zqxj"  # in every record text here, and in no other string the service stores


ROWS = [{**row, "text": f"{MARK} {i} {row['text']}"} for i, row in enumerate(toy_rows())]


def _rows() -> list[dict]:
    return [dict(row) for row in ROWS]


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (the database, its WAL and shared memory, anything)."""
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _pg_dump(url: str) -> bytes:
    parsed = make_url(url)
    command_line = ["pg_dump", "-h", parsed.host or "127.0.0.1", "-p", str(parsed.port or 5432),
                    "-U", parsed.username or "postgres", "-d", parsed.database or ""]  # fmt: skip
    return subprocess.run(command_line, check=True, capture_output=True, timeout=120).stdout


def test_no_record_text_in_the_embedded_data_folder_and_jobs_still_read_them(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    url = f"sqlite:///{data / 'dpsyn.db'}"
    upgrade(url)
    for api in make_api(url):
        dataset = api.upload(_rows())
        with session_scope(url) as session:  # what the workers read: the records, opened
            opened = load_records(session, dataset["id"], TEST_READER)
        assert [r.text for r in opened] == [r["text"] for r in _rows()]
        assert api.budget(dataset["id"], 3.0).status_code == 200
        job = api.submit(dataset["id"]).json()
        api.run_job(job["id"])
        done = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
        assert done["status"] == "succeeded", done
        files = _folder_bytes(data)
        assert any(name.endswith("-wal") for name in files)  # the WAL was read too
        leaks = [name for name, content in files.items() if MARK.encode() in content]
        assert not leaks, leaks


def test_no_record_text_in_a_postgresql_dump(postgres_url: str) -> None:
    for api in make_api(postgres_url):
        dataset = api.upload(_rows())
        with session_scope(postgres_url) as session:
            assert len(load_records(session, dataset["id"], TEST_READER)) == len(_rows())
        dump = _pg_dump(postgres_url)
        assert b"dataset_records" in dump and MARK.encode() not in dump


def test_a_deleted_datasets_records_cannot_be_read_from_an_earlier_backup(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'dpsyn.db'}"
    upgrade(url)
    for api in make_api(url):
        dataset = api.upload(_rows())
        backup = tmp_path / "backup.db"
        with sqlite3.connect(tmp_path / "dpsyn.db") as live, sqlite3.connect(backup) as copy:
            live.backup(copy)  # a backup taken while the dataset lived
        deleted = api.client.delete(f"/v1/datasets/{dataset['id']}", headers=auth(api.admin))
        assert deleted.status_code == 200, deleted.text
        with sqlite3.connect(backup) as copy:
            sealed = [row[0] for row in copy.execute("SELECT sealed FROM dataset_records")]
        assert len(sealed) == len(_rows())  # the backup still has the sealed records
        keys = record_keys.current()
        assert not (keys.folder / f"{dataset['id']}.key").exists()
        with pytest.raises(RecordKeyError):
            keys.open_records(dataset["id"], sealed)
        # a fresh process (no key in memory) fails the same way
        with pytest.raises(RecordKeyError):
            record_keys.RecordKeys(keys.folder, keys.kek).open_records(dataset["id"], sealed)


def _old_records(url: str) -> None:
    """A tenant, a dataset and three plain records, as a deployment at 0021 holds them."""
    engine = create_engine(url)
    with engine.begin() as conn:
        seed_datasets(conn, records=3)
        for i in range(3):
            conn.execute(
                text("INSERT INTO dataset_records (dataset_id, text, label) VALUES ('d', :t, 'a')"),
                {"t": f"{MARK} old record {i}"},
            )
    engine.dispose()


def test_0022_seals_existing_records_and_leaves_no_plain_copy(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0021")
    _old_records(empty_url)
    upgrade(empty_url)  # the service's own upgrade (it compacts an SQLite file after 0022)
    with session_scope(empty_url) as session:
        opened = load_records(session, "d", TEST_READER)
        assert [r.text for r in opened] == [f"{MARK} old record {i}" for i in range(3)]
        assert len(session.scalars(select(DatasetRecord.sealed)).all()) == 3
    engine = create_engine(empty_url)
    with engine.connect() as conn:
        assert not compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    if empty_url.startswith("sqlite"):
        folder = Path(make_url(empty_url).database or "").parent
        leaks = [name for name, b in _folder_bytes(folder).items() if MARK.encode() in b]
    else:
        leaks = ["dump"] if MARK.encode() in _pg_dump(empty_url) else []
    assert not leaks, leaks
    command.downgrade(config, "0021")  # the records open back into plain columns
    engine = create_engine(empty_url)
    with engine.connect() as conn:
        texts = conn.execute(text("SELECT text FROM dataset_records ORDER BY id")).scalars()
        assert list(texts) == [f"{MARK} old record {i}" for i in range(3)]
    engine.dispose()
