"""The database side of the calibration and planner caches: every API process reuses the
others' work.

Why the database. A calibration costs a search over the accountant; the in-process LRU of
:mod:`app.privacy.calibration_cache` saves it within one process, and this store within the
deployment (several API processes, restarts). Rows are public (a hash of public inputs and two
floats). Each lookup and insert uses a connection of its own, outside the request's
transaction, so a refused or quoted job still leaves its calibration for the next one, and the
store never holds a lock across planning. The store is an optimisation: a database error is
logged (the error's type only) and admission carries on, calibrating afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Executable, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from app.db.models import CalibrationRecord, PlannerChoiceRecord, now

log = logging.getLogger(__name__)


class _Store:
    """One cache table: a lookup and an insert, each on a connection of its own; a failure
    is logged by its type only and the caller computes afresh."""

    what = ""  # the cache's name in the log lines
    table: Any = None  # the ORM class of the rows

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _first(self, query: Executable) -> Any:
        """The query's first row, or None (also when the lookup failed)."""
        try:
            with self.engine.connect() as conn:
                return conn.execute(query).first()
        except SQLAlchemyError as err:
            log.warning(
                "%s cache lookup failed (%s); computing afresh", self.what, type(err).__name__
            )
            return None

    def _insert(self, values: Mapping[str, Any]) -> None:
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(self.table).values(**values, created_at=now()))
        except IntegrityError:
            pass  # another process stored the same key meanwhile: the same answer
        except SQLAlchemyError as err:
            log.warning("%s cache insert failed (%s)", self.what, type(err).__name__)


class DatabaseCalibrationStore(_Store):
    """:class:`app.privacy.calibration_cache.CalibrationStore` on the service's database."""

    what, table = "calibration", CalibrationRecord

    def get(self, key: str) -> tuple[float, float] | None:
        row = self._first(
            select(CalibrationRecord.multiplier, CalibrationRecord.epsilon).where(
                CalibrationRecord.key == key
            )
        )
        return None if row is None else (float(row[0]), float(row[1]))

    def put(self, key: str, value: tuple[float, float]) -> None:
        multiplier, epsilon = value
        self._insert({"key": key, "multiplier": multiplier, "epsilon": epsilon})


class DatabasePlannerStore(_Store):
    """:class:`app.privacy.planner_cache.PlannerStore` on the service's database: AdaDPSyn's
    planner choices by the hash of their public shape (the same rules as the calibrations)."""

    what, table = "planner", PlannerChoiceRecord

    def get(self, key: str) -> dict[str, Any] | None:
        row = self._first(select(PlannerChoiceRecord.choice).where(PlannerChoiceRecord.key == key))
        return None if row is None else dict(row[0])

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        self._insert({"key": key, "choice": dict(value)})
