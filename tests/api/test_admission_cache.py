"""Admission's calibrations in the database (issue 23), on SQLite and PostgreSQL: a submission
stores its calibration, another process (an empty memory) admits the same shape from the row
without searching, with the same event and epsilon; the floats survive the round trip bit for
bit; and a store that fails never fails admission. AdaDPSyn's planner choices the same way
(issue 42): a shape planned by one process is a lookup for every other."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, func, inspect, select

from app.db.migrate import alembic_config
from app.db.models import Base, CalibrationRecord, Job, PlannerChoiceRecord
from app.db.session import get_engine, session_scope
from app.privacy import calibration, calibration_cache, planner
from app.services.calibrations import DatabaseCalibrationStore, DatabasePlannerStore
from tests.api.conftest import Api, make_api
from tests.api.test_migration_0002 import empty_url  # noqa: F401 (the fixture)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_url(request: pytest.FixtureRequest) -> str:
    return str(
        request.getfixturevalue(f"{'sqlite' if request.param == 'sqlite' else 'postgres'}_url")
    )


@pytest.fixture
def db_api(any_url: str) -> Iterator[Api]:
    calibration_cache.MEMORY.clear()
    yield from make_api(any_url)
    calibration_cache.MEMORY.clear()


def no_search(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the search ran although the database remembered the calibration")


def _count(url: str) -> int:
    with session_scope(url) as session:
        return int(session.scalar(select(func.count()).select_from(CalibrationRecord)) or 0)


def test_a_second_process_admits_from_the_database(db_api: Api) -> None:
    # Counts declared public: both jobs price the same sizes (released counts differ per job,
    # and so does the calibration's key).
    dataset = db_api.upload(counts_public=True)
    assert db_api.budget(dataset["id"], epsilon=10.0).status_code == 200
    before = _count(db_api.url)
    first = db_api.submit(dataset["id"], epsilon=1.2345)
    assert first.status_code == 201, first.text
    assert _count(db_api.url) > before
    calibration_cache.MEMORY.clear()  # another API process: nothing in its memory
    with mock.patch.object(calibration, "search_noise", no_search):
        second = db_api.submit(dataset["id"], epsilon=1.2345)
    assert second.status_code == 201, second.text
    with session_scope(db_api.url) as session:
        jobs = [session.get(Job, r.json()["id"]) for r in (first, second)]
        assert jobs[0] is not None and jobs[1] is not None
        # event for event; the labels' order follows each job's random public schedule
        events = [sorted(job.event["labels"], key=lambda e: e["label"]) for job in jobs]
        assert events[0] == events[1] and len(events[0]) == 2
        assert jobs[0].epsilon == jobs[1].epsilon
        assert jobs[0].config["plan"] == jobs[1].config["plan"]


def test_floats_round_trip_exactly(any_url: str) -> None:
    store = DatabaseCalibrationStore(get_engine(any_url))
    value = (0.1 + 0.2, 1 / 3)  # neither is a short decimal
    store.put("k" * 64, value)
    store.put("k" * 64, (9.0, 9.0))  # a second insert of a key is ignored, never an error
    assert store.get("k" * 64) == value
    assert store.get("m" * 64) is None


def test_a_failing_store_never_fails(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'no_tables.db'}")  # never migrated
    try:
        store = DatabaseCalibrationStore(engine)
        assert store.get("k" * 64) is None
        store.put("k" * 64, (1.0, 1.0))
    finally:
        engine.dispose()
    assert "OperationalError" in caplog.text and "k" * 64 not in caplog.text


def test_0009_creates_calibrations_and_downgrades(empty_url: str) -> None:  # noqa: F811
    config = alembic_config(empty_url)
    command.upgrade(config, "0008")
    engine = create_engine(empty_url)
    try:
        assert "calibrations" not in inspect(engine).get_table_names()
        command.upgrade(config, "0009")
        columns = {c["name"] for c in inspect(engine).get_columns("calibrations")}
        assert columns == {"key", "multiplier", "epsilon", "created_at"}
        command.upgrade(config, "head")  # later revisions too, so that the models match
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        DatabaseCalibrationStore(engine).put("a" * 64, (1.5, 0.25))
        assert DatabaseCalibrationStore(engine).get("a" * 64) == (1.5, 0.25)
        command.downgrade(config, "0008")
        assert "calibrations" not in inspect(engine).get_table_names()
        command.upgrade(config, "head")
        assert "calibrations" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def no_simulation(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the planner simulated although the database remembered its choice")


def test_a_second_process_plans_adadpsyn_from_the_database(
    db_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a shape outside the shipped table (tests/privacy/test_planner_table.py): planned once
    monkeypatch.setattr(planner, "shipped_choices", dict)
    dataset = db_api.upload(counts_public=True)
    assert db_api.budget(dataset["id"], epsilon=10.0).status_code == 200
    planner.choose.cache_clear()
    first = db_api.submit(dataset["id"], epsilon=1.5, method="adadpsyn")
    assert first.status_code == 201, first.text
    with session_scope(db_api.url) as session:
        stored = session.scalars(select(PlannerChoiceRecord)).all()
        assert len(stored) == 1 and set(stored[0].choice) >= {"candidate", "agreement"}
    planner.choose.cache_clear()  # another API process: nothing in its memory
    calibration_cache.MEMORY.clear()
    with mock.patch.object(planner, "choose", no_simulation):
        second = db_api.submit(dataset["id"], epsilon=1.5, method="adadpsyn")
    assert second.status_code == 201, second.text
    with session_scope(db_api.url) as session:
        jobs = [session.get(Job, r.json()["id"]) for r in (first, second)]
        assert jobs[0] is not None and jobs[1] is not None
        assert jobs[0].config["plan"] == jobs[1].config["plan"]
        assert jobs[0].epsilon == jobs[1].epsilon


def test_a_planner_choice_round_trips_and_a_failing_store_never_fails(
    any_url: str, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    choice = planner.choose(4, 8, 40)
    store = DatabasePlannerStore(get_engine(any_url))
    store.put("p" * 64, planner._encoded(choice))
    store.put("p" * 64, {"candidate": {}})  # a second insert of a key is ignored
    stored = store.get("p" * 64)
    assert stored is not None and planner._decoded(stored) == choice
    engine = create_engine(f"sqlite:///{tmp_path / 'no_tables.db'}")  # never migrated
    try:
        broken = DatabasePlannerStore(engine)
        assert broken.get("p" * 64) is None
        broken.put("p" * 64, planner._encoded(choice))
    finally:
        engine.dispose()
    assert "OperationalError" in caplog.text
