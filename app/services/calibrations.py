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

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from app.db.models import CalibrationRecord, PlannerChoiceRecord, now

log = logging.getLogger(__name__)


class DatabaseCalibrationStore:
    """:class:`app.privacy.calibration_cache.CalibrationStore` on the service's database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def get(self, key: str) -> tuple[float, float] | None:
        query = select(CalibrationRecord.multiplier, CalibrationRecord.epsilon).where(
            CalibrationRecord.key == key
        )
        try:
            with self.engine.connect() as conn:
                row = conn.execute(query).first()
        except SQLAlchemyError as err:
            log.warning("calibration cache lookup failed (%s); calibrating", type(err).__name__)
            return None
        return None if row is None else (float(row[0]), float(row[1]))

    def put(self, key: str, value: tuple[float, float]) -> None:
        multiplier, epsilon = value
        values = {"key": key, "multiplier": multiplier, "epsilon": epsilon, "created_at": now()}
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(CalibrationRecord).values(**values))
        except IntegrityError:
            pass  # another process stored the same key meanwhile: the same answer
        except SQLAlchemyError as err:
            log.warning("calibration cache insert failed (%s)", type(err).__name__)


class DatabasePlannerStore:
    """:class:`app.privacy.planner_cache.PlannerStore` on the service's database: AdaDPSyn's
    planner choices by the hash of their public shape (the same rules as the calibrations:
    a connection of its own per call, a failure logged and planning carries on)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def get(self, key: str) -> dict[str, Any] | None:
        query = select(PlannerChoiceRecord.choice).where(PlannerChoiceRecord.key == key)
        try:
            with self.engine.connect() as conn:
                row = conn.execute(query).first()
        except SQLAlchemyError as err:
            log.warning("planner cache lookup failed (%s); planning", type(err).__name__)
            return None
        return None if row is None else dict(row[0])

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        values = {"key": key, "choice": dict(value), "created_at": now()}
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(PlannerChoiceRecord).values(**values))
        except IntegrityError:
            pass  # another process stored the same shape meanwhile: the same answer
        except SQLAlchemyError as err:
            log.warning("planner cache insert failed (%s)", type(err).__name__)
